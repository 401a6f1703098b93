//! The closed loop against RabbitMQ (feature `compare`), like for like with
//! nimbus at `fsync`: one classic durable queue per session, persistent
//! messages (delivery mode 2), publisher confirms (at most `window`
//! unconfirmed per queue, since at most `window` are in flight), one
//! consumer per queue with prefetch `--prefetch` and manual acks.
//!
//! A message is in flight from its publish until its ack is sent: AMQP 0-9-1
//! has no acknowledgement of an ack, so RabbitMQ's loop closes a little
//! earlier than nimbus's, whose permit returns only when the complete is
//! committed. The comparison is therefore, if anything, kind to RabbitMQ.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer};
use tokio::sync::Semaphore;

use crate::Args;
use crate::measure::{self, Outcome, Record, Window};

/// AMQP delivery mode of a persistent message (written to disk).
const PERSISTENT: u8 = 2;

/// Runs the loop over `queues` queues, each with `window` messages in flight.
pub(crate) async fn scenario(args: &Args, queues: usize, window: usize) -> Result<Outcome> {
    let connection = Connection::connect(&args.amqp_url, ConnectionProperties::default())
        .await
        .with_context(|| format!("connect to RabbitMQ at {}", args.amqp_url))?;
    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let setup = connection.create_channel().await.context("open channel")?;
    let mut names = Vec::new();
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for q in 0..queues {
        let name = format!("nimbus-bench-{q}");
        // A fresh, empty queue per scenario, as nimbus gets a fresh data dir.
        setup
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await
            .with_context(|| format!("delete queue {name}"))?;
        setup
            .queue_declare(
                name.as_str().into(),
                QueueDeclareOptions::durable(),
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declare durable queue {name}"))?;
        let publisher = connection.create_channel().await.context("open channel")?;
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("enable publisher confirms")?;
        let receiver = connection.create_channel().await.context("open channel")?;
        receiver
            .basic_qos(args.prefetch, BasicQosOptions::default())
            .await
            .context("set prefetch")?;
        let consumer = receiver
            .basic_consume(
                name.as_str().into(),
                format!("bench-{q}").into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("consume {name}"))?;
        let permits = Arc::new(Semaphore::new(window));
        let sent = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        consumers.push(tokio::spawn(consume(
            consumer,
            name.clone(),
            Arc::clone(&permits),
            Arc::clone(&record),
            Arc::clone(&done),
            Arc::clone(&sent),
            epoch,
        )));
        producers.push(tokio::spawn(produce(
            Producer {
                channel: publisher,
                queue: name.clone(),
                permits,
                stop: Arc::clone(&stop),
                sent,
                done,
                published: Arc::clone(&published),
            },
            args.body,
            epoch,
        )));
        // Keep the consuming channel open for the consumer's lifetime.
        names.push((name, receiver));
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
    for (name, _) in &names {
        setup
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await
            .with_context(|| format!("delete queue {name}"))?;
    }
    connection
        .close(200, "bench done".into())
        .await
        .context("close connection")?;
    closed.outcome(&record, completed, published.load(Ordering::Relaxed))
}

/// One queue's publishing side and what it shares with its consumer.
struct Producer {
    channel: Channel,
    queue: String,
    permits: Arc<Semaphore>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    published: Arc<AtomicU64>,
}

/// Publishes whatever the window allows, one message per publish (AMQP has
/// no batch publish), and checks every publisher confirm, until stopped and
/// everything is confirmed.
///
/// `basic_publish` resolves only once the client's I/O loop has written the
/// frames; awaiting it before the next publish would cost one I/O loop
/// round trip per message and measure the client, not the server. So each
/// publish (and then its confirm) is a future of its own, polled once at
/// once, which queues its frames in publish order, and then driven with the
/// others.
async fn produce(p: Producer, body_len: usize, epoch: Instant) -> Result<()> {
    let mut in_flight = FuturesUnordered::new();
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
                let channel = p.channel.clone();
                let queue = p.queue.clone();
                let body = measure::body(body_len, epoch, next_index);
                let mut publish = Box::pin(async move {
                    let confirm = channel
                        .basic_publish(
                            "".into(),
                            queue.as_str().into(),
                            BasicPublishOptions::default(),
                            &body,
                            BasicProperties::default().with_delivery_mode(PERSISTENT),
                        )
                        .await?;
                    confirm.await
                });
                match (&mut publish).now_or_never() {
                    Some(confirmation) => confirmed(confirmation, &p.queue)?,
                    None => in_flight.push(publish),
                }
                next_index += 1;
                p.sent.store(next_index, Ordering::Release);
                p.published.fetch_add(1, Ordering::Relaxed);
            }
            Some(confirmation) = in_flight.next(), if !in_flight.is_empty() => {
                confirmed(confirmation, &p.queue)?;
            }
            else => break,
        }
    }
    p.done.store(true, Ordering::Release);
    Ok(())
}

/// Fails on a publish error or a negative publisher confirm.
fn confirmed(confirmation: lapin::Result<Confirmation>, queue: &str) -> Result<()> {
    let confirmation = confirmation.with_context(|| format!("publish to {queue}"))?;
    ensure!(
        confirmation.is_ack(),
        "RabbitMQ nacked a publish to {queue}"
    );
    Ok(())
}

/// Receives one queue in order and acks each message; returns how many once
/// the producer stopped and everything it sent was received and acked.
/// Acks run concurrently with the next deliveries, for the same reason
/// publishes do (see `produce`).
async fn consume(
    mut consumer: Consumer,
    queue: String,
    permits: Arc<Semaphore>,
    record: Arc<Record>,
    producer_done: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    epoch: Instant,
) -> Result<u64> {
    let mut expected_index: u64 = 0;
    let mut acks = FuturesUnordered::new();
    let acked = |result: lapin::Result<Instant>| -> Result<()> {
        let published_at = result.with_context(|| format!("ack on {queue}"))?;
        record.complete(published_at);
        permits.add_permits(1);
        Ok(())
    };
    loop {
        if producer_done.load(Ordering::Acquire)
            && expected_index >= sent.load(Ordering::Acquire)
            && acks.is_empty()
        {
            break;
        }
        tokio::select! {
            Some(result) = acks.next(), if !acks.is_empty() => acked(result)?,
            next = tokio::time::timeout(Duration::from_millis(50), consumer.next()) => {
                let delivery = match next {
                    Err(_) => continue,
                    Ok(None) => bail!("RabbitMQ cancelled the consumer of {queue}"),
                    Ok(Some(delivery)) => {
                        delivery.with_context(|| format!("receive from {queue}"))?
                    }
                };
                let (published_at, index) = measure::parse_body(&delivery.data, epoch)?;
                ensure!(
                    index == expected_index,
                    "queue {queue}: got message {index}, expected {expected_index}"
                );
                expected_index += 1;
                let mut ack = Box::pin(async move {
                    delivery
                        .ack(BasicAckOptions::default())
                        .await
                        .map(|_| published_at)
                });
                match (&mut ack).now_or_never() {
                    Some(result) => acked(result)?,
                    None => acks.push(ack),
                }
            }
        }
    }
    Ok(expected_index)
}
