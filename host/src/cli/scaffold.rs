//! `docket adapter new NAME [--handler] [--dir DIR]`: a standalone crate for a new adapter
//! or handler, outside this repository.
//!
//! The crate builds with plain `cargo build --target wasm32-wasip2 --release`: the guest
//! helper (`vendor/docket-guest`) and the WIT (`wit/`) travel with it, copied from this
//! binary so that they match the host that made them. It comes with a README, a test that
//! runs the component through `docket adapter invoke`, and (adapters) a `verify.toml` for
//! `docket adapter verify` and two rehearsals (`scenarios/`, with a workflow in
//! `workflows/`) its test runs through `docket scenario run`.

use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::ExitCode;
use toml::{Table, Value};

/// What to make.
pub struct Scaffold {
    pub name: String,
    pub handler: bool,
    /// Where the crate's directory goes (default: the current directory).
    pub dir: Option<PathBuf>,
}

const ADAPTER_LIB: &str = include_str!("../../../adapters/template/adapter/src/lib.rs");
const ADAPTER_TEST: &str = include_str!("../../../adapters/template/adapter/tests/invoke.rs");
const HANDLER_LIB: &str = include_str!("../../../adapters/template/handler/src/lib.rs");
const HANDLER_TEST: &str = include_str!("../../../adapters/template/handler/tests/invoke.rs");
const CARGO_TOML: &str = include_str!("../../../adapters/template/Cargo.toml.in");
const README: &str = include_str!("../../../adapters/template/README.md.in");
const VERIFY_TOML: &str = include_str!("../../../adapters/template/verify.toml");
const ADAPTER_WORKFLOW: &str =
    include_str!("../../../adapters/template/adapter/workflows/delivery.toml");
/// The adapter's rehearsals, run by its `cargo test` through `docket scenario run`.
const ADAPTER_SCENARIOS: &[(&str, &str)] = &[
    (
        "scenarios/lost-answer-recovered-by-query.toml",
        include_str!(
            "../../../adapters/template/adapter/scenarios/lost-answer-recovered-by-query.toml"
        ),
    ),
    (
        "scenarios/rate-limited-then-delivered.toml",
        include_str!(
            "../../../adapters/template/adapter/scenarios/rate-limited-then-delivered.toml"
        ),
    ),
];
const GUEST_MANIFEST: &str = include_str!("../../../adapters/guest/Cargo.toml");
const WORKSPACE_MANIFEST: &str = include_str!("../../../Cargo.toml");

const ADAPTER_TRY: &str = "docket sim-provider --listen 127.0.0.1:8090 &          # docket's provider simulator
docket adapter invoke target/wasm32-wasip2/release/__crate__.wasm \\
  --setting base_url=http://127.0.0.1:8090 --allow-host http://127.0.0.1:8090 \\
  --secret provider_token=docket-sim-token \\
  --input '{\"recipient\": \"reader@example.com\", \"document\": \"Hello\", \"document_digest\": \"sha256:1\"}'
docket adapter verify target/wasm32-wasip2/release/__crate__.wasm   # each declared claim (verify.toml)";

const ADAPTER_MORE: &str =
    "`src/lib.rs` speaks the reference delivery protocol of docket's simulator; change its paths
and fields to your provider's. `Response::error_for_status()` maps a status to what the host
does next (429 and 503 retried, 409 an idempotency conflict, 401/403 unauthorized, other 4xx
rejected, anything unexpected an unknown outcome), so a refusal never becomes a receipt.

`docket adapter verify` checks each claim the adapter declares (idempotency, query,
compensation) by running scenarios through docket's own egress: a duplicate request, a
response lost after the provider committed, a changed input under one key, two attempts at
once, a request delivered twice, a restarted worker, compensating twice. `verify.toml` gives
it the sample inputs and, when you point it at your own sandbox, the provider's URL, settings
and secrets; without a `[provider]` it uses the built-in simulator.";

const HANDLER_TRY: &str = "docket adapter invoke target/wasm32-wasip2/release/__crate__.wasm --input '{\"name\": \"Ada\"}'";

const HANDLER_MORE: &str =
    "A handler is pure: no HTTP, no secrets, no settings, and the same input always gives the
same output, so docket may run it again at any time. Use it in a definition with
`kind = \"handler\"`.";

/// Makes the crate and says what to do next.
pub fn run(s: Scaffold) -> anyhow::Result<ExitCode> {
    check_name(&s.name)?;
    let base = match &s.dir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let root = base.join(&s.name);
    if root.exists()
        && std::fs::read_dir(&root)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "{} already exists and is not empty; choose another name or --dir",
            root.display()
        );
    }
    for (path, text) in files(&s)? {
        let target = root.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&target, text).with_context(|| format!("writing {}", target.display()))?;
    }
    let kind = if s.handler { "handler" } else { "adapter" };
    println!("created the {kind} `{}` in {}", s.name, root.display());
    println!(
        "next: cd {} && cargo build --target wasm32-wasip2 --release",
        root.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Component names are what definitions and the registry call them by.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
        && name.len() <= 64;
    if !ok {
        bail!(
            "`{name}` is not a component name: use 1–64 lower-case letters, digits and `-`, \
             starting with a letter (e.g. `acme-mailer`)"
        );
    }
    Ok(())
}

/// Every file of the crate as (path, text).
fn files(s: &Scaffold) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let world = if s.handler { "handler" } else { "adapter" };
    let fill = |text: &str| {
        text.replace("__name__", &s.name)
            .replace("__crate__", &s.name.replace('-', "_"))
            .replace("__world__", world)
            .replace("__docket_version__", env!("CARGO_PKG_VERSION"))
    };
    let (lib, test, try_it, more) = if s.handler {
        (HANDLER_LIB, HANDLER_TEST, HANDLER_TRY, HANDLER_MORE)
    } else {
        (ADAPTER_LIB, ADAPTER_TEST, ADAPTER_TRY, ADAPTER_MORE)
    };
    let readme = README.replace("__try__", try_it).replace("__more__", more);
    let mut out = vec![
        (PathBuf::from("Cargo.toml"), fill(CARGO_TOML)),
        (PathBuf::from("README.md"), fill(&readme)),
        (PathBuf::from("src/lib.rs"), fill(lib)),
        (PathBuf::from("tests/invoke.rs"), fill(test)),
        (PathBuf::from(".gitignore"), "/target\n".to_string()),
        (
            PathBuf::from("vendor/docket-guest/Cargo.toml"),
            guest_manifest()?,
        ),
    ];
    if !s.handler {
        out.push((PathBuf::from("verify.toml"), VERIFY_TOML.to_string()));
        out.push((
            PathBuf::from(format!("workflows/{}-delivery.toml", s.name)),
            fill(ADAPTER_WORKFLOW),
        ));
        for (path, text) in ADAPTER_SCENARIOS {
            out.push((PathBuf::from(path), fill(text)));
        }
    }
    for (path, text) in crate::guests::VENDORED {
        out.push((PathBuf::from(path), text.to_string()));
    }
    Ok(out)
}

/// The guest helper's manifest with what it inherits from docket's workspace written out,
/// so that it builds on its own.
fn guest_manifest() -> anyhow::Result<String> {
    let workspace: Table = toml::from_str(WORKSPACE_MANIFEST).context("docket's Cargo.toml")?;
    let mut guest: Table = toml::from_str(GUEST_MANIFEST).context("the guest's Cargo.toml")?;
    let inherited = |table: &str| -> Table {
        workspace
            .get("workspace")
            .and_then(|w| w.get(table))
            .and_then(Value::as_table)
            .cloned()
            .unwrap_or_default()
    };
    let (package_values, dependency_values) = (inherited("package"), inherited("dependencies"));
    if let Some(Value::Table(package)) = guest.get_mut("package") {
        for (key, value) in package.iter_mut() {
            if is_inherited(value) {
                *value = package_values
                    .get(key)
                    .cloned()
                    .with_context(|| format!("the workspace gives no package.{key}"))?;
            }
        }
        package.insert("publish".into(), Value::Boolean(false));
    }
    if let Some(Value::Table(dependencies)) = guest.get_mut("dependencies") {
        for (name, value) in dependencies.iter_mut() {
            if !is_inherited(value) {
                continue;
            }
            let mut resolved = match dependency_values.get(name) {
                Some(Value::String(version)) => {
                    let mut t = Table::new();
                    t.insert("version".into(), Value::String(version.clone()));
                    t
                }
                Some(Value::Table(t)) => t.clone(),
                _ => bail!("the workspace gives no dependency `{name}`"),
            };
            // Keys beside `workspace = true` (optional, features) still apply.
            if let Value::Table(own) = value {
                for (k, v) in own.iter().filter(|(k, _)| *k != "workspace") {
                    resolved.insert(k.clone(), v.clone());
                }
            }
            *value = Value::Table(resolved);
        }
    }
    Ok(format!(
        "# docket's guest helper, vendored by `docket adapter new` from docket {}.\n{}",
        env!("CARGO_PKG_VERSION"),
        toml::to_string(&guest)?
    ))
}

fn is_inherited(value: &Value) -> bool {
    value
        .as_table()
        .and_then(|t| t.get("workspace"))
        .and_then(Value::as_bool)
        == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_guest_inherits_nothing() {
        let manifest = guest_manifest().unwrap();
        assert!(!manifest.contains("workspace"), "{manifest}");
        let parsed: Table = toml::from_str(&manifest).unwrap();
        assert_eq!(parsed["package"]["name"].as_str(), Some("docket-guest"));
        assert!(parsed["dependencies"]["wit-bindgen"]["version"].is_str());
        assert_eq!(
            parsed["dependencies"]["serde"]["optional"].as_bool(),
            Some(true)
        );
    }

    #[test]
    fn a_name_that_is_not_a_component_name_is_refused() {
        for bad in ["", "Mailer", "9lives", "acme_mailer", "acme-"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        check_name("acme-mailer").unwrap();
    }

    #[test]
    fn every_placeholder_is_filled() {
        for handler in [false, true] {
            let s = Scaffold {
                name: "acme-mailer".into(),
                handler,
                dir: None,
            };
            for (path, text) in files(&s).unwrap() {
                assert!(
                    !text.contains("__name__") && !text.contains("__crate__"),
                    "{}",
                    path.display()
                );
            }
        }
    }

    /// The WIT lands where the helper's `generate!` looks for it (`../../wit` from
    /// `vendor/docket-guest`).
    #[test]
    fn the_wit_lands_where_the_helper_looks_for_it() {
        let s = Scaffold {
            name: "x".into(),
            handler: false,
            dir: None,
        };
        let paths: Vec<PathBuf> = files(&s).unwrap().into_iter().map(|(p, _)| p).collect();
        assert!(paths.contains(&PathBuf::from("wit/docket.wit")));
        assert!(paths.contains(&PathBuf::from("vendor/docket-guest/src/lib.rs")));
        assert!(
            crate::guests::VENDORED
                .iter()
                .any(|(_, text)| text.contains("path: \"../../wit\""))
        );
    }
}
