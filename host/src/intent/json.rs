//! Canonical JSON (RFC 8785) and digests.
//!
//! The canonical form of an input decides whether a resubmission under the same key is the
//! same command: key order and number spelling do not matter, anything else does. No
//! defaults are injected before digesting.
//!
//! Canonical JSON presumes I-JSON (RFC 7493), which forbids an object naming a member
//! twice: such text has no one meaning (most parsers keep the last value, some the
//! first), so [`parse`] refuses it rather than digest a guess.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// An input in canonical form with its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalInput {
    /// RFC 8785 text.
    pub text: String,
    /// `sha256:<hex>` of `text`.
    pub digest: String,
}

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the input cannot be canonicalized: {0}")]
pub struct InputError(String);

/// RFC 8785 canonical text and digest of `value`.
pub fn canonicalize(value: &Value) -> Result<CanonicalInput, InputError> {
    let text = serde_jcs::to_string(value).map_err(|e| InputError(e.to_string()))?;
    let digest = sha256_digest(text.as_bytes());
    Ok(CanonicalInput { text, digest })
}

/// Parses JSON text, refusing an object that names a member twice; the error names the
/// member and the object's place (a JSON pointer, `""` for the top level).
pub fn parse(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let value = Unique { pointer: "" }.deserialize(&mut reader)?;
    reader.end()?;
    Ok(value)
}

/// A JSON value at `pointer` whose objects name each member once.
struct Unique<'p> {
    pointer: &'p str,
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let pointer = format!("{}/{}", self.pointer, items.len());
            match seq.next_element_seed(Unique { pointer: &pointer })? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if members.contains_key(&name) {
                return Err(de::Error::custom(format!(
                    "the member `{name}` appears twice in the object at `{}`; name each \
                     member once",
                    self.pointer
                )));
            }
            // RFC 6901: `~` and `/` in a member's name are escaped in a pointer.
            let pointer = format!(
                "{}/{}",
                self.pointer,
                name.replace('~', "~0").replace('/', "~1")
            );
            let value = map.next_value_seed(Unique { pointer: &pointer })?;
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_number_spelling_do_not_change_the_digest() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1.0, "a": [1, "x"], "c": {"z": 1, "y": 2}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"c": {"y": 2, "z": 1}, "a": [1, "x"], "b": 1}"#).unwrap();
        assert_eq!(canonicalize(&a).unwrap(), canonicalize(&b).unwrap());
        assert_eq!(
            canonicalize(&b).unwrap().text,
            r#"{"a":[1,"x"],"b":1,"c":{"y":2,"z":1}}"#
        );
    }

    #[test]
    fn a_member_named_twice_is_refused_with_its_name_and_place() {
        let top = parse(br#"{"title": "t", "title": "u"}"#).unwrap_err();
        assert!(
            top.to_string()
                .contains("the member `title` appears twice in the object at ``"),
            "{top}"
        );
        let deep = parse(br#"{"input": {"a/b": [{"x": 1, "x": 2}]}}"#).unwrap_err();
        assert!(
            deep.to_string()
                .contains("`x` appears twice in the object at `/input/a~1b/0`"),
            "{deep}"
        );
        // The same name in different objects, and everything else JSON allows, is fine.
        let fine = parse(br#"{"a": {"x": 1}, "b": {"x": [1.5, -2, true, null, "s"]}}"#).unwrap();
        assert_eq!(
            fine,
            json!({"a": {"x": 1}, "b": {"x": [1.5, -2, true, null, "s"]}})
        );
        assert!(parse(b"{} extra").is_err());
        assert!(parse(b"{").is_err());
    }

    #[test]
    fn different_values_differ() {
        let a = canonicalize(&json!({"a": 1})).unwrap();
        let b = canonicalize(&json!({"a": "1"})).unwrap();
        assert_ne!(a.digest, b.digest);
        assert!(a.digest.starts_with("sha256:"));
    }
}
