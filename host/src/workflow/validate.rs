//! From the authored shape to a [`WorkflowDef`]: every check that needs nothing outside
//! the file, collecting all problems rather than stopping at the first.
//!
//! Workflow-level values are checked here; each step by [`super::step`], the dependency
//! graph by [`super::graph`], and what input-mapping references read by
//! [`super::references`].

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use serde_json::Value;
use serde_spanned::Spanned;

use super::def::Budget;
use super::diagnostics::{Diagnostic, line_col};
use super::graph::Graph;
use super::raw::{BudgetToml, StepToml, WorkflowToml};
use super::schema::{pointer_keys, schema_help, schema_problems};
use super::spans::{Part, Seg, SourceTree, toml_to_json};
use super::values::TomlDuration;
use super::{StepKind, WorkflowDef, approval, batch, references, step};

/// Default per-attempt timeout (never longer than the workflow's deadline).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// State shared by the checks: the source for locating spans, and the findings.
pub(super) struct Ctx<'t, 'i> {
    pub tree: &'t SourceTree<'i>,
    pub source: &'i str,
    pub diags: Vec<Diagnostic>,
}

impl Ctx<'_, '_> {
    /// Records a problem.
    pub(super) fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// The span of `path` under step `index`, or of the nearest enclosing entry.
    pub(super) fn step_span(&self, index: usize, rest: &[Seg], part: Part) -> Option<Range<usize>> {
        let mut path = vec![Seg::key("steps"), Seg::Index(index)];
        path.extend_from_slice(rest);
        self.tree.locate_near(&path, part)
    }
}

/// Validates the whole file. The returned definition is only meaningful when no
/// diagnostics were added.
pub(super) fn workflow(raw: &WorkflowToml, ctx: &mut Ctx<'_, '_>, digest: String) -> WorkflowDef {
    let version = positive(
        ctx,
        &raw.version,
        "workflow version",
        "number versions from 1 and raise the number whenever the definition changes",
    );
    let deadline = nonzero(
        ctx,
        &raw.deadline,
        "deadline",
        "give the whole workflow time to finish, e.g. deadline = \"1h\"",
    );
    let input_schema = input_schema(raw, ctx);
    if raw.steps.is_empty() {
        ctx.push(
            Diagnostic::new(format!("workflow `{}` has no steps", raw.name.get_ref()))
                .at(ctx.tree.locate(&[Seg::key("name")], Part::Key))
                .help(
                    "add at least one [[steps]] table with id, label, kind, component and version",
                ),
        );
    }

    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, step) in raw.steps.iter().enumerate() {
        let id = step.id.get_ref().as_str();
        if let Some(&first) = index.get(id) {
            let (line, _) = line_col(ctx.source, raw.steps[first].id.span().start);
            ctx.push(
                Diagnostic::new(format!(
                    "duplicate step id `{id}`; it is first defined on line {line}"
                ))
                .at(step.id.span())
                .help("give every step its own id; ids are stable, so rename the newer step"),
            );
        } else {
            index.insert(id, i);
        }
    }
    let graph = Graph::build(&raw.steps, &index, &mut ctx.diags);

    let mut steps = Vec::with_capacity(raw.steps.len());
    let mut input_refs = Vec::with_capacity(raw.steps.len());
    for (i, raw_step) in raw.steps.iter().enumerate() {
        let (mut step, refs, compensation_refs) = step::step(raw_step, i, deadline, ctx);
        step.batch = batch::declaration(raw, i, &refs, &index, &graph, &input_schema, ctx);
        input_refs.push(refs.clone());
        references::references(raw, i, refs, &index, &graph, &input_schema, ctx);
        references::compensation_references(raw, i, compensation_refs, &index, &graph, ctx);
        steps.push(step);
    }
    approval::check(raw, &index, &graph, &input_refs, ctx);
    let budget = budget(raw.budget.as_ref(), &raw.steps, ctx);

    WorkflowDef {
        name: raw.name.get_ref().clone(),
        version,
        description: raw.description.clone(),
        deadline,
        budget,
        input_schema,
        steps,
        source_digest: digest,
    }
}

/// A positive integer that fits in `u32`; reports and returns 1 otherwise.
pub(super) fn positive(ctx: &mut Ctx<'_, '_>, value: &Spanned<i64>, what: &str, help: &str) -> u32 {
    match u32::try_from(*value.get_ref()) {
        Ok(n) if n > 0 => n,
        _ => {
            ctx.push(
                Diagnostic::new(format!(
                    "{what} `{}` is not a positive integer",
                    value.get_ref()
                ))
                .at(value.span())
                .help(help),
            );
            1
        }
    }
}

/// A non-zero duration; reports and returns one second otherwise.
pub(super) fn nonzero(
    ctx: &mut Ctx<'_, '_>,
    value: &Spanned<TomlDuration>,
    what: &str,
    help: &str,
) -> Duration {
    let duration = value.get_ref().0;
    if duration.is_zero() {
        ctx.push(
            Diagnostic::new(format!("{what} is zero"))
                .at(value.span())
                .help(help),
        );
        return Duration::from_secs(1);
    }
    duration
}

fn input_schema(raw: &WorkflowToml, ctx: &mut Ctx<'_, '_>) -> Value {
    let table = toml::Value::Table(raw.input_schema.get_ref().clone());
    let schema = match toml_to_json(&table) {
        Ok(schema) => schema,
        Err(err) => {
            ctx.push(
                Diagnostic::new(format!("input schema: {err}"))
                    .at(raw.input_schema.span())
                    .help("use finite numbers in the schema"),
            );
            return Value::Object(Default::default());
        }
    };
    for problem in schema_problems(&schema) {
        let mut path = vec![Seg::key("input_schema")];
        path.extend(pointer_keys(&problem.pointer).into_iter().map(Seg::Key));
        let pointer = if problem.pointer.is_empty() {
            "/"
        } else {
            problem.pointer.as_str()
        };
        ctx.push(
            Diagnostic::new(format!(
                "input schema is not valid JSON Schema at `{pointer}`: {}",
                problem.message
            ))
            .at(ctx.tree.locate_near(&path, Part::Value))
            .help(schema_help(&problem.pointer)),
        );
    }
    schema
}

fn budget(raw: Option<&BudgetToml>, steps: &[StepToml], ctx: &mut Ctx<'_, '_>) -> Budget {
    let defaults = Budget::default();
    let count = |value: Option<&Spanned<i64>>, what: &str, default: u32, ctx: &mut Ctx<'_, '_>| {
        value.map_or(default, |v| {
            positive(
                ctx,
                v,
                &format!("budget `{what}`"),
                "a budget counts from 1; raise it",
            )
        })
    };
    let max_attempts = count(
        raw.and_then(|b| b.max_attempts.as_ref()),
        "max_attempts",
        defaults.max_attempts,
        ctx,
    );
    let max_external_calls = count(
        raw.and_then(|b| b.max_external_calls.as_ref()),
        "max_external_calls",
        defaults.max_external_calls,
        ctx,
    );
    let max_cost = raw.and_then(|b| b.max_cost.as_ref()).map(|v| {
        positive(
            ctx,
            v,
            "budget `max_cost`",
            "a cost budget counts units from 1; raise it, or remove `max_cost` for no limit",
        )
    });
    let recovery_queries = match raw.and_then(|b| b.recovery_queries.as_ref()) {
        None => defaults.recovery_queries,
        Some(v) => u32::try_from(*v.get_ref()).unwrap_or_else(|_| {
            ctx.push(
                Diagnostic::new(format!(
                    "budget `recovery_queries` `{}` is not a whole number",
                    v.get_ref()
                ))
                .at(v.span())
                .help("reserve the recovery queries that may run once max_attempts is spent, e.g. recovery_queries = 3"),
            );
            defaults.recovery_queries
        }),
    };
    let max_runtime = raw
        .and_then(|b| b.max_runtime.as_ref())
        .map_or(defaults.max_runtime, |v| {
            nonzero(
                ctx,
                v,
                "budget `max_runtime`",
                "allow the attempts some time, e.g. max_runtime = \"10m\"",
            )
        });

    let adapters = steps
        .iter()
        .filter(|s| *s.kind.get_ref() == StepKind::Adapter)
        .count();
    let too_small = [
        (
            "max_attempts",
            max_attempts,
            steps.len(),
            "steps",
            "each step needs at least one attempt",
        ),
        (
            "max_external_calls",
            max_external_calls,
            adapters,
            "adapter steps",
            "each adapter step calls out at least once",
        ),
    ];
    for (field, allowed, needed, what, why) in too_small {
        if (allowed as usize) < needed {
            let path = [Seg::key("budget"), Seg::key(field)];
            ctx.push(
                Diagnostic::new(format!(
                    "budget `{field}` is {allowed}, but the workflow has {needed} {what}"
                ))
                .at(ctx.tree.locate_near(&path, Part::Value))
                .help(format!(
                    "raise [budget] {field} to at least {needed}; {why}, and retries need more"
                )),
            );
        }
    }
    if let Some(max_cost) = max_cost {
        // One call of each adapter step must fit, or the workflow can never complete.
        let needed: u64 = steps
            .iter()
            .filter(|s| *s.kind.get_ref() == StepKind::Adapter)
            .map(|s| s.cost.as_ref().map_or(1, |c| (*c.get_ref()).max(0) as u64))
            .sum();
        if u64::from(max_cost) < needed {
            let path = [Seg::key("budget"), Seg::key("max_cost")];
            ctx.push(
                Diagnostic::new(format!(
                    "budget `max_cost` is {max_cost}, but one call of each adapter step costs {needed}"
                ))
                .at(ctx.tree.locate_near(&path, Part::Value))
                .help(format!(
                    "raise [budget] max_cost to at least {needed}; retries cost again, so leave room"
                )),
            );
        }
    }
    Budget {
        max_attempts,
        max_runtime,
        max_external_calls,
        max_cost,
        recovery_queries,
    }
}
