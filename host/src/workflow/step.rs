//! The checks of one step on its own: label, milestone, timeout, retry policy, outputs,
//! requested capabilities, compensation, and the syntax of its input mapping.
//!
//! What the mapping's references read is checked afterwards, with the whole dependency
//! graph known ([`super::references`]).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use serde_spanned::Spanned;

use super::def::{
    ActionCapabilities, COMPLETION_RECORDED, Compensation, REQUEST_RECORDED, RequestedCapabilities,
};
use super::diagnostics::Diagnostic;
use super::mapping::{InputMapping, Located, REFERENCE_HELP, Reference};
use super::raw::{ActionCapabilitiesToml, RetryToml, StepToml};
use super::retry::RetryPolicy;
use super::spans::{Part, Seg, toml_to_json};
use super::validate::{Ctx, DEFAULT_TIMEOUT, nonzero, positive};
use super::values::TomlDuration;
use super::{StepDef, StepKind};

/// A step, with the references in its input mapping (for [`super::references`]) and in its
/// compensation's.
pub(super) fn step(
    raw: &StepToml,
    i: usize,
    deadline: Duration,
    ctx: &mut Ctx<'_, '_>,
) -> (StepDef, Vec<Located<Reference>>, Vec<Located<Reference>>) {
    let id = raw.id.get_ref();
    let kind = *raw.kind.get_ref();
    if raw.label.get_ref().trim().is_empty() {
        ctx.push(
            Diagnostic::new(format!("step `{id}` has an empty label"))
                .at(raw.label.span())
                .help("write the label a person sees, e.g. label = \"Render document\""),
        );
    }
    if kind == StepKind::Approval {
        super::approval::approval_only(raw, i, ctx);
    } else {
        runs_a_component(raw, ctx);
    }
    if let Some(milestone) = &raw.milestone {
        let text = milestone.get_ref().trim();
        let reserved = [REQUEST_RECORDED, COMPLETION_RECORDED]
            .iter()
            .any(|r| r.eq_ignore_ascii_case(text));
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
            let timeout = nonzero(
                ctx,
                value,
                &format!("step `{id}` timeout"),
                "give each attempt time to run, e.g. timeout = \"5s\"",
            );
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
    let retry = raw
        .retry
        .as_ref()
        .map_or_else(RetryPolicy::default, |r| retry(r, id.as_str(), ctx));
    let outputs = outputs(raw, ctx);
    let capabilities = capabilities(raw, i, ctx);
    if kind == StepKind::Handler
        && let Some(compensation) = &raw.compensation
    {
        ctx.push(
            Diagnostic::new(format!(
                "handler step `{id}` has a compensation, but handlers have no effect to undo"
            ))
            .at(ctx
                .step_span(i, &[Seg::key("compensation")], Part::Key)
                .or(Some(compensation.span())))
            .help("remove [steps.compensation], or make this step an adapter (kind = \"adapter\")"),
        );
    }
    let (input, refs) = input(raw, i, ctx);
    let cost = match &raw.cost {
        None => 1,
        Some(value) if kind == StepKind::Handler => {
            ctx.push(
                Diagnostic::new(format!(
                    "handler step `{id}` has a cost, but only external calls cost anything"
                ))
                .at(value.span())
                .help("remove `cost` from this step, or set it on the adapter step it belongs to"),
            );
            0
        }
        Some(value) => match u32::try_from(*value.get_ref()) {
            Ok(n) => n,
            Err(_) => {
                ctx.push(
                    Diagnostic::new(format!(
                        "step `{id}` cost `{}` is not a whole number of units",
                        value.get_ref()
                    ))
                    .at(value.span())
                    .help("write the units one external call of this step costs, e.g. cost = 5"),
                );
                0
            }
        },
    };
    let cost = if kind == StepKind::Adapter { cost } else { 0 };

    let step = StepDef {
        id: id.clone(),
        label: raw.label.get_ref().clone(),
        kind,
        component: raw
            .component
            .as_ref()
            .map(|c| c.get_ref().clone())
            .unwrap_or_default(),
        version_req: raw
            .version
            .as_ref()
            .map_or(semver::VersionReq::STAR, |v| v.get_ref().0.clone()),
        after: raw.after.iter().map(|a| a.get_ref().clone()).collect(),
        input,
        outputs,
        retry,
        timeout,
        capabilities,
        milestone: raw
            .milestone
            .as_ref()
            .map(|m| m.get_ref().trim().to_string()),
        compensation: None,
        cost,
        approval: super::approval::declaration(raw, deadline, ctx),
        batch: None,
    };
    let mut compensation_refs = Vec::new();
    let compensation = raw.compensation.as_ref().map(|c| {
        let c = c.get_ref();
        let input = c.input.as_ref().map(|table| {
            let (mapping, refs) = compensation_input(table, id.as_str(), i, ctx);
            compensation_refs = refs;
            mapping
        });
        let retry = c
            .retry
            .as_ref()
            .map_or_else(RetryPolicy::default, |r| self::retry(r, id.as_str(), ctx));
        Compensation {
            on: c.on,
            input,
            retry,
        }
    });
    (
        StepDef {
            compensation,
            ..step
        },
        refs,
        compensation_refs,
    )
}

/// A handler or adapter step names the component that runs it and which versions may;
/// only an approval step decides what it approves.
fn runs_a_component(raw: &StepToml, ctx: &mut Ctx<'_, '_>) {
    let id = raw.id.get_ref();
    let kind = raw.kind.get_ref().as_str();
    match &raw.component {
        None => ctx.push(
            Diagnostic::new(format!("{kind} step `{id}` names no component"))
                .at(raw.id.span())
                .help("name the handler or adapter component that runs the step, e.g. component = \"render-document\""),
        ),
        Some(c) if c.get_ref().trim().is_empty() => ctx.push(
            Diagnostic::new(format!("step `{id}` names no component"))
                .at(c.span())
                .help("name the handler or adapter component that runs the step, e.g. component = \"render-document\""),
        ),
        Some(_) => {}
    }
    if raw.version.is_none() {
        ctx.push(
            Diagnostic::new(format!("{kind} step `{id}` has no `version`"))
                .at(raw.id.span())
                .help("require the component versions that may run it, e.g. version = \"^1\""),
        );
    }
    let approval_field = [
        ("approves", !raw.approves.is_empty()),
        ("expires", raw.expires.is_some()),
        ("approvers", !raw.approvers.is_empty()),
        ("summary", raw.summary.is_some()),
    ]
    .into_iter()
    .find(|(_, set)| *set);
    if let Some((field, _)) = approval_field {
        ctx.push(
            Diagnostic::new(format!(
                "{kind} step `{id}` has `{field}`, but only an approval step approves"
            ))
            .at(raw.id.span())
            .help(format!(
                "remove `{field}`, or add a step with kind = \"approval\" that approves this one"
            )),
        );
    }
}

/// The path of a compensation's mapping entry under its step.
pub(super) fn compensation_path(path: &[Seg]) -> Vec<Seg> {
    let mut full = vec![Seg::key("compensation"), Seg::key("input")];
    full.extend_from_slice(path);
    full
}

/// `[steps.compensation.input]`, built like a step's mapping.
fn compensation_input(
    table: &toml::Table,
    id: &str,
    i: usize,
    ctx: &mut Ctx<'_, '_>,
) -> (InputMapping, Vec<Located<Reference>>) {
    let fields = match toml_to_json(&toml::Value::Table(table.clone())) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => Default::default(),
        Err(err) => {
            ctx.push(
                Diagnostic::new(format!("compensation input mapping of step `{id}`: {err}"))
                    .at(ctx.step_span(i, &compensation_path(&[]), Part::Key))
                    .help("use finite numbers in the input mapping"),
            );
            return (InputMapping::default(), Vec::new());
        }
    };
    let (mapping, refs, errors) = InputMapping::build(&fields);
    for (path, err) in errors {
        let span = ctx.step_span(i, &compensation_path(&path), Part::Value);
        ctx.push(
            Diagnostic::new(err.to_string())
                .at(span)
                .help(REFERENCE_HELP),
        );
    }
    (mapping, refs)
}

fn retry(raw: &RetryToml, id: &str, ctx: &mut Ctx<'_, '_>) -> RetryPolicy {
    let defaults = RetryPolicy::default();
    let max_attempts = raw
        .max_attempts
        .as_ref()
        .map_or(defaults.max_attempts, |v| {
            positive(
                ctx,
                v,
                &format!("step `{id}` retry `max_attempts`"),
                "count attempts from 1 (the first attempt); 1 means no retries",
            )
        });
    let duration = |v: &Option<Spanned<TomlDuration>>,
                    what: &str,
                    default: Duration,
                    ctx: &mut Ctx<'_, '_>| {
        v.as_ref().map_or(default, |v| {
            nonzero(
                ctx,
                v,
                &format!("step `{id}` retry `{what}`"),
                "wait a little between attempts, e.g. \"200ms\"",
            )
        })
    };
    let initial_backoff = duration(
        &raw.initial_backoff,
        "initial_backoff",
        defaults.initial_backoff,
        ctx,
    );
    let max_backoff = duration(&raw.max_backoff, "max_backoff", defaults.max_backoff, ctx);
    if max_backoff < initial_backoff {
        let span = raw
            .max_backoff
            .as_ref()
            .or(raw.initial_backoff.as_ref())
            .map(Spanned::span);
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
    let mut float =
        |v: &Option<Spanned<f64>>, what: &str, default: f64, ok: fn(f64) -> bool, help: &str| {
            let Some(v) = v else { return default };
            let value = *v.get_ref();
            if !ok(value) {
                ctx.push(
                    Diagnostic::new(format!(
                        "step `{id}` retry `{what}` `{value}` is out of range"
                    ))
                    .at(v.span())
                    .help(help),
                );
                return default;
            }
            value
        };
    let multiplier = float(
        &raw.multiplier,
        "multiplier",
        defaults.multiplier,
        |m| m.is_finite() && m >= 1.0,
        "use a multiplier of at least 1.0, e.g. 2.0 doubles the wait after each attempt",
    );
    let jitter = float(
        &raw.jitter,
        "jitter",
        defaults.jitter,
        |j| (0.0..=1.0).contains(&j),
        "use a fraction from 0.0 (no jitter) to 1.0, e.g. 0.2",
    );
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
    let handler = *raw.kind.get_ref() == StepKind::Handler;
    let any_action = caps.query.is_some() || caps.compensate.is_some();
    if handler && (!(caps.outbound_hosts.is_empty() && caps.secrets.is_empty()) || any_action) {
        ctx.push(
            Diagnostic::new(format!(
                "handler step `{id}` requests capabilities, but handlers are pure and get none"
            ))
            .at(ctx.step_span(i, &[Seg::key("capabilities")], Part::Key))
            .help("remove [steps.capabilities], or make this step an adapter (kind = \"adapter\")"),
        );
    }
    if let Some(table) = &caps.compensate
        && !handler
        && raw.compensation.is_none()
    {
        ctx.push(
            Diagnostic::new(format!(
                "step `{id}` grants `compensate` capabilities, but it has no [steps.compensation], so nothing would use them"
            ))
            .at(table.span())
            .help("add [steps.compensation] with `on`, or remove [steps.capabilities.compensate]"),
        );
    }
    let own = action_capabilities(&caps.outbound_hosts, &caps.secrets, ctx);
    let action = |table: &Option<Spanned<ActionCapabilitiesToml>>, ctx: &mut Ctx<'_, '_>| {
        table.as_ref().map(|t| {
            let t = t.get_ref();
            action_capabilities(&t.outbound_hosts, &t.secrets, ctx)
        })
    };
    let query = action(&caps.query, ctx);
    let compensate = action(&caps.compensate, ctx);
    RequestedCapabilities {
        outbound_hosts: own.outbound_hosts,
        secrets: own.secrets,
        query,
        compensate,
    }
}

/// Checks one action's hosts and secret names and returns them as written.
fn action_capabilities(
    hosts: &[Spanned<String>],
    secrets: &[Spanned<String>],
    ctx: &mut Ctx<'_, '_>,
) -> ActionCapabilities {
    for host in hosts {
        if let Some(problem) = host_problem(host.get_ref()) {
            ctx.push(Diagnostic::new(problem).at(host.span()).help(
                "write `scheme://host:port`, `host:port`, or `$setting` for the host of the URL in an adapter setting (e.g. \"$base_url\")",
            ));
        }
    }
    for secret in secrets {
        let name = secret.get_ref();
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            ctx.push(
                Diagnostic::new(format!("secret name `{name}` is not valid"))
                    .at(secret.span())
                    .help("name the secret with letters, digits, `_`, `-` and `.`, e.g. \"provider_token\""),
            );
        }
    }
    ActionCapabilities {
        outbound_hosts: hosts.iter().map(|h| h.get_ref().clone()).collect(),
        secrets: secrets.iter().map(|s| s.get_ref().clone()).collect(),
    }
}

/// What is wrong with an `outbound_hosts` entry, if anything.
pub(super) fn host_problem(text: &str) -> Option<String> {
    match text.strip_prefix('$') {
        Some(setting) if is_setting_name(setting) => None,
        Some(_) => Some(format!("outbound host `{text}` names an invalid setting")),
        None => text
            .parse::<crate::capabilities::HostRule>()
            .err()
            .map(|e| e.to_string()),
    }
}

/// An adapter setting's name, as used after `$` in `outbound_hosts`.
fn is_setting_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn input(
    raw: &StepToml,
    i: usize,
    ctx: &mut Ctx<'_, '_>,
) -> (InputMapping, Vec<Located<Reference>>) {
    let table = toml::Value::Table(raw.input.clone());
    let fields = match toml_to_json(&table) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => Default::default(),
        Err(err) => {
            ctx.push(
                Diagnostic::new(format!(
                    "input mapping of step `{}`: {err}",
                    raw.id.get_ref()
                ))
                .at(ctx.step_span(i, &[Seg::key("input")], Part::Key))
                .help("use finite numbers in the input mapping"),
            );
            return (InputMapping::default(), Vec::new());
        }
    };
    let (mapping, refs, errors) = InputMapping::build(&fields);
    for (path, err) in errors {
        let span = ctx.step_span(i, &mapping_path(&path), Part::Value);
        ctx.push(
            Diagnostic::new(err.to_string())
                .at(span)
                .help(REFERENCE_HELP),
        );
    }
    (mapping, refs)
}

/// The path of a mapping entry under its step.
pub(super) fn mapping_path(path: &[Seg]) -> Vec<Seg> {
    let mut full = vec![Seg::key("input")];
    full.extend_from_slice(path);
    full
}
