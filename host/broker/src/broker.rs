//! The broker core: the state every operation shares ([`Inner`]: the
//! topics, the sequence counter, the log's store, the timer heap, the
//! inbox) and the few things every operation needs of it (a number, the
//! time, a topic, a submit to the log). Each concern adds its own
//! `impl Inner` in a module of its own:
//!
//! - `locking`: several topics locked together, in id order;
//! - `routing`: a publish through rules, forwarding, duplicate detection
//!   and scheduling to one copy per subscription, as a `plan` that is
//!   checked against the request limit, then applied to memory and the log;
//! - `settlement`: complete, abandon, dead-letter, session state, inbox
//!   records and the publishes of one settlement, as one commit;
//! - `dead_letter`: a failed delivery counted, and a message moved to the
//!   dead-letter queue;
//! - `timer_task`: what happens when a lock, a message's time to live or a
//!   scheduled message falls due;
//! - `open`: memory rebuilt from the log; `options`: how to open; `inbox`:
//!   consumers' inbox records.
//!
//! What a caller holds lives outside: the [`Broker`](crate::Broker) handle
//! (`api`: publish, peek, accept a session, open a receiver; `api::admin`:
//! entities and rules) and the session and receiver handles (`handles`:
//! receive, renew, settle, release).
//!
//! Concurrency: one mutex per topic guards everything under it (its
//! subscriptions, their queues and sessions, its scheduled messages). An
//! operation that touches several topics (a publish that auto-forwards, a
//! settlement that publishes elsewhere) locks all of them in topic-id order,
//! so it cannot deadlock. No lock is held across I/O: the durable ops are
//! queued to the writer thread under the locks (so the log order is the
//! memory order) and their commit is awaited after the locks are released.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::SystemTime;

use nimbus_transport::TransientError;

use crate::clock::Clock;
use crate::commit::OnCommit;
use crate::records::StoreOp;
use crate::state::TopicCore;
use crate::store::{Ack, Store};
use crate::timers::Timers;

mod dead_letter;
mod footprint;
mod inbox;
mod locking;
mod open;
mod options;
mod plan;
mod routing;
mod settlement;
mod timer_task;

pub use footprint::Footprint;
pub use options::BrokerOptions;
pub use plan::DEFAULT_MAX_REQUEST_BYTES;
pub use routing::{
    MAX_FORWARD_HOPS, REASON_FILTER_FAILED, REASON_FORWARD_TARGET_MISSING, REASON_MAX_HOPS,
};
pub use timer_task::REASON_EXPIRED;

pub(crate) use open::open;
pub(crate) use plan::row;

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
    pub(crate) inbox: Mutex<inbox::Inbox>,
    /// See [`BrokerOptions::max_request_bytes`].
    pub(crate) max_request_bytes: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Let the timer task notice the broker is gone.
        self.timers.changed.notify_one();
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

    pub(crate) fn new_topic_id(&self) -> u64 {
        self.next_topic_id.fetch_add(1, Ordering::Relaxed) + 1
    }
}

#[cfg(test)]
mod request_size_tests;
