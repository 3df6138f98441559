//! Golden tests of workflow definition errors: each `tests/ui/<name>.toml` is checked
//! against a fixed environment and its rendered diagnostics must equal `<name>.err`
//! exactly. Run with `DOCKET_BLESS=1` to rewrite the `.err` files after an intended
//! change of wording, then review the diff.
//!
//! Also checks that the shipped `workflows/*.toml` definitions are clean, and that the JSON
//! Schema of the format (`docket workflow schema`, kept at `docs/workflow.schema.json`)
//! accepts every shipped and good definition and refuses malformed ones.

use std::path::{Path, PathBuf};

use docket::workflow::{self, ComponentWorld, StaticEnv};
use semver::Version;

/// The components and operator allowances every golden file is checked against.
fn env() -> StaticEnv {
    StaticEnv::new()
        .component(
            "validate-document",
            Version::new(1, 0, 0),
            ComponentWorld::Handler,
        )
        .component(
            "render-document",
            Version::new(1, 0, 0),
            ComponentWorld::Handler,
        )
        .component(
            "http-delivery",
            Version::new(1, 0, 0),
            ComponentWorld::Adapter,
        )
        .component(
            "http-delivery-fire-and-forget",
            Version::new(1, 0, 0),
            ComponentWorld::Adapter,
        )
        .component(
            "http-delivery-query-only",
            Version::new(1, 0, 0),
            ComponentWorld::Adapter,
        )
        .allow_host("http-delivery", "$base_url")
        .allow_secret("http-delivery", "provider_token")
        .allow_host("http-delivery-query-only", "$base_url")
        .allow_secret("http-delivery-query-only", "provider_token")
        .allow_host("http-delivery-fire-and-forget", "$base_url")
        .allow_secret("http-delivery-fire-and-forget", "provider_token")
        .compensation("http-delivery", Version::new(1, 0, 0), true)
        .compensation(
            "http-delivery-fire-and-forget",
            Version::new(1, 0, 0),
            false,
        )
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Files in `dir` with extension `ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

#[test]
fn definition_errors_match_golden_files() {
    let bless = std::env::var("DOCKET_BLESS").is_ok_and(|v| v == "1");
    let dir = manifest_dir().join("tests/ui");
    let cases = files(&dir, "toml");
    assert!(!cases.is_empty(), "no golden cases in {}", dir.display());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let shown = format!("tests/ui/{name}");
        let source = std::fs::read_to_string(case).unwrap();
        let actual = match workflow::check(&shown, &source, &env()) {
            Ok(_) => {
                failures.push(format!("{shown}: expected errors, but it checked clean"));
                continue;
            }
            Err(diags) => diags.to_string(),
        };
        let golden = case.with_extension("err");
        if bless {
            std::fs::write(&golden, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if actual != expected {
            failures.push(format!(
                "{shown}: diagnostics differ from {}\n--- expected\n{expected}--- actual\n{actual}",
                golden.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    // Every golden file must belong to a case, so stale ones do not linger.
    for golden in files(&dir, "err") {
        if !golden.with_extension("toml").exists() {
            failures.push(format!("{} has no .toml case", golden.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\n(set DOCKET_BLESS=1 to accept the new output)",
        failures.join("\n\n")
    );
}

#[test]
fn shipped_definitions_check_clean() {
    let dir = manifest_dir().join("../workflows");
    let shipped = files(&dir, "toml");
    assert!(
        shipped
            .iter()
            .any(|p| p.ends_with("document-delivery.toml")),
        "workflows/document-delivery.toml is missing"
    );
    for path in shipped {
        let source = std::fs::read_to_string(&path).unwrap();
        let shown = format!("workflows/{}", path.file_name().unwrap().to_string_lossy());
        if let Err(diags) = workflow::check(&shown, &source, &env()) {
            panic!("{diags}");
        }
    }
}

/// The schema as committed for editors; it must be what the code generates.
fn committed_schema() -> serde_json::Value {
    let path = manifest_dir().join("../docs/workflow.schema.json");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = workflow::definition_schema();
    let expected = format!("{}\n", serde_json::to_string_pretty(&generated).unwrap());
    if std::env::var("DOCKET_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &expected).unwrap();
        return generated;
    }
    assert!(
        text == expected,
        "docs/workflow.schema.json is not what `docket workflow schema` prints; run \
         `cargo run -- workflow schema > docs/workflow.schema.json` (or DOCKET_BLESS=1)"
    );
    generated
}

/// A definition file as the JSON its schema speaks about.
fn as_json(source: &str) -> serde_json::Value {
    let table: toml::Table = toml::from_str(source).expect("TOML");
    serde_json::to_value(table).unwrap()
}

#[test]
fn shipped_and_good_definitions_satisfy_the_schema_editors_read() {
    let schema = committed_schema();
    assert_eq!(
        schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
        "{schema}"
    );
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    let shipped = files(&manifest_dir().join("../workflows"), "toml");
    let good = files(&manifest_dir().join("tests/good"), "toml");
    assert!(good.len() >= 2, "no good definitions in tests/good");
    for path in shipped.iter().chain(&good) {
        let source = std::fs::read_to_string(path).unwrap();
        let shown = path.display().to_string();
        // The line editors (Taplo / Even Better TOML) take the schema from.
        let first = source.lines().next().unwrap_or_default();
        let target = first
            .strip_prefix("#:schema ")
            .unwrap_or_else(|| panic!("{shown} does not start with a `#:schema` line"));
        let resolved = path.parent().unwrap().join(target);
        assert!(
            resolved.canonicalize().ok()
                == manifest_dir()
                    .join("../docs/workflow.schema.json")
                    .canonicalize()
                    .ok(),
            "{shown}: `#:schema {target}` does not lead to docs/workflow.schema.json"
        );
        let errors: Vec<String> = validator
            .iter_errors(&as_json(&source))
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{shown}: {errors:#?}");
        // …and the parser agrees: good definitions are good.
        if let Err(diags) = workflow::parse(&shown, &source) {
            panic!("{diags}");
        }
    }
}

#[test]
fn the_schema_refuses_what_the_parser_refuses_for_its_shape() {
    let validator = jsonschema::validator_for(&workflow::definition_schema()).unwrap();
    // Golden cases whose mistake is the shape or the syntax of a value: an editor shows
    // each as the parser would.
    for name in [
        "bad_duration",
        "duration_without_unit",
        "bad_step_id",
        "bad_workflow_name",
        "missing_field",
        "unknown_step_field",
        "unknown_top_level_field",
        "unknown_kind",
        "missing_top_level_field",
        "input_not_a_table",
    ] {
        let path = manifest_dir().join(format!("tests/ui/{name}.toml"));
        let source =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            workflow::parse(name, &source).is_err(),
            "{name} parses; it is not a bad case"
        );
        assert!(
            !validator.is_valid(&as_json(&source)),
            "the schema accepts tests/ui/{name}.toml, which the parser refuses"
        );
    }
}

/// Policy documents refused with their line and column, as the API's `422
/// invalid_document` details and `docket policy deploy` report them.
#[test]
fn policy_errors_match_golden_files() {
    let bless = std::env::var("DOCKET_BLESS").is_ok_and(|v| v == "1");
    let dir = manifest_dir().join("tests/policy_ui");
    let cases = files(&dir, "toml");
    assert!(!cases.is_empty(), "no golden cases in {}", dir.display());
    let mut failures = Vec::new();
    for case in &cases {
        let source = std::fs::read_to_string(case).unwrap();
        let actual = match docket::policy::PolicyDoc::parse(&source) {
            Ok(_) => {
                failures.push(format!(
                    "{}: expected errors, but it parsed",
                    case.display()
                ));
                continue;
            }
            Err(problems) => problems
                .iter()
                .map(|p| format!("{p}\n"))
                .collect::<String>(),
        };
        let golden = case.with_extension("err");
        if bless {
            std::fs::write(&golden, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if actual != expected {
            failures.push(format!(
                "{}: errors differ\n--- expected\n{expected}--- actual\n{actual}",
                case.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\n(set DOCKET_BLESS=1 to accept the new output)",
        failures.join("\n\n")
    );
}
