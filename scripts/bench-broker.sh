#!/usr/bin/env bash
# Broker benchmark: publish -> receive -> complete, closed loop, 300-byte
# bodies, 1/16/256 sessions at `fsync` and `os` durability, on the embedded
# broker (release build). Prints msg/s and latency p50/p99 per scenario,
# with the machine state first so figures are quoted with it.
#
#   scripts/bench-broker.sh                 # the full matrix
#   scripts/bench-broker.sh --seconds 10    # any broker-bench option
#   BENCH_FEATURES=mimalloc scripts/bench-broker.sh
#
# Data directories go under $BENCH_DATA_DIR (default: target dir), on a real
# disk: on tmpfs an fsync costs nothing and the `fsync` figures would lie.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
data="${BENCH_DATA_DIR:-$target/bench-data}"

# BENCH_FEATURES=mimalloc measures with mimalloc as the global allocator
# (the nimbus binary ships with the system allocator).
features="${BENCH_FEATURES:-}"
cargo build --release --quiet -p nimbus-broker-bench --bin broker-bench ${features:+--features "$features"}

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ)  nproc=$(nproc)  load:$(cut -d' ' -f1-3 /proc/loadavg)  $(uname -sr)"
echo "# data dir: $data ($(df -T "$(dirname "$data")" 2>/dev/null | awk 'NR==2 {print $2}'))"
echo "# command: $target/release/broker-bench --data-dir $data $*"
trap 'rm -rf "$data"' EXIT
"$target/release/broker-bench" --data-dir "$data" "$@"
