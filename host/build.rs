//! Builds the example and test plugins in `adapters/` for `wasm32-wasip2`, so that
//! `cargo build`, `cargo test` and `docket serve` always run components built from the
//! source next to them (no `.wasm` is committed).
//!
//! Guests build in their own target directory (`target/guests`, or `guests` under an
//! absolute `CARGO_TARGET_DIR`) so this nested cargo never waits on the lock of the outer
//! build. The paths of the finished components are written to `$OUT_DIR/guests.rs`,
//! included by `docket::guests`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (output name, package, features): one component each.
const COMPONENTS: &[(&str, &str, &str)] = &[
    ("http-delivery", "http-delivery", ""),
    ("http-delivery-query-only", "http-delivery", "query-only"),
    (
        "http-delivery-fire-and-forget",
        "http-delivery",
        "fire-and-forget",
    ),
    ("http-delivery-lying", "http-delivery", "lying"),
    // Later versions of `http-delivery`, for registry tests: not loaded by `serve`.
    ("http-delivery-2", "http-delivery", "version-2"),
    (
        "http-delivery-3-other-namespace",
        "http-delivery",
        "other-namespace",
    ),
    ("http-delivery-batching", "http-delivery", "batching"),
    ("ledger", "ledger", ""),
    ("ledger-lying", "ledger", "lying"),
    ("noop", "noop", ""),
    ("validate-document", "validate-document", ""),
    ("render-document", "render-document", ""),
    ("hostile", "hostile", ""),
    ("hostile-describe-bomb", "hostile", "describe-bomb"),
    ("hostile-describe-spin", "hostile", "describe-spin"),
    ("hostile-import", "hostile-import", ""),
    // Built against docket:plugin@0.2.0: the host still runs it.
    ("legacy-0-2", "legacy-0-2", ""),
];

/// Components above that are later versions of an example: built, not loaded by `serve`.
const LATER_VERSIONS: &[&str] = &[
    "http-delivery-2",
    "http-delivery-3-other-namespace",
    "http-delivery-batching",
];

/// Components above whose `describe()` is hostile: built for the sandbox tests only, never
/// listed with the examples (loading one is refused, or takes its whole deadline).
const HOSTILE_DESCRIBE: &[&str] = &["hostile-describe-bomb", "hostile-describe-spin"];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    for watched in [
        "adapters",
        "wit",
        "migrations",
        "workflows",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    // An absolute CARGO_TARGET_DIR (CI's fresh-machine check shares one between two
    // checkouts) holds the guests too, so that their compiled dependencies are shared.
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let target_dir = match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("guests"),
        _ => root.join("target").join("guests"),
    };
    let out_components = target_dir.join("components");
    std::fs::create_dir_all(&out_components).unwrap();
    ensure_wasm_target(&root);

    let mut consts = String::new();
    let mut all = String::new();
    let mut versions = String::new();
    let mut embedded = String::new();
    // Group builds by feature set: one cargo invocation for all default-feature packages.
    let default_pkgs: Vec<&str> = COMPONENTS
        .iter()
        .filter(|(_, _, f)| f.is_empty())
        .map(|(_, p, _)| *p)
        .collect();
    build(&root, &target_dir, &default_pkgs, "");
    for (name, package, features) in COMPONENTS {
        if !features.is_empty() {
            build(&root, &target_dir, &[package], features);
        }
        let built = target_dir
            .join("wasm32-wasip2")
            .join("guest")
            .join(format!("{}.wasm", package.replace('-', "_")));
        let dest = out_components.join(format!("{name}.wasm"));
        std::fs::copy(&built, &dest)
            .unwrap_or_else(|e| panic!("copy {} -> {}: {e}", built.display(), dest.display()));
        let ident = name.replace('-', "_").to_uppercase();
        consts.push_str(&format!(
            "/// The `{name}` component, built from `adapters/{package}`{}.\npub const {ident}: &str = {:?};\n",
            if features.is_empty() {
                String::new()
            } else {
                format!(" with feature `{features}`")
            },
            dest.display().to_string()
        ));
        if HOSTILE_DESCRIBE.contains(name) {
            continue;
        }
        if LATER_VERSIONS.contains(name) {
            versions.push_str(&format!("    ({name:?}, {ident}),\n"));
        } else {
            all.push_str(&format!("    ({name:?}, {ident}),\n"));
            embedded.push_str(&format!(
                "    ({name:?}, include_bytes!({:?})),\n",
                dest.display().to_string()
            ));
        }
    }
    consts.push_str(&format!(
        "/// Every built example component as (name, path); `serve` loads these.\npub const ALL: &[(&str, &str)] = &[\n{all}];\n"
    ));
    consts.push_str(&format!(
        "/// Later versions of the examples as (name, path), deployed by hand (registry tests).\npub const VERSIONS: &[(&str, &str)] = &[\n{versions}];\n"
    ));
    consts.push_str(&format!(
        "/// The examples of [`ALL`] as (name, bytes), part of the binary: a copied or installed\n/// `docket` runs them without this source tree.\npub const EMBEDDED: &[(&str, &[u8])] = &[\n{embedded}];\n"
    ));
    consts.push_str(&shipped_workflows(&root));
    consts.push_str(&vendored(&root));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("guests.rs");
    std::fs::write(out, consts).unwrap();
}

/// The definitions in `workflows/` as (file name, text), part of the binary: a host started
/// where there is no `workflows/` directory deploys these.
fn shipped_workflows(root: &Path) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("workflows"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut list = String::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        list.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            file.display().to_string()
        ));
    }
    format!(
        "/// The definitions of `workflows/` as (file name, text), part of the binary.\npub const SHIPPED_WORKFLOWS: &[(&str, &str)] = &[\n{list}];\n"
    )
}

/// The guest helper's sources and the WIT as (path in a scaffolded crate, text), part of the
/// binary: `docket adapter new` vendors them into the crate it makes.
fn vendored(root: &Path) -> String {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut list = String::new();
    for (from, to) in [
        ("adapters/guest/src", "vendor/docket-guest/src"),
        ("wit", "wit"),
    ] {
        let mut files = Vec::new();
        walk(&root.join(from), &mut files);
        files.sort();
        for file in files {
            let relative = file.strip_prefix(root.join(from)).unwrap();
            list.push_str(&format!(
                "    ({:?}, include_str!({:?})),\n",
                format!("{to}/{}", relative.display()),
                file.display().to_string()
            ));
        }
    }
    format!(
        "/// The guest helper's sources and the WIT as (path in a scaffolded crate, text).\npub const VENDORED: &[(&str, &str)] = &[\n{list}];\n"
    )
}

/// Adds the `wasm32-wasip2` target to the toolchain building this when it lacks it: rustup
/// installs a `rust-toolchain.toml` target only with a toolchain it installs itself, so a
/// machine whose stable toolchain was already there would otherwise fail here.
fn ensure_wasm_target(root: &Path) {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let Some(sysroot) = sysroot else {
        return; // The guest build below says what is wrong.
    };
    if sysroot.join("lib/rustlib/wasm32-wasip2").is_dir() {
        return;
    }
    let toolchain = std::env::var("RUSTUP_TOOLCHAIN").ok();
    println!(
        "cargo:warning=the wasm32-wasip2 target is missing from {}; adding it with `rustup target add wasm32-wasip2`",
        sysroot.display()
    );
    let mut add = Command::new("rustup");
    add.current_dir(root)
        .args(["target", "add", "wasm32-wasip2"]);
    if let Some(t) = &toolchain {
        add.args(["--toolchain", t]);
    }
    match add.status() {
        Ok(status) if status.success() => {}
        Ok(status) => panic!(
            "`rustup target add wasm32-wasip2` failed ({status}); run it yourself (the plugins in adapters/ are built for that target), then build again"
        ),
        Err(e) => panic!(
            "the wasm32-wasip2 target is missing from {} and rustup cannot be run ({e}); add the target to this toolchain (with rustup: `rustup target add wasm32-wasip2`), then build again",
            sysroot.display()
        ),
    }
}

fn build(root: &Path, target_dir: &Path, packages: &[&str], features: &str) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .arg("build")
        .arg("--quiet")
        .args(["--target", "wasm32-wasip2", "--profile", "guest"])
        .env("CARGO_TARGET_DIR", target_dir)
        // Flags meant for the host build must not leak into the guest build.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_PRIMARY_PACKAGE");
    for p in packages {
        cmd.args(["-p", p]);
    }
    if !features.is_empty() {
        cmd.args(["--features", features]);
    }
    let status = cmd
        .status()
        .expect("failed to run cargo for the guest components");
    if !status.success() {
        panic!(
            "building guest components {packages:?} (features: {features:?}) for wasm32-wasip2 failed; \
             if the target is missing, run `rustup target add wasm32-wasip2` (rust-toolchain.toml lists it)"
        );
    }
}
