//! The items of a batch step, as its workflow holds them when the step becomes ready: the
//! list `for_each` names, each item with the key that names it stably (`item_key`, else the
//! digest of its canonical JSON). Pure: the caller gives the input and the receipts.
//!
//! Each item is an effect intent of its own, so two items with one key would be one effect
//! said twice: a batch with duplicate keys is refused, naming them, never merged.

use serde_json::Value;

use super::def::{BatchDef, StepDef};
use super::mapping::{MappingError, ReceiptView, lookup};

/// One item of a batch: its key and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub key: String,
    pub value: Value,
}

/// Why a batch step has no items to run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ItemsError {
    /// The list or an item's key could not be read.
    #[error(transparent)]
    Mapping(#[from] MappingError),
    /// `for_each` named something that is not a list.
    #[error("`for_each` reads `{reference}`, which is {found}, not a list")]
    NotAList { reference: String, found: String },
    /// An item's key is not a string or a number.
    #[error("item {index} has the key {found}: `item_key` must name a string or a number")]
    BadKey { index: usize, found: String },
    /// Two or more items share a key.
    #[error(
        "items share a key ({}): each item is an effect of its own, so each needs its own `item_key`",
        .duplicates.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
    )]
    Duplicates { duplicates: Vec<String> },
}

/// The identity a batch item's external key derives from: the step's and the item's key.
pub fn item_identity(step: &str, item_key: &str) -> String {
    format!("{step}[{item_key}]")
}

/// The batch step and the item key of an item's row id (`<step>[<item key>]`), if it is
/// one. A step id has no `[`, so the first one ends the step's.
pub fn item_of(id: &str) -> Option<(&str, &str)> {
    let open = id.find('[')?;
    let key = id[open + 1..].strip_suffix(']')?;
    Some((&id[..open], key))
}

fn kind_of(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(_) => "a number".into(),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

impl BatchDef {
    /// The items of the batch, in the list's order, each with its key.
    pub fn items(
        &self,
        input: &Value,
        receipts: impl Fn(&str) -> Option<ReceiptView>,
    ) -> Result<Vec<Item>, ItemsError> {
        let list = lookup(&self.for_each, input, None, &receipts)?;
        let Value::Array(values) = list else {
            return Err(ItemsError::NotAList {
                reference: self.for_each.to_string(),
                found: kind_of(&list),
            });
        };
        let mut items = Vec::with_capacity(values.len());
        for (index, value) in values.into_iter().enumerate() {
            let key = match &self.item_key {
                None => crate::intent::canonicalize(&value)
                    .map(|c| c.digest)
                    .map_err(|e| ItemsError::BadKey {
                        index,
                        found: e.to_string(),
                    })?,
                Some(reference) => match lookup(reference, input, Some(&value), &receipts)? {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    other => {
                        return Err(ItemsError::BadKey {
                            index,
                            found: kind_of(&other),
                        });
                    }
                },
            };
            items.push(Item { key, value });
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut duplicates = Vec::new();
        for item in &items {
            if !seen.insert(item.key.as_str()) && !duplicates.contains(&item.key) {
                duplicates.push(item.key.clone());
            }
        }
        if !duplicates.is_empty() {
            return Err(ItemsError::Duplicates { duplicates });
        }
        Ok(items)
    }
}

impl StepDef {
    /// What this step would send for the workflow `input` and the receipts that stand:
    /// its mapped input, or, for a batch step, its items in the list's order, each
    /// `{"item_key", "input"}`. An approval binds this value's digest and a revision compares
    /// it, so for a batch it is the whole item set: an item added, dropped or changed is a
    /// different consequence.
    pub fn would_send(
        &self,
        input: &Value,
        receipts: impl Fn(&str) -> Option<ReceiptView>,
    ) -> Result<Value, ItemsError> {
        let Some(batch) = &self.batch else {
            return Ok(self.input.resolve(input, &receipts)?);
        };
        let items = batch.items(input, &receipts)?;
        let mut sent = Vec::with_capacity(items.len());
        for item in items {
            let mapped = self
                .input
                .resolve_item(input, Some(&item.value), &receipts)?;
            sent.push(serde_json::json!({ "item_key": item.key, "input": mapped }));
        }
        Ok(Value::Array(sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::Reference;
    use serde_json::json;

    fn batch(for_each: &str, item_key: Option<&str>) -> BatchDef {
        BatchDef {
            for_each: Reference::parse(for_each).unwrap(),
            item_key: item_key.map(|k| Reference::parse(k).unwrap()),
            max_parallel: 8,
        }
    }

    #[test]
    fn each_item_has_its_key_in_the_lists_order() {
        let input = json!({"recipients": [{"email": "b@x"}, {"email": "a@x"}, {"email": 7}]});
        let items = batch("$input.recipients", Some("$item.email"))
            .items(&input, |_| None)
            .unwrap();
        let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, ["b@x", "a@x", "7"]);
        assert_eq!(items[1].value, json!({"email": "a@x"}));
        assert_eq!(item_identity("deliver", "a@x"), "deliver[a@x]");
        assert_eq!(item_of("deliver[a@x]"), Some(("deliver", "a@x")));
        assert_eq!(item_of("deliver[a[b]]"), Some(("deliver", "a[b]")));
        assert_eq!(item_of("deliver"), None);
        assert_eq!(item_of("deliver.compensate"), None);
    }

    #[test]
    fn without_an_item_key_an_item_is_named_by_its_digest() {
        let input = json!({"list": [{"b": 1, "a": 2}, {"a": 2, "b": 1}]});
        let err = batch("$input.list", None)
            .items(&input, |_| None)
            .unwrap_err();
        // The same item twice, in another key order, is the same item.
        assert!(matches!(err, ItemsError::Duplicates { ref duplicates } if duplicates.len() == 1));
        let input = json!({"list": ["x", "y"]});
        let items = batch("$input.list", None).items(&input, |_| None).unwrap();
        assert!(items[0].key.starts_with("sha256:"), "{items:?}");
        assert_ne!(items[0].key, items[1].key);
    }

    #[test]
    fn duplicates_a_non_list_and_bad_keys_are_refused_by_name() {
        let input = json!({"r": [{"e": "a"}, {"e": "b"}, {"e": "a"}, {"e": "a"}], "s": "x"});
        let err = batch("$input.r", Some("$item.e"))
            .items(&input, |_| None)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "items share a key (`a`): each item is an effect of its own, so each needs its own `item_key`"
        );
        let err = batch("$input.s", None).items(&input, |_| None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`for_each` reads `$input.s`, which is a string, not a list"
        );
        let input = json!({"r": [{"e": {"nested": true}}]});
        let err = batch("$input.r", Some("$item.e"))
            .items(&input, |_| None)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "item 0 has the key an object: `item_key` must name a string or a number"
        );
        let err = batch("$input.missing", None)
            .items(&input, |_| None)
            .unwrap_err();
        assert!(matches!(err, ItemsError::Mapping(_)), "{err:?}");
    }

    /// What a batch step would send is its whole item set, each item's key with its mapped
    /// input; a plain step's is its mapped input.
    #[test]
    fn a_batch_would_send_each_item_with_its_key() {
        let def = crate::workflow::parse(
            "mailing.toml",
            r#"
name = "mailing"
version = 1
deadline = "1h"
[input_schema]
type = "object"
[[steps]]
id = "deliver"
label = "Deliver"
kind = "adapter"
component = "http-delivery"
version = "^1"
for_each = "$input.to"
item_key = "$item.email"
[steps.input]
recipient = "$item.email"
document = "$input.doc"
"#,
        )
        .unwrap();
        let step = def.step("deliver").unwrap();
        let input = json!({"doc": "d", "to": [{"email": "a@x"}, {"email": "b@x"}]});
        assert_eq!(
            step.would_send(&input, |_| None).unwrap(),
            json!([
                {"item_key": "a@x", "input": {"recipient": "a@x", "document": "d"}},
                {"item_key": "b@x", "input": {"recipient": "b@x", "document": "d"}},
            ])
        );
        let plain = StepDef {
            batch: None,
            ..step.clone()
        };
        assert!(
            plain.would_send(&input, |_| None).is_err(),
            "`$item` outside a batch"
        );
    }

    #[test]
    fn a_list_may_come_from_an_earlier_receipt() {
        let items = batch("$steps.pick.output.people", Some("$item"))
            .items(&json!({}), |id| {
                (id == "pick").then(|| ReceiptView {
                    output: json!({"people": ["ann", "bob"]}),
                    external_reference: None,
                })
            })
            .unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].key, "bob");
    }
}
