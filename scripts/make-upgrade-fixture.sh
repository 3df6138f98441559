#!/usr/bin/env bash
# Makes the upgrade fixture of the current schema (the last migration's number):
# host/tests/fixtures/upgrade/<NNNN>/ — a SQLite file and a PostgreSQL dump holding
# workflows paused in each state, the provider simulator's world beside each, and
# fixture.json naming what each workflow must become after an upgrade.
#
#   bash scripts/make-upgrade-fixture.sh
#
# Run it with every new migration and commit what it writes: the suite fails until the
# newest migration has its fixture, and every fixture is opened by every later release.
# Needs a running PostgreSQL and pg_dump (scripts/test.sh sets both up).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi
command -v pg_dump >/dev/null 2>&1 || {
    echo "pg_dump is missing: install the PostgreSQL client (apt-get install postgresql-client)" >&2
    exit 1
}
export DOCKET_TEST_POSTGRES="${DOCKET_TEST_POSTGRES:-postgres://docket:docket@127.0.0.1:5432/postgres}"
DOCKET_MAKE_UPGRADE_FIXTURE=1 cargo test --test all upgrade_fixtures::the_generator_makes_a_fixture_this_release_opens -- --exact
ls -l host/tests/fixtures/upgrade/*/
