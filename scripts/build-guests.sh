#!/usr/bin/env bash
# Builds every guest crate (the example handlers under examples/ and the test
# components under tests/guests/) to a wasm32-wasip2 component at
#   ${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/<crate_name>.wasm
# (a `-` in a crate name becomes `_`, e.g. erp_import.wasm, swap_v1.wasm).
# Guest crates are workspace members but not default members, so a plain host
# `cargo build`/`cargo test` never compiles them for the host.
# The small-stack link flag comes from .cargo/config.toml. Each component is
# then slimmed in place by guest-sdk/slim (see below); cargo's own output is
# kept in .../release/full/.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
guests=$(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json,sys; m=json.load(sys.stdin); print(" ".join("-p "+p["name"] for p in m["packages"] if "/examples/" in p["manifest_path"] or "/tests/guests/" in p["manifest_path"]))')
# Guests are built with fat LTO and one codegen unit: a fresh instance runs
# per event, so the guest's instruction count is paid on every event, and LTO
# cut it by 5-6 % (callgrind, docs/decisions/0003-dispatch-cost.md; components
# ~15 % smaller). The workspace's release profile has the same since decision
# 0124 (for the host); kept here so the guests' build says what it needs.
if [ -n "$guests" ]; then
  # shellcheck disable=SC2086
  CARGO_PROFILE_RELEASE_LTO=true CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
    cargo build --release --target wasm32-wasip2 $guests
fi

# Post-step (an optimisation only): strip from each component the 19 WASI
# stdio/environment/exit imports that std links in for its panic path, which
# wasmtime would otherwise wire up on every event's fresh instance (-15 to
# -20 % instructions per event; docs/decisions/0003-dispatch-cost.md). The
# tool refuses, and the component stays as cargo built it, when the handler
# uses stdio, the environment or exit itself, or imports other WASI
# interfaces. The components as cargo built them are kept in full/ beside the
# slimmed ones (for comparisons: NIMBUS_BENCH_COMPARE_DIR=<out>/full).
cargo build -p nimbus-guest-slim
metadata=$(cargo metadata --no-deps --format-version 1)
# cargo's own idea of the target dir (CARGO_TARGET_DIR, config, or ./target).
target_dir=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])' <<<"$metadata")
slim="$target_dir/debug/nimbus-guest-slim"
out="$target_dir/wasm32-wasip2/release"
mkdir -p "$out/full"
for name in $(python3 -c 'import json,sys; m=json.load(sys.stdin); print(" ".join(p["name"].replace("-","_") for p in m["packages"] if "/examples/" in p["manifest_path"] or "/tests/guests/" in p["manifest_path"]))' <<<"$metadata"); do
  # cargo re-links the unslimmed artifact here on every build; keep a copy.
  cp "$out/$name.wasm" "$out/full/$name.wasm"
  status=0
  "$slim" "$out/full/$name.wasm" "$out/$name.wasm" || status=$?
  # 2: refused (kept whole, reason printed): the component stays as built.
  if [ "$status" -ne 0 ] && [ "$status" -ne 2 ]; then
    exit "$status"
  fi
done
