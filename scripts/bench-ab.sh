#!/usr/bin/env bash
# Compares two builds of `nimbus` end to end, alternating them in one sitting
# so the shared machine's load hits both alike: for each round and each
# durability, `nimbus bench --native` with A, then with B. Quote medians over
# the pairs; a single pair swings by ±20 % here.
#
#   scripts/bench-ab.sh A_BINARY B_BINARY [ROUNDS] [extra `nimbus bench` args...]
#
# BENCH_EVENTS / BENCH_WARMUP change the phase sizes (20000 / 2000).
# Guests come from NIMBUS_GUESTS_DIR, else ${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release
# (`scripts/build-guests.sh`). Used for decision records 0102 and 0103.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 A_BINARY B_BINARY [ROUNDS] [extra nimbus bench args...]" >&2
  exit 2
fi
a=$1 b=$2
rounds=${3:-2}
shift $(( $# >= 3 ? 3 : 2 ))
guests=${NIMBUS_GUESTS_DIR:-${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release}
for round in $(seq "$rounds"); do
  for durability in fsync os; do
    for bin in "$a" "$b"; do
      echo "=== round $round, durability $durability, $bin, $(date -u +%H:%M:%S), $(uptime | sed 's/.*load/load/')"
      "$bin" bench --native --events "${BENCH_EVENTS:-20000}" --warmup "${BENCH_WARMUP:-2000}" --durability "$durability" \
        --guests-dir "$guests" "$@" 2>&1 | grep -E "^(wasm|native) |wasm / native"
    done
  done
done
