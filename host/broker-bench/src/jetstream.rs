//! The closed loop against NATS JetStream (feature `compare`), like for
//! like with nimbus at `os` (JetStream's default: acknowledged writes are
//! in the OS page cache, synced every two minutes, so they survive a
//! process crash, not a power loss): one file-storage stream with a
//! subject per session, a durable pull consumer per subject (filtered,
//! explicit ack, fetching `--prefetch` per pull request), every publish
//! acknowledged by the server (at most `window` outstanding per subject,
//! since at most `window` are in flight).
//!
//! A message is in flight from its publish until its ack is sent: a plain
//! JetStream ack is not acknowledged back (the client writes acks in
//! batches on the connection), so, as with RabbitMQ, the loop closes a
//! little earlier than nimbus's, whose permit returns only when the
//! complete is committed. The stream uses work-queue retention, so an
//! acked message is removed, as a completed one is from a subscription.

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use async_nats::jetstream::consumer::{AckPolicy, pull};
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_nats::jetstream::{self as js};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Semaphore;

use crate::Args;
use crate::measure::{self, Outcome, Record, Window};

const STREAM: &str = "NIMBUS_BENCH";
const SUBJECT_PREFIX: &str = "nimbus-bench";

/// Runs the loop over `subjects` subjects, each with `window` messages in
/// flight.
pub(crate) async fn scenario(args: &Args, subjects: usize, window: usize) -> Result<Outcome> {
    let client = async_nats::connect(&args.nats_url)
        .await
        .with_context(|| format!("connect to NATS at {}", args.nats_url))?;
    let context = js::new(client.clone());
    // A fresh, empty stream per scenario, as nimbus gets a fresh data dir.
    if context.get_stream(STREAM).await.is_ok() {
        context
            .delete_stream(STREAM)
            .await
            .context("delete the previous bench stream")?;
    }
    let stream = context
        .create_stream(stream::Config {
            name: STREAM.to_owned(),
            subjects: vec![format!("{SUBJECT_PREFIX}.>")],
            storage: StorageType::File,
            retention: RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .context("create a file-storage stream (is JetStream enabled: nats-server -js?)")?;

    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for s in 0..subjects {
        let subject = format!("{SUBJECT_PREFIX}.s{s}");
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(format!("bench-{s}")),
                filter_subject: subject.clone(),
                ack_policy: AckPolicy::Explicit,
                max_ack_pending: i64::try_from(window).context("window too large")?,
                ..Default::default()
            })
            .await
            .with_context(|| format!("create a pull consumer on {subject}"))?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(usize::from(args.prefetch))
            .messages()
            .await
            .with_context(|| format!("pull from {subject}"))?;
        let permits = Arc::new(Semaphore::new(window));
        let sent = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        consumers.push(tokio::spawn(consume(
            messages,
            subject.clone(),
            Arc::clone(&permits),
            Arc::clone(&record),
            Arc::clone(&done),
            Arc::clone(&sent),
            epoch,
        )));
        producers.push(tokio::spawn(produce(
            Producer {
                context: context.clone(),
                subject,
                permits,
                stop: Arc::clone(&stop),
                sent,
                done,
                published: Arc::clone(&published),
            },
            args.body,
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
    client.flush().await.context("flush the last acks")?;
    context
        .delete_stream(STREAM)
        .await
        .context("delete the bench stream")?;
    closed.outcome(&record, completed, published.load(Ordering::Relaxed))
}

/// One subject's publishing side and what it shares with its consumer.
struct Producer {
    context: js::Context,
    subject: String,
    permits: Arc<Semaphore>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    published: Arc<AtomicU64>,
}

/// Publishes whatever the window allows, one message per publish
/// (JetStream has no batch publish; the client pipelines them), and checks
/// every publish acknowledgement, until stopped and everything is
/// acknowledged.
async fn produce(p: Producer, body_len: usize, epoch: Instant) -> Result<()> {
    let mut acks = FuturesUnordered::new();
    let mut next_index: u64 = 0;
    loop {
        let stopping = p.stop.load(Ordering::Relaxed);
        tokio::select! {
            permit = p.permits.acquire(), if !stopping => {
                let permit = permit.context("window closed")?;
                if p.stop.load(Ordering::Relaxed) {
                    // Stopped while waiting: the permit goes back unused.
                    continue;
                }
                permit.forget();
                let ack = p
                    .context
                    .publish(p.subject.clone(), measure::body(body_len, epoch, next_index).into())
                    .await
                    .with_context(|| format!("publish to {}", p.subject))?;
                acks.push(ack.into_future());
                next_index += 1;
                p.sent.store(next_index, Ordering::Release);
                p.published.fetch_add(1, Ordering::Relaxed);
            }
            Some(ack) = acks.next(), if !acks.is_empty() => {
                let ack = ack.with_context(|| format!("publish ack on {}", p.subject))?;
                ensure!(!ack.duplicate, "JetStream took a publish to {} as a duplicate", p.subject);
            }
            else => break,
        }
    }
    p.done.store(true, Ordering::Release);
    Ok(())
}

/// Receives one subject in order and acks each message; returns how many
/// once the producer stopped and everything it sent was received.
async fn consume(
    mut messages: pull::Stream,
    subject: String,
    permits: Arc<Semaphore>,
    record: Arc<Record>,
    producer_done: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    epoch: Instant,
) -> Result<u64> {
    let mut expected_index: u64 = 0;
    loop {
        if producer_done.load(Ordering::Acquire) && expected_index >= sent.load(Ordering::Acquire) {
            break;
        }
        let message = match tokio::time::timeout(Duration::from_millis(50), messages.next()).await {
            Err(_) => continue,
            Ok(None) => bail!("JetStream ended the pull consumer of {subject}"),
            Ok(Some(message)) => {
                message.map_err(|e| anyhow::anyhow!("receive from {subject}: {e}"))?
            }
        };
        let (published_at, index) = measure::parse_body(&message.payload, epoch)?;
        ensure!(
            index == expected_index,
            "subject {subject}: got message {index}, expected {expected_index}"
        );
        expected_index += 1;
        message
            .ack()
            .await
            .map_err(|e| anyhow::anyhow!("ack on {subject}: {e}"))?;
        record.complete(published_at);
        permits.add_permits(1);
    }
    Ok(expected_index)
}
