//! Where a value sits in the source: looking up spans by path in the parsed TOML tree.
//!
//! The raw serde types keep spans for the values that semantic checks point at most
//! often. Values deep inside free-form tables (input mappings, the input schema) are
//! located here instead, by walking `toml`'s spanned document tree along a path.

use std::ops::Range;

use serde_spanned::Spanned;
use toml::de::{DeTable, DeValue};

/// One step of a path into a TOML document or a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seg {
    /// A table key / object field.
    Key(String),
    /// An array index.
    Index(usize),
}

impl Seg {
    /// A key segment.
    pub fn key(key: &str) -> Self {
        Seg::Key(key.to_string())
    }
}

/// The parsed document, for span lookups.
pub(super) struct SourceTree<'i> {
    root: Spanned<DeTable<'i>>,
}

/// Which part of a `key = value` entry to point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Key,
    Value,
}

impl<'i> SourceTree<'i> {
    /// Parses `source`; `Err` carries every syntax error found.
    pub fn parse(source: &'i str) -> Result<Self, Vec<toml::de::Error>> {
        let (root, errors) = DeTable::parse_recoverable(source);
        if errors.is_empty() {
            Ok(Self { root })
        } else {
            Err(errors)
        }
    }

    /// The span of the value (or of the key naming it) at `path`, if the source has it.
    pub fn locate(&self, path: &[Seg], part: Part) -> Option<Range<usize>> {
        let mut table: &DeTable<'i> = self.root.get_ref();
        let mut array: Option<&[Spanned<DeValue<'i>>]> = None;
        let mut best: Option<Range<usize>> = None;
        for (i, seg) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            // JSON pointers do not say whether `0` is a key or an index: the tree decides.
            let value = match (array, seg) {
                (None, seg) => {
                    let key = match seg {
                        Seg::Key(key) => key.clone(),
                        Seg::Index(index) => index.to_string(),
                    };
                    let (k, v) = table.get_key_value(key.as_str())?;
                    best = Some(if last && part == Part::Key {
                        k.span()
                    } else {
                        v.span()
                    });
                    v
                }
                (Some(items), seg) => {
                    let index = match seg {
                        Seg::Index(index) => *index,
                        Seg::Key(key) => key.parse().ok()?,
                    };
                    let v = items.get(index)?;
                    best = Some(v.span());
                    v
                }
            };
            match value.get_ref() {
                DeValue::Table(t) => {
                    table = t;
                    array = None;
                }
                DeValue::Array(items) => array = Some(items),
                _ if !last => return None,
                _ => {}
            }
        }
        best
    }

    /// Like [`Self::locate`], but falls back to the nearest enclosing entry when the
    /// full path is not in the source (e.g. a default value).
    pub fn locate_near(&self, path: &[Seg], part: Part) -> Option<Range<usize>> {
        (0..=path.len())
            .rev()
            .find_map(|n| self.locate(&path[..n], if n == path.len() { part } else { Part::Key }))
    }
}

/// The JSON form of a TOML value; datetimes become their RFC 3339 text. `Err` names a
/// float JSON cannot hold (NaN, infinity).
pub fn toml_to_json(value: &toml::Value) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    Ok(match value {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(J::Number)
            .ok_or_else(|| format!("`{f}` cannot be represented in JSON"))?,
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(items) => {
            J::Array(items.iter().map(toml_to_json).collect::<Result<_, _>>()?)
        }
        toml::Value::Table(t) => J::Object(
            t.iter()
                .map(|(k, v)| Ok((k.clone(), toml_to_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"name = "x"

[[steps]]
id = "a"

[[steps]]
id = "b"
[steps.input]
title = "$input.title"
list = [1, "$input.x"]
"#;

    fn text(range: Option<Range<usize>>) -> &'static str {
        &SOURCE[range.expect("located")]
    }

    #[test]
    fn finds_values_and_keys_by_path() {
        let tree = SourceTree::parse(SOURCE).unwrap();
        let path = |segs: &[Seg]| segs.to_vec();
        let title = path(&[
            Seg::key("steps"),
            Seg::Index(1),
            Seg::key("input"),
            Seg::key("title"),
        ]);
        assert_eq!(text(tree.locate(&title, Part::Value)), "\"$input.title\"");
        assert_eq!(text(tree.locate(&title, Part::Key)), "title");
        let item = path(&[
            Seg::key("steps"),
            Seg::Index(1),
            Seg::key("input"),
            Seg::key("list"),
            Seg::Index(1),
        ]);
        assert_eq!(text(tree.locate(&item, Part::Value)), "\"$input.x\"");
        let id = path(&[Seg::key("steps"), Seg::Index(0), Seg::key("id")]);
        assert_eq!(text(tree.locate(&id, Part::Value)), "\"a\"");
        let missing = path(&[Seg::key("steps"), Seg::Index(0), Seg::key("retry")]);
        assert_eq!(tree.locate(&missing, Part::Value), None);
        assert!(tree.locate_near(&missing, Part::Value).is_some());
    }

    #[test]
    fn reports_every_syntax_error() {
        let errors = SourceTree::parse("a = \nb = 'x\n").err().unwrap();
        assert!(!errors.is_empty());
    }

    #[test]
    fn converts_toml_to_json() {
        let table: toml::Table = toml::from_str("a = 1\nb = [true, 2.5]\nc = 1979-05-27").unwrap();
        let value = toml::Value::Table(table);
        assert_eq!(
            toml_to_json(&value).unwrap(),
            serde_json::json!({"a": 1, "b": [true, 2.5], "c": "1979-05-27"})
        );
    }
}
