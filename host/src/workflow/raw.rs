//! The authored shape of a definition file: serde types that mirror the TOML exactly.
//!
//! Every table denies unknown fields, scalar values with rules are validating newtypes,
//! and values that later checks point at are `Spanned`. Nothing here is checked beyond
//! its own value; [`super::validate`] turns these into the validated types. The same types
//! give the JSON Schema of the format ([`super::definition_schema`]), so an editor checks
//! what the host will read; their doc comments are its descriptions.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_spanned::Spanned;

use super::values::{StepId, TomlDuration, TomlVersionReq, WorkflowName};
use super::{CompensationTrigger, StepKind};

/// A JSON object written as a TOML table.
type Table = serde_json::Map<String, serde_json::Value>;

/// A workflow definition: its name and version, the input it admits, its deadline and
/// budget, and its steps.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "docket workflow definition")]
pub(super) struct WorkflowToml {
    /// The workflow's name, which clients submit intents to (e.g. `document-delivery`).
    #[schemars(with = "WorkflowName")]
    pub name: Spanned<WorkflowName>,
    /// The definition's version, a positive integer. A changed definition needs a higher
    /// version; running workflows keep the version they started on.
    #[schemars(with = "u32", range(min = 1))]
    pub version: Spanned<i64>,
    /// What the workflow does, for people.
    #[serde(default)]
    pub description: String,
    /// How long a workflow may take from admission to its end (e.g. `"1h"`).
    #[schemars(with = "TomlDuration")]
    pub deadline: Spanned<TomlDuration>,
    /// Limits on what one workflow may spend; without it, the defaults.
    pub budget: Option<BudgetToml>,
    /// A JSON Schema (written in TOML) that every intent's input must satisfy; admission
    /// refuses any other input with `422`.
    #[schemars(with = "Table")]
    pub input_schema: Spanned<toml::Table>,
    /// The steps, each a handler (pure computation) or an adapter (an external side effect).
    #[serde(default)]
    pub steps: Vec<StepToml>,
}

/// `[budget]`: what one workflow may spend, all attempts of all steps together.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Budget")]
pub(super) struct BudgetToml {
    /// Attempts of all steps together (default 20).
    #[schemars(with = "Option<u32>", range(min = 1))]
    pub max_attempts: Option<Spanned<i64>>,
    /// Time spent in attempts, all steps together (default `"10m"`).
    #[schemars(with = "Option<TomlDuration>")]
    pub max_runtime: Option<Spanned<TomlDuration>>,
    /// Calls to the outside world (adapter attempts that reached the call) (default 10).
    #[schemars(with = "Option<u32>", range(min = 1))]
    pub max_external_calls: Option<Spanned<i64>>,
    /// The sum of the `cost` of each adapter call; no limit when left out.
    #[schemars(with = "Option<u32>", range(min = 1))]
    pub max_cost: Option<Spanned<i64>>,
    /// Recovery queries allowed once the attempts are spent, so that an unknown outcome can
    /// still be looked up (default 3).
    #[schemars(with = "Option<u32>")]
    pub recovery_queries: Option<Spanned<i64>>,
}

/// One `[[steps]]` table.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Step")]
// A handler or adapter names the component that runs it; an approval step names none.
#[schemars(extend(
    "if" = {"properties": {"kind": {"enum": ["handler", "adapter"]}}},
    "then" = {"required": ["component", "version"]},
    "else" = {"required": ["approves"]}
))]
pub(super) struct StepToml {
    /// The step's stable id; attempts, receipts and the provider's idempotency keys derive
    /// from it, so it never changes between versions.
    #[schemars(with = "StepId")]
    pub id: Spanned<StepId>,
    /// What people see the step as; may change between versions.
    #[schemars(with = "String")]
    pub label: Spanned<String>,
    /// `handler` (pure computation), `adapter` (an external side effect) or `approval`
    /// (a person's consent to the exact consequence of the adapter steps it `approves`).
    #[schemars(with = "StepKind")]
    pub kind: Spanned<StepKind>,
    /// The component that runs the step, by the name it declares (handlers and adapters).
    #[schemars(with = "Option<String>")]
    pub component: Option<Spanned<String>>,
    /// Which versions of the component may run it, a semver requirement (e.g. `"^1"`)
    /// (handlers and adapters).
    #[schemars(with = "Option<TomlVersionReq>")]
    pub version: Option<Spanned<TomlVersionReq>>,
    /// Approval steps: the adapter steps whose consequence a person approves. Each runs
    /// after the approval, and its input reads only `$input` and the steps the approval
    /// runs after, so the consequence is known when the approval is asked.
    #[serde(default)]
    #[schemars(with = "Vec<StepId>")]
    pub approves: Vec<Spanned<StepId>>,
    /// Approval steps: how long the approval may wait (e.g. `"24h"`); never past the
    /// workflow's deadline, which is also the limit without it.
    #[schemars(with = "Option<TomlDuration>")]
    pub expires: Option<Spanned<TomlDuration>>,
    /// Approval steps: what a person is asked, in words, with references in braces read
    /// when the approval is asked (e.g. `"Deliver document to {$input.recipient}"`);
    /// without it, the labels of the steps it approves.
    #[schemars(with = "Option<String>")]
    pub summary: Option<Spanned<String>>,
    /// Approval steps: the subjects who may approve; without it, anyone holding the
    /// `approver` role.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub approvers: Vec<Spanned<String>>,
    /// Steps whose receipts this step waits for.
    #[serde(default)]
    #[schemars(with = "Vec<StepId>")]
    pub after: Vec<Spanned<StepId>>,
    /// The step's input: literals, and references to the intent's input (`"$input.title"`)
    /// or to an earlier step's receipt (`"$steps.render.output.document"`,
    /// `"$steps.deliver.external_reference"`); `"$$"` starts a literal `$`.
    #[serde(default)]
    #[schemars(with = "Table")]
    pub input: toml::Table,
    /// The fields of its output later steps may read.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub outputs: Vec<Spanned<String>>,
    /// The milestone people see when the step succeeds (e.g. "Delivery verified").
    #[schemars(with = "Option<String>")]
    pub milestone: Option<Spanned<String>>,
    /// How long one attempt may run (default `"30s"`).
    #[schemars(with = "Option<TomlDuration>")]
    pub timeout: Option<Spanned<TomlDuration>>,
    /// How failed attempts are retried.
    pub retry: Option<RetryToml>,
    /// What an adapter step may reach: hosts and secrets, within what the host allows.
    pub capabilities: Option<CapabilitiesToml>,
    /// When and how the adapter's `compensate` undoes the step's effect.
    #[schemars(with = "Option<CompensationToml>")]
    pub compensation: Option<Spanned<CompensationToml>>,
    /// What one call of this adapter step costs against `budget.max_cost` (default 1).
    #[schemars(with = "Option<u32>")]
    pub cost: Option<Spanned<i64>>,
    /// Adapter steps: a batch. The list whose items each become an effect of their own
    /// (`"$input.recipients"`, or `"$steps.<id>.output.<field>"`); the input reads the item
    /// as `$item`.
    #[schemars(with = "Option<String>")]
    pub for_each: Option<Spanned<String>>,
    /// With `for_each`: what names an item stably, a reference into it (`"$item.email"`);
    /// without it, the digest of the item's canonical JSON.
    #[schemars(with = "Option<String>")]
    pub item_key: Option<Spanned<String>>,
    /// With `for_each`: how many items may run at once (default 8).
    #[schemars(with = "Option<u32>", range(min = 1, max = 1000))]
    pub max_parallel: Option<Spanned<i64>>,
}

/// `[steps.retry]`: exponential backoff with jitter. Whether a failure is retried at all is
/// the adapter's typed error's kind; the deadline and the budget stop retries too.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Retry")]
pub(super) struct RetryToml {
    /// Attempts in all, the first included (default 5).
    #[schemars(with = "Option<u32>", range(min = 1))]
    pub max_attempts: Option<Spanned<i64>>,
    /// The wait after the first failed attempt (default `"200ms"`).
    #[schemars(with = "Option<TomlDuration>")]
    pub initial_backoff: Option<Spanned<TomlDuration>>,
    /// The longest wait (default `"30s"`); a provider's retry-after may be longer.
    #[schemars(with = "Option<TomlDuration>")]
    pub max_backoff: Option<Spanned<TomlDuration>>,
    /// Growth of the wait per failed attempt, at least 1.0 (default 2.0).
    #[schemars(with = "Option<f64>", range(min = 1.0))]
    pub multiplier: Option<Spanned<f64>>,
    /// The fraction of each wait randomised away, 0.0–1.0 (default 0.2).
    #[schemars(with = "Option<f64>", range(min = 0.0, max = 1.0))]
    pub jitter: Option<Spanned<f64>>,
}

/// `[steps.capabilities]`: asked for by the definition, granted only where the host's
/// `[adapters.<name>]` allows it too.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Capabilities")]
pub(super) struct CapabilitiesToml {
    /// `scheme://host:port`, `host:port`, or `$setting` (the host of the URL in that
    /// adapter setting, e.g. `"$base_url"`).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub outbound_hosts: Vec<Spanned<String>>,
    /// Names of the secrets the component may read.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub secrets: Vec<Spanned<String>>,
    /// `[steps.capabilities.query]`: what the adapter's `query` may reach; without it, the
    /// step's own hosts and secrets.
    #[schemars(with = "Option<ActionCapabilitiesToml>")]
    pub query: Option<Spanned<ActionCapabilitiesToml>>,
    /// `[steps.capabilities.compensate]`: what the adapter's `compensate` may reach;
    /// without it, the step's own hosts and secrets.
    #[schemars(with = "Option<ActionCapabilitiesToml>")]
    pub compensate: Option<Spanned<ActionCapabilitiesToml>>,
}

/// The hosts and secrets of one adapter action (`query` or `compensate`), in place of the
/// step's: least authority per action.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ActionCapabilities")]
pub(super) struct ActionCapabilitiesToml {
    /// As the step's `outbound_hosts`.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub outbound_hosts: Vec<Spanned<String>>,
    /// As the step's `secrets`.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub secrets: Vec<Spanned<String>>,
}

/// `[steps.compensation]`: the step's effect is undone by the adapter's `compensate`, as a
/// step of its own (`<step>.compensate`). The adapter must declare compensation.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Compensation")]
pub(super) struct CompensationToml {
    /// When the effect is undone.
    pub on: CompensationTrigger,
    /// The compensation's input (references as in `input`, including this step's receipt);
    /// without it, the step's own input.
    #[schemars(with = "Option<Table>")]
    pub input: Option<toml::Table>,
    /// How failed compensation attempts are retried.
    pub retry: Option<RetryToml>,
}
