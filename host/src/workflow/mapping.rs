//! Input mappings: how a step's input is built from the workflow input and the receipts
//! of earlier steps.
//!
//! A mapping is a table whose values are literal JSON values or reference strings,
//! anywhere inside nested tables and arrays:
//!
//! | text | value |
//! |---|---|
//! | `$input` | the whole workflow input |
//! | `$input.<path>` | a field of the workflow input |
//! | `$steps.<id>.output` | the whole output of step `<id>`'s receipt |
//! | `$steps.<id>.output.<field>[.<path>]` | a named receipt field (listed in `<id>`'s `outputs`) |
//! | `$steps.<id>.external_reference` | the external reference of adapter step `<id>`'s receipt |
//! | `$item`, `$item.<path>` | in a step with `for_each`: the item (or a field of it) |
//! | `$$...` | the literal string `$...` |
//!
//! A path is segments separated by `.`; a segment that is a number indexes an array.
//! Resolution ([`InputMapping::resolve`]) is pure: the caller supplies the input and the
//! receipts, and a value missing at run time is a [`MappingError`] naming the reference.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::spans::Seg;
use super::values::StepId;

/// Help shown for any malformed reference.
pub(super) const REFERENCE_HELP: &str = "write `$input.<field>`, `$steps.<id>.output.<field>` or \
     `$steps.<id>.external_reference`; write `$$` for a literal `$`";

/// A reference to a value available when a step starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// `$input` (empty path) or `$input.<path>`.
    Input {
        /// Field names (or array indices) from the root of the workflow input.
        path: Vec<String>,
    },
    /// `$steps.<id>.output` (empty path) or `$steps.<id>.output.<field>[.<path>]`.
    Output {
        /// The step whose receipt is read.
        step: StepId,
        /// The receipt field first, then a path inside it.
        path: Vec<String>,
    },
    /// `$steps.<id>.external_reference`.
    ExternalReference {
        /// The adapter step whose receipt is read.
        step: StepId,
    },
    /// `$item` (empty path) or `$item.<path>`: in a step with `for_each`, the item.
    Item {
        /// Field names (or array indices) from the root of the item.
        path: Vec<String>,
    },
}

/// A reference string that does not follow the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid reference `{text}`: {reason}")]
pub struct ReferenceError {
    /// The string as written.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Reference {
    /// Parses a reference string, which starts with one `$`.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let fail = |reason: String| ReferenceError {
            text: text.to_string(),
            reason,
        };
        let body = text
            .strip_prefix('$')
            .ok_or_else(|| fail("a reference starts with `$`".to_string()))?;
        let segments: Vec<&str> = body.split('.').collect();
        if let Some(index) = segments.iter().position(|s| s.is_empty()) {
            let reason = if body.is_empty() {
                "nothing follows `$`".to_string()
            } else {
                format!("segment {} is empty", index + 1)
            };
            return Err(fail(reason));
        }
        let owned = |s: &[&str]| s.iter().map(|s| s.to_string()).collect();
        match segments.as_slice() {
            ["input", path @ ..] => Ok(Reference::Input { path: owned(path) }),
            ["item", path @ ..] => Ok(Reference::Item { path: owned(path) }),
            ["steps"] => Err(fail("a step id must follow `$steps.`".to_string())),
            ["steps", id, rest @ ..] => {
                let step = StepId::new(*id).map_err(|err| fail(err.to_string()))?;
                match rest {
                    ["output", path @ ..] => Ok(Reference::Output {
                        step,
                        path: owned(path),
                    }),
                    ["external_reference"] => Ok(Reference::ExternalReference { step }),
                    ["external_reference", ..] => Err(fail(
                        "`external_reference` is a string; nothing may follow it".to_string(),
                    )),
                    [] => Err(fail(format!(
                        "say what to read from step `{step}`: `.output`, `.output.<field>` or \
                         `.external_reference`"
                    ))),
                    [other, ..] => Err(fail(format!(
                        "step receipts have `output` and `external_reference`, not `{other}`"
                    ))),
                }
            }
            [root, ..] => Err(fail(format!(
                "unknown root `${root}`; references start with `$input` or `$steps` (or `$item`, in a step with `for_each`)"
            ))),
            [] => Err(fail("nothing follows `$`".to_string())),
        }
    }

    /// The step whose receipt this reads, if any.
    pub fn step(&self) -> Option<&StepId> {
        match self {
            Reference::Input { .. } | Reference::Item { .. } => None,
            Reference::Output { step, .. } | Reference::ExternalReference { step } => Some(step),
        }
    }

    /// The named receipt field this reads (`$steps.<id>.output.<field>...`), if any.
    pub fn receipt_field(&self) -> Option<&str> {
        match self {
            Reference::Output { path, .. } => path.first().map(String::as_str),
            _ => None,
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (head, path) = match self {
            Reference::Input { path } => ("$input".to_string(), path),
            Reference::Item { path } => ("$item".to_string(), path),
            Reference::Output { step, path } => (format!("$steps.{step}.output"), path),
            Reference::ExternalReference { step } => {
                return write!(f, "$steps.{step}.external_reference");
            }
        };
        f.write_str(&head)?;
        path.iter().try_for_each(|s| write!(f, ".{s}"))
    }
}

/// What a step's input is built from: one receipt of an earlier step, as the mapping sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptView {
    /// The step's result.
    pub output: Value,
    /// The external system's id for the effect, for adapter steps that have one.
    pub external_reference: Option<String>,
}

/// A value a mapping needs is not there at run time. Each names the reference, so the
/// step's failure says which field of which receipt or input was missing; the step cannot
/// start, and retrying will not help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// The path leads nowhere in the input or the receipt's output.
    #[error("input mapping reads `{reference}`, but there is no value at `{missing}`")]
    MissingValue {
        /// The reference as written.
        reference: String,
        /// The part of the path that was not found, e.g. `$input.title`.
        missing: String,
    },
    /// The step has no committed receipt (it has not succeeded yet).
    #[error("input mapping reads `{reference}`, but step `{step}` has no receipt")]
    MissingReceipt {
        /// The reference as written.
        reference: String,
        /// The step without a receipt.
        step: String,
    },
    /// `$item` outside a step with `for_each`.
    #[error("input mapping reads `{reference}`, but only a step with `for_each` has an item")]
    NoItem {
        /// The reference as written.
        reference: String,
    },
    /// The receipt has no external reference.
    #[error(
        "input mapping reads `{reference}`, but the receipt of step `{step}` has no external reference"
    )]
    NoExternalReference {
        /// The reference as written.
        reference: String,
        /// The step whose receipt lacks it.
        step: String,
    },
}

/// One node of a mapping.
#[derive(Debug, Clone, PartialEq)]
enum Template {
    /// A literal scalar (a `$$`-escaped string is stored unescaped).
    Literal(Value),
    Reference(Reference),
    Array(Vec<Template>),
    Object(BTreeMap<String, Template>),
}

/// A reference found while building a mapping, with where it sits in the mapping.
pub(super) type Located<T> = (Vec<Seg>, T);

/// A step's input mapping: the top-level fields of the step input and how each is made.
/// An empty mapping gives the step the input `{}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InputMapping {
    fields: BTreeMap<String, Template>,
}

impl InputMapping {
    /// Builds a mapping from its JSON form (as written in TOML: references as strings).
    pub fn from_value(value: &Value) -> Result<Self, ReferenceError> {
        let Value::Object(fields) = value else {
            return Err(ReferenceError {
                text: value.to_string(),
                reason: "an input mapping is a table of fields".to_string(),
            });
        };
        let (mapping, _, mut errors) = Self::build(fields);
        match errors.pop() {
            Some((_, err)) => Err(err),
            None => Ok(mapping),
        }
    }

    /// Builds a mapping, returning every reference and every malformed reference with
    /// its path inside the mapping (so the caller can point at it in the source).
    pub(super) fn build(
        fields: &Map<String, Value>,
    ) -> (Self, Vec<Located<Reference>>, Vec<Located<ReferenceError>>) {
        let mut refs = Vec::new();
        let mut errors = Vec::new();
        let mut path = Vec::new();
        let mut out = BTreeMap::new();
        for (key, value) in fields {
            path.push(Seg::Key(key.clone()));
            out.insert(
                key.clone(),
                template(value, &mut path, &mut refs, &mut errors),
            );
            path.pop();
        }
        (Self { fields: out }, refs, errors)
    }

    /// The mapping's JSON form: references as `$` strings, literal `$` strings escaped.
    pub fn to_value(&self) -> Value {
        Value::Object(
            self.fields
                .iter()
                .map(|(k, t)| (k.clone(), to_value(t)))
                .collect(),
        )
    }

    /// Every reference in the mapping.
    pub fn references(&self) -> Vec<&Reference> {
        fn walk<'a>(t: &'a Template, out: &mut Vec<&'a Reference>) {
            match t {
                Template::Literal(_) => {}
                Template::Reference(r) => out.push(r),
                Template::Array(items) => items.iter().for_each(|i| walk(i, out)),
                Template::Object(fields) => fields.values().for_each(|i| walk(i, out)),
            }
        }
        let mut out = Vec::new();
        self.fields.values().for_each(|t| walk(t, &mut out));
        out
    }

    /// True when the mapping has no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The step input: every reference replaced by its value. `receipts` returns the
    /// committed receipt of a step by id.
    pub fn resolve(
        &self,
        input: &Value,
        receipts: impl Fn(&str) -> Option<ReceiptView>,
    ) -> Result<Value, MappingError> {
        self.resolve_item(input, None, receipts)
    }

    /// [`Self::resolve`] for one item of a step with `for_each` (`$item` reads `item`).
    pub fn resolve_item(
        &self,
        input: &Value,
        item: Option<&Value>,
        receipts: impl Fn(&str) -> Option<ReceiptView>,
    ) -> Result<Value, MappingError> {
        let fields = self
            .fields
            .iter()
            .map(|(k, t)| Ok((k.clone(), fill(t, input, item, &receipts)?)))
            .collect::<Result<Map<_, _>, _>>()?;
        Ok(Value::Object(fields))
    }
}

impl Serialize for InputMapping {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for InputMapping {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(&value).map_err(serde::de::Error::custom)
    }
}

fn template(
    value: &Value,
    path: &mut Vec<Seg>,
    refs: &mut Vec<Located<Reference>>,
    errors: &mut Vec<Located<ReferenceError>>,
) -> Template {
    match value {
        Value::String(text) if text.starts_with("$$") => {
            Template::Literal(Value::String(text[1..].to_string()))
        }
        Value::String(text) if text.starts_with('$') => match Reference::parse(text) {
            Ok(r) => {
                refs.push((path.clone(), r.clone()));
                Template::Reference(r)
            }
            Err(err) => {
                errors.push((path.clone(), err));
                Template::Literal(Value::Null)
            }
        },
        Value::Array(items) => Template::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    path.push(Seg::Index(i));
                    let t = template(item, path, refs, errors);
                    path.pop();
                    t
                })
                .collect(),
        ),
        Value::Object(fields) => Template::Object(
            fields
                .iter()
                .map(|(k, item)| {
                    path.push(Seg::Key(k.clone()));
                    let t = template(item, path, refs, errors);
                    path.pop();
                    (k.clone(), t)
                })
                .collect(),
        ),
        scalar => Template::Literal(scalar.clone()),
    }
}

fn to_value(t: &Template) -> Value {
    match t {
        Template::Literal(Value::String(s)) if s.starts_with('$') => Value::String(format!("${s}")),
        Template::Literal(v) => v.clone(),
        Template::Reference(r) => Value::String(r.to_string()),
        Template::Array(items) => Value::Array(items.iter().map(to_value).collect()),
        Template::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, t)| (k.clone(), to_value(t)))
                .collect(),
        ),
    }
}

fn fill(
    t: &Template,
    input: &Value,
    item: Option<&Value>,
    receipts: &dyn Fn(&str) -> Option<ReceiptView>,
) -> Result<Value, MappingError> {
    Ok(match t {
        Template::Literal(v) => v.clone(),
        Template::Reference(r) => lookup(r, input, item, receipts)?,
        Template::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| fill(i, input, item, receipts))
                .collect::<Result<_, _>>()?,
        ),
        Template::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, i)| Ok((k.clone(), fill(i, input, item, receipts)?)))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// The value one reference names: of the item (`item`, in a step with `for_each`), the
/// input, or an earlier step's receipt.
pub fn lookup(
    r: &Reference,
    input: &Value,
    item: Option<&Value>,
    receipts: &dyn Fn(&str) -> Option<ReceiptView>,
) -> Result<Value, MappingError> {
    let receipt = |step: &StepId| {
        receipts(step.as_str()).ok_or_else(|| MappingError::MissingReceipt {
            reference: r.to_string(),
            step: step.to_string(),
        })
    };
    match r {
        Reference::Input { path } => walk(r, "$input", input, path),
        Reference::Item { path } => match item {
            Some(item) => walk(r, "$item", item, path),
            None => Err(MappingError::NoItem {
                reference: r.to_string(),
            }),
        },
        Reference::Output { step, path } => {
            let view = receipt(step)?;
            walk(r, &format!("$steps.{step}.output"), &view.output, path)
        }
        Reference::ExternalReference { step } => match receipt(step)?.external_reference {
            Some(reference) => Ok(Value::String(reference)),
            None => Err(MappingError::NoExternalReference {
                reference: r.to_string(),
                step: step.to_string(),
            }),
        },
    }
}

/// The value at `path` inside `root`; `head` is the reference text up to `root`.
fn walk(r: &Reference, head: &str, root: &Value, path: &[String]) -> Result<Value, MappingError> {
    let mut current = root;
    let mut reached = head.to_string();
    for segment in path {
        reached.push('.');
        reached.push_str(segment);
        let next = match current {
            Value::Object(fields) => fields.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        };
        current = next.ok_or_else(|| MappingError::MissingValue {
            reference: r.to_string(),
            missing: reached.clone(),
        })?;
    }
    Ok(current.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn mapping(value: Value) -> InputMapping {
        InputMapping::from_value(&value).unwrap()
    }

    #[test]
    fn parses_and_prints_references() {
        for text in [
            "$input",
            "$input.title",
            "$input.items.0.name",
            "$steps.render.output",
            "$steps.render.output.document",
            "$steps.deliver.external_reference",
        ] {
            assert_eq!(Reference::parse(text).unwrap().to_string(), text);
        }
        let r = Reference::parse("$steps.render.output.document.size").unwrap();
        assert_eq!(r.step().unwrap().as_str(), "render");
        assert_eq!(r.receipt_field(), Some("document"));
    }

    #[test]
    fn refuses_malformed_references() {
        for (text, reason) in [
            ("$", "nothing follows `$`"),
            ("$input..title", "segment 2 is empty"),
            ("$inputs.title", "unknown root `$inputs`"),
            ("$steps", "a step id must follow"),
            ("$steps.Render.output", "step id `Render`"),
            ("$steps.render", "say what to read"),
            ("$steps.render.result", "not `result`"),
            ("$steps.deliver.external_reference.x", "nothing may follow"),
        ] {
            let err = Reference::parse(text).unwrap_err();
            assert!(err.reason.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn resolves_input_receipts_and_literals() {
        let m = mapping(json!({
            "title": "$input.title",
            "all": "$input",
            "doc": "$steps.render.output.document",
            "ref": "$steps.deliver.external_reference",
            "nested": {"list": ["$input.tags.1", 3, "$$literal"]},
            "flag": true,
        }));
        let input = json!({"title": "Hi", "tags": ["a", "b"]});
        let receipts = |step: &str| match step {
            "render" => Some(ReceiptView {
                output: json!({"document": "Hi\n"}),
                external_reference: None,
            }),
            "deliver" => Some(ReceiptView {
                output: json!({}),
                external_reference: Some("del_1".to_string()),
            }),
            _ => None,
        };
        let value = m.resolve(&input, receipts).unwrap();
        assert_eq!(
            value,
            json!({
                "title": "Hi",
                "all": input,
                "doc": "Hi\n",
                "ref": "del_1",
                "nested": {"list": ["b", 3, "$literal"]},
                "flag": true,
            })
        );
        assert_eq!(m.references().len(), 5);
    }

    #[test]
    fn missing_values_name_the_reference() {
        let m = mapping(json!({"t": "$input.meta.title"}));
        let err = m.resolve(&json!({"meta": {}}), |_| None).unwrap_err();
        assert_eq!(
            err,
            MappingError::MissingValue {
                reference: "$input.meta.title".to_string(),
                missing: "$input.meta.title".to_string(),
            }
        );
        let err = m.resolve(&json!({}), |_| None).unwrap_err();
        assert!(
            err.to_string().contains("no value at `$input.meta`"),
            "{err}"
        );

        let m = mapping(json!({"d": "$steps.render.output.document"}));
        let err = m.resolve(&json!({}), |_| None).unwrap_err();
        assert!(matches!(err, MappingError::MissingReceipt { ref step, .. } if step == "render"));

        let m = mapping(json!({"r": "$steps.validate.external_reference"}));
        let view = ReceiptView {
            output: json!({}),
            external_reference: None,
        };
        let err = m.resolve(&json!({}), |_| Some(view.clone())).unwrap_err();
        assert!(matches!(err, MappingError::NoExternalReference { .. }));
    }

    #[test]
    fn round_trips_through_json() {
        let text = json!({"a": "$input.x", "b": "$$x", "c": [1, {"d": "$steps.s.output"}]});
        let m = mapping(text.clone());
        assert_eq!(m.to_value(), text);
        let stored = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<InputMapping>(&stored).unwrap(), m);
        assert!(InputMapping::from_value(&json!({"a": "$nope"})).is_err());
        assert!(InputMapping::from_value(&json!([1])).is_err());
        assert!(
            InputMapping::default()
                .resolve(&json!(null), |_| None)
                .unwrap()
                == json!({})
        );
    }
}
