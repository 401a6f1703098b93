//! The Resolver's store: the trait the rest of nimbus uses, and what it
//! returns.

use serde::Serialize;

use crate::observation::{HandoffDetails, Observation};
use crate::status::Status;

/// The current projection of one event at one endpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRecord {
    /// The endpoint that handles the event.
    pub endpoint: String,
    /// The event's id at that endpoint.
    pub event_id: String,
    /// Its session.
    pub session_id: Option<String>,
    /// Its status.
    pub status: Status,
    /// `Handoff` while an external job runs.
    pub sub_status: Option<String>,
    /// The message type that set the status.
    pub status_source: String,
    /// The event type.
    pub event_type: Option<String>,
    /// The business correlation id.
    pub correlation_id: Option<String>,
    /// The message id of the last message recorded for the event.
    pub last_message_id: Option<String>,
    /// The `MessageId` of the request the endpoint received (the
    /// EventRequest's; learnt from a response's `ParentMessageId` when no
    /// request copy was seen): the `ParentMessageId` of control messages.
    pub request_message_id: Option<String>,
    /// The `From` of that request (the producer that published the event).
    pub request_from: Option<String>,
    /// The request's `OriginatingMessageId` (`None` for `self`).
    pub originating_message_id: Option<String>,
    /// The request's `OriginatingFrom` (`None` for `self`).
    pub originating_from: Option<String>,
    /// The automatic retry count last seen.
    pub retry_count: u32,
    /// The last error's type.
    pub error_type: Option<String>,
    /// The last error's text.
    pub error_text: Option<String>,
    /// The dead-letter reason, when dead-lettered.
    pub dead_letter_reason: Option<String>,
    /// The dead-letter description, when dead-lettered.
    pub dead_letter_description: Option<String>,
    /// Why the event was handed off.
    pub handoff_reason: Option<String>,
    /// The external job's id.
    pub external_job_id: Option<String>,
    /// When the external job is expected to be done.
    pub expected_by: Option<String>,
    /// The digest of the handler version behind the last response.
    pub handler_version: Option<String>,
    /// Enqueue to handler entry, in ms, of the last response.
    pub queue_time_ms: Option<i64>,
    /// Handler entry to response, in ms, of the last response.
    pub processing_time_ms: Option<i64>,
    /// The event payload as last seen (`None` in a listing).
    pub payload: Option<String>,
    /// When the first message about the event was enqueued (ms since epoch).
    pub first_seen_ms: i64,
    /// When the status last changed (ms since epoch).
    pub updated_ms: i64,
    /// The published message's user properties, a JSON object
    /// (`{"Tenant": "acme"}`), when it had any: a resubmission carries them
    /// again.
    pub properties: Option<String>,
}

/// One entry of an event's history: one message, in the order recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryEntry {
    /// The message id.
    pub message_id: Option<String>,
    /// The message type.
    pub message_type: String,
    /// The status the message asked for.
    pub status: Status,
    /// When the message was enqueued (ms since epoch).
    pub at_ms: i64,
    /// The message's `From`.
    pub from: Option<String>,
    /// The automatic retry count it carried.
    pub retry_count: u32,
    /// The error type it carried.
    pub error_type: Option<String>,
    /// The error text it carried.
    pub error_text: Option<String>,
    /// The handler version that produced it.
    pub handler_version: Option<String>,
    /// Set when its status write was refused as stale: why.
    pub refused: Option<String>,
    /// What it said about a handoff: a `PendingHandoffResponse`'s job id,
    /// reason and deadline, a `HandoffCompletedRequest`'s details. Kept
    /// after the handoff settles, when the event's own handoff fields are
    /// cleared. (A `HandoffFailedRequest`'s error is in `error_type` and
    /// `error_text`.)
    pub handoff: Option<HandoffDetails>,
    /// On a `ResubmissionRequest` with an edited payload: the payload it
    /// replaced (the event keeps only the latest).
    pub replaced_payload: Option<String>,
}

/// An event with its full history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventDetail {
    /// The current projection.
    pub record: EventRecord,
    /// Every message recorded for it, oldest first.
    pub history: Vec<HistoryEntry>,
}

/// Which events to list.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only this endpoint.
    pub endpoint: Option<String>,
    /// Only this status.
    pub status: Option<Status>,
    /// Only this sub-status (`Handoff`: events waiting on an external job).
    pub sub_status: Option<String>,
    /// Only this session.
    pub session_id: Option<String>,
    /// At most this many (most recently updated first); `None` for a default
    /// of 1000.
    pub limit: Option<usize>,
}

/// The last heartbeat answer the Resolver saw from an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Heartbeat {
    /// The endpoint that answered.
    pub endpoint: String,
    /// The answer's message type: `ResolutionResponse` means the endpoint is
    /// up; an error, deferral or unsupported answer says why it is not.
    pub message_type: String,
    /// When the answer was enqueued (ms since epoch).
    pub at_ms: i64,
}

/// What recording a message did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// History written and the status applied.
    Applied {
        /// The status now.
        status: Status,
    },
    /// History written, but the status write was refused as stale.
    Refused {
        /// The status that stays.
        current: Status,
        /// Why the write was refused.
        reason: String,
    },
    /// This exact message (same id and type) was recorded before; nothing
    /// changed. Redelivery of a Resolver message lands here.
    AlreadyRecorded,
}

/// A store failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database failed.
    #[error("resolver store: {context}: {source}")]
    Database {
        /// What the store was doing.
        context: &'static str,
        /// The database error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database holds a value this version cannot read.
    #[error("resolver store: corrupt row: {0}")]
    Corrupt(String),
    /// A value could not be encoded for the database.
    #[error("resolver store: encoding {context}: {source}")]
    Encode {
        /// What was being encoded.
        context: &'static str,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The database file fails SQLite's integrity check: pages were
    /// overwritten or lost (a disk fault, a copy taken mid-write). Opened
    /// anyway it would answer some reads and fail others.
    #[error(
        "resolver store {path} is damaged ({problems}): restore it from a backup, or move it \
         aside (with its -wal and -shm files) and start with an empty store, `nimbus run \
         --new-resolver-store` (its events' status and history are lost; the broker's messages \
         and blocked sessions are not)",
        path = path.display()
    )]
    Damaged {
        /// The database file.
        path: std::path::PathBuf,
        /// What the check found, first problems first.
        problems: String,
    },
    /// A store call panicked (its transaction rolled back).
    #[error("resolver store: a store call panicked: {0}")]
    Panicked(String),
}

/// Rows a store has written: the highest row number of each table, which
/// retention's deletions do not lower (counting would read the whole table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreRows {
    /// Events (one row per event and endpoint).
    pub events: u64,
    /// History rows (one per message recorded).
    pub history: u64,
}

/// Where the Resolver keeps status and history. SQLite by default; a shared
/// database (PostgreSQL) when several hosts share one namespace.
pub trait ResolverStore: Send + Sync {
    /// Records one message: appends it to the event's history, then applies
    /// its status unless the stale-write guard refuses it.
    fn record(&self, observation: &Observation) -> Result<Recorded, StoreError>;
    /// Records several messages, in order. The SQLite store commits them as
    /// one unit (all or none), so messages of different sessions share one
    /// commit; this default records them one at a time and stops at the
    /// first failure. Recording is idempotent per message, so retrying a
    /// failed batch whole is safe.
    fn record_batch(&self, observations: &[Observation]) -> Result<Vec<Recorded>, StoreError> {
        observations.iter().map(|o| self.record(o)).collect()
    }
    /// The event with this id at every endpoint that has it, with history.
    fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError>;
    /// The events one message belongs to, by any `MessageId` the Resolver
    /// recorded in their history (a published message's id names its event
    /// at every consuming endpoint), with history. Not indexed: it reads
    /// the whole history, so it is the fallback when no event has the id.
    fn events_of_message(&self, message_id: &str) -> Result<Vec<EventDetail>, StoreError>;
    /// Events matching the filter, most recently updated first, without
    /// their payloads ([`EventRecord::payload`] is `None`; [`Self::event`]
    /// has it).
    fn events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError>;
    /// How many status writes the guard has refused since the store opened.
    fn refused_writes(&self) -> u64;
    /// How many event and history rows the store has written, when it can
    /// say without a scan (for a soak's report); `None` when it cannot.
    fn rows_written(&self) -> Result<Option<StoreRows>, StoreError> {
        Ok(None)
    }
    /// Notes a heartbeat answer from `endpoint`, keeping only the newest per
    /// endpoint (heartbeats are not events and have no history).
    fn record_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), StoreError>;
    /// The last heartbeat answer of every endpoint, by endpoint.
    fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError>;
    /// Appends an operator's dead-letter replay to the event's history
    /// (message type [`DEAD_LETTER_REPLAY`], the status as it is, the note
    /// as its text): the replay sends the Resolver no message of its own,
    /// so without it the history would show the outcome of a run nobody
    /// asked for. The event's status; `None` when the store has no such
    /// event, or keeps no operator actions (this default).
    fn record_replay(&self, replay: &ReplayNote) -> Result<Option<Status>, StoreError> {
        let _ = replay;
        Ok(None)
    }
    /// Records an event the store has no row for, rebuilt by the Manager
    /// from the broker's session state, which names it as a session's
    /// blocker (the store was lost, or started anew; decision 0140): the
    /// row as `rebuilt` has it, and one history entry of message type
    /// [`REBUILT_FROM_BROKER`] with `note` as its text, so the event's
    /// history says where its first facts came from. Changes nothing when
    /// the store has a row for the event already (`false`); this default
    /// keeps nothing (`false`).
    fn record_rebuilt(&self, rebuilt: &EventRecord, note: &str) -> Result<bool, StoreError> {
        let _ = (rebuilt, note);
        Ok(false)
    }
}

/// The message type of a history row that records an event rebuilt from
/// the broker's session state (see [`ResolverStore::record_rebuilt`]).
pub const REBUILT_FROM_BROKER: &str = "RebuiltFromBroker";

/// The message type of a history row that records a dead-letter replay.
pub const DEAD_LETTER_REPLAY: &str = "DeadLetterReplay";

/// An operator's dead-letter replay of one of an event's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayNote {
    /// The endpoint whose queue it went back to.
    pub endpoint: String,
    /// The event.
    pub event_id: String,
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// What was replayed, from where (shown as the row's note).
    pub note: String,
}
