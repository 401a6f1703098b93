//! What the log holds: one [`StoreOp`] per durable mutation, the stored
//! message copies they carry ([`EntryRow`]), and the [`Snapshot`] that
//! opening rebuilds from them. The store writes these, the log frames them,
//! compaction folds them; none of those is needed to read them.

use std::time::SystemTime;

use nimbus_transport::{Message, SubscriptionSettings, TopicSettings};
use serde::{Deserialize, Serialize};

use crate::op_serde::{subscription_settings, time_ms, topic_settings};

/// One durable mutation: a record of the log.
///
/// The log stores these by variant index, so a new variant goes at the end
/// and an existing one never changes shape without a new
/// [`FORMAT_VERSION`](crate::log::FORMAT_VERSION).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum StoreOp {
    PutTopic {
        name: String,
        #[serde(with = "topic_settings")]
        settings: TopicSettings,
    },
    DeleteTopic {
        name: String,
    },
    PutSubscription {
        topic: String,
        name: String,
        #[serde(with = "subscription_settings")]
        settings: SubscriptionSettings,
    },
    DeleteSubscription {
        topic: String,
        name: String,
    },
    PutRule {
        topic: String,
        subscription: String,
        name: String,
        filter: String,
        action: Option<String>,
        order: i64,
    },
    DeleteRule {
        topic: String,
        subscription: String,
        name: String,
    },
    InsertEntry(Box<EntryRow>),
    DeleteEntry {
        id: i64,
    },
    /// Delivery count and (after abandon with properties) the message.
    UpdateEntry {
        id: i64,
        failures: u32,
        #[serde(with = "serde_bytes")]
        message: Option<Vec<u8>>,
    },
    MoveToDeadLetter {
        id: i64,
        failures: u32,
        reason: String,
        description: String,
    },
    InsertScheduled {
        seq: i64,
        topic: String,
        #[serde(with = "time_ms")]
        at: SystemTime,
        #[serde(with = "serde_bytes")]
        message: Vec<u8>,
    },
    DeleteScheduled {
        seq: i64,
    },
    SetSessionState {
        topic: String,
        subscription: String,
        session: String,
        #[serde(with = "serde_bytes")]
        state: Option<Vec<u8>>,
    },
    PutDedup {
        topic: String,
        message_id: String,
        #[serde(with = "time_ms")]
        at: SystemTime,
        seq: i64,
    },
    PruneDedup {
        topic: String,
        #[serde(with = "time_ms")]
        before: SystemTime,
    },
    PutInbox {
        scope: String,
        key: String,
        #[serde(with = "time_ms")]
        expires: SystemTime,
    },
    PruneInbox {
        #[serde(with = "time_ms")]
        before: SystemTime,
    },
    /// The sequence high-water mark: no number at or below it is reused.
    SequenceHighWater(i64),
}

impl StoreOp {
    /// About how many bytes the op adds to a frame: its message bytes and
    /// a little for the rest (names and numbers).
    pub(crate) fn size_hint(&self) -> usize {
        const FIELDS: usize = 64;
        FIELDS
            + match self {
                StoreOp::InsertEntry(row) => row.message.len(),
                StoreOp::UpdateEntry { message, .. } => message.as_ref().map_or(0, Vec::len),
                StoreOp::InsertScheduled { message, .. } => message.len(),
                StoreOp::SetSessionState { state, .. } => state.as_ref().map_or(0, Vec::len),
                _ => 0,
            }
    }
}

/// A stored message copy (main or dead-letter queue of a subscription).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EntryRow {
    pub(crate) id: i64,
    pub(crate) topic: String,
    pub(crate) subscription: String,
    pub(crate) dead_letter: bool,
    pub(crate) seq: i64,
    #[serde(with = "time_ms")]
    pub(crate) enqueued: SystemTime,
    #[serde(with = "time_ms::option")]
    pub(crate) expires: Option<SystemTime>,
    pub(crate) failures: u32,
    pub(crate) dead_letter_reason: Option<String>,
    pub(crate) dead_letter_description: Option<String>,
    #[serde(with = "serde_bytes")]
    pub(crate) message: Vec<u8>,
}

/// Everything on disk, read once at open to rebuild memory state.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) sequence: i64,
    pub(crate) topics: Vec<(String, TopicSettings)>,
    pub(crate) subscriptions: Vec<(String, String, SubscriptionSettings)>,
    pub(crate) rules: Vec<(String, String, String, String, Option<String>)>,
    pub(crate) entries: Vec<LoadedEntry>,
    pub(crate) scheduled: Vec<(i64, String, SystemTime, Message)>,
    pub(crate) session_states: Vec<(String, String, String, Vec<u8>)>,
    pub(crate) dedup: Vec<(String, String, SystemTime, i64)>,
    pub(crate) inbox: Vec<(String, String, SystemTime)>,
}

/// A stored entry with its message decoded.
#[derive(Debug)]
pub(crate) struct LoadedEntry {
    pub(crate) row: EntryRow,
    pub(crate) decoded: Message,
}
