#!/usr/bin/env bash
# Lints the guest side, which the workspace-wide clippy/test (default members
# only) does not reach:
#  - clippy -D warnings for the guest SDK and every guest crate, compiled for
#    wasm32-wasip2 as they ship;
#  - the native tests of the guest SDK (dispatch, payload decoding, error
#    mapping, its doc examples and the compile-fail examples that pin the
#    compiler errors a handler author sees) and of the example handlers (their
#    decisions, through the SDK's test host);
#  - that every guest crate is loaded by at least one host test (its crate
#    name in quotes in a .rs file under host/ or tests/): a fixture nobody
#    tests is dead weight, or a test that was lost (STYLE.md habit 16).
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
packages=$(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json,sys; m=json.load(sys.stdin); print(" ".join("-p "+p["name"] for p in m["packages"] if "/examples/" in p["manifest_path"] or "/tests/guests/" in p["manifest_path"] or p["name"] == "nimbus-guest"))')
# shellcheck disable=SC2086
cargo clippy --target wasm32-wasip2 $packages -- -D warnings
native="-p nimbus-guest -p orders -p erp-import -p notifier"
# shellcheck disable=SC2086
cargo clippy $native --all-targets -- -D warnings
# shellcheck disable=SC2086
cargo test $native

untested=""
for manifest in examples/*/Cargo.toml tests/guests/*/Cargo.toml; do
  name=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -1)
  if ! grep -rqF --include='*.rs' "\"$name\"" host tests --exclude-dir=guests; then
    untested="$untested $name"
  fi
done
if [ -n "$untested" ]; then
  echo "guest crates that no host test loads:$untested" >&2
  exit 1
fi
