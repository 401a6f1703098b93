#!/usr/bin/env bash
# Builds every guest crate (the example handlers and the hostile test
# components) to wasm32-wasip2 components under target/wasm32-wasip2/release.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
guests=$(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json,sys; m=json.load(sys.stdin); print(" ".join("-p "+p["name"] for p in m["packages"] if "/examples/" in p["manifest_path"] or "/tests/guests/" in p["manifest_path"]))')
if [ -n "$guests" ]; then
  # shellcheck disable=SC2086
  cargo build --release --target wasm32-wasip2 $guests
fi
