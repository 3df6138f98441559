//! What input-mapping references read: the input schema's properties (when the schema
//! is closed), or a step the reader transitively runs after, and one of that step's
//! declared `outputs` (or an adapter's external reference).

use std::collections::BTreeMap;

use serde_json::Value;

use super::StepKind;
use super::diagnostics::{Diagnostic, closest, list};
use super::graph::Graph;
use super::mapping::{Located, Reference};
use super::raw::WorkflowToml;
use super::spans::Part;
use super::step::mapping_path;
use super::validate::Ctx;

/// Checks what each reference of step `i`'s compensation reads: a step's compensation runs
/// after its effect, so it may read the step's own receipt and those of the steps it runs
/// after.
pub(super) fn compensation_references(
    raw: &WorkflowToml,
    i: usize,
    refs: Vec<Located<Reference>>,
    index: &BTreeMap<&str, usize>,
    graph: &Graph,
    ctx: &mut Ctx<'_, '_>,
) {
    let id = raw.steps[i].id.get_ref();
    let ancestors = graph.ancestors(i);
    for (path, reference) in refs {
        let Some(target) = reference.step() else {
            continue;
        };
        let name = target.as_str();
        let known = index.get(name).copied();
        let readable = known.is_some_and(|j| j == i || ancestors.contains(&j));
        if !readable && !graph.is_incomplete(i) {
            let span = ctx.step_span(i, &super::step::compensation_path(&path), Part::Value);
            ctx.push(
                Diagnostic::new(format!(
                    "the compensation of step `{id}` reads `{reference}`, but `{name}` is neither `{id}` nor a step it runs after"
                ))
                .at(span)
                .help(format!(
                    "read the receipt of `{id}` or of a step in its `after`; the steps are {}",
                    list(index.keys())
                )),
            );
        }
    }
}

/// Checks what each reference of step `i` reads.
pub(super) fn references(
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
                ctx.push(Diagnostic {
                    message: format!("{reads}, but {}", d.message),
                    span,
                    help: d.help,
                });
            }
            continue;
        };
        let name = target.as_str();
        let Some(&j) = index.get(name) else {
            let help = match closest(name, index.keys().copied()) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("the steps are {}", list(index.keys())),
            };
            ctx.push(
                Diagnostic::new(format!("{reads}, but there is no step `{name}`"))
                    .at(span.clone())
                    .help(help),
            );
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
        // With an unknown `after` entry the dependencies are not known; that error says enough.
        if !ancestors.contains(&j) && !graph.is_incomplete(i) {
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
                Diagnostic::new(format!(
                    "{reads}, but `{name}` is a handler step and has no external reference"
                ))
                .at(span.clone())
                .help(format!(
                    "read a field of its output instead, e.g. `$steps.{name}.output.<field>`"
                )),
            );
        }
        if let Some(field) = reference.receipt_field() {
            let declared: Vec<&str> = target_step
                .outputs
                .iter()
                .map(|o| o.get_ref().as_str())
                .collect();
            if !declared.contains(&field) {
                let help = match closest(field, declared.iter().copied()) {
                    Some(near) => format!(
                        "did you mean `{near}`? Otherwise add \"{field}\" to the `outputs` of step `{name}`"
                    ),
                    None => format!(
                        "add \"{field}\" to the `outputs` of step `{name}` (it declares {})",
                        list(&declared)
                    ),
                };
                ctx.push(
                    Diagnostic::new(format!(
                        "{reads}, but step `{name}` declares no output `{field}`"
                    ))
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
    let Reference::Input { path } = reference else {
        return None;
    };
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
        Some(near) => format!(
            "did you mean `{near}`? Otherwise add `{field}` under [input_schema.properties]"
        ),
        None => format!(
            "the input has {}; add `{field}` under [input_schema.properties]",
            list(&properties)
        ),
    };
    Some(Diagnostic::new(format!("the input schema has no property `{field}`")).help(help))
}
