//! Publish -> receive -> complete, in process and through the AMQP port
//! (with the Rust transport and with Python's SDK), side by side on one
//! embedded broker (issue 29).
//!
//! In process: one task publishes `BENCH_EVENTS` messages, one at a time,
//! over `SESSIONS` sessions of a session subscription, at most `WINDOW` not
//! completed yet, while `RECEIVERS` tasks
//! take the next available session, receive and complete. Through the port:
//! the same loop by this crate's transport over AMQP, and by Microsoft's
//! Python SDK (`tests/python/bench_receive.py`), against this broker's
//! endpoint. Each prints messages per second (first
//! publish to last complete) and the publish-to-complete latency's median
//! and p99; then the ratio.
//!
//!     cargo bench -p nimbus-servicebus --bench roundtrip
//!
//! The Python environment is `scripts/python-env.sh`'s (`NIMBUS_PYTHON`
//! names its interpreter); without it the AMQP half is skipped, said so.
//! `BENCH_EVENTS` changes the count (2000 by default); durability is fsync.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nimbus_amqp::Endpoint;
use nimbus_broker::{Broker, BrokerOptions};
use nimbus_dialect::SharedAccessKey;
use nimbus_servicebus::{ConnectionString, ServiceBus};
use nimbus_transport::{
    Admin, Message, SessionLock, SessionSelector, SubscriptionPath, SubscriptionSettings,
    TopicSettings, Transport,
};

const SESSIONS: usize = 16;
/// One receiver per session: the loop measures delivery, not session switching.
const RECEIVERS: usize = SESSIONS;
const PAYLOAD: usize = 300;
/// Messages published and not completed at most: a closed loop, so the
/// latency is the pipeline's, not a queue's.
const WINDOW: usize = 64;
const KEY_NAME: &str = "RootManageSharedAccessKey";
const KEY: &str = "bench key";

struct Figures {
    messages: usize,
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn main() {
    let events: usize = std::env::var("BENCH_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("a temp dir");
    let broker = runtime.block_on(async {
        let broker = Arc::new(
            Broker::open(BrokerOptions::new(dir.path().join("broker")))
                .await
                .expect("the broker opens"),
        );
        for topic in ["inproc", "rust", "amqp"] {
            broker
                .create_topic(topic, TopicSettings::default())
                .await
                .expect("a topic");
            broker
                .create_subscription(
                    &SubscriptionPath::new(topic, "sessions"),
                    SubscriptionSettings::sessions(),
                )
                .await
                .expect("a subscription");
        }
        broker
    });

    let inproc = runtime.block_on(round(Arc::clone(&broker), "inproc", events));
    report("in process (Rust, Transport trait)", &inproc);

    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a port");
    let port = listener.local_addr().expect("its address").port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let endpoint = Endpoint::new(
        Arc::clone(&broker),
        vec![SharedAccessKey::new(KEY_NAME, KEY)],
        1024 * 1024,
    );
    let serving = runtime.spawn(endpoint.serve(listener, async {
        let _ = stopped.await;
    }));

    let cs: ConnectionString = format!(
        "Endpoint=sb://localhost:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};\
         UseDevelopmentEmulator=true;"
    )
    .parse()
    .expect("a connection string");
    let rust = runtime.block_on(async {
        let bus = Arc::new(ServiceBus::connect(&cs).await.expect("connects"));
        round(bus, "rust", events).await
    });
    report("through the AMQP port (Rust, nimbus-servicebus)", &rust);
    println!(
        "ratio Rust over AMQP/in process: throughput {:.3}, p99 {:.1}x",
        rust.per_second / inproc.per_second,
        rust.p99_ms / inproc.p99_ms
    );

    let Some(python) = python() else {
        println!(
            "through the AMQP port with Python: skipped (no Python environment: run \
             scripts/python-env.sh)"
        );
        return;
    };
    let cpu_before = process_cpu_seconds();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/bench_receive.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .args(["--amqp", &format!("localhost:{port}")])
        .args(["--key-name", KEY_NAME, "--key", KEY])
        .args(["--topic", "amqp", "--subscription", "sessions"])
        .args(["--events", &events.to_string()])
        .args(["--sessions", &SESSIONS.to_string()])
        .args(["--receivers", &RECEIVERS.to_string()])
        .args(["--payload", &PAYLOAD.to_string()])
        .args(["--window", &WINDOW.to_string()])
        .output()
        .expect("run the Python bench");
    let endpoint_cpu = process_cpu_seconds() - cpu_before;
    let _ = stop.send(());
    let _ = runtime.block_on(serving);
    assert!(
        output.status.success(),
        "the Python bench failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = String::from_utf8_lossy(&output.stdout);
    let json: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON line");
    let number = |key: &str| json[key].as_f64().unwrap_or(f64::NAN);
    let amqp = Figures {
        messages: json["messages"].as_u64().unwrap_or(0) as usize,
        per_second: number("per_second"),
        p50_ms: number("p50_ms"),
        p99_ms: number("p99_ms"),
    };
    report("through the AMQP port (Python SDK 7.15)", &amqp);
    println!(
        "  CPU time over the {:.1} s: the Python client {:.1} s, the endpoint and broker {:.1} s",
        number("elapsed_s"),
        number("client_cpu_s"),
        endpoint_cpu
    );
    println!(
        "ratio AMQP/in process: throughput {:.3}, p99 {:.1}x",
        amqp.per_second / inproc.per_second,
        amqp.p99_ms / inproc.p99_ms
    );
}

fn report(what: &str, figures: &Figures) {
    println!(
        "{what}: {} messages, {:.0} msg/s, p50 {:.2} ms, p99 {:.2} ms",
        figures.messages, figures.per_second, figures.p50_ms, figures.p99_ms
    );
}

/// The closed loop on `transport`, over topic `topic`'s session
/// subscription.
async fn round<T: Transport>(transport: Arc<T>, topic: &'static str, events: usize) -> Figures {
    let broker = transport;
    let path = SubscriptionPath::new(topic, "sessions");
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let done: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let started = Instant::now();
    let mut receivers = Vec::new();
    for _ in 0..RECEIVERS {
        let (broker, path, sent, done) = (
            Arc::clone(&broker),
            path.clone(),
            Arc::clone(&sent),
            Arc::clone(&done),
        );
        receivers.push(tokio::spawn(async move {
            while done.lock().expect("not poisoned").len() < events {
                let Ok(lock) = broker
                    .accept_session(
                        &path,
                        SessionSelector::NextAvailable,
                        Duration::from_millis(500),
                    )
                    .await
                else {
                    continue;
                };
                while let Ok(Some(message)) = lock.receive(Duration::from_millis(200)).await {
                    let id = message.message.message_id.clone().unwrap_or_default();
                    lock.complete(message).await.expect("complete");
                    let at = sent.lock().expect("not poisoned").get(&id).copied();
                    if let Some(at) = at {
                        done.lock().expect("not poisoned").push(at.elapsed());
                    }
                }
            }
        }));
    }
    for n in 0..events {
        while n - done.lock().expect("not poisoned").len() >= WINDOW {
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        let mut message = Message::new(vec![b'x'; PAYLOAD]);
        let id = uuid::Uuid::new_v4().to_string();
        message.message_id = Some(id.clone());
        message.session_id = Some(format!("bench-{}", n % SESSIONS));
        sent.lock()
            .expect("not poisoned")
            .insert(id, Instant::now());
        broker.publish(topic, vec![message]).await.expect("publish");
    }
    for receiver in receivers {
        receiver.await.expect("a receiver");
    }
    let elapsed = started.elapsed();
    let mut latencies = done.lock().expect("not poisoned").clone();
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Figures {
        messages: latencies.len(),
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: ms(latencies[latencies.len() / 2]),
        p99_ms: ms(latencies[(latencies.len() * 99 / 100).saturating_sub(1)]),
    }
}

/// This process's CPU time (user + system), from `/proc/self/stat`; NaN
/// where there is none.
fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces): utime is the
    // 12th, stime the 13th, in clock ticks (100 a second on Linux).
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// The interpreter of `scripts/python-env.sh`'s environment.
fn python() -> Option<PathBuf> {
    std::env::var_os("NIMBUS_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
                || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
                PathBuf::from,
            );
            Some(target.join("pyenv/bin/python"))
        })
        .filter(|p| p.is_file())
}
