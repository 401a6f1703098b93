//! Hot state in memory: per topic, its subscriptions, their queues, the
//! sessions in them and who holds which lock. The append-only log is the
//! record; this is rebuilt from it on open.
//!
//! Indexes kept so no operation scans: per partition (session) the ids of
//! available messages in order; per session queue the unlocked sessions that
//! have an available message, by the id of their oldest one (next-available
//! picks the first); lock token → message.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use nimbus_transport::{LockToken, Message, ReceivedMessage, SubscriptionSettings, TopicSettings};
use tokio::sync::Notify;

use crate::commit::{CommitFlag, OnCommit, Wakeups};
use crate::rules::CompiledRule;

/// Entry ids order messages within a queue; sequence numbers and entry ids
/// share one broker-wide counter.
pub(crate) type EntryId = i64;

/// The partition key of a non-session queue (it has one partition).
pub(crate) const NO_SESSION: &str = "";

/// Whether a message waits or is being processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryStatus {
    Available,
    Locked {
        token: LockToken,
        until: SystemTime,
        /// The receiver or session lock that holds it (released on close).
        holder: u64,
    },
}

/// One message copy in one queue.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) id: EntryId,
    pub(crate) seq: i64,
    pub(crate) message: Message,
    pub(crate) enqueued: SystemTime,
    pub(crate) expires: Option<SystemTime>,
    /// Deliveries that ended in abandon or lock expiry.
    pub(crate) failures: u32,
    pub(crate) dead_letter_reason: Option<String>,
    pub(crate) dead_letter_description: Option<String>,
    pub(crate) status: EntryStatus,
    /// The commit of the request that put it here, while that may still be
    /// pending; `None` once known committed.
    pub(crate) commit: Option<Arc<CommitFlag>>,
}

impl Entry {
    /// Whether it may be handed out: only once it is in the log. If not,
    /// `notify` is woken when it is.
    fn deliverable_or_wake(&mut self, notify: &Arc<Notify>) -> bool {
        match &self.commit {
            None => true,
            Some(flag) if flag.is_set_or_wake(notify) => {
                self.commit = None;
                true
            }
            Some(_) => false,
        }
    }

    /// Whether its request has committed, without waiting for it.
    pub(crate) fn is_committed(&self) -> bool {
        self.commit.as_ref().is_none_or(|flag| flag.is_set())
    }

    /// As a peek shows it: no lock of its own.
    fn peeked(&self) -> ReceivedMessage {
        self.received(
            LockToken::from_uuid(uuid::Uuid::nil()),
            std::time::UNIX_EPOCH,
        )
    }

    fn received(&self, token: LockToken, until: SystemTime) -> ReceivedMessage {
        ReceivedMessage {
            message: self.message.clone(),
            sequence_number: self.seq,
            enqueued_time: self.enqueued,
            delivery_count: self.failures.saturating_add(1),
            dead_letter_reason: self.dead_letter_reason.clone(),
            dead_letter_description: self.dead_letter_description.clone(),
            lock_token: token,
            locked_until: until,
        }
    }
}

/// Who holds a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) holder: u64,
    pub(crate) until: SystemTime,
}

/// A session's messages (or all messages of a non-session queue).
#[derive(Debug, Default)]
pub(crate) struct Partition {
    pub(crate) entries: BTreeMap<EntryId, Entry>,
    available: BTreeSet<EntryId>,
    pub(crate) owner: Option<Owner>,
    pub(crate) state: Option<Vec<u8>>,
    pub(crate) notify: Arc<Notify>,
    ready_key: Option<EntryId>,
}

impl Partition {
    fn is_idle(&self) -> bool {
        self.entries.is_empty() && self.owner.is_none() && self.state.is_none()
    }
}

/// A queue: the main queue or the dead-letter queue of a subscription.
#[derive(Debug)]
pub(crate) struct QueueCore {
    pub(crate) sessionful: bool,
    /// Main queues skip expired messages; a dead-letter queue keeps them.
    expiring: bool,
    pub(crate) partitions: HashMap<String, Partition>,
    ready: BTreeSet<(EntryId, String)>,
    tokens: HashMap<LockToken, (String, EntryId)>,
    /// Wakes accept-next-available waiters and non-session receivers.
    pub(crate) notify: Arc<Notify>,
    len: usize,
}

impl QueueCore {
    /// Up to `max` committed messages from `from` on, in sequence order:
    /// `session`'s only, or all of the queue's.
    pub(crate) fn peek(
        &self,
        session: Option<&str>,
        from: i64,
        max: usize,
    ) -> Vec<ReceivedMessage> {
        let mut found: Vec<&Entry> = match session {
            Some(id) => {
                let key = if self.sessionful { id } else { NO_SESSION };
                self.partitions
                    .get(key)
                    .into_iter()
                    .flat_map(|p| p.entries.values())
                    .filter(|e| self.sessionful || e.message.session_id.as_deref() == Some(id))
                    .filter(|e| e.seq >= from && e.is_committed())
                    .collect()
            }
            None => self
                .partitions
                .values()
                .flat_map(|p| p.entries.values())
                .filter(|e| e.seq >= from && e.is_committed())
                .collect(),
        };
        found.sort_by_key(|e| e.seq);
        found.into_iter().take(max).map(Entry::peeked).collect()
    }

    pub(crate) fn new(sessionful: bool, expiring: bool) -> Self {
        QueueCore {
            sessionful,
            expiring,
            partitions: HashMap::new(),
            ready: BTreeSet::new(),
            tokens: HashMap::new(),
            notify: Arc::new(Notify::new()),
            len: 0,
        }
    }

    /// Messages in the queue (available or locked).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Message lock tokens outstanding.
    pub(crate) fn lock_tokens(&self) -> usize {
        self.tokens.len()
    }

    fn key_of(&self, message: &Message) -> String {
        if self.sessionful {
            message.session_id.clone().unwrap_or_default()
        } else {
            NO_SESSION.to_owned()
        }
    }

    /// Keeps the ready index and partition cleanup in step after any change
    /// to partition `key`.
    fn reindex(&mut self, key: &str, wake: &mut Wakeups) {
        let Some(partition) = self.partitions.get_mut(key) else {
            return;
        };
        let head = partition.available.first().copied();
        if self.sessionful {
            let want = if partition.owner.is_none() {
                head
            } else {
                None
            };
            if want != partition.ready_key {
                if let Some(old) = partition.ready_key.take() {
                    self.ready.remove(&(old, key.to_owned()));
                }
                if let Some(new) = want {
                    self.ready.insert((new, key.to_owned()));
                    partition.ready_key = Some(new);
                    wake.add(&self.notify);
                }
            }
        } else if head.is_some() {
            wake.add(&self.notify);
        }
        if head.is_some() {
            wake.add(&partition.notify);
        }
        if partition.is_idle() {
            self.partitions.remove(key);
        }
    }

    /// Adds a message at its place (by id).
    pub(crate) fn insert(&mut self, entry: Entry, wake: &mut Wakeups) {
        let key = self.key_of(&entry.message);
        let partition = self.partitions.entry(key.clone()).or_default();
        if let EntryStatus::Locked { token, .. } = entry.status {
            self.tokens.insert(token, (key.clone(), entry.id));
        } else {
            partition.available.insert(entry.id);
        }
        partition.entries.insert(entry.id, entry);
        self.len += 1;
        self.reindex(&key, wake);
    }

    /// Adds a message its request has not committed yet: it is handed out,
    /// and its receivers woken, once that commit is done.
    pub(crate) fn insert_uncommitted(&mut self, mut entry: Entry, on_commit: &mut OnCommit) {
        entry.commit = Some(on_commit.flag());
        self.insert(entry, &mut on_commit.wake);
    }

    /// The unlocked session whose oldest available message is the oldest of
    /// all, if that message is deliverable. When it is not, none is taken:
    /// commits follow the order messages were queued in, so the sessions
    /// behind it wait for the same commit or a later one, which wakes the
    /// accepts waiting on this queue.
    pub(crate) fn next_ready_session(&mut self) -> Option<&str> {
        let (id, key) = self.ready.first()?;
        let deliverable = self
            .partitions
            .get_mut(key)
            .and_then(|p| p.entries.get_mut(id))
            .is_some_and(|e| e.deliverable_or_wake(&self.notify));
        deliverable.then_some(key.as_str())
    }

    pub(crate) fn partition(&self, key: &str) -> Option<&Partition> {
        self.partitions.get(key)
    }

    /// Takes a session lock for `holder` (the partition is created if the
    /// session has nothing yet).
    pub(crate) fn lock_session(
        &mut self,
        key: &str,
        holder: u64,
        until: SystemTime,
        wake: &mut Wakeups,
    ) -> Arc<Notify> {
        let partition = self.partitions.entry(key.to_owned()).or_default();
        partition.owner = Some(Owner { holder, until });
        let notify = Arc::clone(&partition.notify);
        self.reindex(key, wake);
        notify
    }

    /// The owner of session `key`, if locked.
    pub(crate) fn session_owner(&self, key: &str) -> Option<Owner> {
        self.partitions.get(key).and_then(|p| p.owner)
    }

    /// Renews a session lock and the message locks under it.
    pub(crate) fn renew_session(&mut self, key: &str, until: SystemTime) {
        if let Some(partition) = self.partitions.get_mut(key) {
            if let Some(owner) = partition.owner.as_mut() {
                owner.until = until;
            }
            for entry in partition.entries.values_mut() {
                if let EntryStatus::Locked { until: u, .. } = &mut entry.status {
                    *u = until;
                }
            }
        }
    }

    /// Drops the session lock. Locked messages go back to available; their
    /// ids are returned so the caller can count a failure (lock expiry) or
    /// not (clean release).
    pub(crate) fn unlock_session(&mut self, key: &str, wake: &mut Wakeups) -> Vec<EntryId> {
        let mut released = Vec::new();
        // Named-session accepts wait for a release even of an empty session.
        wake.add(&self.notify);
        if let Some(partition) = self.partitions.get_mut(key) {
            partition.owner = None;
            for entry in partition.entries.values_mut() {
                if let EntryStatus::Locked { token, .. } = entry.status {
                    self.tokens.remove(&token);
                    entry.status = EntryStatus::Available;
                    partition.available.insert(entry.id);
                    released.push(entry.id);
                }
            }
        }
        self.reindex(key, wake);
        released
    }

    /// Locks the first available, unexpired message of partition `key`, if
    /// it is deliverable (the messages behind it wait with it: order).
    pub(crate) fn take_next(
        &mut self,
        key: &str,
        holder: u64,
        until: SystemTime,
        now: SystemTime,
        wake: &mut Wakeups,
    ) -> Option<ReceivedMessage> {
        let expiring = self.expiring;
        let partition = self.partitions.get_mut(key)?;
        let id = partition.available.iter().copied().find(|id| {
            partition
                .entries
                .get(id)
                .is_some_and(|e| !expiring || e.expires.is_none_or(|x| x > now))
        })?;
        let entry = partition.entries.get_mut(&id)?;
        // Session receivers wait on the partition, queue receivers on the
        // queue.
        let waiters = if self.sessionful {
            &partition.notify
        } else {
            &self.notify
        };
        if !entry.deliverable_or_wake(waiters) {
            return None;
        }
        partition.available.remove(&id);
        let token = LockToken::new();
        entry.status = EntryStatus::Locked {
            token,
            until,
            holder,
        };
        let received = entry.received(token, until);
        self.tokens.insert(token, (key.to_owned(), id));
        self.reindex(key, wake);
        Some(received)
    }

    /// Locks the first available, unexpired message of any partition of a
    /// non-session queue.
    pub(crate) fn take_any(
        &mut self,
        holder: u64,
        until: SystemTime,
        now: SystemTime,
        wake: &mut Wakeups,
    ) -> Option<ReceivedMessage> {
        self.take_next(NO_SESSION, holder, until, now, wake)
    }

    /// The message locked with `token`, if that lock is current.
    pub(crate) fn locked(&self, token: LockToken) -> Option<&Entry> {
        let (key, id) = self.tokens.get(&token)?;
        self.partitions.get(key)?.entries.get(id)
    }

    /// The message locked with `token`, mutably.
    pub(crate) fn locked_mut(&mut self, token: LockToken) -> Option<&mut Entry> {
        let (key, id) = self.tokens.get(&token)?;
        self.partitions.get_mut(key)?.entries.get_mut(id)
    }

    /// Removes the message locked with `token`.
    pub(crate) fn remove_locked(&mut self, token: LockToken, wake: &mut Wakeups) -> Option<Entry> {
        let (key, id) = self.tokens.remove(&token)?;
        self.remove_id(&key, id, wake)
    }

    /// Removes message `id` of partition `key`, whatever its status.
    pub(crate) fn remove_id(
        &mut self,
        key: &str,
        id: EntryId,
        wake: &mut Wakeups,
    ) -> Option<Entry> {
        let partition = self.partitions.get_mut(key)?;
        let entry = partition.entries.remove(&id)?;
        partition.available.remove(&id);
        if let EntryStatus::Locked { token, .. } = entry.status {
            self.tokens.remove(&token);
        }
        self.len -= 1;
        self.reindex(key, wake);
        Some(entry)
    }

    /// Makes the message locked with `token` available again at its place.
    pub(crate) fn release_locked(
        &mut self,
        token: LockToken,
        wake: &mut Wakeups,
    ) -> Option<EntryId> {
        let (key, id) = self.tokens.remove(&token)?;
        let partition = self.partitions.get_mut(&key)?;
        let entry = partition.entries.get_mut(&id)?;
        entry.status = EntryStatus::Available;
        partition.available.insert(id);
        self.reindex(&key, wake);
        Some(id)
    }

    /// Releases every message `holder` has locked in a non-session queue.
    pub(crate) fn release_holder(&mut self, holder: u64, wake: &mut Wakeups) {
        let tokens: Vec<LockToken> = self
            .tokens
            .iter()
            .filter(|(_, (key, id))| {
                self.partitions
                    .get(key)
                    .and_then(|p| p.entries.get(id))
                    .is_some_and(|e| {
                        matches!(e.status, EntryStatus::Locked { holder: h, .. } if h == holder)
                    })
            })
            .map(|(token, _)| *token)
            .collect();
        for token in tokens {
            self.release_locked(token, wake);
        }
    }

    /// The message `id` in partition `key`.
    pub(crate) fn get_mut(&mut self, key: &str, id: EntryId) -> Option<&mut Entry> {
        self.partitions.get_mut(key)?.entries.get_mut(&id)
    }

    /// The partition key a message belongs in.
    pub(crate) fn partition_key(&self, message: &Message) -> String {
        self.key_of(message)
    }

    /// Sets the state of session `key` (creating the partition).
    pub(crate) fn set_state(&mut self, key: &str, state: Option<Vec<u8>>, wake: &mut Wakeups) {
        let partition = self.partitions.entry(key.to_owned()).or_default();
        partition.state = state;
        self.reindex(key, wake);
    }
}

/// A scheduled message waiting at topic level.
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    pub(crate) at: SystemTime,
    pub(crate) message: Message,
}

/// A subscription.
#[derive(Debug)]
pub(crate) struct SubCore {
    pub(crate) settings: SubscriptionSettings,
    pub(crate) rules: Vec<CompiledRule>,
    pub(crate) main: QueueCore,
    pub(crate) dead_letter: QueueCore,
    /// Distinguishes this incarnation from a deleted and re-created
    /// subscription of the same name (handles check it).
    pub(crate) incarnation: u64,
}

impl SubCore {
    pub(crate) fn new(settings: SubscriptionSettings, incarnation: u64) -> Self {
        SubCore {
            main: QueueCore::new(settings.requires_session, true),
            dead_letter: QueueCore::new(false, false),
            settings,
            rules: Vec::new(),
            incarnation,
        }
    }
}

/// A topic and everything under it, behind the topic's one mutex.
#[derive(Debug)]
pub(crate) struct TopicCore {
    pub(crate) deleted: bool,
    pub(crate) settings: TopicSettings,
    pub(crate) subs: BTreeMap<String, SubCore>,
    pub(crate) scheduled: BTreeMap<i64, Scheduled>,
    pub(crate) dedup: HashMap<String, (SystemTime, i64)>,
    pub(crate) dedup_order: VecDeque<(SystemTime, String)>,
}

impl TopicCore {
    pub(crate) fn new(settings: TopicSettings) -> Self {
        TopicCore {
            deleted: false,
            settings,
            subs: BTreeMap::new(),
            scheduled: BTreeMap::new(),
            dedup: HashMap::new(),
            dedup_order: VecDeque::new(),
        }
    }
}
