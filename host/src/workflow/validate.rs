//! From the authored shape to a [`WorkflowDef`]: every check that needs nothing outside
//! the file, collecting all problems rather than stopping at the first.
//!
//! Numbers and durations are range-checked, the dependency graph is checked by
//! [`super::graph`], and each input-mapping reference must name the input schema's
//! properties (when the schema is closed), or a transitive dependency and one of its
//! declared `outputs`.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::time::Duration;

use serde_json::Value;
use serde_spanned::Spanned;

use super::def::{Budget, COMPLETION_RECORDED, Compensation, REQUEST_RECORDED, RequestedCapabilities};
use super::diagnostics::{Diagnostic, closest, line_col, list};
use super::graph::Graph;
use super::mapping::{InputMapping, Located, REFERENCE_HELP, Reference};
use super::raw::{BudgetToml, RetryToml, StepToml, WorkflowToml};
use super::retry::RetryPolicy;
use super::schema::{pointer_keys, schema_help, schema_problems};
use super::spans::{Part, Seg, SourceTree, toml_to_json};
use super::values::TomlDuration;
use super::{StepDef, StepKind, WorkflowDef};

/// Default per-attempt timeout (never longer than the workflow's deadline).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// State shared by the checks: the source for locating spans, and the findings.
pub(super) struct Ctx<'t, 'i> {
    pub tree: &'t SourceTree<'i>,
    pub source: &'i str,
    pub diags: Vec<Diagnostic>,
}

impl Ctx<'_, '_> {
    fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// The span of `path` under step `index`, or of the nearest enclosing entry.
    fn step_span(&self, index: usize, rest: &[Seg], part: Part) -> Option<Range<usize>> {
        let mut path = vec![Seg::key("steps"), Seg::Index(index)];
        path.extend_from_slice(rest);
        self.tree.locate_near(&path, part)
    }
}

/// Validates the whole file. The returned definition is only meaningful when no
/// diagnostics were added.
pub(super) fn workflow(raw: &WorkflowToml, ctx: &mut Ctx<'_, '_>, digest: String) -> WorkflowDef {
    let version = positive(ctx, &raw.version, "workflow version", "number versions from 1 and raise the number whenever the definition changes");
    let deadline = nonzero(ctx, &raw.deadline, "deadline", "give the whole workflow time to finish, e.g. deadline = \"1h\"");
    let input_schema = input_schema(raw, ctx);
    if raw.steps.is_empty() {
        ctx.push(
            Diagnostic::new(format!("workflow `{}` has no steps", raw.name.get_ref()))
                .at(ctx.tree.locate(&[Seg::key("name")], Part::Key))
                .help("add at least one [[steps]] table with id, label, kind, component and version"),
        );
    }

    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, step) in raw.steps.iter().enumerate() {
        let id = step.id.get_ref().as_str();
        if let Some(&first) = index.get(id) {
            let (line, _) = line_col(ctx.source, raw.steps[first].id.span().start);
            ctx.push(
                Diagnostic::new(format!("duplicate step id `{id}`; it is first defined on line {line}"))
                    .at(step.id.span())
                    .help("give every step its own id; ids are stable, so rename the newer step"),
            );
        } else {
            index.insert(id, i);
        }
    }
    let graph = Graph::build(&raw.steps, &index, &mut ctx.diags);

    let mut steps = Vec::with_capacity(raw.steps.len());
    for (i, raw_step) in raw.steps.iter().enumerate() {
        let (step, refs) = self::step(raw_step, i, deadline, ctx);
        references(raw, i, refs, &index, &graph, &input_schema, ctx);
        steps.push(step);
    }
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
fn positive(ctx: &mut Ctx<'_, '_>, value: &Spanned<i64>, what: &str, help: &str) -> u32 {
    match u32::try_from(*value.get_ref()) {
        Ok(n) if n > 0 => n,
        _ => {
            ctx.push(
                Diagnostic::new(format!("{what} `{}` is not a positive integer", value.get_ref()))
                    .at(value.span())
                    .help(help),
            );
            1
        }
    }
}

/// A non-zero duration; reports and returns one second otherwise.
fn nonzero(ctx: &mut Ctx<'_, '_>, value: &Spanned<TomlDuration>, what: &str, help: &str) -> Duration {
    let duration = value.get_ref().0;
    if duration.is_zero() {
        ctx.push(Diagnostic::new(format!("{what} is zero")).at(value.span()).help(help));
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
        let pointer = if problem.pointer.is_empty() { "/" } else { problem.pointer.as_str() };
        ctx.push(
            Diagnostic::new(format!("input schema is not valid JSON Schema at `{pointer}`: {}", problem.message))
                .at(ctx.tree.locate_near(&path, Part::Value))
                .help(schema_help(&problem.pointer)),
        );
    }
    schema
}

fn budget(raw: Option<&BudgetToml>, steps: &[StepToml], ctx: &mut Ctx<'_, '_>) -> Budget {
    let defaults = Budget::default();
    let count = |value: Option<&Spanned<i64>>, what: &str, default: u32, ctx: &mut Ctx<'_, '_>| {
        value.map_or(default, |v| positive(ctx, v, &format!("budget `{what}`"), "a budget counts from 1; raise it"))
    };
    let max_attempts = count(raw.and_then(|b| b.max_attempts.as_ref()), "max_attempts", defaults.max_attempts, ctx);
    let max_external_calls = count(
        raw.and_then(|b| b.max_external_calls.as_ref()),
        "max_external_calls",
        defaults.max_external_calls,
        ctx,
    );
    let max_runtime = raw.and_then(|b| b.max_runtime.as_ref()).map_or(defaults.max_runtime, |v| {
        nonzero(ctx, v, "budget `max_runtime`", "allow the attempts some time, e.g. max_runtime = \"10m\"")
    });

    let adapters = steps.iter().filter(|s| *s.kind.get_ref() == StepKind::Adapter).count();
    let too_small = [
        ("max_attempts", max_attempts, steps.len(), "steps", "each step needs at least one attempt"),
        ("max_external_calls", max_external_calls, adapters, "adapter steps", "each adapter step calls out at least once"),
    ];
    for (field, allowed, needed, what, why) in too_small {
        if (allowed as usize) < needed {
            let path = [Seg::key("budget"), Seg::key(field)];
            ctx.push(
                Diagnostic::new(format!("budget `{field}` is {allowed}, but the workflow has {needed} {what}"))
                    .at(ctx.tree.locate_near(&path, Part::Value))
                    .help(format!("raise [budget] {field} to at least {needed}; {why}, and retries need more")),
            );
        }
    }
    Budget {
        max_attempts,
        max_runtime,
        max_external_calls,
    }
}

/// A step, with the references in its input mapping (for [`references`]).
fn step(
    raw: &StepToml,
    i: usize,
    deadline: Duration,
    ctx: &mut Ctx<'_, '_>,
) -> (StepDef, Vec<Located<Reference>>) {
    let id = raw.id.get_ref();
    let kind = *raw.kind.get_ref();
    if raw.label.get_ref().trim().is_empty() {
        ctx.push(
            Diagnostic::new(format!("step `{id}` has an empty label"))
                .at(raw.label.span())
                .help("write the label a person sees, e.g. label = \"Render document\""),
        );
    }
    if raw.component.get_ref().trim().is_empty() {
        ctx.push(
            Diagnostic::new(format!("step `{id}` names no component"))
                .at(raw.component.span())
                .help("name the handler or adapter component that runs the step, e.g. component = \"render-document\""),
        );
    }
    if let Some(milestone) = &raw.milestone {
        let text = milestone.get_ref().trim();
        let reserved = [REQUEST_RECORDED, COMPLETION_RECORDED].iter().any(|r| r.eq_ignore_ascii_case(text));
        if text.is_empty() {
            ctx.push(Diagnostic::new(format!("step `{id}` has an empty milestone")).at(milestone.span()).help(
                "name what a person sees as achieved, e.g. milestone = \"Document prepared\", or remove `milestone`",
            ));
        } else if reserved {
            ctx.push(
                Diagnostic::new(format!("milestone `{text}` is reached by every workflow on its own"))
                    .at(milestone.span())
                    .help("remove `milestone` from this step, or name what the step achieves, e.g. \"Document prepared\""),
            );
        }
    }
    let timeout = match &raw.timeout {
        None => DEFAULT_TIMEOUT.min(deadline),
        Some(value) => {
            let timeout = nonzero(ctx, value, &format!("step `{id}` timeout"), "give each attempt time to run, e.g. timeout = \"5s\"");
            if timeout > deadline {
                ctx.push(
                    Diagnostic::new(format!(
                        "step `{id}` timeout `{}` is longer than the workflow deadline `{}`",
                        humantime::format_duration(timeout),
                        humantime::format_duration(deadline)
                    ))
                    .at(value.span())
                    .help("shorten the step's timeout, or lengthen `deadline`"),
                );
            }
            timeout
        }
    };
    let retry = raw.retry.as_ref().map_or_else(RetryPolicy::default, |r| retry(r, id.as_str(), ctx));
    let outputs = outputs(raw, ctx);
    let capabilities = capabilities(raw, i, ctx);
    if kind == StepKind::Handler
        && let Some(compensation) = &raw.compensation
    {
        ctx.push(
            Diagnostic::new(format!("handler step `{id}` has a compensation, but handlers have no effect to undo"))
                .at(ctx.step_span(i, &[Seg::key("compensation")], Part::Key).or(Some(compensation.span())))
                .help("remove [steps.compensation], or make this step an adapter (kind = \"adapter\")"),
        );
    }
    let (input, refs) = input(raw, i, ctx);

    let step = StepDef {
        id: id.clone(),
        label: raw.label.get_ref().clone(),
        kind,
        component: raw.component.get_ref().clone(),
        version_req: raw.version.get_ref().0.clone(),
        after: raw.after.iter().map(|a| a.get_ref().clone()).collect(),
        input,
        outputs,
        retry,
        timeout,
        capabilities,
        milestone: raw.milestone.as_ref().map(|m| m.get_ref().trim().to_string()),
        compensation: raw.compensation.as_ref().map(|c| Compensation { on: c.get_ref().on }),
    };
    (step, refs)
}

fn retry(raw: &RetryToml, id: &str, ctx: &mut Ctx<'_, '_>) -> RetryPolicy {
    let defaults = RetryPolicy::default();
    let max_attempts = raw.max_attempts.as_ref().map_or(defaults.max_attempts, |v| {
        positive(ctx, v, "retry `max_attempts`", "count attempts from 1 (the first attempt); 1 means no retries")
    });
    let duration = |v: &Option<Spanned<TomlDuration>>, what: &str, default: Duration, ctx: &mut Ctx<'_, '_>| {
        v.as_ref().map_or(default, |v| nonzero(ctx, v, &format!("retry `{what}`"), "wait a little between attempts, e.g. \"200ms\""))
    };
    let initial_backoff = duration(&raw.initial_backoff, "initial_backoff", defaults.initial_backoff, ctx);
    let max_backoff = duration(&raw.max_backoff, "max_backoff", defaults.max_backoff, ctx);
    if max_backoff < initial_backoff {
        let span = raw.max_backoff.as_ref().or(raw.initial_backoff.as_ref()).map(Spanned::span);
        ctx.push(
            Diagnostic::new(format!(
                "step `{id}` retry `max_backoff` ({}) is shorter than `initial_backoff` ({})",
                humantime::format_duration(max_backoff),
                humantime::format_duration(initial_backoff)
            ))
            .at(span)
            .help("make `max_backoff` at least `initial_backoff`"),
        );
    }
    let mut float = |v: &Option<Spanned<f64>>, what: &str, default: f64, ok: fn(f64) -> bool, help: &str| {
        let Some(v) = v else { return default };
        let value = *v.get_ref();
        if !ok(value) {
            ctx.push(Diagnostic::new(format!("retry `{what}` `{value}` is out of range")).at(v.span()).help(help));
            return default;
        }
        value
    };
    let multiplier = float(&raw.multiplier, "multiplier", defaults.multiplier, |m| m.is_finite() && m >= 1.0, "use a multiplier of at least 1.0, e.g. 2.0 doubles the wait after each attempt");
    let jitter = float(&raw.jitter, "jitter", defaults.jitter, |j| (0.0..=1.0).contains(&j), "use a fraction from 0.0 (no jitter) to 1.0, e.g. 0.2");
    RetryPolicy {
        max_attempts,
        initial_backoff,
        max_backoff,
        multiplier,
        jitter,
    }
}

fn outputs(raw: &StepToml, ctx: &mut Ctx<'_, '_>) -> Vec<String> {
    let id = raw.id.get_ref();
    let mut seen = BTreeSet::new();
    for output in &raw.outputs {
        let name = output.get_ref().as_str();
        let problem = if name.is_empty() {
            Some("is empty")
        } else if name.contains('.') || name.starts_with('$') {
            Some("may not contain `.` or start with `$`")
        } else if !seen.insert(name) {
            Some("is listed twice")
        } else {
            None
        };
        if let Some(problem) = problem {
            ctx.push(
                Diagnostic::new(format!("output field `{name}` of step `{id}` {problem}"))
                    .at(output.span())
                    .help("list each top-level field of the step's result once, e.g. outputs = [\"document\"]"),
            );
        }
    }
    raw.outputs.iter().map(|o| o.get_ref().clone()).collect()
}

fn capabilities(raw: &StepToml, i: usize, ctx: &mut Ctx<'_, '_>) -> RequestedCapabilities {
    let Some(caps) = &raw.capabilities else {
        return RequestedCapabilities::default();
    };
    let id = raw.id.get_ref();
    if *raw.kind.get_ref() == StepKind::Handler && !(caps.outbound_hosts.is_empty() && caps.secrets.is_empty()) {
        ctx.push(
            Diagnostic::new(format!("handler step `{id}` requests capabilities, but handlers are pure and get none"))
                .at(ctx.step_span(i, &[Seg::key("capabilities")], Part::Key))
                .help("remove [steps.capabilities], or make this step an adapter (kind = \"adapter\")"),
        );
    }
    for host in &caps.outbound_hosts {
        let text = host.get_ref();
        let problem = match text.strip_prefix('$') {
            Some(setting) if is_setting_name(setting) => None,
            Some(_) => Some(format!("outbound host `{text}` names an invalid setting")),
            None => text.parse::<crate::capabilities::HostRule>().err().map(|e| e.to_string()),
        };
        if let Some(problem) = problem {
            ctx.push(Diagnostic::new(problem).at(host.span()).help(
                "write `scheme://host:port`, `host:port`, or `$setting` for the host of the URL in an adapter setting (e.g. \"$base_url\")",
            ));
        }
    }
    for secret in &caps.secrets {
        let name = secret.get_ref();
        let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            ctx.push(
                Diagnostic::new(format!("secret name `{name}` is not valid"))
                    .at(secret.span())
                    .help("name the secret with letters, digits, `_`, `-` and `.`, e.g. \"provider_token\""),
            );
        }
    }
    RequestedCapabilities {
        outbound_hosts: caps.outbound_hosts.iter().map(|h| h.get_ref().clone()).collect(),
        secrets: caps.secrets.iter().map(|s| s.get_ref().clone()).collect(),
    }
}

/// An adapter setting's name, as used after `$` in `outbound_hosts`.
fn is_setting_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn input(raw: &StepToml, i: usize, ctx: &mut Ctx<'_, '_>) -> (InputMapping, Vec<Located<Reference>>) {
    let table = toml::Value::Table(raw.input.clone());
    let fields = match toml_to_json(&table) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => Default::default(),
        Err(err) => {
            ctx.push(
                Diagnostic::new(format!("input mapping of step `{}`: {err}", raw.id.get_ref()))
                    .at(ctx.step_span(i, &[Seg::key("input")], Part::Key))
                    .help("use finite numbers in the input mapping"),
            );
            return (InputMapping::default(), Vec::new());
        }
    };
    let (mapping, refs, errors) = InputMapping::build(&fields);
    for (path, err) in errors {
        let span = ctx.step_span(i, &mapping_path(&path), Part::Value);
        ctx.push(Diagnostic::new(err.to_string()).at(span).help(REFERENCE_HELP));
    }
    (mapping, refs)
}

fn mapping_path(path: &[Seg]) -> Vec<Seg> {
    let mut full = vec![Seg::key("input")];
    full.extend_from_slice(path);
    full
}

/// Checks what each reference of step `i` reads.
fn references(
    raw: &WorkflowToml,
    i: usize,
    refs: Vec<Located<Reference>>,
    index: &BTreeMap<&str, usize>,
    graph: &Graph,
    schema: &Value,
    ctx: &mut Ctx<'_, '_>,
) {
    let id = raw.steps[i].id.get_ref();
    let ancestors = graph.ancestors(i);
    for (path, reference) in refs {
        let span = ctx.step_span(i, &mapping_path(&path), Part::Value);
        let reads = format!("step `{id}` reads `{reference}`");
        let Some(target) = reference.step() else {
            if let Some(d) = input_field(&reference, schema) {
                ctx.push(Diagnostic { message: format!("{reads}, but {}", d.message), span, help: d.help });
            }
            continue;
        };
        let name = target.as_str();
        let Some(&j) = index.get(name) else {
            let help = match closest(name, index.keys().copied()) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("the steps are {}", list(index.keys())),
            };
            ctx.push(Diagnostic::new(format!("{reads}, but there is no step `{name}`")).at(span.clone()).help(help));
            continue;
        };
        if j == i {
            ctx.push(
                Diagnostic::new(format!("{reads}, its own receipt"))
                    .at(span.clone())
                    .help("a step can read only the receipts of steps it runs after"),
            );
            continue;
        }
        if !ancestors.contains(&j) {
            ctx.push(
                Diagnostic::new(format!("{reads}, but does not run after `{name}`"))
                    .at(span.clone())
                    .help(format!("add \"{name}\" to the `after` of step `{id}`, so its receipt exists when `{id}` starts")),
            );
        }
        let target_step = &raw.steps[j];
        if matches!(reference, Reference::ExternalReference { .. })
            && *target_step.kind.get_ref() == StepKind::Handler
        {
            ctx.push(
                Diagnostic::new(format!("{reads}, but `{name}` is a handler step and has no external reference"))
                    .at(span.clone())
                    .help(format!("read a field of its output instead, e.g. `$steps.{name}.output.<field>`")),
            );
        }
        if let Some(field) = reference.receipt_field() {
            let declared: Vec<&str> = target_step.outputs.iter().map(|o| o.get_ref().as_str()).collect();
            if !declared.contains(&field) {
                let help = match closest(field, declared.iter().copied()) {
                    Some(near) => format!("did you mean `{near}`? Otherwise add \"{field}\" to the `outputs` of step `{name}`"),
                    None => format!("add \"{field}\" to the `outputs` of step `{name}` (it declares {})", list(&declared)),
                };
                ctx.push(
                    Diagnostic::new(format!("{reads}, but step `{name}` declares no output `{field}`"))
                        .at(span.clone())
                        .help(help),
                );
            }
        }
    }
}

/// For `$input.<field>`: when the schema is closed (`additionalProperties = false`), the
/// field must be one of its `properties`.
fn input_field(reference: &Reference, schema: &Value) -> Option<Diagnostic> {
    let Reference::Input { path } = reference else { return None };
    let field = path.first()?;
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return None;
    }
    let properties: Vec<&str> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    if properties.contains(&field.as_str()) {
        return None;
    }
    let help = match closest(field, properties.iter().copied()) {
        Some(near) => format!("did you mean `{near}`? Otherwise add `{field}` under [input_schema.properties]"),
        None => format!("the input has {}; add `{field}` under [input_schema.properties]", list(&properties)),
    };
    Some(Diagnostic::new(format!("the input schema has no property `{field}`")).help(help))
}
