//! The broker core: opening and rebuilding state, locking topics, routing
//! (rules, fan-out, auto-forward, scheduling, duplicate detection), the
//! settlement protocol and the timer handlers.
//!
//! Concurrency: one mutex per topic guards everything under it (its
//! subscriptions, their queues and sessions, its scheduled messages). An
//! operation that touches several topics (a publish that auto-forwards, a
//! settlement that publishes elsewhere) locks all of them in topic-id order,
//! so it cannot deadlock. No lock is held across I/O: the durable ops are
//! queued to the writer thread under the locks (so the log order is the
//! memory order) and their commit is awaited after the locks are released.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::{Duration, SystemTime};

use nimbus_transport::{
    AdminError, Disposition, InboxRecord, Message, PublishError, ReceivedMessage, SettleError,
    SettleReceipt, SettlementParts, SubQueue, SubscriptionSettings, TopicSettings, TransientError,
};

use crate::clock::{Clock, SystemClock};
use crate::codec;
use crate::commit::{OnCommit, Wakeups};
use crate::durability::Durability;
use crate::error::{OpenError, StoreError};
use crate::records::{EntryRow, StoreOp};
use crate::rules::{CompiledRule, RuleOutcome};
use crate::state::{Entry, EntryId, EntryStatus, Scheduled, SubCore, TopicCore};
use crate::store::{self, Ack, Store};
use crate::timers::{TimerEvent, Timers};

/// Most auto-forward hops a message may take; beyond it the copy goes to
/// the forwarding subscription's dead-letter queue (Service Bus allows 4).
pub const MAX_FORWARD_HOPS: u32 = 4;

/// Dead-letter reason for an expired message.
pub const REASON_EXPIRED: &str = "TTLExpiredException";
/// Dead-letter reason when a forward chain is too long.
pub const REASON_MAX_HOPS: &str = "MaxTransferHopCountExceeded";
/// Dead-letter reason when a forward target topic does not exist.
pub const REASON_FORWARD_TARGET_MISSING: &str = "ForwardToTargetNotFound";
/// Dead-letter reason when a rule's filter or action fails on a message.
pub const REASON_FILTER_FAILED: &str = "FilterEvaluationException";

/// How to open a broker.
#[derive(Clone)]
pub struct BrokerOptions {
    pub(crate) data_dir: PathBuf,
    pub(crate) durability: Durability,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) segment_bytes: u64,
    pub(crate) max_request_bytes: usize,
}

impl std::fmt::Debug for BrokerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerOptions")
            .field("data_dir", &self.data_dir)
            .field("durability", &self.durability)
            .field("segment_bytes", &self.segment_bytes)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish_non_exhaustive()
    }
}

impl BrokerOptions {
    /// A broker keeping its data in `data_dir`, at `fsync` durability, on
    /// the system clock.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        BrokerOptions {
            data_dir: data_dir.into(),
            durability: Durability::default(),
            clock: Arc::new(SystemClock),
            segment_bytes: store::DEFAULT_SEGMENT_BYTES,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }

    /// Sets the size at which the log starts a new segment (64 MiB by
    /// default). Sealed segments are folded into a snapshot in the
    /// background, so the log on disk stays within about twice what is live
    /// plus a segment or two. Smaller segments mean more, smaller compactions.
    pub fn log_segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes.max(1);
        self
    }

    /// Sets the most bytes of messages one request may store (256 MiB by
    /// default, at most that): a publish with every copy its routing
    /// makes, or a settlement with its publishes. A larger request is
    /// refused with a reason. Whatever sends through the broker must fit
    /// its own requests under it: nimbus's engine needs ~4 MiB for one
    /// event's settlement at the API's largest payload, so `nimbus.toml`
    /// holds it at 16 MiB or more; tests lower it to cross it cheaply.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes.clamp(1, DEFAULT_MAX_REQUEST_BYTES);
        self
    }

    /// Sets the durability level.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets the clock (tests pass a [`ManualClock`](crate::ManualClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// One topic: its identity (for lock ordering) and its state.
#[derive(Debug)]
pub(crate) struct TopicState {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) core: Mutex<TopicCore>,
}

impl TopicState {
    pub(crate) fn lock(&self) -> MutexGuard<'_, TopicCore> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The shared broker state.
pub(crate) struct Inner {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) store: Store,
    pub(crate) topics: RwLock<BTreeMap<String, Arc<TopicState>>>,
    sequence: AtomicI64,
    next_topic_id: AtomicU64,
    next_holder: AtomicU64,
    pub(crate) timers: Arc<Timers>,
    pub(crate) inbox: Mutex<Inbox>,
    /// See [`BrokerOptions::max_request_bytes`].
    pub(crate) max_request_bytes: usize,
}

/// How many inbox records may be written between two purges of expired ones.
const INBOX_PURGE_EVERY: usize = 10_000;

/// Consumers' inbox records in memory: (scope, key) → expiry. The log holds
/// the same, written in the settlement's commit.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    records: HashMap<(String, String), SystemTime>,
    writes_since_purge: usize,
}

impl Inbox {
    /// Whether `key` is recorded in `scope` and not expired at `now`.
    pub(crate) fn contains(&self, scope: &str, key: &str, now: SystemTime) -> bool {
        // Keys are short; the tuple allocation is cheaper than a second map level.
        self.records
            .get(&(scope.to_owned(), key.to_owned()))
            .is_some_and(|expires| *expires > now)
    }

    /// Records each of `records`, and now and then forgets expired ones.
    fn record(&mut self, records: &[InboxRecord], now: SystemTime, ops: &mut Vec<StoreOp>) {
        for record in records {
            self.records.insert(
                (record.scope.clone(), record.key.clone()),
                record.expires_at,
            );
            ops.push(StoreOp::PutInbox {
                scope: record.scope.clone(),
                key: record.key.clone(),
                expires: record.expires_at,
            });
        }
        self.writes_since_purge += records.len();
        if self.writes_since_purge >= INBOX_PURGE_EVERY {
            self.writes_since_purge = 0;
            self.records.retain(|_, expires| *expires > now);
            ops.push(StoreOp::PruneInbox { before: now });
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Let the timer task notice the broker is gone.
        self.timers.changed.notify_one();
    }
}

/// Several topics locked together, in id order.
pub(crate) struct Locked<'a> {
    names: Vec<&'a str>,
    guards: Vec<MutexGuard<'a, TopicCore>>,
}

impl Locked<'_> {
    pub(crate) fn get(&self, name: &str) -> Option<&TopicCore> {
        let i = self.names.iter().position(|n| *n == name)?;
        Some(&*self.guards[i])
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut TopicCore> {
        let i = self.names.iter().position(|n| *n == name)?;
        Some(&mut *self.guards[i])
    }
}

/// What one subscription's rules made of a message being routed.
enum RouteMatch<'r> {
    /// A filter or an action failed: the original is dead-lettered there.
    Failed(String),
    /// What goes to the subscription, in rule order.
    Copies(Vec<SubCopy<'r>>),
}

impl RouteMatch<'_> {
    /// How many uses of the original it takes.
    fn uses(&self) -> usize {
        match self {
            RouteMatch::Failed(_) => 1,
            RouteMatch::Copies(copies) => copies
                .iter()
                .filter(|c| !matches!(c, SubCopy::Made(_)))
                .count(),
        }
    }
}

/// One message a subscription's rules send it.
enum SubCopy<'r> {
    /// The original (a rule without an action matched).
    Original,
    /// A rule's action applied to a scratch copy, made while filters ran,
    /// since an action that can fail must leave the original whole for the
    /// dead-letter queue.
    Made(Box<Message>),
    /// A rule whose action cannot fail: applied to a use of the original
    /// (the message itself, when that is its last use).
    Transform(&'r CompiledRule),
}

/// One message routing sends a subscription.
enum Outgoing {
    Deliver(Message),
    /// To its dead-letter queue, with why.
    DeadLetter(Message, String),
}

/// The message being routed, handed out as clones until its last use,
/// which gets the original itself.
struct Original {
    message: Option<Message>,
    uses_left: usize,
}

impl Original {
    fn new(message: Message, uses: usize) -> Self {
        Original {
            message: Some(message),
            uses_left: uses,
        }
    }

    /// The message for one more use: a clone while others follow, the
    /// original for the last one.
    fn take(&mut self) -> Message {
        debug_assert!(self.message.is_some(), "the original was taken already");
        self.uses_left = self.uses_left.saturating_sub(1);
        if self.uses_left == 0 {
            self.message.take().unwrap_or_default()
        } else {
            self.message.clone().unwrap_or_default()
        }
    }
}

/// The most bytes of messages one request may store: a publish with every
/// copy its routing makes, or a settlement with its publishes. A request is
/// one frame of the log, never split, and a frame over the log's 1 GiB limit
/// fails the write and with it every later one (a 2 MiB message reaching
/// ~500 subscriptions was enough); refused up front, the sender gets an
/// error that says why and the broker goes on. Also the most
/// [`BrokerOptions::max_request_bytes`] may set.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 256 << 20;

/// Headroom per copy for everything but the body (ids, user properties), so
/// the exact size is computed only for a request that may be near the limit.
const NON_BODY_ALLOWANCE: usize = 64 << 10;

/// What routing one publish decided, before anything is applied.
#[derive(Default)]
pub(crate) struct Plan {
    /// (topic, subscription, dead-letter queue?, entry)
    placements: Vec<(String, String, bool, Entry)>,
    scheduled: Vec<(String, i64, Scheduled)>,
    dedup: Vec<(String, String, i64)>,
    /// The sequence number per published message.
    pub(crate) sequence_numbers: Vec<i64>,
}

impl Plan {
    /// Refuses a plan whose messages would make the request larger than
    /// `limit` bytes, saying why.
    pub(crate) fn check_size(&self, limit: usize) -> Result<(), String> {
        let messages = || {
            self.placements
                .iter()
                .map(|(_, _, _, entry)| &entry.message)
                .chain(self.scheduled.iter().map(|(_, _, s)| &s.message))
        };
        let copies = self.placements.len() + self.scheduled.len();
        let bodies: usize = messages().map(|m| m.body.len()).sum();
        if bodies.saturating_add(copies.saturating_mul(NON_BODY_ALLOWANCE)) <= limit {
            return Ok(());
        }
        let (total, largest) = messages()
            .map(|m| postcard::experimental::serialized_size(m).unwrap_or(usize::MAX))
            .fold((0usize, 0usize), |(total, largest), size| {
                (total.saturating_add(size), largest.max(size))
            });
        if total <= limit {
            return Ok(());
        }
        Err(format!(
            "it would store {copies} message copies ({} in all, the largest {}) in one request, \
             more than the {} a request may hold; send smaller messages, or fewer at once, or \
             route them to fewer subscriptions",
            mib(total),
            mib(largest),
            mib(limit),
        ))
    }
}

/// `bytes` for a person: MiB with one decimal, or bytes below 1 MiB.
fn mib(bytes: usize) -> String {
    if bytes < 1 << 20 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

impl Inner {
    pub(crate) fn alloc(&self) -> i64 {
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn new_holder(&self) -> u64 {
        self.next_holder.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.clock.now()
    }

    pub(crate) fn topic(&self, name: &str) -> Option<Arc<TopicState>> {
        self.topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    pub(crate) fn healthy(&self) -> Result<(), TransientError> {
        match self.store.failure() {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    /// Queues `ops` plus the sequence high-water mark.
    pub(crate) fn submit(&self, ops: Vec<StoreOp>) -> Ack {
        self.submit_with(ops, OnCommit::default())
    }

    /// Queues `ops` plus the sequence high-water mark; the messages they
    /// insert become deliverable when `on_commit` runs.
    pub(crate) fn submit_with(&self, mut ops: Vec<StoreOp>, on_commit: OnCommit) -> Ack {
        if !ops.is_empty() {
            ops.push(self.high_water());
        }
        self.store.submit(ops, on_commit)
    }

    fn high_water(&self) -> StoreOp {
        StoreOp::SequenceHighWater(self.sequence.load(Ordering::Relaxed))
    }

    /// Topics reachable from `roots` through forwarding, found by locking
    /// one topic at a time. Missing roots are reported.
    fn forward_closure(&self, roots: &[&str]) -> Result<Vec<Arc<TopicState>>, String> {
        let mut seen: BTreeMap<String, Arc<TopicState>> = BTreeMap::new();
        let mut todo: Vec<String> = Vec::new();
        for root in roots {
            let topic = self.topic(root).ok_or_else(|| (*root).to_owned())?;
            if seen
                .insert(topic.name.clone(), Arc::clone(&topic))
                .is_none()
            {
                todo.push(topic.name.clone());
            }
        }
        while let Some(name) = todo.pop() {
            let Some(topic) = seen.get(&name).cloned() else {
                continue;
            };
            let targets: Vec<String> = topic
                .lock()
                .subs
                .values()
                .filter_map(|s| s.settings.forward_to.clone())
                .collect();
            for target in targets {
                if seen.contains_key(&target) {
                    continue;
                }
                if let Some(t) = self.topic(&target) {
                    seen.insert(target.clone(), t);
                    todo.push(target);
                }
            }
        }
        Ok(seen.into_values().collect())
    }

    /// Runs `f` with `roots` and every topic they forward to locked (in id
    /// order). `Err(name)` when a root topic does not exist.
    pub(crate) fn with_topics<R>(
        &self,
        roots: &[&str],
        f: impl FnOnce(&mut Locked<'_>) -> R,
    ) -> Result<R, String> {
        // Fast path: one topic that forwards nowhere needs only its own lock.
        if let [root] = roots {
            let topic = self.topic(root).ok_or_else(|| (*root).to_owned())?;
            let guard = topic.lock();
            if guard.deleted {
                return Err((*root).to_owned());
            }
            if guard.subs.values().all(|s| s.settings.forward_to.is_none()) {
                let mut locked = Locked {
                    names: vec![topic.name.as_str()],
                    guards: vec![guard],
                };
                return Ok(f(&mut locked));
            }
        }
        loop {
            let mut topics = self.forward_closure(roots)?;
            topics.sort_by_key(|t| t.id);
            let guards: Vec<MutexGuard<'_, TopicCore>> = topics.iter().map(|t| t.lock()).collect();
            let mut locked = Locked {
                names: topics.iter().map(|t| t.name.as_str()).collect(),
                guards,
            };
            for root in roots {
                if locked.get(root).is_none_or(|c| c.deleted) {
                    return Err((*root).to_owned());
                }
            }
            // The topology may have changed between finding and locking.
            let complete = locked.guards.iter().all(|core| {
                core.subs.values().all(|s| {
                    s.settings.forward_to.as_deref().is_none_or(|target| {
                        locked.get(target).is_some() || self.topic(target).is_none()
                    })
                })
            });
            if complete {
                return Ok(f(&mut locked));
            }
        }
    }

    /// Plans publishing `message` to `topic` at the root (not forwarded).
    pub(crate) fn plan_publish(
        &self,
        locked: &Locked<'_>,
        topic: &str,
        mut message: Message,
        now: SystemTime,
        plan: &mut Plan,
    ) -> Result<(), PublishError> {
        let core = locked
            .get(topic)
            .ok_or_else(|| PublishError::TopicNotFound {
                topic: topic.to_owned(),
            })?;
        let sender_id = message.message_id.is_some();
        if !sender_id {
            let mut buffer = uuid::Uuid::encode_buffer();
            let id = uuid::Uuid::new_v4().simple().encode_lower(&mut buffer);
            message.message_id = Some(id.to_owned());
        }
        let message_id = message.message_id.clone().unwrap_or_default();
        if sender_id && let Some(window) = core.settings.duplicate_detection_window {
            let earlier = plan
                .dedup
                .iter()
                .find(|(t, id, _)| t == topic && *id == message_id)
                .map(|(_, _, seq)| *seq)
                .or_else(|| {
                    core.dedup
                        .get(&message_id)
                        .filter(|(at, _)| *at + window > now)
                        .map(|(_, seq)| *seq)
                });
            if let Some(seq) = earlier {
                plan.sequence_numbers.push(seq);
                return Ok(());
            }
        }
        let seq = self.alloc();
        if sender_id && core.settings.duplicate_detection_window.is_some() {
            plan.dedup.push((topic.to_owned(), message_id, seq));
        }
        plan.sequence_numbers.push(seq);
        match message.scheduled_enqueue_time {
            Some(at) if at > now => {
                // Check now that it would route, so a bad message is refused
                // to the sender rather than lost at activation.
                let mut dry = Plan::default();
                self.route(locked, topic, message.clone(), seq, now, 0, &mut dry)?;
                dry.check_size(self.max_request_bytes).map_err(|reason| {
                    PublishError::InvalidMessage {
                        reason: format!("when it falls due, {reason}"),
                    }
                })?;
                plan.scheduled
                    .push((topic.to_owned(), seq, Scheduled { at, message }));
                Ok(())
            }
            _ => self.route(locked, topic, message, seq, now, 0, plan),
        }
    }

    /// Fans `message` out to the subscriptions of `topic` whose rules match.
    ///
    /// Takes the message by value: the last use of the original (a plain
    /// placement, or a copy through an action that cannot fail, such as a
    /// forwarder's) gets it moved rather than cloned. At steady load most
    /// publishes have one use per topic, so they clone nothing here.
    #[expect(
        clippy::too_many_arguments,
        reason = "one recursive routing step needs all of them"
    )]
    fn route(
        &self,
        locked: &Locked<'_>,
        topic: &str,
        message: Message,
        seq: i64,
        now: SystemTime,
        hops: u32,
        plan: &mut Plan,
    ) -> Result<(), PublishError> {
        let core = locked
            .get(topic)
            .ok_or_else(|| PublishError::TopicNotFound {
                topic: topic.to_owned(),
            })?;
        // Evaluate every rule first, so the uses of the original are known
        // before any placement takes it.
        let mut matches: Vec<(&String, &SubCore, RouteMatch)> = Vec::with_capacity(core.subs.len());
        for (sub_name, sub) in &core.subs {
            let mut copies = Vec::new();
            let mut failure = None;
            for rule in &sub.rules {
                match rule.evaluate(&message, seq) {
                    RuleOutcome::NoMatch => {}
                    RuleOutcome::Matched => {
                        // One plain match sends the original once, ahead
                        // of the rules' copies.
                        if !matches!(copies.first(), Some(SubCopy::Original)) {
                            copies.insert(0, SubCopy::Original);
                        }
                    }
                    RuleOutcome::MatchedWithAction if rule.action_cannot_fail() => {
                        copies.push(SubCopy::Transform(rule));
                    }
                    RuleOutcome::MatchedWithAction => match rule.transform(message.clone(), seq) {
                        Ok(copy) => copies.push(SubCopy::Made(Box::new(copy))),
                        Err(failed) => failure = Some(failed.0),
                    },
                    RuleOutcome::Failed(reason) => failure = Some(reason),
                }
            }
            let matched = match failure {
                Some(reason) => RouteMatch::Failed(reason),
                None => RouteMatch::Copies(copies),
            };
            matches.push((sub_name, sub, matched));
        }
        let mut original = Original::new(message, matches.iter().map(|(_, _, m)| m.uses()).sum());
        let mut forwards: Vec<(String, Message)> = Vec::new();
        for (sub_name, sub, matched) in matches {
            // What goes to the subscription, or to its dead-letter queue
            // with why: the original when a filter or an action failed, or
            // (should an action `action_cannot_fail` passed fail after all)
            // the copy as it was left, rather than lose it.
            let copies: Vec<Outgoing> = match matched {
                RouteMatch::Failed(reason) => vec![Outgoing::DeadLetter(original.take(), reason)],
                RouteMatch::Copies(copies) => copies
                    .into_iter()
                    .map(|copy| match copy {
                        SubCopy::Original => Outgoing::Deliver(original.take()),
                        SubCopy::Made(copy) => Outgoing::Deliver(*copy),
                        SubCopy::Transform(rule) => match rule.transform(original.take(), seq) {
                            Ok(copy) => Outgoing::Deliver(copy),
                            Err(failed) => {
                                let (reason, partial) = *failed;
                                Outgoing::DeadLetter(partial, reason)
                            }
                        },
                    })
                    .collect(),
            };
            for copy in copies {
                let copy = match copy {
                    Outgoing::Deliver(copy) => copy,
                    Outgoing::DeadLetter(message, reason) => {
                        plan.placements.push((
                            topic.to_owned(),
                            sub_name.clone(),
                            true,
                            self.entry(
                                message,
                                seq,
                                now,
                                core,
                                sub,
                                Some((REASON_FILTER_FAILED, reason)),
                            ),
                        ));
                        continue;
                    }
                };
                if let Some(target) = &sub.settings.forward_to {
                    let dead = if hops >= MAX_FORWARD_HOPS {
                        Some((
                            REASON_MAX_HOPS,
                            format!("more than {MAX_FORWARD_HOPS} auto-forward hops"),
                        ))
                    } else if locked.get(target).is_none_or(|c| c.deleted) {
                        Some((
                            REASON_FORWARD_TARGET_MISSING,
                            format!("forward target topic '{target}' does not exist"),
                        ))
                    } else {
                        None
                    };
                    match dead {
                        Some(dead) => plan.placements.push((
                            topic.to_owned(),
                            sub_name.clone(),
                            true,
                            self.entry(copy, seq, now, core, sub, Some(dead)),
                        )),
                        None => forwards.push((target.clone(), copy)),
                    }
                } else {
                    if sub.settings.requires_session && copy.session_id.is_none() {
                        return Err(PublishError::InvalidMessage {
                            reason: format!(
                                "subscription '{topic}/{sub_name}' requires a session id and \
                                 the message '{}' has none",
                                copy.message_id.as_deref().unwrap_or_default()
                            ),
                        });
                    }
                    plan.placements.push((
                        topic.to_owned(),
                        sub_name.clone(),
                        false,
                        self.entry(copy, seq, now, core, sub, None),
                    ));
                }
            }
        }
        for (target, copy) in forwards {
            let forwarded_seq = self.alloc();
            self.route(locked, &target, copy, forwarded_seq, now, hops + 1, plan)?;
        }
        Ok(())
    }

    fn entry(
        &self,
        message: Message,
        seq: i64,
        now: SystemTime,
        topic: &TopicCore,
        sub: &SubCore,
        dead: Option<(&str, String)>,
    ) -> Entry {
        let ttl = [
            message.time_to_live,
            sub.settings.default_message_ttl,
            topic.settings.default_message_ttl,
        ]
        .into_iter()
        .flatten()
        .min();
        let (reason, description) = match dead {
            Some((r, d)) => (Some(r.to_owned()), Some(d)),
            None => (None, None),
        };
        Entry {
            id: self.alloc(),
            seq,
            message,
            enqueued: now,
            expires: ttl.map(|t| now + t),
            failures: 0,
            dead_letter_reason: reason,
            dead_letter_description: description,
            status: EntryStatus::Available,
            commit: None,
        }
    }

    /// Applies a plan to memory; returns the store ops. The messages it
    /// places are delivered once `on_commit` runs.
    pub(crate) fn apply_plan(
        &self,
        locked: &mut Locked<'_>,
        plan: Plan,
        now: SystemTime,
        ops: &mut Vec<StoreOp>,
        on_commit: &mut OnCommit,
    ) {
        for (topic, sub, dead, entry) in plan.placements {
            let Some(core) = locked.get_mut(&topic) else {
                continue;
            };
            let Some(sub_core) = core.subs.get_mut(&sub) else {
                continue;
            };
            ops.push(StoreOp::InsertEntry(Box::new(row(
                &topic, &sub, dead, &entry,
            ))));
            if let Some(expires) = entry.expires
                && !dead
            {
                self.timers.push(
                    expires,
                    TimerEvent::Expiry {
                        topic: topic.clone(),
                        subscription: sub.clone(),
                        key: sub_core.main.partition_key(&entry.message),
                        id: entry.id,
                    },
                );
            }
            let queue = if dead {
                &mut sub_core.dead_letter
            } else {
                &mut sub_core.main
            };
            queue.insert_uncommitted(entry, on_commit);
        }
        for (topic, seq, scheduled) in plan.scheduled {
            let Some(core) = locked.get_mut(&topic) else {
                continue;
            };
            ops.push(StoreOp::InsertScheduled {
                seq,
                topic: topic.clone(),
                at: scheduled.at,
                message: codec::encode(&scheduled.message),
            });
            self.timers.push(
                scheduled.at,
                TimerEvent::Scheduled {
                    topic: topic.clone(),
                    seq,
                },
            );
            core.scheduled.insert(seq, scheduled);
        }
        for (topic, message_id, seq) in plan.dedup {
            let Some(core) = locked.get_mut(&topic) else {
                continue;
            };
            let Some(window) = core.settings.duplicate_detection_window else {
                continue;
            };
            let cutoff = now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
            let mut pruned = false;
            while core.dedup_order.front().is_some_and(|(at, _)| *at < cutoff) {
                if let Some((at, id)) = core.dedup_order.pop_front()
                    && core.dedup.get(&id).is_some_and(|(a, _)| *a == at)
                {
                    core.dedup.remove(&id);
                }
                pruned = true;
            }
            if pruned {
                ops.push(StoreOp::PruneDedup {
                    topic: topic.clone(),
                    before: cutoff,
                });
            }
            core.dedup.insert(message_id.clone(), (now, seq));
            core.dedup_order.push_back((now, message_id.clone()));
            ops.push(StoreOp::PutDedup {
                topic,
                message_id,
                at: now,
                seq,
            });
        }
    }

    /// Publishes atomically (the data-plane entry point).
    pub(crate) async fn publish(
        &self,
        topic: &str,
        messages: Vec<Message>,
    ) -> Result<Vec<i64>, PublishError> {
        self.healthy()?;
        let now = self.now();
        let outcome = self
            .with_topics(&[topic], |locked| {
                let mut plan = Plan::default();
                for message in messages {
                    self.plan_publish(locked, topic, message, now, &mut plan)?;
                }
                plan.check_size(self.max_request_bytes)
                    .map_err(|reason| PublishError::InvalidMessage { reason })?;
                let sequence_numbers = std::mem::take(&mut plan.sequence_numbers);
                let mut ops = Vec::new();
                let mut on_commit = OnCommit::default();
                self.apply_plan(locked, plan, now, &mut ops, &mut on_commit);
                if ops.is_empty() {
                    // Every message was a duplicate. Its original may not be
                    // committed yet; an empty request still queues behind it,
                    // so this acknowledgement cannot overtake that commit.
                    ops.push(self.high_water());
                }
                Ok::<_, PublishError>((sequence_numbers, self.submit_with(ops, on_commit)))
            })
            .map_err(|topic| PublishError::TopicNotFound { topic })??;
        let (sequence_numbers, ack) = outcome;
        ack.committed().await.map_err(TransientError::from)?;
        Ok(sequence_numbers)
    }

    /// Applies a settlement on `topic/subscription` (queue `queue`), with
    /// `session` = (session id, holder) when done under a session lock.
    pub(crate) async fn settle(
        &self,
        topic: &Arc<TopicState>,
        subscription: &str,
        incarnation: u64,
        queue: SubQueue,
        session: Option<(&str, u64)>,
        mut parts: SettlementParts,
    ) -> Result<SettleReceipt, SettleError> {
        self.healthy()?;
        let now = self.now();
        // The publishes are moved into the plan, not cloned: the settlement
        // is consumed here either way.
        let publishes = std::mem::take(&mut parts.publishes);
        let publish_topics: Vec<String> = publishes.iter().map(|(t, _)| t.clone()).collect();
        let mut roots: Vec<&str> = vec![topic.name.as_str()];
        for t in &publish_topics {
            if !roots.contains(&t.as_str()) {
                roots.push(t);
            }
        }
        let mut wake = Wakeups::default();
        let result = self.with_topics(&roots, |locked| {
            self.settle_locked(
                locked,
                &topic.name,
                subscription,
                incarnation,
                queue,
                session,
                &parts,
                publishes,
                now,
                &mut wake,
            )
        });
        let (receipt, ack) = match result {
            Ok(r) => r?,
            Err(missing) if missing == topic.name => {
                return Err(match session {
                    Some((id, _)) => SettleError::SessionLockLost {
                        session_id: id.to_owned(),
                    },
                    None => SettleError::LockLost {
                        message_id: outcome_id(&parts),
                    },
                });
            }
            Err(missing) => return Err(SettleError::TopicNotFound { topic: missing }),
        };
        wake.fire();
        ack.committed().await.map_err(TransientError::from)?;
        Ok(receipt)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the settlement context is spelled out rather than bundled"
    )]
    fn settle_locked(
        &self,
        locked: &mut Locked<'_>,
        topic: &str,
        subscription: &str,
        incarnation: u64,
        queue: SubQueue,
        session: Option<(&str, u64)>,
        parts: &SettlementParts,
        publishes: Vec<(String, Message)>,
        now: SystemTime,
        wake: &mut Wakeups,
    ) -> Result<(SettleReceipt, Ack), SettleError> {
        let mut on_commit = OnCommit::default();
        let lost = || match session {
            Some((id, _)) => SettleError::SessionLockLost {
                session_id: id.to_owned(),
            },
            None => SettleError::LockLost {
                message_id: outcome_id(parts),
            },
        };
        // 1. Validate everything before changing anything.
        {
            let core = locked.get(topic).ok_or_else(lost)?;
            let sub = core
                .subs
                .get(subscription)
                .filter(|s| s.incarnation == incarnation)
                .ok_or_else(lost)?;
            if let Some((id, holder)) = session {
                let owner = sub.main.session_owner(id);
                if !owner.is_some_and(|o| o.holder == holder && o.until > now) {
                    return Err(lost());
                }
            } else if parts.session_state.is_some() {
                return Err(SettleError::Invalid {
                    reason: "session state can only be set under a session lock".to_owned(),
                });
            }
            if let Some((message, disposition)) = &parts.outcome {
                let q = match queue {
                    SubQueue::Main => &sub.main,
                    SubQueue::DeadLetter => &sub.dead_letter,
                };
                let lock_lost = || SettleError::LockLost {
                    message_id: message.message.message_id.clone().unwrap_or_default(),
                };
                let entry = q.locked(message.lock_token).ok_or_else(lock_lost)?;
                match entry.status {
                    EntryStatus::Locked { until, .. } if until > now => {}
                    _ => return Err(lock_lost()),
                }
                if let Some((id, _)) = session
                    && entry.message.session_id.as_deref() != Some(id)
                {
                    return Err(SettleError::Invalid {
                        reason: format!(
                            "message '{}' was not received in session '{id}'",
                            message.message.message_id.as_deref().unwrap_or_default()
                        ),
                    });
                }
                if queue == SubQueue::DeadLetter
                    && matches!(disposition, Disposition::DeadLetter { .. })
                {
                    return Err(SettleError::Invalid {
                        reason: "the message is in the dead-letter queue already".to_owned(),
                    });
                }
            }
        }
        let mut plan = Plan::default();
        for (t, message) in publishes {
            self.plan_publish(locked, &t, message, now, &mut plan)
                .map_err(|e| match e {
                    PublishError::TopicNotFound { topic } => SettleError::TopicNotFound { topic },
                    PublishError::Transient(t) => SettleError::Transient(t),
                    other => SettleError::Invalid {
                        reason: other.to_string(),
                    },
                })?;
        }
        plan.check_size(self.max_request_bytes)
            .map_err(|reason| SettleError::Invalid {
                reason: format!("its messages were refused: {reason}"),
            })?;
        // 2. Apply.
        let mut ops = Vec::new();
        let sequence_numbers = std::mem::take(&mut plan.sequence_numbers);
        {
            let core = locked.get_mut(topic).ok_or_else(lost)?;
            let sub = core.subs.get_mut(subscription).ok_or_else(lost)?;
            if let Some((message, disposition)) = &parts.outcome {
                self.apply_disposition(
                    topic,
                    subscription,
                    sub,
                    queue,
                    message,
                    disposition,
                    now,
                    &mut ops,
                    wake,
                    &mut on_commit,
                );
            }
            if let (Some((id, _)), Some(state)) = (session, &parts.session_state) {
                sub.main.set_state(id, state.clone(), wake);
                ops.push(StoreOp::SetSessionState {
                    topic: topic.to_owned(),
                    subscription: subscription.to_owned(),
                    session: id.to_owned(),
                    state: state.clone(),
                });
            }
        }
        if !parts.inbox.is_empty() {
            self.inbox
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(&parts.inbox, now, &mut ops);
        }
        self.apply_plan(locked, plan, now, &mut ops, &mut on_commit);
        Ok((
            SettleReceipt::new(sequence_numbers),
            self.submit_with(ops, on_commit),
        ))
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the settlement context is spelled out rather than bundled"
    )]
    fn apply_disposition(
        &self,
        topic: &str,
        subscription: &str,
        sub: &mut SubCore,
        queue: SubQueue,
        message: &ReceivedMessage,
        disposition: &Disposition,
        now: SystemTime,
        ops: &mut Vec<StoreOp>,
        wake: &mut Wakeups,
        on_commit: &mut OnCommit,
    ) {
        let token = message.lock_token;
        match disposition {
            Disposition::Complete => {
                let q = match queue {
                    SubQueue::Main => &mut sub.main,
                    SubQueue::DeadLetter => &mut sub.dead_letter,
                };
                if let Some(entry) = q.remove_locked(token, wake) {
                    ops.push(StoreOp::DeleteEntry { id: entry.id });
                }
            }
            Disposition::Abandon { properties } => {
                let q = match queue {
                    SubQueue::Main => &mut sub.main,
                    SubQueue::DeadLetter => &mut sub.dead_letter,
                };
                let Some(entry) = q.locked_mut(token) else {
                    return;
                };
                if !properties.is_empty() {
                    for (k, v) in properties {
                        entry.message.properties.insert(k.clone(), v.clone());
                    }
                }
                let changed = (!properties.is_empty()).then(|| codec::encode(&entry.message));
                let id = entry.id;
                let session = entry.message.session_id.clone();
                let key = if q.sessionful {
                    session.unwrap_or_default()
                } else {
                    crate::state::NO_SESSION.to_owned()
                };
                if let Some(id) = q.release_locked(token, wake) {
                    self.count_failure(
                        topic,
                        subscription,
                        sub,
                        queue,
                        &key,
                        id,
                        changed,
                        now,
                        ops,
                        wake,
                        on_commit,
                    );
                } else {
                    tracing::warn!(id, "abandoned message vanished while settling");
                }
            }
            Disposition::DeadLetter {
                reason,
                description,
            } => {
                if let Some(entry) = sub.main.remove_locked(token, wake) {
                    move_to_dead_letter(sub, entry, reason, description, ops, on_commit);
                }
            }
        }
    }

    /// Counts a failed delivery of available message `id` (abandon or lock
    /// expiry): dead-letters it at the max delivery count, else persists the
    /// count. `changed` is the re-encoded message when abandon changed it.
    /// A dead-lettered message is delivered from there once `on_commit`
    /// runs.
    #[expect(
        clippy::too_many_arguments,
        reason = "the message's full address is needed for the store and timers"
    )]
    pub(crate) fn count_failure(
        &self,
        topic: &str,
        subscription: &str,
        sub: &mut SubCore,
        queue: SubQueue,
        key: &str,
        id: EntryId,
        changed: Option<Vec<u8>>,
        now: SystemTime,
        ops: &mut Vec<StoreOp>,
        wake: &mut Wakeups,
        on_commit: &mut OnCommit,
    ) {
        let max = sub.settings.max_delivery_count;
        let q = match queue {
            SubQueue::Main => &mut sub.main,
            SubQueue::DeadLetter => &mut sub.dead_letter,
        };
        let Some(entry) = q.get_mut(key, id) else {
            return;
        };
        entry.failures = entry.failures.saturating_add(1);
        let failures = entry.failures;
        let expires = entry.expires;
        if queue == SubQueue::Main && failures >= max {
            if let Some(entry) = q.remove_id(key, id, wake) {
                if let Some(message) = changed {
                    ops.push(StoreOp::UpdateEntry {
                        id,
                        failures,
                        message: Some(message),
                    });
                }
                let description =
                    format!("Message could not be consumed after {max} delivery attempts.");
                move_to_dead_letter(
                    sub,
                    entry,
                    nimbus_transport::MAX_DELIVERY_COUNT_EXCEEDED,
                    &description,
                    ops,
                    on_commit,
                );
            }
            return;
        }
        ops.push(StoreOp::UpdateEntry {
            id,
            failures,
            message: changed,
        });
        if queue == SubQueue::Main
            && let Some(expires) = expires
            && expires <= now
        {
            self.timers.push(
                now,
                TimerEvent::Expiry {
                    topic: topic.to_owned(),
                    subscription: subscription.to_owned(),
                    key: key.to_owned(),
                    id,
                },
            );
        }
    }
}

fn outcome_id(parts: &SettlementParts) -> String {
    parts
        .outcome
        .as_ref()
        .and_then(|(m, _)| m.message.message_id.clone())
        .unwrap_or_default()
}

/// Moves a message (already removed from the main queue) into the
/// dead-letter queue, in place on disk; it is delivered from there once
/// `on_commit` runs.
pub(crate) fn move_to_dead_letter(
    sub: &mut SubCore,
    mut entry: Entry,
    reason: &str,
    description: &str,
    ops: &mut Vec<StoreOp>,
    on_commit: &mut OnCommit,
) {
    entry.status = EntryStatus::Available;
    entry.dead_letter_reason = Some(reason.to_owned());
    entry.dead_letter_description = Some(description.to_owned());
    ops.push(StoreOp::MoveToDeadLetter {
        id: entry.id,
        failures: entry.failures,
        reason: reason.to_owned(),
        description: description.to_owned(),
    });
    sub.dead_letter.insert_uncommitted(entry, on_commit);
}

pub(crate) fn row(topic: &str, sub: &str, dead: bool, entry: &Entry) -> EntryRow {
    EntryRow {
        id: entry.id,
        topic: topic.to_owned(),
        subscription: sub.to_owned(),
        dead_letter: dead,
        seq: entry.seq,
        enqueued: entry.enqueued,
        expires: entry.expires,
        failures: entry.failures,
        dead_letter_reason: entry.dead_letter_reason.clone(),
        dead_letter_description: entry.dead_letter_description.clone(),
        message: codec::encode(&entry.message),
    }
}

/// Opens the store, rebuilds memory state and starts the timer task.
pub(crate) fn open(options: BrokerOptions) -> Result<Arc<Inner>, OpenError> {
    let (store, snapshot) =
        Store::open(&options.data_dir, options.durability, options.segment_bytes)?;
    let path = options.data_dir.join(crate::log::DIR_NAME);
    let now = options.clock.now();
    let timers = Arc::new(Timers::default());
    let mut sequence = snapshot.sequence;
    let mut topics: BTreeMap<String, TopicCore> = BTreeMap::new();
    for (name, settings) in snapshot.topics {
        topics.insert(name, TopicCore::new(settings));
    }
    let mut incarnation = 0u64;
    for (topic, name, settings) in snapshot.subscriptions {
        if let Some(core) = topics.get_mut(&topic) {
            incarnation += 1;
            core.subs.insert(name, SubCore::new(settings, incarnation));
        }
    }
    for (topic, sub, name, filter, action) in snapshot.rules {
        let mut description = nimbus_transport::RuleDescription::new(name, filter);
        description.action = action;
        let compiled = CompiledRule::compile(description).map_err(|e| OpenError::Corrupt {
            path: path.display().to_string(),
            reason: format!("stored rule on '{topic}/{sub}' no longer parses: {e}"),
        })?;
        if let Some(s) = topics.get_mut(&topic).and_then(|c| c.subs.get_mut(&sub)) {
            s.rules.push(compiled);
        }
    }
    let mut wake = Wakeups::default();
    for loaded in snapshot.entries {
        let row = loaded.row;
        sequence = sequence.max(row.id).max(row.seq);
        let Some(sub) = topics
            .get_mut(&row.topic)
            .and_then(|c| c.subs.get_mut(&row.subscription))
        else {
            continue;
        };
        let entry = Entry {
            id: row.id,
            seq: row.seq,
            message: loaded.decoded,
            enqueued: row.enqueued,
            expires: row.expires,
            failures: row.failures,
            dead_letter_reason: row.dead_letter_reason,
            dead_letter_description: row.dead_letter_description,
            status: EntryStatus::Available,
            commit: None,
        };
        if row.dead_letter {
            sub.dead_letter.insert(entry, &mut wake);
        } else {
            if let Some(expires) = entry.expires {
                timers.push(
                    expires,
                    TimerEvent::Expiry {
                        topic: row.topic.clone(),
                        subscription: row.subscription.clone(),
                        key: sub.main.partition_key(&entry.message),
                        id: entry.id,
                    },
                );
            }
            sub.main.insert(entry, &mut wake);
        }
    }
    for (topic, sub, session, state) in snapshot.session_states {
        if let Some(s) = topics.get_mut(&topic).and_then(|c| c.subs.get_mut(&sub)) {
            s.main.set_state(&session, Some(state), &mut wake);
        }
    }
    for (seq, topic, at, message) in snapshot.scheduled {
        sequence = sequence.max(seq);
        if let Some(core) = topics.get_mut(&topic) {
            timers.push(
                at,
                TimerEvent::Scheduled {
                    topic: topic.clone(),
                    seq,
                },
            );
            core.scheduled.insert(seq, Scheduled { at, message });
        }
    }
    for (topic, message_id, at, seq) in snapshot.dedup {
        sequence = sequence.max(seq);
        if let Some(core) = topics.get_mut(&topic)
            && let Some(window) = core.settings.duplicate_detection_window
            && at + window > now
        {
            core.dedup.insert(message_id.clone(), (at, seq));
            core.dedup_order.push_back((at, message_id));
        }
    }
    let mut inbox = Inbox::default();
    for (scope, key, expires) in snapshot.inbox {
        if expires > now {
            inbox.records.insert((scope, key), expires);
        }
    }
    let mut map = BTreeMap::new();
    let mut next_topic_id = 0u64;
    for (name, core) in topics {
        next_topic_id += 1;
        map.insert(
            name.clone(),
            Arc::new(TopicState {
                id: next_topic_id,
                name,
                core: Mutex::new(core),
            }),
        );
    }
    let inner = Arc::new(Inner {
        clock: options.clock,
        store,
        topics: RwLock::new(map),
        sequence: AtomicI64::new(sequence.max(incarnation_floor(incarnation))),
        next_topic_id: AtomicU64::new(next_topic_id),
        next_holder: AtomicU64::new(0),
        timers: Arc::clone(&timers),
        inbox: Mutex::new(inbox),
        max_request_bytes: options.max_request_bytes,
    });
    tokio::spawn(timer_task(Arc::downgrade(&inner), timers));
    Ok(inner)
}

fn incarnation_floor(incarnation: u64) -> i64 {
    i64::try_from(incarnation).unwrap_or(0)
}

impl Inner {
    pub(crate) fn new_topic_id(&self) -> u64 {
        self.next_topic_id.fetch_add(1, Ordering::Relaxed) + 1
    }
}

async fn timer_task(inner: Weak<Inner>, timers: Arc<Timers>) {
    loop {
        let changed = timers.changed.notified();
        let (clock, next) = {
            let Some(strong) = inner.upgrade() else {
                return;
            };
            (Arc::clone(&strong.clock), timers.next_deadline())
        };
        match next {
            None => changed.await,
            Some(at) => {
                tokio::select! {
                    () = clock.sleep_until(at) => {}
                    () = changed => {}
                }
            }
        }
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let due = timers.pop_due(strong.now());
        for event in due {
            strong.on_timer(event);
        }
    }
}

impl Inner {
    fn on_timer(&self, event: TimerEvent) {
        let now = self.now();
        let mut wake = Wakeups::default();
        match event {
            TimerEvent::MessageLock {
                topic,
                subscription,
                queue,
                token,
            } => {
                let Some(state) = self.topic(&topic) else {
                    return;
                };
                let mut core = state.lock();
                let Some(sub) = core.subs.get_mut(&subscription) else {
                    return;
                };
                let q = match queue {
                    SubQueue::Main => &mut sub.main,
                    SubQueue::DeadLetter => &mut sub.dead_letter,
                };
                let expired = q.locked(token).is_some_and(
                    |e| matches!(e.status, EntryStatus::Locked { until, .. } if until <= now),
                );
                if !expired {
                    return;
                }
                let key = q
                    .locked(token)
                    .map(|e| q.partition_key(&e.message))
                    .unwrap_or_default();
                if let Some(id) = q.release_locked(token, &mut wake) {
                    let mut ops = Vec::new();
                    let mut on_commit = OnCommit::default();
                    self.count_failure(
                        &topic,
                        &subscription,
                        sub,
                        queue,
                        &key,
                        id,
                        None,
                        now,
                        &mut ops,
                        &mut wake,
                        &mut on_commit,
                    );
                    self.store.submit_detached(ops, on_commit);
                }
            }
            TimerEvent::SessionLock {
                topic,
                subscription,
                session,
                holder,
            } => {
                let Some(state) = self.topic(&topic) else {
                    return;
                };
                let mut core = state.lock();
                let Some(sub) = core.subs.get_mut(&subscription) else {
                    return;
                };
                let expired = sub
                    .main
                    .session_owner(&session)
                    .is_some_and(|o| o.holder == holder && o.until <= now);
                if !expired {
                    return;
                }
                tracing::debug!(%topic, %subscription, %session, "session lock expired");
                let released = sub.main.unlock_session(&session, &mut wake);
                let mut ops = Vec::new();
                let mut on_commit = OnCommit::default();
                for id in released {
                    self.count_failure(
                        &topic,
                        &subscription,
                        sub,
                        SubQueue::Main,
                        &session,
                        id,
                        None,
                        now,
                        &mut ops,
                        &mut wake,
                        &mut on_commit,
                    );
                }
                self.store.submit_detached(ops, on_commit);
            }
            TimerEvent::Scheduled { topic, seq } => {
                let result = self.with_topics(&[topic.as_str()], |locked| {
                    let Some(core) = locked.get_mut(&topic) else {
                        return;
                    };
                    let Some(scheduled) = core.scheduled.remove(&seq) else {
                        return;
                    };
                    let mut plan = Plan::default();
                    let mut ops = vec![StoreOp::DeleteScheduled { seq }];
                    let mut on_commit = OnCommit::default();
                    // Activation routes with a fresh sequence number, so the
                    // message queues after everything enqueued before now.
                    let active_seq = self.alloc();
                    match self.route(
                        locked,
                        &topic,
                        scheduled.message,
                        active_seq,
                        now,
                        0,
                        &mut plan,
                    ) {
                        Ok(()) => self.apply_plan(locked, plan, now, &mut ops, &mut on_commit),
                        Err(error) => tracing::error!(
                            %topic, seq, %error,
                            "scheduled message can no longer be routed; dropped"
                        ),
                    }
                    self.store.submit_detached(ops, on_commit);
                });
                if result.is_err() {
                    tracing::debug!(%topic, seq, "scheduled message's topic is gone");
                }
            }
            TimerEvent::Expiry {
                topic,
                subscription,
                key,
                id,
            } => {
                let Some(state) = self.topic(&topic) else {
                    return;
                };
                let mut core = state.lock();
                let Some(sub) = core.subs.get_mut(&subscription) else {
                    return;
                };
                let Some(entry) = sub.main.get_mut(&key, id) else {
                    return;
                };
                if entry.expires.is_none_or(|x| x > now) {
                    return;
                }
                if let EntryStatus::Locked { until, .. } = entry.status {
                    // A locked message expires once its lock ends (settled,
                    // released or lapsed); look again then.
                    self.timers.push(
                        until.max(now),
                        TimerEvent::Expiry {
                            topic,
                            subscription,
                            key,
                            id,
                        },
                    );
                    return;
                }
                let mut ops = Vec::new();
                let mut on_commit = OnCommit::default();
                if let Some(entry) = sub.main.remove_id(&key, id, &mut wake) {
                    if sub.settings.dead_letter_on_expiry {
                        move_to_dead_letter(
                            sub,
                            entry,
                            REASON_EXPIRED,
                            "The message expired and was dead-lettered.",
                            &mut ops,
                            &mut on_commit,
                        );
                    } else {
                        ops.push(StoreOp::DeleteEntry { id });
                    }
                }
                self.store.submit_detached(ops, on_commit);
            }
        }
        wake.fire();
    }

    /// Checks a new subscription's settings.
    pub(crate) fn validate_subscription(
        &self,
        settings: &SubscriptionSettings,
    ) -> Result<(), AdminError> {
        if settings.max_delivery_count == 0 {
            return Err(AdminError::InvalidSetting {
                reason: "max_delivery_count must be at least 1".to_owned(),
            });
        }
        if settings.lock_duration < Duration::from_millis(1) {
            return Err(AdminError::InvalidSetting {
                reason: "lock_duration must be positive".to_owned(),
            });
        }
        if let Some(target) = &settings.forward_to
            && self.topic(target).is_none()
        {
            return Err(AdminError::NotFound {
                entity: format!("forward_to topic '{target}'"),
            });
        }
        Ok(())
    }

    /// Validates a topic setting set.
    pub(crate) fn validate_topic(settings: &TopicSettings) -> Result<(), AdminError> {
        if settings.duplicate_detection_window == Some(Duration::ZERO) {
            return Err(AdminError::InvalidSetting {
                reason: "duplicate_detection_window must be positive when set".to_owned(),
            });
        }
        Ok(())
    }

    /// The set of topics (for admin listing).
    pub(crate) fn topic_names(&self) -> BTreeSet<String> {
        self.topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }
}

impl From<StoreError> for SettleError {
    fn from(value: StoreError) -> Self {
        SettleError::Transient(value.into())
    }
}

#[cfg(test)]
mod request_size_tests;
