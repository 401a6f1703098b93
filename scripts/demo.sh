#!/usr/bin/env bash
# The demo: builds the example handlers and the `nimbus` binary, lays out a
# demo directory, starts `nimbus run` on the embedded broker, publishes sample
# traffic — including an order that FAILS and blocks its session, with a later
# order parked behind it, an ERP import that hands off, and a shipment whose
# notifier publishes a follow-up — shows the state with the CLI, and prints
# how to fix the failure, resubmit or skip it, and complete the handoff.
#
# Usage: scripts/demo.sh [--keep-running] [--stop]
#   --keep-running  leave the host running at the end (default: stop it; its
#                   state stays in the demo directory for the next start)
#   --stop          only stop a demo host left running, then exit
# Environment:
#   NIMBUS_DEMO_DIR  the demo directory        [target/demo]
#   NIMBUS_DEMO_API  where the API listens     [127.0.0.1:7300]
#   CARGO_TARGET_DIR where cargo builds        [target]
#
# Re-runnable: each run stops the previous demo host and starts from an empty
# demo directory. Every wait is bounded; nothing here waits forever.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

keep_running=0
stop_only=0
for arg in "$@"; do
  case "$arg" in
    --keep-running) keep_running=1 ;;
    --stop) stop_only=1 ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

demo=${NIMBUS_DEMO_DIR:-$root/target/demo}
api_addr=${NIMBUS_DEMO_API:-127.0.0.1:7300}
api="http://$api_addr"
target=${CARGO_TARGET_DIR:-$root/target}
# The dev profile optimises dependencies (wasmtime, SQLite), so this build is
# quick and shares its artifacts with the test build.
nimbus=$target/debug/nimbus
pidfile=$demo/nimbus.pid
log=$demo/nimbus.log

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo.sh: $*" >&2; exit 1; }
n() { "$nimbus" "$@" --api "$api"; }

# Stops the demo host of a previous run, if its pid is still a `nimbus run`.
stop_host() {
  [ -f "$pidfile" ] || return 0
  local pid
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null && grep -q "nimbus" "/proc/$pid/cmdline" 2>/dev/null; then
    echo "stopping the demo host (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    # SIGTERM drains in-flight events (engine.shutdown_grace); bounded wait.
    for _ in $(seq 1 350); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "the host did not stop within 35s; killing it (nothing acknowledged is lost)"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}

if [ "$stop_only" = 1 ]; then
  if [ ! -f "$pidfile" ]; then
    echo "no demo host to stop: $pidfile does not exist (NIMBUS_DEMO_DIR names another demo directory)"
    exit 0
  fi
  stop_host
  exit 0
fi

command -v cargo >/dev/null || die "cargo not found: install Rust from https://rustup.rs"
command -v rustup >/dev/null || die "rustup not found: install Rust from https://rustup.rs"
command -v curl >/dev/null || die "curl not found: install curl (used to wait for the API)"
# JSON answers are read with jq, or python3 where jq is missing.
if command -v jq >/dev/null; then
  count_json() { jq "[.[] | $1] | length"; }
  first_id() { jq -r "[.[] | $1][0].event_id // empty"; }
elif command -v python3 >/dev/null; then
  py_filter() { # jq-style select for the two filters used below
    case "$1" in
      "select(true)") echo "True" ;;
      "select(.sub_status != null)") echo "r.get('sub_status') is not None" ;;
    esac
  }
  count_json() { python3 -c "import json,sys; print(sum(1 for r in json.load(sys.stdin) if $(py_filter "$1")))"; }
  first_id() { python3 -c "import json,sys; print(next((r['event_id'] for r in json.load(sys.stdin) if $(py_filter "$1")), ''))"; }
else
  die "neither jq nor python3 found: install jq"
fi

say "1/6 Building the example handlers (wasm32-wasip2) and the nimbus binary"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2 -p orders -p erp-import -p notifier
cargo build -p nimbus-cli
[ -x "$nimbus" ] || die "$nimbus was not built"
wasm=$target/wasm32-wasip2/release

say "2/6 Laying out $demo"
stop_host
rm -rf "$demo"
mkdir -p "$demo/handlers/sales" "$demo/handlers/erp" "$demo/handlers/notifications"
sed "s|^listen = .*|listen = \"$api_addr\"|" examples/nimbus.toml >"$demo/nimbus.toml"
cp "$wasm/orders.wasm" "$demo/handlers/sales/orders.wasm"
cp "$wasm/erp_import.wasm" "$demo/handlers/erp/erp-import.wasm"
cp "$wasm/notifier.wasm" "$demo/handlers/notifications/notifier.wasm"
# The business rule that will bite: orders over 1000 are rejected.
cat >"$demo/handlers/sales/orders.toml" <<'EOF'
[config]
reject_over_total = "1000"
EOF
cat >"$demo/handlers/notifications/notifier.toml" <<'EOF'
[config]
channel = "email"
EOF
find "$demo" -type f | sed "s|^$root/||" | sort

say "3/6 Starting the host: nimbus run --config ${demo#"$root"/}/nimbus.toml"
if curl -fsS -o /dev/null "$api/health" 2>/dev/null; then
  die "something already answers on $api_addr; stop it or set NIMBUS_DEMO_API=127.0.0.1:PORT"
fi
nohup "$nimbus" run --config "$demo/nimbus.toml" >"$log" 2>&1 &
echo $! >"$pidfile"
pid=$(cat "$pidfile")
up=0
for _ in $(seq 1 300); do
  if ! kill -0 "$pid" 2>/dev/null; then
    tail -n 30 "$log" >&2
    die "the host exited during start (log above, in full at $log)"
  fi
  if curl -fsS -o /dev/null "$api/health" 2>/dev/null; then
    up=1
    break
  fi
  sleep 0.1
done
[ "$up" = 1 ] || { tail -n 30 "$log" >&2; stop_host; die "the API did not answer on $api within 30s"; }
echo "host up (pid $pid), API on $api, log in ${log#"$root"/}"

say "4/6 Publishing sample traffic"
order() { # session id total
  printf '{"OrderId":"%s","Customer":"%s","Total":%s,"Lines":[{"Sku":"A-1","Quantity":1,"UnitPrice":%s}]}' \
    "$2" "$1" "$3" "$3"
}
publish() { # event-type session data
  local id
  id=$(n publish --event-type "$1" --session "$2" --data "$3")
  printf '  %-20s session %-16s -> %s\n' "$1" "$2" "$id"
}
publish OrderPlaced customer-acme "$(order acme o-1001 150.0)"
publish OrderPlaced customer-acme "$(order acme o-1002 5000.0)" # over the limit: fails, blocks
publish OrderPlaced customer-acme "$(order acme o-1003 80.0)"   # parked behind o-1002
publish OrderPlaced customer-globex "$(order globex o-2001 320.0)"
publish OrderPlaced customer-globex "$(order globex o-2002 45.5)"
publish OrderPlaced customer-initech "$(order initech o-3001 999.0)"
publish ErpImportRequested erp-customers '{"ImportId":"imp-42","Entity":"Customers","Rows":1200}'
publish OrderShipped customer-globex '{"OrderId":"o-2001","Customer":"globex","Carrier":"DHL","TrackingNumber":"JD0142"}'

# Bounded wait until the traffic has settled: the failure, the parked order,
# the handoff, and five completed events (four orders and the shipment).
count() { # status -> number of events with it
  n events --status "$1" --json | count_json 'select(true)'
}
settled=0
for _ in $(seq 1 150); do
  if [ "$(count Failed)" -ge 1 ] && [ "$(count Deferred)" -ge 1 ] \
    && [ "$(count Completed)" -ge 5 ] \
    && [ "$(n events --status Pending --json | count_json 'select(.sub_status != null)')" -ge 1 ]; then
    settled=1
    break
  fi
  sleep 0.2
done
[ "$settled" = 1 ] || echo "(the traffic had not fully settled after 30s; showing the state as it is)"

say "5/6 What the operator sees"
echo "\$ nimbus events"
n events
echo
echo "\$ nimbus sessions --blocked"
n sessions --blocked
failed_id=$(n events --status Failed --json | first_id 'select(true)')
handoff_id=$(n events --status Pending --json | first_id 'select(.sub_status != null)')
if [ -n "$failed_id" ]; then
  echo
  echo "\$ nimbus event $failed_id"
  n event "$failed_id"
fi

say "6/6 Next steps"
rel_demo=${demo#"$root"/}
rel_nimbus=${nimbus#"$root"/}
failed=${failed_id:-<FAILED_EVENT_ID>}
handoff=${handoff_id:-<HANDOFF_EVENT_ID>}
start_hint=""
if [ "$keep_running" = 0 ]; then
  start_hint="  0. Start the host again (its state is kept in $rel_demo/data):
       $rel_nimbus run --config $rel_demo/nimbus.toml &
"
fi
cat <<EOF
Order o-1002 (total 5000) failed with OrderRejected: the handler's config
rejects orders over 1000. It blocks session customer-acme; o-1003 is parked
behind it and will run right after it, in order.

$start_hint  1. Look at the failure (status, error, handler version, full history):
       $rel_nimbus event $failed --api $api
       $rel_nimbus sessions --blocked --api $api
  2. Fix it: drop a new version of the handler's manifest in place (the host
     hot-swaps it; write-then-rename so it never reads half a file):
       printf '[config]\\nreject_over_total = "10000"\\n' > $rel_demo/handlers/sales/.orders.toml.tmp \\
         && mv $rel_demo/handlers/sales/.orders.toml.tmp $rel_demo/handlers/sales/orders.toml
       $rel_nimbus handlers --api $api        # the new version serving
  3. Resubmit it (o-1002 completes, then the parked o-1003 replays):
       $rel_nimbus resubmit $failed --api $api
     or skip it instead (o-1003 still replays):
       $rel_nimbus skip $failed --api $api
     or, after an outage, every Failed event at once (--dry-run shows which):
       $rel_nimbus resubmit --all --dry-run --api $api
  4. Complete the ERP import's pending handoff (or fail it):
       $rel_nimbus handoff complete $handoff --api $api
       $rel_nimbus handoff fail $handoff --error "DMF job failed" --api $api
  5. Watch the outcome:
       $rel_nimbus events --session customer-acme --api $api
EOF

if [ "$keep_running" = 1 ]; then
  # --stop finds the host by the demo directory: name it when it is not the
  # default, or the hint would stop nothing.
  stop_env=""
  [ -n "${NIMBUS_DEMO_DIR:-}" ] && stop_env="NIMBUS_DEMO_DIR=$demo "
  cat <<EOF

The host keeps running (pid $pid, log $rel_demo/nimbus.log).
Stop it with: ${stop_env}scripts/demo.sh --stop    (or: kill $pid)
EOF
else
  echo
  stop_host
  echo "Host stopped (run scripts/demo.sh --keep-running to leave it up)."
fi
