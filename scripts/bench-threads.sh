#!/usr/bin/env bash
# Runs a command (a `nimbus bench`, typically) and reports, for the threads
# that write the stores (the broker's writer and compactor, the Resolver's
# recorder, the checkpointer), their CPU time and what they wrote (bytes and write calls
# from /proc/PID/task/TID/io), sampled until the command exits. Divide by the
# events the run published for per-event figures. Linux only.
#
#   scripts/bench-threads.sh target/release/nimbus bench --native-only --events 10000 --warmup 1000
#
# Used for decision records 0102 and 0103.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi
out=$(mktemp)
"$@" >"$out" 2>&1 &
pid=$!
declare -A written calls cpu_ns
while kill -0 "$pid" 2>/dev/null; do
  for task in /proc/"$pid"/task/*; do
    name=$(cat "$task/comm" 2>/dev/null) || continue
    case "$name" in nimbus-broker-w* | nimbus-broker-c* | nimbus-recorder* | nimbus-checkpoi*) ;; *) continue ;; esac
    w=$(awk '/^wchar/{print $2}' "$task/io" 2>/dev/null || true)
    c=$(awk '/^syscw/{print $2}' "$task/io" 2>/dev/null || true)
    s=$(awk '{print $1}' "$task/schedstat" 2>/dev/null || true)
    if [ -n "$w" ]; then written[$name]=$w; calls[$name]=$c; fi
    if [ -n "$s" ]; then cpu_ns[$name]=$s; fi
  done
  sleep 0.2
done
wait "$pid" || true
for name in "${!written[@]}"; do
  echo "$name: bytes written ${written[$name]}, write calls ${calls[$name]}, cpu $(( ${cpu_ns[$name]:-0} / 1000000 )) ms"
done
grep -E 'closed loop|open @' "$out" || cat "$out"
rm -f "$out"
