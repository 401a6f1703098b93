//! `broker-bench`: the embedded broker's publish → receive → complete
//! throughput and latency, closed-loop, like `redis-benchmark` or `pgbench`.
//!
//! Each scenario (durability × session count) opens a fresh broker on a
//! data directory, creates one topic with one session-enabled subscription,
//! and runs one producer and one consumer per session. The load is
//! closed-loop: a session has at most `window` messages in flight (published
//! and not yet completed); the producer publishes whatever the window
//! allows, up to `batch` messages per publish call (one atomic unit, as a
//! Service Bus send batch); the consumer holds the session lock, receives in
//! order and completes each message without waiting for the previous
//! completion. Throughput is therefore measured at a bounded backlog, and
//! latency (publish call → complete acknowledged) stays bounded (Little's
//! law: in-flight / throughput).
//!
//! The run fails, rather than reports, if a session's messages arrive out
//! of order or if anything published is not completed by the end.
//!
//! With the `compare` feature, `--system rabbitmq` and `--system jetstream`
//! run the same closed loop against a RabbitMQ or NATS JetStream server
//! (sessions become queues or subjects), measured and checked by the same
//! code (`measure`), so the script can quote nimbus / other ratios from
//! one run.
//!
//! Not part of the default build or CI: `scripts/bench-broker.sh` builds
//! it in release and runs it.

#[cfg(feature = "compare")]
mod jetstream;
mod measure;
#[cfg(feature = "compare")]
mod rabbitmq;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::{Parser, ValueEnum};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use nimbus_broker::{Broker, BrokerOptions, Durability};
use nimbus_transport::{
    Admin, Message, ReceivedMessage, SessionLock, SessionSelector, SubscriptionPath,
    SubscriptionSettings, TopicSettings, Transport,
};
use tokio::sync::Semaphore;

use crate::measure::{Outcome, Record, Window};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TOPIC: &str = "bench";
const SUBSCRIPTION: &str = "bench";

#[derive(Debug, Parser)]
#[command(about = "Closed-loop publish -> receive -> complete benchmark of the embedded broker")]
struct Args {
    /// Session counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    sessions: Vec<usize>,
    /// Durability levels to run, comma-separated (`fsync`, `os`).
    #[arg(long, value_delimiter = ',', default_value = "fsync,os")]
    durability: Vec<String>,
    /// Body size in bytes.
    #[arg(long, default_value_t = 300)]
    body: usize,
    /// Messages in flight per session: min(window, total-window / sessions).
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// Messages in flight over all sessions at most.
    #[arg(long, default_value_t = 4096)]
    total_window: usize,
    /// Most messages per publish call.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Seconds of warm-up (not measured) per scenario.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds measured per scenario.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Where to create each scenario's broker data directory (a real disk:
    /// on tmpfs, fsync costs nothing).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Which system to load: the embedded broker, or (feature `compare`)
    /// a running RabbitMQ or NATS JetStream server.
    #[arg(long, value_enum, default_value_t = System::Nimbus)]
    system: System,
    /// RabbitMQ's AMQP address (`--system rabbitmq`).
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    amqp_url: String,
    /// NATS server address (`--system jetstream`).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// The server's process id, so its CPU time counts in `cpu us/msg`
    /// (the embedded broker's is this process's own).
    #[arg(long)]
    server_pid: Option<u32>,
    /// RabbitMQ prefetch (QoS) per consumer, and JetStream pull batch.
    #[arg(long, default_value_t = 100)]
    prefetch: u16,
}

/// The system under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum System {
    /// The embedded broker, in this process.
    Nimbus,
    /// RabbitMQ over AMQP 0-9-1: classic durable queues, persistent
    /// messages, publisher confirms, manual acks.
    Rabbitmq,
    /// NATS JetStream: file storage, pull consumers, explicit acks.
    Jetstream,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    println!(
        "# broker-bench: publish -> receive -> complete, {} B bodies, closed loop, {} s measured after {} s warm-up",
        args.body, args.seconds, args.warmup
    );
    println!(
        "# allocator: {}",
        if cfg!(feature = "mimalloc") {
            "mimalloc"
        } else {
            "system (built with --no-default-features)"
        }
    );
    println!(
        "# {:<7} {:<8} {:>8} {:>7} {:>12} {:>9} {:>9} {:>9} {:>10} {:>11} {:>14}",
        "system",
        "durab.",
        "sessions",
        "window",
        "msg/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "messages",
        "cpu us/msg",
        "cpu-bound/s"
    );
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    // The durability column: the level for nimbus, what the other system
    // was configured with otherwise (one level each, see the modules).
    let levels: Vec<String> = match args.system {
        System::Nimbus => args.durability.clone(),
        System::Rabbitmq => vec!["durable".to_owned()],
        System::Jetstream => vec!["file".to_owned()],
    };
    for durability in &levels {
        for &sessions in &args.sessions {
            ensure!(sessions > 0, "session count must be at least 1");
            let window = args.window.min(args.total_window / sessions).max(1);
            let outcome = runtime.block_on(run(&args, durability, sessions, window))?;
            let cpu = outcome
                .cpu_us_per_message
                .map_or_else(|| "-".to_owned(), |us| format!("{us:.1}"));
            // What the process could move if it had every core to itself:
            // meaningful when other work shares the machine.
            let bound = outcome.cpu_us_per_message.map_or_else(
                || "-".to_owned(),
                |us| format!("{:.0}", cores as f64 * 1e6 / us),
            );
            println!(
                "{:<9} {:<8} {:>8} {:>7} {:>12.0} {:>9.2} {:>9.2} {:>9.2} {:>10} {:>11} {:>14}",
                system_name(args.system),
                durability,
                sessions,
                window,
                outcome.rate,
                f64::from(outcome.p50_us) / 1000.0,
                f64::from(outcome.p99_us) / 1000.0,
                f64::from(outcome.max_us) / 1000.0,
                outcome.measured,
                cpu,
                bound,
            );
            eprintln!(
                "#   verified: {} published, all received in order and completed",
                outcome.total
            );
        }
    }
    Ok(())
}

fn system_name(system: System) -> &'static str {
    match system {
        System::Nimbus => "nimbus",
        System::Rabbitmq => "rabbitmq",
        System::Jetstream => "jetstream",
    }
}

/// One scenario on the chosen system.
async fn run(args: &Args, durability: &str, sessions: usize, window: usize) -> Result<Outcome> {
    match args.system {
        System::Nimbus => {
            let level = match durability {
                "fsync" => Durability::Fsync,
                "os" => Durability::Os,
                other => bail!("unknown durability '{other}' (expected fsync or os)"),
            };
            scenario(args, level, sessions, window).await
        }
        #[cfg(feature = "compare")]
        System::Rabbitmq => rabbitmq::scenario(args, sessions, window).await,
        #[cfg(feature = "compare")]
        System::Jetstream => jetstream::scenario(args, sessions, window).await,
        #[cfg(not(feature = "compare"))]
        System::Rabbitmq | System::Jetstream => bail!(
            "--system {} needs the `compare` feature (scripts/bench-broker.sh --compare)",
            system_name(args.system)
        ),
    }
}

async fn scenario(
    args: &Args,
    durability: Durability,
    sessions: usize,
    window: usize,
) -> Result<Outcome> {
    let dir = match &args.data_dir {
        Some(parent) => {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("create {}", parent.display()))?;
            tempfile::tempdir_in(parent)
        }
        None => tempfile::tempdir(),
    }
    .context("temp data dir")?;
    let broker = Arc::new(
        Broker::open(BrokerOptions::new(dir.path()).durability(durability))
            .await
            .context("open broker")?,
    );
    broker
        .create_topic(TOPIC, TopicSettings::default())
        .await
        .context("create topic")?;
    let path = SubscriptionPath::new(TOPIC, SUBSCRIPTION);
    broker
        .create_subscription(&path, SubscriptionSettings::sessions())
        .await
        .context("create subscription")?;

    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let mut consumers = Vec::new();
    let mut producers = Vec::new();
    for s in 0..sessions {
        let session_id = format!("session-{s}");
        let window_permits = Arc::new(Semaphore::new(window));
        let lock = broker
            .accept_session(
                &path,
                SessionSelector::Named(session_id.clone()),
                Duration::from_secs(5),
            )
            .await
            .context("accept session")?;
        let sent = Arc::new(AtomicU64::new(0));
        let producer_done = Arc::new(AtomicBool::new(false));
        consumers.push(tokio::spawn(consume(
            lock,
            Arc::clone(&window_permits),
            Arc::clone(&record),
            Arc::clone(&producer_done),
            Arc::clone(&sent),
            epoch,
        )));
        producers.push(tokio::spawn(produce(
            Arc::clone(&broker),
            session_id,
            window_permits,
            args.batch,
            args.body,
            Arc::clone(&stop),
            sent,
            producer_done,
            Arc::clone(&published),
            epoch,
        )));
    }

    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    let measuring = Window::open(&record, args.server_pid);
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    let closed = measuring.close(&record);
    stop.store(true, Ordering::Relaxed);

    for producer in producers {
        producer.await.context("producer task")??;
    }
    let mut completed = 0;
    for consumer in consumers {
        completed += consumer.await.context("consumer task")??;
    }
    drop(broker);
    closed.outcome(&record, completed, published.load(Ordering::Relaxed))
}

/// Publishes to one session whatever the window allows, in batches, until
/// stopped. Each body starts with the publish time (µs since `epoch`) and
/// the message's index within its session.
#[allow(clippy::too_many_arguments, reason = "one task's wiring, called once")]
async fn produce(
    broker: Arc<Broker>,
    session_id: String,
    window: Arc<Semaphore>,
    batch: usize,
    body_len: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    published: Arc<AtomicU64>,
    epoch: Instant,
) -> Result<()> {
    let mut next_index: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let permit = window.acquire().await.context("window closed")?;
        permit.forget();
        let mut n = 1;
        while n < batch {
            match window.try_acquire() {
                Ok(permit) => {
                    permit.forget();
                    n += 1;
                }
                Err(_) => break,
            }
        }
        let messages: Vec<Message> = (0..n)
            .map(|i| {
                let mut message =
                    Message::new(measure::body(body_len, epoch, next_index + i as u64));
                message.session_id = Some(session_id.clone());
                message
            })
            .collect();
        broker.publish(TOPIC, messages).await.context("publish")?;
        next_index += n as u64;
        sent.store(next_index, Ordering::Release);
        published.fetch_add(n as u64, Ordering::Relaxed);
    }
    done.store(true, Ordering::Release);
    Ok(())
}

/// Receives one session in order and hands every message to a completer
/// task, so completions run concurrently with the next receives; returns
/// how many were completed once the producer stopped and everything sent
/// was.
async fn consume<L: SessionLock>(
    lock: L,
    window: Arc<Semaphore>,
    record: Arc<Record>,
    producer_done: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    epoch: Instant,
) -> Result<u64> {
    let lock = Arc::new(lock);
    let (to_complete, received) = tokio::sync::mpsc::unbounded_channel();
    let completer = tokio::spawn(complete_all(Arc::clone(&lock), received, window, record));
    let mut expected_index: u64 = 0;
    loop {
        // Once the producer is done, `sent` no longer moves: stop when
        // everything it sent has been received.
        if producer_done.load(Ordering::Acquire) && expected_index >= sent.load(Ordering::Acquire) {
            break;
        }
        let Some(message) = lock
            .receive(Duration::from_millis(50))
            .await
            .context("receive")?
        else {
            continue;
        };
        let (published_at, index) = measure::parse_body(&message.message.body, epoch)?;
        ensure!(
            index == expected_index,
            "session {}: got message {index}, expected {expected_index}",
            lock.session_id()
        );
        expected_index += 1;
        if to_complete.send((message, published_at)).is_err() {
            // The completer stopped on an error: report it.
            break;
        }
    }
    drop(to_complete);
    completer.await.context("completer task")??;
    Ok(expected_index)
}

/// Completes every message it is handed, many at once (in one task, no
/// task per message), recording latency and returning the window permit
/// when the complete is acknowledged.
async fn complete_all<L: SessionLock>(
    lock: Arc<L>,
    mut received: tokio::sync::mpsc::UnboundedReceiver<(ReceivedMessage, Instant)>,
    window: Arc<Semaphore>,
    record: Arc<Record>,
) -> Result<()> {
    let lock = &*lock;
    let mut pending = FuturesUnordered::new();
    let mut open = true;
    while open || !pending.is_empty() {
        tokio::select! {
            next = received.recv(), if open => match next {
                Some((message, published_at)) => pending.push(async move {
                    lock.complete(message).await.map(|()| published_at)
                }),
                None => open = false,
            },
            Some(done) = pending.next(), if !pending.is_empty() => {
                record.complete(done.context("complete")?);
                window.add_permits(1);
            }
        }
    }
    Ok(())
}
