//! Workflow definitions: TOML files in `workflows/`, parsed into validated types.
//!
//! A definition goes through typed stages: the authored serde shape (`raw`, unknown
//! fields denied, identifiers as validating newtypes), then the checks that need nothing
//! outside the file ([`parse`]), then — optionally — the checks against the host's world
//! ([`check`]: components, versions, operator allowances). Every problem is a
//! [`Diagnostic`] that quotes the value, points at `file:line:col` and says how to fix it;
//! as many as practical are collected per file (TOML syntax and shape errors stop early,
//! because nothing after them can be trusted).
//!
//! # Format
//!
//! ```toml
//! name = "document-delivery"   # [a-z][a-z0-9-]*: the API's command type
//! version = 1                  # positive integer; a changed file needs a new version
//! description = "Validate, render and deliver one document"   # optional
//! deadline = "1h"              # the whole workflow's deadline (humantime text)
//!
//! [budget]                     # optional; defaults below
//! max_attempts = 20            # attempts over all steps (>= number of steps)
//! max_runtime = "10m"          # summed attempt wall time
//! max_external_calls = 10      # adapter calls (>= number of adapter steps)
//! max_cost = 50                # optional: cost units over all calls (each step's `cost`)
//! recovery_queries = 3         # recovery queries that may run once max_attempts is spent
//!
//! [input_schema]               # JSON Schema draft 2020-12, written as TOML; checked at admission
//! type = "object"
//! required = ["title"]
//! additionalProperties = false # makes `$input.<field>` references checkable
//! [input_schema.properties.title]
//! type = "string"
//!
//! [[steps]]
//! id = "validate"              # stable id: [a-z][a-z0-9_-]*, unique
//! label = "Validate document"  # display label; may change between versions
//! kind = "handler"             # "handler" (pure) or "adapter" (side effect)
//! component = "validate-document"
//! version = "^1"               # semver requirement on the component's version
//! after = []                   # ids of steps that must succeed first
//! milestone = "Input validated"  # optional: the milestone this step's receipt reaches
//! timeout = "5s"               # per attempt; default 30s (at most the deadline)
//! cost = 1                     # adapters only: units one call costs against max_cost
//! outputs = ["title"]          # receipt fields later steps may read by name
//! [steps.input]                # the step input: literals and references (see below)
//! title = "$input.title"
//! [steps.retry]                # optional; defaults: 5 attempts, 200ms, 30s, 2.0, 0.2
//! max_attempts = 3
//! initial_backoff = "200ms"
//! max_backoff = "30s"
//! multiplier = 2.0
//! jitter = 0.2
//! [steps.capabilities]         # adapters only
//! outbound_hosts = ["$base_url"]  # "scheme://host:port", "host:port" or "$setting"
//! secrets = ["provider_token"]
//! [steps.capabilities.query]   # optional: what `query` alone may reach (else the above)
//! outbound_hosts = ["$status_url"]
//! secrets = []
//! [steps.capabilities.compensate]  # optional: likewise for `compensate`
//! [steps.compensation]         # adapters only; carried for compensation support
//! on = "workflow_failed"       # or "workflow_cancelled", "workflow_not_completed"
//! ```
//!
//! References in `[steps.input]` (see [`mapping`](InputMapping)): `$input`,
//! `$input.<path>`, `$steps.<id>.output`, `$steps.<id>.output.<field>[.<path>]`,
//! `$steps.<id>.external_reference`; `$$` starts a literal `$` string. A step may read only
//! steps it (transitively) runs after, and only fields listed in their `outputs`.
//!
//! Milestones ([`WorkflowDef::milestones`]): "Request recorded" (at admission), each step's
//! milestone in definition order (each once), then "Completion recorded" (when the
//! workflow completes).

mod approval;
mod batch;
mod def;
mod diagnostics;
mod env;
mod graph;
mod items;
mod mapping;
mod raw;
mod references;
mod retry;
mod schema;
mod spans;
mod step;
mod validate;
mod values;

pub use approval::{APPROVAL_COMPONENT, Consequence, ConsequenceError, approval_provenance};
pub use def::{
    ActionCapabilities, AdapterAction, ApprovalDef, BatchDef, Budget, COMPLETION_RECORDED,
    Compensation, CompensationTrigger, OutputMismatch, REQUEST_RECORDED, RequestedCapabilities,
    StepDef, StepKind, WorkflowDef,
};
pub use diagnostics::{
    Diagnostic, Diagnostics, LocatedDiagnostic, closest, from_toml as toml_diagnostic,
    list as name_list,
};
pub use env::{CheckEnv, ComponentWorld, StaticEnv};
pub use items::{Item, ItemsError, item_identity, item_of};
pub use mapping::{InputMapping, MappingError, ReceiptView, Reference, ReferenceError};
pub use retry::RetryPolicy;
pub use schema::{InputError, InputValidator, SchemaError};
pub use spans::toml_to_json as toml_value_to_json;
pub use validate::DEFAULT_TIMEOUT;
pub use values::{NameError, StepId, TomlDuration, WorkflowName};

use sha2::{Digest, Sha256};

use self::raw::WorkflowToml;
use self::spans::SourceTree;
use self::validate::Ctx;

/// Parses and validates a definition without the host: syntax, shape, and every check
/// that needs nothing outside the file. `file_name` is only used in diagnostics.
pub fn parse(file_name: &str, source: &str) -> Result<WorkflowDef, Diagnostics> {
    load(file_name, source, None)
}

/// Like [`parse`], and also checks each step against `env`: the component exists, is of
/// the step's kind, has a version satisfying the requirement, and the operator allows the
/// capabilities requested. Problems of both kinds are reported together.
pub fn check(
    file_name: &str,
    source: &str,
    env: &dyn CheckEnv,
) -> Result<WorkflowDef, Diagnostics> {
    load(file_name, source, Some(env))
}

/// The JSON Schema (draft 2020-12) of the definition format, from the same types the
/// parser reads: `docket workflow schema` prints it, `docs/workflow.schema.json` keeps it
/// for editors (a definition's `#:schema` line). It checks shapes and value syntax; what
/// needs the whole file or the host (references, cycles, components) stays [`check`]'s.
pub fn definition_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(WorkflowToml);
    serde_json::to_value(schema).expect("a schema is JSON")
}

/// `sha256:<hex>` of the source's bytes.
pub fn source_digest(source: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(source.as_bytes())))
}

fn load(
    file_name: &str,
    source: &str,
    env: Option<&dyn CheckEnv>,
) -> Result<WorkflowDef, Diagnostics> {
    let fail = |items| Diagnostics::new(file_name, source, items);
    let tree = SourceTree::parse(source).map_err(|errors| {
        fail(
            errors
                .iter()
                .map(|e| diagnostics::from_toml(e, true))
                .collect(),
        )
    })?;
    let raw: WorkflowToml =
        toml::from_str(source).map_err(|e| fail(vec![diagnostics::from_toml(&e, false)]))?;
    let mut ctx = Ctx {
        tree: &tree,
        source,
        diags: Vec::new(),
    };
    let def = validate::workflow(&raw, &mut ctx, source_digest(source));
    if let Some(env) = env {
        env::check_steps(&raw.steps, env, &mut ctx.diags);
    }
    if ctx.diags.is_empty() {
        Ok(def)
    } else {
        Err(fail(ctx.diags))
    }
}

#[cfg(test)]
mod tests;
