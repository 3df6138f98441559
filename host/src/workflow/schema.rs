//! The workflow's input schema: checking it when a definition is parsed, and checking
//! inputs against it at admission.
//!
//! Schemas are JSON Schema draft 2020-12 and may not fetch remote references (the crate is
//! built without resolvers), so a schema is self-contained. Input errors carry a JSON
//! pointer to the offending field, which the API returns as `422` details.

use serde::Serialize;
use serde_json::Value;

use super::def::WorkflowDef;

/// One way an input fails the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputError {
    /// JSON pointer to the offending field, e.g. `/title` (`""` is the whole input). For a
    /// missing required field it points at the field that should be there.
    pub pointer: String,
    /// What is wrong with it.
    pub message: String,
}

/// A problem with the schema itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("input schema is not valid at `{pointer}`: {message}")]
pub struct SchemaError {
    /// JSON pointer into the schema (`""` is the schema's root).
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

/// A compiled input schema; build once per definition and reuse for every admission.
#[derive(Debug)]
pub struct InputValidator {
    validator: jsonschema::Validator,
}

/// Instances longer than this (as JSON text) are not quoted in input errors.
const MAX_QUOTED: usize = 80;

impl InputValidator {
    /// Compiles `schema` (draft 2020-12).
    pub fn new(schema: &Value) -> Result<Self, SchemaError> {
        jsonschema::draft202012::new(schema)
            .map(|validator| Self { validator })
            .map_err(|err| SchemaError {
                pointer: err.instance_path().to_string(),
                message: err.to_string(),
            })
    }

    /// Checks `input`; `Err` lists every violation, ordered by pointer.
    pub fn validate(&self, input: &Value) -> Result<(), Vec<InputError>> {
        let mut errors = Vec::new();
        for err in self.validator.iter_errors(input) {
            let at = err.instance_path().to_string();
            let message = if err.instance().to_string().len() > MAX_QUOTED {
                err.masked().to_string()
            } else {
                err.to_string()
            };
            match err.kind() {
                jsonschema::error::ValidationErrorKind::Required { property } => {
                    let name = property
                        .as_str()
                        .map_or_else(|| property.to_string(), str::to_string);
                    errors.push(InputError {
                        pointer: format!("{at}/{}", escape(&name)),
                        message: format!("`{name}` is required"),
                    });
                }
                jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected }
                | jsonschema::error::ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                    errors.extend(unexpected.iter().map(|name| InputError {
                        pointer: format!("{at}/{}", escape(name)),
                        message: format!("`{name}` is not an allowed field"),
                    }));
                }
                _ => errors.push(InputError {
                    pointer: at,
                    message,
                }),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            errors.sort_by(|a, b| a.pointer.cmp(&b.pointer));
            Err(errors)
        }
    }
}

impl WorkflowDef {
    /// The compiled input schema, for repeated admissions.
    pub fn input_validator(&self) -> Result<InputValidator, SchemaError> {
        InputValidator::new(&self.input_schema)
    }

    /// Checks an input against the schema, compiling it first (use
    /// [`Self::input_validator`] to compile once). A schema that does not compile (possible
    /// only for a definition that bypassed parsing) is reported as an error at `""`.
    pub fn validate_input(&self, input: &Value) -> Result<(), Vec<InputError>> {
        match self.input_validator() {
            Ok(validator) => validator.validate(input),
            Err(err) => Err(vec![InputError {
                pointer: String::new(),
                message: err.to_string(),
            }]),
        }
    }
}

/// Every problem with `schema`: meta-schema violations first (all of them), else the one
/// compile error (e.g. a bad regular expression or an unresolvable `$ref`).
pub(super) fn schema_problems(schema: &Value) -> Vec<SchemaError> {
    let meta = jsonschema::draft202012::meta::validator();
    let mut problems: Vec<SchemaError> = meta
        .iter_errors(schema)
        .map(|err| SchemaError {
            pointer: err.instance_path().to_string(),
            message: err.to_string(),
        })
        .collect();
    if problems.is_empty()
        && let Err(err) = InputValidator::new(schema)
    {
        problems.push(err);
    }
    problems
}

/// How to fix a schema problem at `pointer`, judged from its last keyword.
pub(super) fn schema_help(pointer: &str) -> String {
    let keyword = pointer.rsplit('/').next().unwrap_or("");
    match keyword {
        "type" => "`type` is one of \"string\", \"number\", \"integer\", \"boolean\", \"object\", \
                   \"array\" or \"null\" (or a list of them)"
            .to_string(),
        "required" => "`required` is a list of property names, e.g. [\"title\"]".to_string(),
        "pattern" => "`pattern` is a regular expression in a string, e.g. \"^[a-z]+$\"".to_string(),
        "" => "the input schema must be a JSON Schema (draft 2020-12) table".to_string(),
        keyword => format!(
            "fix `{keyword}` so the schema is valid JSON Schema (draft 2020-12); see \
             https://json-schema.org/draft/2020-12/json-schema-validation"
        ),
    }
}

/// The keys of a JSON pointer, unescaped.
pub(super) fn pointer_keys(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document_schema() -> Value {
        json!({
            "type": "object",
            "required": ["title", "recipient", "body"],
            "additionalProperties": false,
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "recipient": {"type": "string", "pattern": "@"},
                "body": {"type": "string"},
            },
        })
    }

    #[test]
    fn accepts_a_valid_input() {
        let v = InputValidator::new(&document_schema()).unwrap();
        assert_eq!(
            v.validate(&json!({"title": "T", "recipient": "a@b", "body": ""})),
            Ok(())
        );
    }

    #[test]
    fn points_at_each_bad_field() {
        let v = InputValidator::new(&document_schema()).unwrap();
        let errors = v
            .validate(&json!({"title": "", "recipient": "nobody", "extra": 1}))
            .unwrap_err();
        let pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/body", "/extra", "/recipient", "/title"]);
        assert_eq!(errors[0].message, "`body` is required");
        assert!(errors[2].message.contains("\"nobody\""), "{:?}", errors[2]);
    }

    #[test]
    fn does_not_echo_long_values() {
        let v = InputValidator::new(&document_schema()).unwrap();
        let long = "x".repeat(300);
        let errors = v
            .validate(&json!({"title": long, "recipient": "a@b", "body": ""}))
            .unwrap_err();
        assert_eq!(errors[0].pointer, "/title");
        assert!(!errors[0].message.contains("xxxx"), "{}", errors[0].message);
    }

    #[test]
    fn finds_schema_problems() {
        assert!(schema_problems(&document_schema()).is_empty());
        let problems = schema_problems(&json!({"properties": {"a": {"type": "strin"}}}));
        assert_eq!(problems[0].pointer, "/properties/a/type");
        let problems = schema_problems(&json!({"pattern": "("}));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(pointer_keys("/a~1b/c~0"), ["a/b", "c~"]);
    }
}
