#!/usr/bin/env bash
# A newcomer's first minutes, as CI runs them: the wasm32-wasip2 target removed from the
# toolchain, a clean clone of this repository, the README's first command, one intent.
#
#   bash scripts/fresh-machine.sh
#
#   bash scripts/fresh-machine.sh --in-place
#
# The build must add the target itself (host/build.rs) and the host must then serve the
# shipped definitions with the built-in simulator, so the intent completes. With
# CARGO_TARGET_DIR set, compiled dependencies are reused: docket and its plugins are still
# built from the clone. `--in-place` runs the check in this checkout instead, which must
# itself be a clean clone that nothing has built yet (CI's is): the suite that follows then
# reuses the build instead of compiling docket twice.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
in_place=
if [ "${1:-}" = "--in-place" ]; then
    in_place=1
    if [ -e target ] || [ -n "${CARGO_TARGET_DIR:-}" ] || [ -n "$(git status --porcelain)" ]; then
        echo "--in-place needs a clean clone that nothing has built (no target/, no CARGO_TARGET_DIR, no changes)" >&2
        exit 1
    fi
fi

step() { printf '\n==> %s\n' "$*"; }

work=$(mktemp -d)
host_pid=
cleanup() {
    if [ -n "$host_pid" ]; then
        kill "$host_pid" 2>/dev/null || true
        wait "$host_pid" 2>/dev/null || true
    fi
    # In place, the host's database is the only thing the check leaves in the checkout.
    if [ -n "$in_place" ]; then rm -rf "$repo/.docket"; fi
    rm -rf "$work"
}
trap cleanup EXIT

step "A toolchain without the wasm32-wasip2 target"
toolchain=$(rustup show active-toolchain | cut -d' ' -f1)
rustup target remove --toolchain "$toolchain" wasm32-wasip2 2>/dev/null || true
if rustup target list --toolchain "$toolchain" --installed | grep -qx wasm32-wasip2; then
    echo "could not remove the wasm32-wasip2 target from $toolchain" >&2
    exit 1
fi

if [ -n "$in_place" ]; then
    step "A clean clone: this checkout ($(git rev-parse --short HEAD)), nothing built yet"
else
    step "A clean clone"
    git clone --quiet "$repo" "$work/docket"
    cd "$work/docket"
fi

step "The README's first command: cargo run -- serve"
first=$(grep -m1 -E '^cargo run .*-- serve' README.md)
[ "$first" = "cargo run -- serve" ] || {
    echo "the README's first command is now \`$first\`; update this script" >&2
    exit 1
}
# The same command, on a port of its own (8080 may be taken on a CI machine).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cargo run -- serve --listen "127.0.0.1:$port" >"$work/host.log" 2>&1 &
host_pid=$!
# Building from scratch takes minutes; the host then says where it listens.
for _ in $(seq 1 2400); do
    grep -q "docket listening on" "$work/host.log" && break
    if ! kill -0 "$host_pid" 2>/dev/null; then
        tail -n 40 "$work/host.log" >&2
        echo "the host exited before it listened" >&2
        exit 1
    fi
    sleep 1
done
grep -q "docket listening on" "$work/host.log" || { tail -n 40 "$work/host.log" >&2; exit 1; }
rustup target list --toolchain "$toolchain" --installed | grep -qx wasm32-wasip2 || {
    echo "the build did not add the wasm32-wasip2 target" >&2
    exit 1
}

step "One intent, submitted as the README shows"
url="http://127.0.0.1:$port"
answer=$(curl -sf -X POST "$url/v1/intents" \
    -H 'Idempotency-Key: order-1' \
    -d '{"workflow": "document-delivery", "input": {"title": "Quarterly report", "recipient": "reader@example.com", "body": "Hello"}}')
echo "$answer"
id=$(printf '%s' "$answer" | python3 -c 'import json, sys; print(json.load(sys.stdin)["workflow_id"])')
for _ in $(seq 1 120); do
    state=$(curl -sf "$url/v1/workflows/$id" | python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])')
    [ "$state" = completed ] && break
    sleep 0.5
done
echo "workflow $id: $state"
[ "$state" = completed ] || { tail -n 40 "$work/host.log" >&2; exit 1; }
echo "a fresh machine runs the README's first command and completes an intent"
