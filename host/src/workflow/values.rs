//! Validating newtypes for the scalar values of a definition file: workflow names, step
//! ids, durations and version requirements.
//!
//! Each parses in its `Deserialize` impl, so a bad value is reported by the TOML
//! deserializer at the value's line and column. Error texts carry their fix after
//! [`HELP_MARKER`]; [`super::diagnostics`] splits it off into the diagnostic's help line.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// Separates the "what is wrong" part of a deserialization error from the "how to fix it"
/// part, so both survive the trip through serde's string-only custom errors.
pub(super) const HELP_MARKER: &str = "\u{1f}help: ";

/// A message with its fix attached, for serde custom errors.
pub(super) fn with_help(message: impl fmt::Display, help: impl fmt::Display) -> String {
    format!("{message}{HELP_MARKER}{help}")
}

/// Longest accepted workflow name or step id.
const MAX_NAME_LEN: usize = 64;

/// A workflow's name: 1–64 characters from `a-z`, `0-9` and `-`, starting with a letter
/// and not ending with `-` (e.g. `document-delivery`). It is the API's command type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WorkflowName(String);

/// A step's stable id: 1–64 characters from `a-z`, `0-9`, `_` and `-`, starting with a
/// letter (e.g. `deliver`). Unlike the display label it never changes between versions,
/// because attempts, receipts and external idempotency keys are derived from it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StepId(String);

/// Why a workflow name or step id was refused; the text quotes the value and says how to
/// write a valid one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NameError {
    message: String,
    help: String,
}

impl NameError {
    /// How to fix the name.
    pub fn help(&self) -> &str {
        &self.help
    }

    /// The error as a serde custom message with its help attached.
    fn into_serde_text(self) -> String {
        with_help(self.message, self.help)
    }
}

/// Checks `text` against the shared name rule; `what` names the thing in messages and
/// `underscore` allows `_` (step ids) besides `-`.
fn check_name(text: &str, what: &str, underscore: bool) -> Result<(), NameError> {
    let allowed = |c: char| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (underscore && c == '_')
    };
    let charset = if underscore {
        "lower-case letters, digits, `_` and `-`"
    } else {
        "lower-case letters, digits and `-`"
    };
    let problem = if text.is_empty() {
        Some("is empty".to_string())
    } else if text.len() > MAX_NAME_LEN {
        Some(format!("is longer than {MAX_NAME_LEN} characters"))
    } else if let Some(bad) = text.chars().find(|c| !allowed(*c)) {
        Some(format!("contains {bad:?}; only {charset} are allowed"))
    } else if !text.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some("must start with a lower-case letter".to_string())
    } else if !underscore && text.ends_with('-') {
        Some("must not end with `-`".to_string())
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => {
            let suggestion = suggest_name(text, underscore);
            let help = if suggestion.is_empty() {
                format!("use {charset}, starting with a letter")
            } else {
                format!("write it as {charset}, e.g. `{suggestion}`")
            };
            Err(NameError {
                message: format!("{what} `{text}` {problem}"),
                help,
            })
        }
    }
}

/// A close valid spelling of `text`: lower-cased, other characters turned into `-`.
fn suggest_name(text: &str, underscore: bool) -> String {
    let mut out = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        let keep = c.is_ascii_lowercase() || c.is_ascii_digit() || (underscore && c == '_');
        if keep {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out
        .trim_start_matches(|c: char| !c.is_ascii_lowercase())
        .trim_end_matches('-');
    trimmed.chars().take(MAX_NAME_LEN).collect()
}

macro_rules! name_type {
    ($ty:ident, $what:literal, $underscore:literal) => {
        impl $ty {
            /// Validates `text`; the error quotes it and says how to fix it.
            pub fn new(text: impl Into<String>) -> Result<Self, NameError> {
                let text = text.into();
                check_name(&text, $what, $underscore)?;
                Ok(Self(text))
            }

            /// The name as written.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $ty {
            type Error = String;

            fn try_from(text: String) -> Result<Self, String> {
                Self::new(text).map_err(NameError::into_serde_text)
            }
        }

        impl From<$ty> for String {
            fn from(value: $ty) -> String {
                value.0
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $ty {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(WorkflowName, "workflow name", false);
name_type!(StepId, "step id", true);

impl StepId {
    /// The id of this step's compensation, `<id>.compensate`: a step of its own, and the
    /// one id with a `.` (never written in a definition, so it never collides).
    pub fn compensation(&self) -> StepId {
        StepId(crate::course::compensation_id(&self.0))
    }

    /// The id of the item `key` of this batch step, `<id>[<key>]`: a row of its own, never
    /// written in a definition (`[` is not in the grammar), so it never collides.
    pub fn item(&self, key: &str) -> StepId {
        StepId(super::items::item_identity(&self.0, key))
    }
}

/// A duration written as text with units (`"5s"`, `"200ms"`, `"1h 30m"`), parsed with
/// `humantime`. Only used at the TOML boundary; validated types hold [`Duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TomlDuration(pub Duration);

/// The longest duration a definition may write.
const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The help shown for any malformed duration.
const DURATION_HELP: &str =
    "write a number with a unit in quotes, e.g. \"500ms\", \"5s\", \"10m\" or \"1h 30m\"";

impl<'de> Deserialize<'de> for TomlDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = TomlDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"5s\"")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<TomlDuration, E> {
                let parsed = humantime::parse_duration(text).map_err(|err| {
                    E::custom(with_help(
                        format_args!("invalid duration `{text}`: {err}"),
                        DURATION_HELP,
                    ))
                })?;
                // Times are kept as signed 64-bit milliseconds; nothing a workflow waits
                // for is sensibly longer than this.
                if parsed > MAX_DURATION {
                    return Err(E::custom(with_help(
                        format_args!("duration `{text}` is longer than ten years"),
                        "write a shorter duration",
                    )));
                }
                Ok(TomlDuration(parsed))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<TomlDuration, E> {
                Err(E::custom(with_help(
                    format_args!("duration `{n}` has no unit"),
                    format_args!("{DURATION_HELP}; a bare number is ambiguous"),
                )))
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<TomlDuration, E> {
                self.visit_i64(i64::try_from(n).unwrap_or(i64::MAX))
            }

            fn visit_f64<E: de::Error>(self, n: f64) -> Result<TomlDuration, E> {
                Err(E::custom(with_help(
                    format_args!("duration `{n}` has no unit"),
                    DURATION_HELP,
                )))
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

/// A semver version requirement written as text (`"^1"`, `"~1.2"`, `">=1.0, <2"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TomlVersionReq(pub semver::VersionReq);

impl<'de> Deserialize<'de> for TomlVersionReq {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        semver::VersionReq::parse(&text)
            .map(TomlVersionReq)
            .map_err(|err| {
                de::Error::custom(with_help(
                    format_args!("invalid version requirement `{text}`: {err}"),
                    "write a semver requirement, e.g. \"^1\" (any 1.x), \"~1.2\" (any 1.2.x) \
                     or \">=1.0, <2\"",
                ))
            })
    }
}

/// JSON Schemas of the scalar values, for [`super::definition_schema`]: the rules above as
/// patterns, so that an editor flags what the parser would refuse.
mod schemas {
    use super::{StepId, TomlDuration, TomlVersionReq, WorkflowName};
    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
    use std::borrow::Cow;

    impl JsonSchema for WorkflowName {
        fn schema_name() -> Cow<'static, str> {
            "WorkflowName".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "description": "1–64 characters from a-z, 0-9 and `-`, starting with a letter, not ending with `-`",
                "pattern": "^[a-z]([a-z0-9-]{0,62}[a-z0-9])?$",
                "examples": ["document-delivery"]
            })
        }
    }

    impl JsonSchema for StepId {
        fn schema_name() -> Cow<'static, str> {
            "StepId".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "description": "1–64 characters from a-z, 0-9, `_` and `-`, starting with a letter",
                "pattern": "^[a-z][a-z0-9_-]{0,63}$",
                "examples": ["deliver"]
            })
        }
    }

    impl JsonSchema for TomlDuration {
        fn schema_name() -> Cow<'static, str> {
            "Duration".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "description": "a duration with units, at most ten years, e.g. \"500ms\", \"5s\", \"10m\" or \"1h 30m\"",
                "pattern": "^\\s*([0-9]+(\\.[0-9]+)?\\s*[a-zA-Zµ]+\\s*)+$",
                "examples": ["5s", "10m", "1h 30m"]
            })
        }
    }

    impl JsonSchema for TomlVersionReq {
        fn schema_name() -> Cow<'static, str> {
            "VersionRequirement".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "description": "a semver requirement on the component's version",
                "minLength": 1,
                "examples": ["^1", "~1.2", ">=1.0, <2"]
            })
        }
    }
}

/// Serde for [`Duration`] fields of validated types: the humantime text (`"5s"`), so a
/// stored definition reads like its source.
pub(super) mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text).map_err(de::Error::custom)
    }

    /// An optional duration as the same text.
    pub mod option {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer, de};

        pub fn serialize<S: Serializer>(
            value: &Option<Duration>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match value {
                Some(d) => serializer.collect_str(&humantime::format_duration(*d)),
                None => serializer.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Duration>, D::Error> {
            Option::<String>::deserialize(deserializer)?
                .map(|text| humantime::parse_duration(&text).map_err(de::Error::custom))
                .transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_names() {
        assert_eq!(
            WorkflowName::new("document-delivery").unwrap().as_str(),
            "document-delivery"
        );
        assert!(StepId::new("deliver_2").is_ok());
        assert!(StepId::new("a").is_ok());
    }

    #[test]
    fn refuses_bad_names_with_a_suggestion() {
        let err = StepId::new("Validate").unwrap_err();
        assert_eq!(
            err.to_string(),
            "step id `Validate` contains 'V'; only lower-case letters, digits, `_` and `-` are allowed"
        );
        assert!(err.help().contains("`validate`"), "{}", err.help());

        let err = WorkflowName::new("document_delivery").unwrap_err();
        assert!(err.help().contains("`document-delivery`"), "{}", err.help());
        assert!(WorkflowName::new("delivery-").is_err());
        assert!(WorkflowName::new("").is_err());
        assert!(StepId::new("1st").is_err());
        assert!(StepId::new("x".repeat(65)).is_err());
    }

    #[test]
    fn durations_serialize_as_text() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Holder {
            #[serde(with = "duration_text")]
            d: Duration,
        }
        let holder = Holder {
            d: Duration::from_millis(1500),
        };
        let text = serde_json::to_string(&holder).unwrap();
        assert_eq!(text, r#"{"d":"1s 500ms"}"#);
        assert_eq!(serde_json::from_str::<Holder>(&text).unwrap(), holder);
    }
}
