#!/usr/bin/env bash
# Lints the guest side, which the workspace-wide clippy/test (default members
# only) does not reach:
#  - clippy -D warnings for the guest SDK and every guest crate, compiled for
#    wasm32-wasip2 as they ship;
#  - the guest SDK's own tests, run natively: unit tests of dispatch, payload
#    decoding and error mapping, its doc examples, and the compile-fail
#    examples that pin the compiler errors a handler author sees.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
packages=$(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json,sys; m=json.load(sys.stdin); print(" ".join("-p "+p["name"] for p in m["packages"] if "/examples/" in p["manifest_path"] or "/tests/guests/" in p["manifest_path"] or p["name"] == "nimbus-guest"))')
# shellcheck disable=SC2086
cargo clippy --target wasm32-wasip2 $packages -- -D warnings
cargo clippy -p nimbus-guest --all-targets -- -D warnings
cargo test -p nimbus-guest
