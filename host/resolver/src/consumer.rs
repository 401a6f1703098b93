//! The Resolver consumer: reads `Resolver/Resolver` and records every
//! message in the store.
//!
//! Sessions are processed concurrently (each worker holds one session at a
//! time). Within a session a worker pipelines: it takes the first message
//! (waiting up to the idle timeout), then every further message already
//! there (up to [`ResolverSettings::max_in_flight_per_session`] in hand),
//! submits all their records to the recorder in session order, and settles
//! them in that order as their commits come back; the completes are issued
//! together so they share the broker's commit. While they are on their way,
//! the next batch is received and its records submitted (its completes
//! wait for the previous ones). Records of different sessions, and the
//! pipelined records of one, share store commits (see `recorder`).
//!
//! What holds: a message is completed only after the store has committed
//! its record. The store sees each session's messages in the order the
//! engine sent them. A store failure abandons the failed message after a
//! backoff, so the bus redelivers it (and, at the subscription's max
//! delivery count, dead-letters it: never lost, never looping); the
//! session's later messages in hand are not recorded ahead of it but
//! released with the session, without a delivery counted, to follow it in
//! order. A message that cannot be recorded is dead-lettered at once with
//! the defect named. At shutdown, records in flight finish and are settled;
//! a message waiting out a backoff is released without a delivery counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use nimbus_transport::{
    AcceptSessionError, ErrorKind, FailureLog, Properties, ReceivedMessage, RetryBackoff,
    SessionLock, SessionSelector, Settlement, SlotRequests, SubscriptionPath, Transport,
};
use nimbus_wire::{ControlKey, NimbusMessage};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::decode::{Decoded, UNRECORDABLE_REASON, decode};
use crate::observation::Observation;
use crate::recorder::{Answer, Chain, Recorder, Submitted};
use crate::store::{Heartbeat, Recorded, ResolverStore, StoreError};

/// How the consumer runs.
#[derive(Debug, Clone)]
pub struct ResolverSettings {
    /// The session subscription to read (`Resolver/Resolver`).
    pub subscription: SubscriptionPath,
    /// How many sessions are processed at once.
    pub max_concurrent_sessions: usize,
    /// How long an idle worker waits for a session before asking again.
    pub accept_timeout: Duration,
    /// How long a worker waits for the next message of its session before
    /// releasing it for other sessions.
    pub session_idle_timeout: Duration,
    /// A busy session held this long is released after the batch in hand,
    /// so sessions beyond [`Self::max_concurrent_sessions`] get their turn
    /// (the next accept takes the session whose oldest message has waited
    /// longest, which may be the same one).
    pub session_max_hold: Duration,
    /// The first backoff before abandoning a message the store failed to
    /// record; doubled per delivery, capped at [`Self::max_store_backoff`].
    pub store_backoff: Duration,
    /// The cap of the store backoff (keep it well under the lock duration).
    pub max_store_backoff: Duration,
    /// At most this many messages share one store commit.
    pub max_batch: usize,
    /// At most this many messages of one session are in flight at once
    /// (received, their records submitted, not yet settled). `1` processes
    /// a session one message at a time.
    pub max_in_flight_per_session: usize,
    /// Where to report each settled message (tests, metrics); `None` for
    /// nowhere.
    pub progress: Option<mpsc::UnboundedSender<Progress>>,
    /// The key the Manager signs control requests with. A copy of a
    /// control request not signed with it is dead-lettered, not recorded,
    /// so a forged one cannot change its event's status (decision 0141).
    /// `None` records them unchecked: only for tests of other rules.
    pub control_key: Option<ControlKey>,
}

impl Default for ResolverSettings {
    fn default() -> Self {
        ResolverSettings {
            subscription: SubscriptionPath::new(
                nimbus_wire::addr::RESOLVER,
                nimbus_wire::addr::RESOLVER,
            ),
            max_concurrent_sessions: 64,
            accept_timeout: Duration::from_secs(5),
            session_idle_timeout: Duration::from_secs(1),
            session_max_hold: Duration::from_secs(5),
            store_backoff: Duration::from_millis(500),
            max_store_backoff: Duration::from_secs(10),
            max_batch: 256,
            max_in_flight_per_session: 64,
            progress: None,
            control_key: None,
        }
    }
}

/// What the consumer did with one message.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The message's broker `MessageId`.
    pub message_id: Option<String>,
    /// Its sequence number on the Resolver subscription.
    pub sequence_number: i64,
    /// What happened.
    pub outcome: Consumed,
}

/// What the consumer did with one message: how it disposed of it, not a
/// handler's outcome (the Resolver runs no handler).
#[derive(Debug, Clone, PartialEq)]
pub enum Consumed {
    /// Recorded for this event and completed.
    Recorded {
        /// The endpoint.
        endpoint: String,
        /// The event id.
        event_id: String,
        /// What the store did.
        recorded: Recorded,
    },
    /// A heartbeat answer noted for this endpoint, and completed.
    Heartbeat {
        /// The endpoint that answered.
        endpoint: String,
    },
    /// Completed without recording (why).
    Ignored(&'static str),
    /// Dead-lettered: it cannot be recorded (the description).
    DeadLettered(String),
    /// The store failed to record it, or an earlier message of its session
    /// (the text says which, ending in `(released: why)` for a message
    /// released unsettled, without a delivery counted): the bus redelivers
    /// it.
    Abandoned(String),
    /// Settling failed (the lock was lost); the bus redelivers the message
    /// and the store recognises it.
    SettleFailed(String),
}

/// Why the consumer stopped before shutdown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolverError {
    /// The Resolver subscription cannot be read (it does not exist, or is
    /// not session-enabled): provisioning is missing.
    #[error("resolver: cannot read {subscription}: {source}")]
    Subscription {
        /// The subscription.
        subscription: SubscriptionPath,
        /// The transport's answer.
        #[source]
        source: AcceptSessionError,
    },
    /// A worker task panicked.
    #[error("resolver: a worker failed: {0}")]
    Worker(String),
}

/// Consumes the Resolver subscription until `shutdown` is cancelled,
/// recording every message in `store`.
///
/// Returns `Ok(())` on shutdown, after each worker finished the message in
/// hand; an error when the subscription cannot be read at all.
pub async fn run_resolver<T: Transport>(
    transport: Arc<T>,
    store: Arc<dyn ResolverStore>,
    settings: ResolverSettings,
    shutdown: CancellationToken,
) -> Result<(), ResolverError> {
    let stop = shutdown.child_token();
    let workers = settings.max_concurrent_sessions.max(1);
    let recorder = Recorder::start(Arc::clone(&store), settings.max_batch);
    let context = Arc::new(Context {
        transport,
        store,
        recorder,
        settings,
        requests: SlotRequests::default(),
        held: AtomicUsize::new(0),
        released: AtomicU64::new(0),
        held_changed: Notify::new(),
        accept_failures: FailureLog::default(),
    });
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        tasks.spawn(worker(Arc::clone(&context), stop.clone()));
    }
    tasks.spawn(scout(Arc::clone(&context), workers, stop.clone()));
    tracing::info!(
        subscription = %context.settings.subscription,
        workers,
        "resolver: consuming"
    );
    let mut result = Ok(());
    while let Some(joined) = tasks.join_next().await {
        let failed = match joined {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error),
            Err(join) => Some(ResolverError::Worker(join.to_string())),
        };
        if let Some(error) = failed {
            stop.cancel();
            if result.is_ok() {
                result = Err(error);
            }
        }
    }
    result
}

/// The least pause before asking the transport for a session again after a
/// failure, so a failing transport is not spun on.
const MIN_ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// How long a worker (or the scout) waits after its accepts failed this
/// many times in a row: from the store backoff (at least
/// [`MIN_ACCEPT_RETRY`]) doubling to [`RetryBackoff::MAX`], from the start
/// again once one works. A fixed half second had 64 workers ask a broker
/// that cannot write 128 times a second (issue 40).
fn accept_backoff(settings: &ResolverSettings) -> RetryBackoff {
    RetryBackoff::new(
        settings.store_backoff.max(MIN_ACCEPT_RETRY),
        RetryBackoff::MAX,
    )
}

struct Context<T> {
    transport: Arc<T>,
    store: Arc<dyn ResolverStore>,
    recorder: Recorder,
    settings: ResolverSettings,
    /// Requests for a worker's session, from the scout (decision 0105).
    requests: SlotRequests,
    /// Workers holding a session now.
    held: AtomicUsize,
    /// Sessions workers have let go, ever: a release is an event the
    /// scout waits for, and a worker may take its next session before the
    /// scout sees `held` drop.
    released: AtomicU64,
    /// Pinged whenever `held` or `released` changes.
    held_changed: Notify,
    /// When the workers' failed accepts are logged: one line for all of
    /// them per interval, not one per worker per attempt.
    accept_failures: FailureLog,
}

impl<T> Context<T> {
    fn took_session(&self) {
        self.held.fetch_add(1, Ordering::SeqCst);
        self.held_changed.notify_waiters();
    }

    fn let_go(&self) {
        self.held.fetch_sub(1, Ordering::SeqCst);
        self.released.fetch_add(1, Ordering::SeqCst);
        self.held_changed.notify_waiters();
    }

    /// Logs a failed accept, if a line is due; `wait` is how long the
    /// worker waits before its next.
    fn accept_failed(&self, error: &AcceptSessionError, wait: Duration) {
        if let Some(line) = self.accept_failures.failed(std::time::Instant::now()) {
            tracing::warn!(
                error = %error,
                held_back = line.held_back,
                next_attempt_in = %humantime::format_duration(wait),
                "resolver: accepting a session failed; retrying, less often while it fails \
                 (one line a minute)"
            );
        }
    }

    /// Notes an accept that worked (or found no session waiting): logs the
    /// end of a failure that was logged.
    fn accept_worked(&self) {
        if let Some(line) = self.accept_failures.succeeded(std::time::Instant::now()) {
            tracing::warn!(
                failures = line.failures,
                failed_for = %humantime::format_duration(line.failed_for),
                "resolver: accepting sessions works again"
            );
        }
    }

    /// Waits until `done` holds; `false` when stopped first.
    async fn until(&self, done: impl Fn(&Self) -> bool, stop: &CancellationToken) -> bool {
        loop {
            let changed = self.held_changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if done(self) {
                return true;
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = changed => {}
            }
        }
    }
}

impl<T: Transport> Context<T> {
    /// Waits (up to the accept timeout) for the session whose oldest
    /// message has waited longest.
    async fn accept_next(&self) -> Result<T::Session, AcceptSessionError> {
        self.transport
            .accept_session(
                &self.settings.subscription,
                SessionSelector::NextAvailable,
                self.settings.accept_timeout,
            )
            .await
    }
}

/// While every worker holds a session, looks for a session with messages
/// waiting; when it finds one, lets it go again and asks a worker with
/// nothing in hand to release its session, so the next accept takes the
/// session whose message waited longest. Without it, more active sessions
/// than workers, each with sparse traffic, waited out whole holds: 256
/// sessions on 64 workers fell behind at ~1,900 events/s with a p99 of 11 s
/// (decision 0105).
async fn scout<T: Transport>(
    context: Arc<Context<T>>,
    workers: usize,
    stop: CancellationToken,
) -> Result<(), ResolverError> {
    let mut backoff = accept_backoff(&context.settings);
    loop {
        let all_held = |c: &Context<T>| c.held.load(Ordering::SeqCst) >= workers;
        if !context.until(all_held, &stop).await {
            return Ok(());
        }
        let changed = context.held_changed.notified();
        let mut changed = std::pin::pin!(changed);
        changed.as_mut().enable();
        // Any release from here on frees a worker for the waiting session.
        let since = context.released.load(Ordering::SeqCst);
        let accepted = tokio::select! {
            biased;
            () = stop.cancelled() => return Ok(()),
            // A worker let go meanwhile: its own accept takes over.
            () = changed => continue,
            accepted = context.accept_next() => accepted,
        };
        match accepted {
            Ok(session) => {
                backoff.succeeded();
                context.accept_worked();
                session.close().await;
                context.requests.post();
                let a_release = |c: &Context<T>| c.released.load(Ordering::SeqCst) > since;
                let stopped = !context.until(a_release, &stop).await;
                context.requests.withdraw();
                if stopped {
                    return Ok(());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::NoSessionAvailable | ErrorKind::SessionCannotBeLocked
                ) =>
            {
                backoff.succeeded();
                context.accept_worked();
            }
            Err(e) => {
                let wait = backoff.failed();
                context.accept_failed(&e, wait);
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

async fn worker<T: Transport>(
    context: Arc<Context<T>>,
    stop: CancellationToken,
) -> Result<(), ResolverError> {
    let settings = &context.settings;
    let mut backoff = accept_backoff(settings);
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            accepted = context.accept_next() => accepted,
        };
        match accepted {
            Ok(session) => {
                backoff.succeeded();
                context.accept_worked();
                context.took_session();
                drain(&context, session, &stop).await;
                context.let_go();
            }
            Err(e) => match e.kind() {
                ErrorKind::NoSessionAvailable | ErrorKind::SessionCannotBeLocked => {
                    backoff.succeeded();
                    context.accept_worked();
                }
                ErrorKind::NotFound | ErrorKind::Invalid => {
                    return Err(ResolverError::Subscription {
                        subscription: settings.subscription.clone(),
                        source: e,
                    });
                }
                _ => {
                    let wait = backoff.failed();
                    context.accept_failed(&e, wait);
                    tokio::select! {
                        () = stop.cancelled() => return Ok(()),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            },
        }
    }
}

/// Processes one session's messages in order until it is idle, it has been
/// held for its time, the lock is lost, a message is abandoned, or
/// shutdown.
///
/// Two batches overlap: while one batch's records commit and its completes
/// go to the broker, the next batch is received and its records submitted
/// (its settlement starts only after the previous one's ended, so completes
/// stay in order). A session's next message — typically an event's response
/// right behind its request copy — thus waits for neither the request
/// copy's commit nor its complete. The recorder keeps the two runs in
/// order, and the runs of one hold share a [`Chain`], so once a record
/// fails, nothing later of the session is recorded ahead of it.
async fn drain<T: Transport>(context: &Context<T>, session: T::Session, stop: &CancellationToken) {
    pipeline(context, &session, stop).await;
    session.close().await;
}

async fn pipeline<T: Transport>(
    context: &Context<T>,
    session: &T::Session,
    stop: &CancellationToken,
) {
    let held_since = tokio::time::Instant::now();
    let most = context.settings.max_in_flight_per_session.max(1);
    let chain = Chain::default();
    // Cancelled when a batch fails, so the session is released at once,
    // not after the next receive's idle wait. One per hold: a failure ends
    // the hold.
    let give_up = stop.child_token();
    // The batch being recorded and settled, and how many messages it holds.
    let mut settling: Option<(Settling<'_>, usize)> = None;
    loop {
        let (previous, in_hand) = match settling.take() {
            Some((settle, in_hand)) => (Some(settle), in_hand),
            None => (None, 0),
        };
        let room = most.saturating_sub(in_hand);
        let (held, submitted) = futures_util::future::join(
            async {
                let held = match previous {
                    Some(settle) => settle.await,
                    None => true,
                };
                if !held {
                    give_up.cancel();
                }
                held
            },
            async {
                if room == 0 {
                    return None;
                }
                let batch = receive_batch(context, session, &give_up, room).await?;
                Some(submit_batch(context, batch, &chain).await)
            },
        )
        .await;
        // A lost lock or a failed record releases the session; a batch
        // submitted meanwhile goes back with it unsettled (a failed chain's
        // later runs are not recorded; otherwise the store knows them on
        // redelivery: AlreadyRecorded).
        if !held {
            break;
        }
        let Some(submitted) = submitted else {
            if room == 0 {
                // The previous batch has settled: there is room again.
                continue;
            }
            break;
        };
        let in_hand = submitted.steps.len();
        settling = Some((
            Box::pin(finish_batch(context, session, submitted, stop)),
            in_hand,
        ));
        if held_since.elapsed() >= context.settings.session_max_hold {
            break;
        }
    }
    if let Some((settle, _)) = settling {
        settle.await;
    }
}

/// A batch's settlement in progress; `false` when the session should be
/// released.
type Settling<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>>;

/// The next message of the session (waiting up to the idle timeout) and
/// every further one already there, up to the in-flight limit; `None` when
/// the session idled, its receive failed, or shutdown began.
async fn receive_batch<T: Transport>(
    context: &Context<T>,
    session: &T::Session,
    stop: &CancellationToken,
    most: usize,
) -> Option<Vec<ReceivedMessage>> {
    // `None` also when another session waits for a worker and this one
    // has nothing in hand (decision 0105).
    let next = tokio::select! {
        () = stop.cancelled() => return None,
        next = context.requests.next_or_hand_over(session, context.settings.session_idle_timeout) => next,
    };
    let first = match next {
        Ok(Some(message)) => message,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(session = session.session_id(), error = %e, "resolver: receive failed; releasing the session");
            return None;
        }
    };
    let mut batch = vec![first];
    while batch.len() < most {
        match session.receive(Duration::ZERO).await {
            Ok(Some(message)) => batch.push(message),
            Ok(None) => break,
            // The next waiting receive meets it again and releases the
            // session; what is in hand is still settled first.
            Err(e) => {
                tracing::debug!(session = session.session_id(), error = %e, "resolver: receive failed while gathering");
                break;
            }
        }
    }
    Some(batch)
}

/// A message on the Resolver topic, its content decoded: what the consumer
/// holds from receiving it to settling it.
type Received = ReceivedMessage<NimbusMessage>;

/// One received message, decoded.
enum Step {
    /// An event, its observation added to the session's run.
    Record {
        message: Received,
        endpoint: String,
        event_id: String,
    },
    Heartbeat {
        message: Received,
        heartbeat: Heartbeat,
    },
    Skip {
        message: Received,
        why: &'static str,
    },
    Unrecordable {
        message: Received,
        description: String,
    },
}

impl Step {
    fn into_message(self) -> Received {
        match self {
            Step::Record { message, .. }
            | Step::Heartbeat { message, .. }
            | Step::Skip { message, .. }
            | Step::Unrecordable { message, .. } => message,
        }
    }
}

/// A settlement decided for one message, with what to report once it is
/// applied.
struct Decided {
    message_id: Option<String>,
    sequence_number: i64,
    settlement: Settlement,
    outcome: Consumed,
}

impl Decided {
    fn new(
        message: Received,
        settlement: impl FnOnce(Received) -> Settlement,
        outcome: Consumed,
    ) -> Decided {
        Decided {
            message_id: message.message.message_id.clone(),
            sequence_number: message.sequence_number,
            settlement: settlement(message),
            outcome,
        }
    }
}

/// A batch whose records have committed: how to settle each message up to
/// the first that could not be recorded, that one with the store's error,
/// and the messages behind it.
struct RecordedBatch {
    decided: Vec<Decided>,
    failure: Option<(Received, StoreError)>,
    behind: Vec<Received>,
}

/// A session's batch whose records are on their way to the store.
struct SubmittedBatch {
    steps: Vec<Step>,
    /// The handle to the records' answers; `None` when the batch has no
    /// event to record.
    records: Option<Result<Submitted, StoreError>>,
}

/// Decodes one session's batch and submits its records, in order, as one
/// run of `chain`; returns without waiting for them to commit.
async fn submit_batch<T: Transport>(
    context: &Context<T>,
    batch: Vec<ReceivedMessage>,
    chain: &Chain,
) -> SubmittedBatch {
    // The events' records go to the recorder as one run, so they share a
    // commit (with other sessions' runs too).
    let mut run = Vec::new();
    let key = context.settings.control_key.as_ref();
    let steps: Vec<Step> = batch
        .into_iter()
        .map(|message| prepare(message, key, &mut run))
        .collect();
    let records = if run.is_empty() {
        None
    } else {
        Some(context.recorder.submit(run, chain).await)
    };
    SubmittedBatch { steps, records }
}

/// Waits for a submitted batch's records, decides how to settle each
/// message, and settles them. `false` when the session should be released.
async fn finish_batch<T: Transport>(
    context: &Context<T>,
    session: &T::Session,
    submitted: SubmittedBatch,
    stop: &CancellationToken,
) -> bool {
    let recorded = decide_batch(context, submitted).await;
    settle_batch(context, session, recorded, stop).await
}

/// Waits for a batch's records and decides how to settle each message.
async fn decide_batch<T: Transport>(
    context: &Context<T>,
    submitted: SubmittedBatch,
) -> RecordedBatch {
    let SubmittedBatch { steps, records } = submitted;
    let answers = match records {
        None => Vec::new(),
        // The recorder is gone: the first event fails with why.
        Some(records) => match records {
            Ok(records) => records.committed().await,
            Err(e) => Err(e),
        }
        .unwrap_or_else(|e| vec![Some(Err(e))]),
    };
    let mut answers = answers.into_iter();
    let mut decided = Vec::with_capacity(steps.len());
    let mut failure = None;
    let mut steps = steps.into_iter();
    for step in steps.by_ref() {
        match decide(context, step, &mut answers).await {
            Ok(settle) => decided.push(settle),
            Err(failed) => {
                failure = Some(failed);
                break;
            }
        }
    }
    RecordedBatch {
        decided,
        failure,
        behind: steps.map(Step::into_message).collect(),
    }
}

/// Settles a recorded batch in order. `false` when the session should be
/// released (its lock is gone, or a message was abandoned and the ones
/// behind it must follow it).
async fn settle_batch<T: Transport>(
    context: &Context<T>,
    session: &T::Session,
    recorded: RecordedBatch,
    stop: &CancellationToken,
) -> bool {
    let RecordedBatch {
        decided,
        failure,
        behind,
    } = recorded;
    let lock_held = settle_together(context, session, decided).await;
    match failure {
        None => lock_held,
        Some((message, error)) => {
            abandon(context, session, message, behind, &error, lock_held, stop).await;
            false
        }
    }
}

/// Decodes `message`; an event's observation joins `run`.
fn prepare(
    message: ReceivedMessage,
    control_key: Option<&ControlKey>,
    run: &mut Vec<Observation>,
) -> Step {
    let (message, decided) = decode(message, control_key);
    match decided {
        Ok(Decoded::Event(observation)) => {
            let endpoint = observation.endpoint.clone();
            let event_id = observation.event_id.clone();
            run.push(*observation);
            Step::Record {
                message,
                endpoint,
                event_id,
            }
        }
        Ok(Decoded::Heartbeat(heartbeat)) => Step::Heartbeat { message, heartbeat },
        Ok(Decoded::Skip(why)) => Step::Skip { message, why },
        Err(unrecordable) => {
            tracing::warn!(
                message_id = message.message.message_id.as_deref().unwrap_or_default(),
                reason = %unrecordable.0,
                "resolver: dead-lettering a message it cannot record"
            );
            let description =
                nimbus_wire::dead_letter::truncate_description(&unrecordable.0).into_owned();
            Step::Unrecordable {
                message,
                description,
            }
        }
    }
}

/// How to settle one message (an event takes the next of the run's
/// `answers`); the message and the store's error when it was not recorded.
async fn decide<T>(
    context: &Context<T>,
    step: Step,
    answers: &mut impl Iterator<Item = Answer>,
) -> Result<Decided, (Received, StoreError)> {
    match step {
        Step::Record {
            message,
            endpoint,
            event_id,
        } => match answers.next().flatten() {
            Some(Ok(recorded)) => Ok(Decided::new(
                message,
                Settlement::complete,
                Consumed::Recorded {
                    endpoint,
                    event_id,
                    recorded,
                },
            )),
            Some(Err(e)) => Err((message, e)),
            // Only records behind a failed one go unanswered, and the walk
            // stops at that failure; this is a recorder defect, so the
            // message goes back to the bus.
            None => Err((
                message,
                StoreError::Panicked("the recorder gave no answer for the message".to_owned()),
            )),
        },
        Step::Heartbeat { message, heartbeat } => {
            let store = Arc::clone(&context.store);
            let endpoint = heartbeat.endpoint.clone();
            match blocking(move || store.record_heartbeat(&heartbeat)).await {
                Ok(()) => Ok(Decided::new(
                    message,
                    Settlement::complete,
                    Consumed::Heartbeat { endpoint },
                )),
                Err(e) => Err((message, e)),
            }
        }
        Step::Skip { message, why } => Ok(Decided::new(
            message,
            Settlement::complete,
            Consumed::Ignored(why),
        )),
        Step::Unrecordable {
            message,
            description,
        } => {
            let reported = description.clone();
            Ok(Decided::new(
                message,
                |m| Settlement::dead_letter(m, UNRECORDABLE_REASON.to_owned(), description),
                Consumed::DeadLettered(reported),
            ))
        }
    }
}

/// Applies the settlements at once, so the broker can commit them together,
/// and reports each. `false` when the session lock is gone.
async fn settle_together<T: Transport>(
    context: &Context<T>,
    session: &T::Session,
    decided: Vec<Decided>,
) -> bool {
    let mut reports = Vec::with_capacity(decided.len());
    let mut settlements = Vec::with_capacity(decided.len());
    for d in decided {
        reports.push((d.message_id, d.sequence_number, d.outcome));
        settlements.push(session.settle(d.settlement));
    }
    let results = join_all(settlements).await;
    let mut lock_held = true;
    for ((message_id, sequence_number, outcome), result) in reports.into_iter().zip(results) {
        match result {
            Ok(_) => report(context, message_id, sequence_number, outcome),
            Err(e) => {
                tracing::warn!(error = %e, "resolver: settling failed; the message will be redelivered");
                if matches!(e.kind(), ErrorKind::SessionLockLost) {
                    lock_held = false;
                }
                report(
                    context,
                    message_id,
                    sequence_number,
                    Consumed::SettleFailed(e.to_string()),
                );
            }
        }
    }
    lock_held
}

/// Abandons `message` after the store backoff and leaves `behind` (the
/// session's later messages in hand) unsettled: releasing the session
/// returns them without a delivery counted, so they are redelivered after
/// `message`, and only its own delivery count grows towards dead-lettering.
async fn abandon<T: Transport>(
    context: &Context<T>,
    session: &T::Session,
    message: Received,
    behind: Vec<Received>,
    error: &StoreError,
    lock_held: bool,
    stop: &CancellationToken,
) {
    let settings = &context.settings;
    let doublings = message.delivery_count.saturating_sub(1).min(16);
    let backoff = settings
        .store_backoff
        .saturating_mul(1 << doublings)
        .min(settings.max_store_backoff);
    tracing::warn!(
        error = %error,
        delivery = message.delivery_count,
        behind = behind.len(),
        backoff_ms = backoff.as_millis(),
        "resolver: the store failed; abandoning the message for redelivery"
    );
    let released = |message: Received, why: &str| {
        report(
            context,
            message.message.message_id.clone(),
            message.sequence_number,
            Consumed::Abandoned(format!("{error} (released: {why})")),
        );
    };
    if !lock_held {
        // The bus redelivers all of them already.
        released(message, "the session lock was lost");
        behind
            .into_iter()
            .for_each(|later| released(later, "the session lock was lost"));
        return;
    }
    // Holding the messages through the backoff keeps the session's order:
    // nothing behind the failed one is recorded first.
    tokio::select! {
        () = stop.cancelled() => {
            // Shutting down: leave them unsettled. Closing the session
            // releases them without counting a delivery.
            released(message, "shutdown");
            behind.into_iter().for_each(|later| released(later, "shutdown"));
            return;
        }
        () = tokio::time::sleep(backoff) => {}
    }
    let message_id = message.message.message_id.clone();
    let sequence_number = message.sequence_number;
    let abandoned = Settlement::abandon(&message, Properties::new());
    let outcome = match session.settle(abandoned).await {
        Ok(_) => Consumed::Abandoned(error.to_string()),
        Err(e) => {
            tracing::warn!(error = %e, "resolver: abandoning failed; the message will be redelivered");
            Consumed::SettleFailed(e.to_string())
        }
    };
    report(context, message_id, sequence_number, outcome);
    behind.into_iter().for_each(|later| {
        released(later, "an earlier message of its session was not recorded");
    });
}

/// Runs a synchronous store call off the async workers.
async fn blocking<R: Send + 'static>(
    call: impl FnOnce() -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    tokio::task::spawn_blocking(call)
        .await
        .unwrap_or_else(|join| Err(StoreError::Panicked(join.to_string())))
}

fn report<T>(
    context: &Context<T>,
    message_id: Option<String>,
    sequence_number: i64,
    outcome: Consumed,
) {
    if let Some(progress) = &context.settings.progress {
        // A dropped receiver only means nobody is watching.
        let _ = progress.send(Progress {
            message_id,
            sequence_number,
            outcome,
        });
    }
}
