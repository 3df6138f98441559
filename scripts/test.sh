#!/usr/bin/env bash
# Runs docket's whole test suite on a fresh machine: installs what is missing, then tests.
#
#   bash scripts/test.sh
#
# - the Rust toolchain and the wasm32-wasip2 target come from rust-toolchain.toml;
# - the example and test plugins are built from adapters/ by the host's build script;
# - everything runs on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "Rust toolchain and the wasm32-wasip2 target (rust-toolchain.toml)"
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi
rustc --version

step "Formatting"
cargo fmt --all --check

step "Lints"
cargo clippy --all-targets -- -D warnings

step "Guest crates' own unit tests (native)"
cargo test -p docket-guest --features adapter -p http-delivery -p render-document

step "Tests (host unit tests and the integration suite; plugins are built from source)"
cargo test
