#!/usr/bin/env bash
# Broker benchmark: publish -> receive -> complete, closed loop, 300-byte
# bodies, 1/16/256 sessions at `fsync` and `os` durability, on the embedded
# broker (release build). Prints msg/s and latency p50/p99 per scenario,
# with the machine state first so figures are quoted with it.
#
#   scripts/bench-broker.sh                 # the full matrix
#   scripts/bench-broker.sh --seconds 10    # any broker-bench option
#   BENCH_ALLOCATOR=system scripts/bench-broker.sh   # glibc malloc, for A/B
#   scripts/bench-broker.sh --compare       # against RabbitMQ and NATS JetStream
#
# `--compare` (never in CI) installs rabbitmq-server and nats-server with
# apt-get if missing, starts each on loopback only with its data under the
# data dir, runs BENCH_ROUNDS (default 3) interleaved rounds of the same
# workload (nimbus, RabbitMQ, JetStream, ..., nimbus again), stops the
# servers and prints medians and nimbus / other ratios in one table.
# Options after `--compare` go to every broker-bench run (e.g. --seconds 5).
#
# Data directories go under $BENCH_DATA_DIR (default: target dir), on a real
# disk: on tmpfs an fsync costs nothing and the `fsync` figures would lie.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
data="${BENCH_DATA_DIR:-$target/bench-data}"

compare=false
if [[ "${1:-}" == "--compare" ]]; then
    compare=true
    shift
fi

# mimalloc is the global allocator, as in the nimbus binary (decision record
# 0022); BENCH_ALLOCATOR=system measures with glibc's allocator instead.
features=""
default_features=()
if [[ "${BENCH_ALLOCATOR:-mimalloc}" == "system" ]]; then
    default_features=(--no-default-features)
fi
if $compare; then
    features="compare"
fi
cargo build --release --quiet -p nimbus-broker-bench --bin broker-bench "${default_features[@]}" ${features:+--features "$features"}
bench="$target/release/broker-bench"

machine_state() {
    echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ)  nproc=$(nproc)  load:$(cut -d' ' -f1-3 /proc/loadavg)  $(uname -sr)"
}

if ! $compare; then
    machine_state
    echo "# data dir: $data ($(df -T "$(dirname "$data")" 2>/dev/null | awk 'NR==2 {print $2}'))"
    echo "# command: $bench --data-dir $data $*"
    trap 'rm -rf "$data"' EXIT
    "$bench" --data-dir "$data" "$@"
    exit 0
fi

# ---- comparison with RabbitMQ and NATS JetStream -------------------------

if [[ -n "${CI:-}" ]]; then
    echo "bench-broker.sh --compare installs and starts servers: not in CI" >&2
    exit 2
fi

amqp_port="${BENCH_AMQP_PORT:-5673}"
nats_port="${BENCH_NATS_PORT:-4223}"
rounds="${BENCH_ROUNDS:-3}"
node="nimbusbench@localhost"

if ! command -v nats-server >/dev/null || [[ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]]; then
    echo "# installing rabbitmq-server and nats-server (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq rabbitmq-server nats-server >/dev/null; }; then
        echo "bench-broker.sh: could not install rabbitmq-server / nats-server with apt-get (see above)" >&2
        exit 1
    fi
fi

mkdir -p "$data"
servers="$(mktemp -d "$data/servers.XXXXXX")"
servers="$(cd "$servers" && pwd)"
rabbit_pid=""
nats_pid=""
epmd_was_running=false
if command -v epmd >/dev/null && epmd -names >/dev/null 2>&1; then
    epmd_was_running=true
fi

stop_servers() {
    if [[ -n "$nats_pid" ]]; then
        kill -TERM "$nats_pid" 2>/dev/null || true
        wait "$nats_pid" 2>/dev/null || true
    fi
    if [[ -n "$rabbit_pid" ]]; then
        # The whole process group: the start script, beam.smp and its helpers.
        kill -TERM -- "-$rabbit_pid" 2>/dev/null || true
        wait "$rabbit_pid" 2>/dev/null || true
    fi
    # epmd daemonizes out of the group; stop it only if this script started it.
    if ! $epmd_was_running && command -v epmd >/dev/null; then
        ERL_EPMD_ADDRESS=127.0.0.1 epmd -kill >/dev/null 2>&1 || true
    fi
    rm -rf "$data"
}
trap stop_servers EXIT

# Waits (bounded) until 127.0.0.1:$1 accepts connections; $2 names the server.
wait_port() {
    local port="$1" name="$2" log="$3"
    for _ in $(seq 1 120); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    echo "bench-broker.sh: $name did not listen on 127.0.0.1:$port within 60 s; its log:" >&2
    tail -n 30 "$log" >&2 || true
    exit 1
}

# The pid of the process listening on 127.0.0.1:$1 (the server itself, for
# its CPU time).
listener_pid() {
    ss -ltnpH "sport = :$1" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1
}

# RabbitMQ: loopback only (AMQP, Erlang distribution and epmd), no plugins,
# data and logs in the temp dir.
mkdir -p "$servers/rabbitmq"
echo "[]." >"$servers/rabbitmq/enabled_plugins"
HOME="$servers/rabbitmq" \
    RABBITMQ_MNESIA_BASE="$servers/rabbitmq/mnesia" \
    RABBITMQ_LOG_BASE="$servers/rabbitmq/log" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$servers/rabbitmq/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$servers/rabbitmq/none" \
    RABBITMQ_NODENAME="$node" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$amqp_port" \
    RABBITMQ_DIST_PORT="$((amqp_port + 20000))" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    setsid /usr/lib/rabbitmq/bin/rabbitmq-server >"$servers/rabbitmq.out" 2>&1 &
rabbit_pid=$!

# NATS: JetStream on, loopback only, store in the temp dir; default sync.
nats-server -js -sd "$servers/nats" -a 127.0.0.1 -p "$nats_port" >"$servers/nats.out" 2>&1 &
nats_pid=$!

wait_port "$nats_port" "nats-server" "$servers/nats.out"
wait_port "$amqp_port" "rabbitmq-server" "$servers/rabbitmq.out"
rabbit_server="$(listener_pid "$amqp_port")"
nats_server="$(listener_pid "$nats_port")"

results="$servers/results.txt"
machine_state
echo "# data dir: $data ($(df -T "$(dirname "$data")" 2>/dev/null | awk 'NR==2 {print $2}')); rabbitmq $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null) on 127.0.0.1:$amqp_port (pid $rabbit_server), $(nats-server --version) on 127.0.0.1:$nats_port (pid $nats_server)"

run_nimbus() {
    echo "# $bench --system nimbus --data-dir $data/nimbus --sessions 1,16 --durability fsync $*; ... --sessions 16 --durability os"
    "$bench" --system nimbus --data-dir "$data/nimbus" --sessions 1,16 --durability fsync "$@" | tee -a "$results"
    "$bench" --system nimbus --data-dir "$data/nimbus" --sessions 16 --durability os "$@" | grep -v '^#' | tee -a "$results"
}
run_rabbitmq() {
    echo "# $bench --system rabbitmq --amqp-url amqp://guest:guest@127.0.0.1:$amqp_port/%2f --sessions 1,16 --server-pid $rabbit_server $*"
    "$bench" --system rabbitmq --amqp-url "amqp://guest:guest@127.0.0.1:$amqp_port/%2f" \
        --sessions 1,16 --server-pid "$rabbit_server" "$@" | grep -v '^#' | tee -a "$results"
}
run_jetstream() {
    echo "# $bench --system jetstream --nats-url nats://127.0.0.1:$nats_port --sessions 16 --server-pid $nats_server $*"
    "$bench" --system jetstream --nats-url "nats://127.0.0.1:$nats_port" \
        --sessions 16 --server-pid "$nats_server" "$@" | grep -v '^#' | tee -a "$results"
}

for round in $(seq 1 "$rounds"); do
    echo "# round $round of $rounds  load:$(cut -d' ' -f1-3 /proc/loadavg)"
    run_nimbus "$@"
    run_rabbitmq "$@"
    run_jetstream "$@"
done
echo "# closing nimbus run  load:$(cut -d' ' -f1-3 /proc/loadavg)"
run_nimbus "$@"
machine_state

# Medians per (system, durability, sessions) over all runs, then one row
# per like-for-like pair with the ratio nimbus / other.
awk '
function median(list,    n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) { t = v[i] + 0; for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
!/^#/ && NF >= 11 {
    key = $1 " " $2 " " $3
    rate[key] = rate[key] " " $5; p50[key] = p50[key] " " $6; p99[key] = p99[key] " " $7
    runs[key]++
}
function row(a, b,    ra, rb) {
    if (!(a in runs) || !(b in runs)) { printf "| %s vs %s | missing |\n", a, b; return }
    ra = median(rate[a]); rb = median(rate[b])
    printf "| %s | %d | %.0f | %.1f / %.1f | %s | %d | %.0f | %.1f / %.1f | **%.2f** |\n", \
        a, runs[a], ra, median(p50[a]), median(p99[a]), b, runs[b], rb, median(p50[b]), median(p99[b]), ra / rb
}
END {
    print ""
    print "Medians of repeated interleaved runs (msg/s; latency publish -> complete in ms):"
    print ""
    print "| nimbus (system durability sessions) | runs | msg/s | p50 / p99 ms | other | runs | msg/s | p50 / p99 ms | nimbus / other |"
    print "|---|---|---|---|---|---|---|---|---|"
    row("nimbus fsync 1", "rabbitmq durable 1")
    row("nimbus fsync 16", "rabbitmq durable 16")
    row("nimbus os 16", "jetstream file 16")
}' "$results"
