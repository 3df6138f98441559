//! Batch steps: `for_each` names a list whose items each become an effect of their own,
//! `item_key` what names an item stably, `max_parallel` how many run at once. Checked here:
//! only an adapter step has items; `for_each` names a list (a field of the input the schema
//! does not declare as something else, or a declared output of a step it runs after);
//! `item_key` reads the item; `$item` is read only where there are items.

use std::collections::BTreeMap;

use serde_json::Value;

use super::StepKind;
use super::def::BatchDef;
use super::diagnostics::{Diagnostic, list};
use super::graph::Graph;
use super::mapping::{Located, REFERENCE_HELP, Reference};
use super::raw::WorkflowToml;
use super::spans::Part;
use super::step::mapping_path;
use super::validate::Ctx;

const FOR_EACH_HELP: &str =
    "name a list: for_each = \"$input.<field>\" or \"$steps.<id>.output.<field>\"";

/// The batch declaration of step `i`, or `None`, with every problem reported. `refs` are the
/// references of its input mapping.
pub(super) fn declaration(
    raw: &WorkflowToml,
    i: usize,
    refs: &[Located<Reference>],
    index: &BTreeMap<&str, usize>,
    graph: &Graph,
    schema: &Value,
    ctx: &mut Ctx<'_, '_>,
) -> Option<BatchDef> {
    let step = &raw.steps[i];
    let id = step.id.get_ref();
    let Some(for_each) = &step.for_each else {
        for (path, reference) in refs {
            if matches!(reference, Reference::Item { .. }) {
                ctx.push(
                    Diagnostic::new(format!(
                        "step `{id}` reads `{reference}`, but only a step with `for_each` has items"
                    ))
                    .at(ctx.step_span(i, &mapping_path(path), Part::Value))
                    .help("add for_each = \"$input.<list>\" to the step, or read `$input` or `$steps`"),
                );
            }
        }
        for (name, span) in [
            ("item_key", step.item_key.as_ref().map(|k| k.span())),
            ("max_parallel", step.max_parallel.as_ref().map(|m| m.span())),
        ] {
            if let Some(span) = span {
                ctx.push(
                    Diagnostic::new(format!(
                        "step `{id}` has `{name}`, but no `for_each`: it has no items"
                    ))
                    .at(span)
                    .help(format!(
                        "add for_each = \"$input.<list>\", or remove `{name}`"
                    )),
                );
            }
        }
        return None;
    };
    let kind = *step.kind.get_ref();
    if kind != StepKind::Adapter {
        ctx.push(
            Diagnostic::new(format!(
                "{} step `{id}` has `for_each`, but only an adapter step's items are effects of their own",
                kind.role().as_str()
            ))
            .at(for_each.span())
            .help("remove `for_each`, or make this an adapter step; a handler computes over the whole list in one run"),
        );
        return None;
    }
    let source = match Reference::parse(for_each.get_ref()) {
        Ok(reference) => reference,
        Err(e) => {
            ctx.push(
                Diagnostic::new(format!("`for_each` of step `{id}`: {e}"))
                    .at(for_each.span())
                    .help(REFERENCE_HELP),
            );
            return None;
        }
    };
    let mut ok = true;
    let mut report = |ctx: &mut Ctx<'_, '_>, message: String, help: String| {
        ok = false;
        ctx.push(Diagnostic::new(message).at(for_each.span()).help(help));
    };
    match &source {
        Reference::Input { path } if path.is_empty() => report(
            ctx,
            format!("`for_each` of step `{id}` names the whole input, an object, not a list"),
            FOR_EACH_HELP.into(),
        ),
        Reference::Input { path } => {
            if let Some(declared) = declared_type(schema, path)
                && declared != "array"
            {
                report(
                    ctx,
                    format!(
                        "`for_each` of step `{id}` reads `{source}`, which the input schema declares as `{declared}`, not a list"
                    ),
                    "name an array field of the input, or declare this one as type = \"array\""
                        .into(),
                );
            }
        }
        Reference::Output { step: from, path } => match index.get(from.as_str()) {
            None => report(
                ctx,
                format!(
                    "`for_each` of step `{id}` reads `{source}`, but there is no step `{from}`"
                ),
                format!("the steps are {}", list_ids(index)),
            ),
            Some(&j) if !graph.ancestors(i).contains(&j) => report(
                ctx,
                format!(
                    "`for_each` of step `{id}` reads `{source}`, but `{from}` is not a step it runs after"
                ),
                format!("add \"{from}\" to the `after` of step `{id}`"),
            ),
            Some(&j) => {
                let outputs: Vec<&str> = raw.steps[j]
                    .outputs
                    .iter()
                    .map(|o| o.get_ref().as_str())
                    .collect();
                match path.first() {
                    None => report(
                        ctx,
                        format!(
                            "`for_each` of step `{id}` reads the whole output of `{from}`, an object, not a list"
                        ),
                        format!("name one of its outputs: {}", list(&outputs)),
                    ),
                    Some(field) if !outputs.contains(&field.as_str()) => report(
                        ctx,
                        format!(
                            "`for_each` of step `{id}` reads `{source}`, but step `{from}` declares no output `{field}`"
                        ),
                        format!(
                            "add \"{field}\" to the `outputs` of `{from}`, or name one of {}",
                            list(&outputs)
                        ),
                    ),
                    Some(_) => {}
                }
            }
        },
        Reference::ExternalReference { .. } | Reference::Item { .. } => report(
            ctx,
            format!("`for_each` of step `{id}` reads `{source}`, which is not a list"),
            FOR_EACH_HELP.into(),
        ),
    }
    let item_key = match &step.item_key {
        None => None,
        Some(text) => match Reference::parse(text.get_ref()) {
            Ok(key @ Reference::Item { .. }) => Some(key),
            Ok(other) => {
                ok = false;
                ctx.push(
                    Diagnostic::new(format!(
                        "`item_key` of step `{id}` reads `{other}`, outside the item: every item would have the same key"
                    ))
                    .at(text.span())
                    .help("name the item by a field of it, e.g. item_key = \"$item.email\", or remove `item_key` to name it by its digest"),
                );
                None
            }
            Err(e) => {
                ok = false;
                ctx.push(
                    Diagnostic::new(format!("`item_key` of step `{id}`: {e}"))
                        .at(text.span())
                        .help("name the item by a field of it, e.g. item_key = \"$item.email\""),
                );
                None
            }
        },
    };
    let max_parallel = match &step.max_parallel {
        None => BatchDef::DEFAULT_MAX_PARALLEL,
        Some(value) => match u32::try_from(*value.get_ref()) {
            Ok(n) if (1..=BatchDef::MAX_PARALLEL).contains(&n) => n,
            _ => {
                ok = false;
                ctx.push(
                    Diagnostic::new(format!(
                        "`max_parallel` of step `{id}` is {}; {}",
                        value.get_ref(),
                        if *value.get_ref() < 1 {
                            "items need at least 1 at a time".to_string()
                        } else {
                            format!("at most {} items run at once", BatchDef::MAX_PARALLEL)
                        }
                    ))
                    .at(value.span())
                    .help(format!(
                        "give 1 to {} (default {})",
                        BatchDef::MAX_PARALLEL,
                        BatchDef::DEFAULT_MAX_PARALLEL
                    )),
                );
                BatchDef::DEFAULT_MAX_PARALLEL
            }
        },
    };
    ok.then_some(BatchDef {
        for_each: source,
        item_key,
        max_parallel,
    })
}

/// The `type` the input schema gives the field at `path`, when it says one.
fn declared_type<'a>(schema: &'a Value, path: &[String]) -> Option<&'a str> {
    let mut current = schema;
    for segment in path {
        current = current.get("properties")?.get(segment)?;
    }
    match current.get("type")? {
        Value::String(t) => Some(t.as_str()),
        // A list of types that allows an array is a list.
        Value::Array(types) if types.iter().any(|t| t == "array") => Some("array"),
        Value::Array(types) => types.first().and_then(Value::as_str),
        _ => None,
    }
}

fn list_ids(index: &BTreeMap<&str, usize>) -> String {
    list(index.keys())
}
