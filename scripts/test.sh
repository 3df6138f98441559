#!/usr/bin/env bash
# Runs docket's whole test suite on a fresh machine: installs what is missing, then tests.
#
#   bash scripts/test.sh
#
# - the Rust toolchain and the wasm32-wasip2 target come from rust-toolchain.toml;
# - the example and test plugins are built from adapters/ by the host's build script;
# - PostgreSQL is installed if missing, started, and given a `docket` role; each
#   PostgreSQL test creates (and drops) its own database through DOCKET_TEST_POSTGRES;
# - Chromium and chromedriver are installed if missing (the console's browser tests);
# - everything runs on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

step "Rust toolchain and the wasm32-wasip2 target (rust-toolchain.toml)"
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi
rustc --version

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
apt_install() {
    if [ -z "$apt_updated" ]; then sudo_if_needed apt-get update; apt_updated=1; fi
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
}

step "A C toolchain (SQLite and jemalloc are compiled from source)"
if ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then
    apt_install gcc make
fi

step "PostgreSQL (the store conformance suite runs against it)"
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    apt_install postgresql
fi
# The installed major version (the highest, if several are), e.g. 15.
pg_version=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }
if ! pg_lsclusters -h | awk -v v="$pg_version" '$1 == v && $2 == "main"' | grep -q .; then
    as_postgres pg_createcluster "$pg_version" main
fi
# Starting a running cluster fails; that is fine.
if ! pg_lsclusters -h | awk -v v="$pg_version" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
    as_postgres pg_ctlcluster "$pg_version" main start
fi
as_postgres psql -v ON_ERROR_STOP=1 -q <<'SQL'
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'docket') THEN
        CREATE ROLE docket LOGIN PASSWORD 'docket' CREATEDB;
    ELSE
        ALTER ROLE docket LOGIN PASSWORD 'docket' CREATEDB;
    END IF;
END
$$;
SQL
pg_port=$(pg_lsclusters -h | awk -v v="$pg_version" '$1 == v && $2 == "main" { print $3 }')
export DOCKET_TEST_POSTGRES="${DOCKET_TEST_POSTGRES:-postgres://docket:docket@127.0.0.1:${pg_port:-5432}/postgres}"
echo "DOCKET_TEST_POSTGRES=$DOCKET_TEST_POSTGRES"

step "Chromium and chromedriver (the console's browser tests drive them)"
if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1; then
    apt_install chromium chromium-driver
fi
chromium --version || true

step "curl and python3 (the fresh-machine check submits an intent with curl, as the README does)"
if ! command -v curl >/dev/null 2>&1; then
    apt_install curl
fi
if ! command -v python3 >/dev/null 2>&1; then
    apt_install python3
fi

step "Formatting"
cargo fmt --all --check

# A checkout that is itself a clean clone nothing has built (CI's) runs the fresh-machine
# check first, in place, so that the suite below reuses that build; any other checkout is
# cloned afresh for the check at the end.
fresh_in_place=
if [ ! -e target ] && [ -z "${CARGO_TARGET_DIR:-}" ] && [ -z "$(git status --porcelain)" ]; then
    fresh_in_place=1
    step "A fresh machine: no wasm32-wasip2 target, this clean clone, the README's first command, one intent"
    bash scripts/fresh-machine.sh --in-place
fi

step "Lints"
cargo clippy --all-targets -- -D warnings

step "Guest crates' own unit tests (native)"
cargo test -p docket-guest --features adapter -p http-delivery -p render-document

step "Tests (host unit tests and the integration suite; plugins are built from source)"
cargo test

if [ -z "$fresh_in_place" ]; then
    step "A fresh machine: no wasm32-wasip2 target, a clean clone, the README's first command, one intent"
    # The clone reuses this checkout's compiled dependencies; docket and its plugins are built
    # again from the clone, and its build must add the target itself.
    CARGO_TARGET_DIR="$(pwd)/target" bash scripts/fresh-machine.sh
fi

step "All passed"
