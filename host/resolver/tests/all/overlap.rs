//! The consumer records a session's next message while the previous one's
//! complete is still on its way to the broker. The real embedded broker,
//! behind a transport whose session settlements wait at a gate the test
//! opens, makes "still on its way" last as long as the test needs.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nimbus_broker::{Broker, BrokerOptions};
use nimbus_resolver::{
    Consumed, Progress, ResolverSettings, ResolverStore, SqliteResolverStore, run_resolver,
};
use nimbus_transport::{
    AcceptSessionError, CancelError, Message, OpenReceiverError, PublishError, ReceiveError,
    ReceivedMessage, RenewError, SessionLock, SessionSelector, SessionStateError, SettleError,
    SettleReceipt, Settlement, SubQueue, SubscriptionPath, TransientError, Transport,
};
use nimbus_wire::topology::{self, Endpoint, Topology};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

/// A safety net so a broken consumer fails the test instead of hanging it;
/// nothing asserts on time.
const PATIENCE: Duration = Duration::from_secs(60);

use crate::support;
use support::forwarded;

/// The embedded broker, except that every session settlement first takes a
/// permit from `gate` (and gives it back).
struct Gated {
    broker: Arc<Broker>,
    gate: Arc<Semaphore>,
}

#[derive(Debug)]
struct GatedSession {
    inner: <Broker as Transport>::Session,
    gate: Arc<Semaphore>,
}

impl Transport for Gated {
    type Session = GatedSession;
    type Receiver = <Broker as Transport>::Receiver;

    async fn publish(&self, topic: &str, messages: Vec<Message>) -> Result<Vec<i64>, PublishError> {
        self.broker.publish(topic, messages).await
    }

    async fn cancel_scheduled(&self, topic: &str, sequence_number: i64) -> Result<(), CancelError> {
        self.broker.cancel_scheduled(topic, sequence_number).await
    }

    async fn accept_session(
        &self,
        path: &SubscriptionPath,
        selector: SessionSelector,
        timeout: Duration,
    ) -> Result<GatedSession, AcceptSessionError> {
        Ok(GatedSession {
            inner: self.broker.accept_session(path, selector, timeout).await?,
            gate: Arc::clone(&self.gate),
        })
    }

    async fn receiver(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
    ) -> Result<Self::Receiver, OpenReceiverError> {
        self.broker.receiver(path, queue).await
    }

    async fn inbox_contains(&self, scope: &str, key: &str) -> Result<bool, TransientError> {
        self.broker.inbox_contains(scope, key).await
    }

    async fn peek(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
        session_id: Option<&str>,
        from_sequence_number: i64,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        self.broker
            .peek(path, queue, session_id, from_sequence_number, max)
            .await
    }
}

impl SessionLock for GatedSession {
    fn session_id(&self) -> &str {
        self.inner.session_id()
    }

    fn locked_until(&self) -> SystemTime {
        self.inner.locked_until()
    }

    async fn receive(&self, max_wait: Duration) -> Result<Option<ReceivedMessage>, ReceiveError> {
        self.inner.receive(max_wait).await
    }

    async fn get_state(&self) -> Result<Option<Vec<u8>>, SessionStateError> {
        self.inner.get_state().await
    }

    async fn set_state(&self, state: Option<Vec<u8>>) -> Result<(), SessionStateError> {
        self.inner.set_state(state).await
    }

    async fn renew(&self) -> Result<SystemTime, RenewError> {
        self.inner.renew().await
    }

    async fn release(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        self.inner.release(message).await
    }

    async fn settle(&self, settlement: Settlement) -> Result<SettleReceipt, SettleError> {
        let _passed = self.gate.acquire().await.unwrap();
        self.inner.settle(settlement).await
    }
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_message_is_recorded_while_the_previous_complete_is_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(
        Broker::open(BrokerOptions::new(dir.path().join("broker")))
            .await
            .unwrap(),
    );
    topology::provision(
        &*broker,
        &Topology::new().endpoint(Endpoint::new("billing")),
    )
    .await
    .unwrap();
    let store = Arc::new(SqliteResolverStore::open(&dir.path().join("resolver.db")).unwrap());
    // Closed: every settlement waits.
    let gate = Arc::new(Semaphore::new(0));
    let (progress, mut reported) = mpsc::unbounded_channel::<Progress>();
    let shutdown = CancellationToken::new();
    let consumer = tokio::spawn(run_resolver(
        Arc::new(Gated {
            broker: Arc::clone(&broker),
            gate: Arc::clone(&gate),
        }),
        Arc::clone(&store) as Arc<dyn ResolverStore>,
        ResolverSettings {
            accept_timeout: Duration::from_millis(200),
            progress: Some(progress),
            ..ResolverSettings::default()
        },
        shutdown.clone(),
    ));

    let recorded = |event_id: &str| !store.event(event_id).unwrap().is_empty();
    broker
        .publish(
            "billing",
            vec![forwarded("ev-1", "order-1", "m-1").to_transport()],
        )
        .await
        .unwrap();
    eventually("ev-1 is recorded", || recorded("ev-1")).await;
    // ev-1's complete now waits at the gate; the session's next message
    // is received and recorded meanwhile.
    broker
        .publish(
            "billing",
            vec![forwarded("ev-2", "order-1", "m-2").to_transport()],
        )
        .await
        .unwrap();
    eventually("ev-2 is recorded while ev-1's complete waits", || {
        recorded("ev-2")
    })
    .await;
    assert!(
        reported.try_recv().is_err(),
        "nothing was settled before the gate opened"
    );

    gate.add_permits(1);
    let mut settled = Vec::new();
    for _ in 0..2 {
        let p = tokio::time::timeout(PATIENCE, reported.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(p.outcome, Consumed::Recorded { .. }), "{p:?}");
        settled.push(p.message_id.unwrap());
    }
    assert_eq!(settled, ["m-1", "m-2"], "completes stay in session order");
    shutdown.cancel();
    consumer.await.unwrap().unwrap();
}
