//! Session state: who blocks the session and what is parked behind it.
//!
//! The blob is upstream's JSON (keys `DeferredSequenceNumbers`,
//! `BlockedByEventId`, `DeferredCount`, `NextDeferralSequence`, read
//! case-sensitively) so a NimBus tool reading the session sees what it
//! expects. One deliberate difference (SEMANTICS.md §4, F8): `DeferredCount`
//! counts what is parked *now* — [`SessionState::unpark`] lowers it when a
//! parked message leaves the Deferred subscription — so a session with
//! nothing blocked and nothing parked is written as zero bytes again. One
//! addition: `SettledParkedEvents`, the parked events the operator
//! settled out of turn (written only while it has any), so a skip or a
//! completed resubmission of a parked event is not undone by its replay.
//! Another: `BlockingEvent`, what an operator needs of the blocker to act on
//! the block when the Resolver lost its record ([`BlockingEvent`]).

mod blocker;

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize};

pub use blocker::{BlockingEvent, MAX_KEPT_EVENT_BYTES};

use crate::message::NimbusMessage;

/// The state of one session of one endpoint subscription.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// Legacy: broker-deferred sequence numbers inside the endpoint
    /// subscription. Nothing writes new entries; read for draining old sessions.
    #[serde(
        rename = "DeferredSequenceNumbers",
        default,
        deserialize_with = "null_as_default"
    )]
    pub deferred_sequence_numbers: Vec<i64>,
    /// The EventId that owns the block; `None` when not blocked.
    #[serde(rename = "BlockedByEventId", default)]
    pub blocked_by_event_id: Option<String>,
    /// How many messages of this session are parked now.
    #[serde(
        rename = "DeferredCount",
        default,
        deserialize_with = "null_as_default"
    )]
    pub deferred_count: u32,
    /// The next `DeferralSequence` to hand out.
    #[serde(
        rename = "NextDeferralSequence",
        default,
        deserialize_with = "null_as_default"
    )]
    pub next_deferral_sequence: u32,
    /// Parked events the operator settled out of turn (skipped, or
    /// resubmitted to an outcome that settles them): a replayed copy of one
    /// that was parked before the settlement is completed without running
    /// the handler. A nimbus addition (upstream ran the parked copy anyway,
    /// so the handler ran again on an event the operator had settled);
    /// written only while not empty, so upstream's blob is otherwise
    /// unchanged, and upstream readers ignore the key.
    #[serde(
        rename = "SettledParkedEvents",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub settled_parked_events: Vec<SettledParked>,
    /// Replayed copies that came back before the lowest parked one and were
    /// parked again since a parked message last left (decision 0050, rule
    /// 4). A nimbus addition, written only while not zero: it bounds how
    /// long a session waits for a parked message that never comes back.
    #[serde(
        rename = "OutOfTurnReplays",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub out_of_turn_replays: u32,
    /// The `MessageId` of the one RetryRequest the block waits for: `""`
    /// when it waits for none, absent when unknown (a state written before
    /// this key, or by upstream). Any other RetryRequest of the blocker is
    /// stale: an operator's resubmission that failed and started a fresh
    /// budget would otherwise leave the older chain running beside it, the
    /// handler running twice per attempt. A nimbus addition, written only
    /// while present.
    #[serde(
        rename = "PendingRetryMessageId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pending_retry_message_id: Option<String>,
    /// When that retry is due, in ms since the Unix epoch, so an operator
    /// can tell "a retry is coming" from "act now". A nimbus addition.
    #[serde(
        rename = "PendingRetryAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pending_retry_at_ms: Option<i64>,
    /// The event that owns the block, as the endpoint received it (decision
    /// 0140): set while blocked by a build that writes it. A nimbus
    /// addition, written only while present.
    #[serde(
        rename = "BlockingEvent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub blocking_event: Option<BlockingEvent>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One operator settlement of a possibly parked event: it applies to the
/// copies of `event_id` parked before it, whose `DeferralSequence` is below
/// `parked_before` (a copy keeps its sequence when it is parked again), and
/// not to a copy of the same event id parked after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettledParked {
    /// The settled event.
    #[serde(rename = "EventId")]
    pub event_id: String,
    /// The session's `NextDeferralSequence` when it was settled.
    #[serde(rename = "ParkedBefore")]
    pub parked_before: u32,
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A session-state blob that is not upstream's JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("session state is not valid NimBus session-state JSON: {0}")]
pub struct SessionStateError(pub String);

fn same_event(a: &str, b: &str) -> bool {
    // Event ids are compared ignoring case, as upstream's Service Bus
    // transport does (F30: its in-memory test transport did not).
    a.chars()
        .flat_map(char::to_lowercase)
        .eq(b.chars().flat_map(char::to_lowercase))
}

impl SessionState {
    /// Reads a blob; zero bytes (or whitespace) is the empty state.
    pub fn from_bytes(blob: &[u8]) -> Result<SessionState, SessionStateError> {
        if blob.iter().all(u8::is_ascii_whitespace) {
            return Ok(SessionState::default());
        }
        serde_json::from_slice(blob).map_err(|e| SessionStateError(e.to_string()))
    }

    /// The blob to store: zero bytes when [`is_empty`](Self::is_empty), else
    /// compact JSON in upstream's key order.
    pub fn to_bytes(&self) -> Vec<u8> {
        if self.is_empty() {
            return Vec::new();
        }
        // Serializing strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Not blocked, nothing parked, no legacy entries. Ignores
    /// `NextDeferralSequence`, as upstream: with nothing parked the sequence
    /// can safely start again at 0; and remembered settlements, which only
    /// apply to parked messages.
    pub fn is_empty(&self) -> bool {
        self.blocked_by_event_id.is_none()
            && self.deferred_sequence_numbers.is_empty()
            && self.deferred_count == 0
    }

    /// The EventId that owns the block, if the session is blocked.
    pub fn blocked_by(&self) -> Option<&str> {
        self.blocked_by_event_id
            .as_deref()
            .filter(|id| !id.is_empty())
    }

    /// Whether any event blocks the session.
    pub fn is_blocked(&self) -> bool {
        self.blocked_by().is_some()
    }

    /// Whether `event_id` owns the block (ignoring case).
    pub fn is_blocked_by(&self, event_id: &str) -> bool {
        self.blocked_by()
            .is_some_and(|owner| same_event(owner, event_id))
    }

    /// Whether another event than `event_id` owns the block.
    pub fn is_blocked_by_another(&self, event_id: &str) -> bool {
        self.blocked_by()
            .is_some_and(|owner| !same_event(owner, event_id))
    }

    /// Blocks the session by `event_id` (failure, pending handoff).
    pub fn block(&mut self, event_id: &str) {
        if !self.is_blocked_by(event_id) {
            // What was kept of the previous owner is not this one's.
            self.blocking_event = None;
        }
        self.blocked_by_event_id = Some(event_id.to_owned());
        // The settlement that blocks says which retry, if any, the block
        // waits for (the engine's `expect_retry`); a plain block writes
        // upstream's blob unchanged.
        self.pending_retry_message_id = None;
        self.pending_retry_at_ms = None;
    }

    /// Records which RetryRequest the block now waits for, and when it is
    /// due (`None`: it waits for none).
    pub fn expect_retry(&mut self, retry: Option<(&str, SystemTime)>) {
        self.pending_retry_message_id =
            Some(retry.map(|(id, _)| id).unwrap_or_default().to_owned());
        self.pending_retry_at_ms = retry.map(|(_, at)| crate::unix_millis(at));
    }

    /// Whether the block waits for a retry: `Some(false)` when its owner's
    /// retries are spent (or none applies), so an operator must act;
    /// `None` when the state does not say (upstream, or an earlier build).
    pub fn awaits_retry(&self) -> Option<bool> {
        self.pending_retry_message_id
            .as_deref()
            .map(|pending| !pending.is_empty())
    }

    /// When the retry the block waits for is due, when the state says.
    pub fn retry_at(&self) -> Option<SystemTime> {
        let ms = u64::try_from(self.pending_retry_at_ms?).ok()?;
        // The blob is read from the broker: any value is possible.
        Some(crate::saturating_add(
            UNIX_EPOCH,
            std::time::Duration::from_millis(ms),
        ))
    }

    /// Whether a RetryRequest with `message_id` is not the one the block
    /// waits for. Unknown (no record) accepts any, as upstream did.
    pub fn is_superseded_retry(&self, message_id: Option<&str>) -> bool {
        self.pending_retry_message_id
            .as_deref()
            .is_some_and(|pending| pending.is_empty() || message_id != Some(pending))
    }

    /// Removes the block. Parked messages stay parked until replayed.
    pub fn unblock(&mut self) {
        self.blocked_by_event_id = None;
        self.blocking_event = None;
        self.pending_retry_message_id = None;
        self.pending_retry_at_ms = None;
    }

    /// Keeps what an operator needs to act on the block without the
    /// Resolver's record (decision 0140). The engine calls it with every
    /// settled message of the block's owner; `handoff` says the settlement
    /// leaves the event pending a handoff. The event is taken from the
    /// message that blocked the session; a later run of it (a retry, a
    /// resubmission, perhaps edited) refreshes its payload. Nothing changes
    /// when `message` is not about the owner.
    pub fn note_blocker(&mut self, message: &NimbusMessage, handoff: bool) {
        if !message
            .event_id
            .as_deref()
            .is_some_and(|event_id| self.is_blocked_by(event_id))
        {
            return;
        }
        let mut kept = match self.blocking_event.take() {
            Some(mut kept) => {
                if BlockingEvent::carries_event(message) {
                    kept.keep_payload(message);
                }
                kept
            }
            None => BlockingEvent::of(message),
        };
        kept.handoff = handoff;
        self.blocking_event = Some(kept);
    }

    /// Parks one more message: returns its `DeferralSequence` and counts it.
    pub fn park(&mut self) -> u32 {
        let sequence = self.next_deferral_sequence;
        self.next_deferral_sequence = self.next_deferral_sequence.saturating_add(1);
        self.deferred_count = self.deferred_count.saturating_add(1);
        sequence
    }

    /// One parked message left the Deferred subscription (replayed). With
    /// nothing parked any more, no remembered settlement can still apply.
    pub fn unpark(&mut self) {
        self.deferred_count = self.deferred_count.saturating_sub(1);
        self.out_of_turn_replays = 0;
        if self.deferred_count == 0 {
            self.settled_parked_events.clear();
        }
    }

    /// The lowest `DeferralSequence` still parked. Sequences are handed out
    /// in order and parked messages leave in order (decision 0050, rule 4),
    /// so the parked ones are the `DeferredCount` sequences just below
    /// `NextDeferralSequence`.
    pub fn replay_floor(&self) -> u32 {
        self.next_deferral_sequence
            .saturating_sub(self.deferred_count)
    }

    /// Gives up on the parked messages below `sequence`: they are no longer
    /// counted, so the replay goes on from `sequence`. For parked messages
    /// that never came back (dead-lettered or removed by hand).
    pub fn give_up_parked_below(&mut self, sequence: u32) {
        let from_sequence = self.next_deferral_sequence.saturating_sub(sequence);
        self.deferred_count = self.deferred_count.min(from_sequence);
        self.out_of_turn_replays = 0;
    }

    /// Remembers that the operator settled `event_id` while messages are
    /// parked, so a copy of it parked so far, if there is one, does not run
    /// when it comes back. Nothing to remember when nothing is parked.
    pub fn remember_settled(&mut self, event_id: &str) {
        if !self.has_parked() {
            return;
        }
        let parked_before = self.next_deferral_sequence;
        match self
            .settled_parked_events
            .iter_mut()
            .find(|settled| same_event(&settled.event_id, event_id))
        {
            Some(settled) => settled.parked_before = parked_before,
            None => self.settled_parked_events.push(SettledParked {
                event_id: event_id.to_owned(),
                parked_before,
            }),
        }
    }

    /// Whether the replayed copy of `event_id` parked under `sequence` is
    /// one the operator settled while it was parked (ids ignoring case).
    pub fn was_settled_while_parked(&self, event_id: &str, sequence: u32) -> bool {
        self.settled_parked_events.iter().any(|settled| {
            same_event(&settled.event_id, event_id) && sequence < settled.parked_before
        })
    }

    /// Whether parked messages wait for a replay.
    pub fn has_parked(&self) -> bool {
        self.deferred_count > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_session_writes_upstream_json_and_reads_it_back() {
        let mut state = SessionState::default();
        state.block("e1");
        let bytes = state.to_bytes();
        assert_eq!(
            String::from_utf8(bytes.clone()).expect("utf8"),
            r#"{"DeferredSequenceNumbers":[],"BlockedByEventId":"e1","DeferredCount":0,"NextDeferralSequence":0}"#
        );
        assert_eq!(SessionState::from_bytes(&bytes), Ok(state));
    }

    /// Issue 28: a stored far-future retry time made every listing of its
    /// session panic, across restarts.
    #[test]
    fn a_stored_far_future_retry_time_reads_as_the_last_writable_tick() {
        let mut state = SessionState::default();
        state.block("e1");
        let far = UNIX_EPOCH + std::time::Duration::from_secs(1 << 50);
        state.expect_retry(Some(("r1", far)));
        let state = SessionState::from_bytes(&state.to_bytes()).expect("reads back");
        let at = state.retry_at().expect("a retry time");
        assert_eq!(crate::format_round_trip(at), crate::MAX_TIMESTAMP_TEXT);
        let stored = br#"{"BlockedByEventId":"e1","PendingRetryMessageId":"r1","PendingRetryAt":9223372036854775807}"#;
        let state = SessionState::from_bytes(stored).expect("reads");
        let at = state.retry_at().expect("a retry time");
        assert_eq!(crate::format_round_trip(at), crate::MAX_TIMESTAMP_TEXT);
    }

    #[test]
    fn parking_then_replaying_everything_returns_to_zero_bytes() {
        let mut state = SessionState::default();
        state.block("E1");
        assert_eq!(state.park(), 0);
        assert_eq!(state.park(), 1);
        assert_eq!(state.deferred_count, 2);
        assert!(state.is_blocked_by("e1"));
        assert!(!state.is_blocked_by_another("e1"));
        assert!(state.is_blocked_by_another("e2"));
        state.unblock();
        assert!(!state.to_bytes().is_empty(), "two messages still parked");
        state.unpark();
        state.unpark();
        assert!(state.is_empty());
        assert!(state.to_bytes().is_empty());
        state.unpark();
        assert_eq!(state.deferred_count, 0, "never below zero");
    }

    #[test]
    fn a_settlement_applies_to_the_copies_parked_before_it_while_any_are_parked() {
        let mut state = SessionState::default();
        state.block("e1");
        state.remember_settled("e2");
        assert!(state.settled_parked_events.is_empty(), "nothing parked");
        assert_eq!(state.park(), 0);
        assert_eq!(state.park(), 1);
        state.remember_settled("E2");
        assert!(state.was_settled_while_parked("e2", 0), "ignoring case");
        assert!(state.was_settled_while_parked("e2", 1));
        assert!(!state.was_settled_while_parked("e3", 0));
        let bytes = state.to_bytes();
        assert_eq!(
            String::from_utf8(bytes.clone()).expect("utf8"),
            r#"{"DeferredSequenceNumbers":[],"BlockedByEventId":"e1","DeferredCount":2,"NextDeferralSequence":2,"SettledParkedEvents":[{"EventId":"E2","ParkedBefore":2}]}"#
        );
        assert_eq!(SessionState::from_bytes(&bytes), Ok(state.clone()));
        // A copy of the same id parked after the settlement is not covered.
        assert_eq!(state.park(), 2);
        assert!(!state.was_settled_while_parked("e2", 2));
        state.unblock();
        state.unpark();
        state.unpark();
        assert!(state.was_settled_while_parked("e2", 0), "one still parked");
        state.unpark();
        assert!(state.settled_parked_events.is_empty(), "nothing parked");
        assert!(state.to_bytes().is_empty());
    }

    fn event_request(event_id: &str, payload: &str) -> NimbusMessage {
        NimbusMessage {
            message_id: Some(format!("m-{event_id}")),
            session_id: Some("s1".to_owned()),
            correlation_id: Some("c1".to_owned()),
            message_type: crate::MessageType::EventRequest,
            event_id: Some(event_id.to_owned()),
            event_type_id: Some("OrderPlaced".to_owned()),
            content: Some(crate::MessageContent::event(crate::EventContent::new(
                "OrderPlaced",
                payload.to_owned(),
            ))),
            properties: [(
                "Tenant".to_owned(),
                nimbus_transport::PropertyValue::String("acme".to_owned()),
            )]
            .into(),
            ..NimbusMessage::default()
        }
    }

    #[test]
    fn the_blocker_is_kept_from_the_message_that_blocked_and_goes_with_the_block() {
        let mut state = SessionState::default();
        state.block("e1");
        state.note_blocker(&event_request("e2", "{}"), false);
        assert_eq!(state.blocking_event, None, "not the owner");
        state.note_blocker(&event_request("e1", r#"{"N":1}"#), false);
        let kept = state.blocking_event.clone().expect("kept");
        assert_eq!(kept.message_id.as_deref(), Some("m-e1"));
        assert_eq!(kept.event_type_id.as_deref(), Some("OrderPlaced"));
        assert_eq!(kept.event_json.as_deref(), Some(r#"{"N":1}"#));
        assert_eq!(
            kept.user_properties.as_deref(),
            Some(r#"{"Tenant":"acme"}"#)
        );
        assert!(!kept.handoff);
        let read = SessionState::from_bytes(&state.to_bytes()).expect("reads back");
        assert_eq!(read, state);

        // A resubmission with an edited payload that hands the event off:
        // the payload is the edit, the rest as first received.
        let mut resubmitted = event_request("e1", r#"{"N":2}"#);
        resubmitted.message_type = crate::MessageType::ResubmissionRequest;
        resubmitted.message_id = Some("m-resubmit".to_owned());
        state.block("e1");
        state.note_blocker(&resubmitted, true);
        let kept = state.blocking_event.clone().expect("kept");
        assert_eq!(kept.message_id.as_deref(), Some("m-e1"));
        assert_eq!(kept.event_json.as_deref(), Some(r#"{"N":2}"#));
        assert!(kept.handoff);

        state.block("e3");
        assert_eq!(state.blocking_event, None, "another owner");
        state.note_blocker(&event_request("e3", "{}"), false);
        state.unblock();
        assert_eq!(state.blocking_event, None);
        assert!(state.to_bytes().is_empty());
    }

    #[test]
    fn a_blocker_over_the_size_kept_is_noted_without_its_payload() {
        let mut state = SessionState::default();
        state.block("e1");
        let large = format!(r#"{{"Text":"{}"}}"#, "x".repeat(MAX_KEPT_EVENT_BYTES));
        state.note_blocker(&event_request("e1", &large), false);
        let kept = state.blocking_event.expect("kept");
        assert_eq!(kept.event_json, None);
        assert_eq!(kept.user_properties, None);
        assert_eq!(
            kept.omitted_bytes,
            u64::try_from(large.len() + r#"{"Tenant":"acme"}"#.len()).expect("small")
        );
        assert_eq!(kept.event_type_id.as_deref(), Some("OrderPlaced"));
    }

    #[test]
    fn keys_are_case_sensitive_and_nulls_read_as_defaults() {
        let state = SessionState::from_bytes(br#"{"blockedByEventId":"e1","DeferredCount":null}"#)
            .expect("reads");
        assert!(!state.is_blocked(), "camelCase key is not BlockedByEventId");
        let state =
            SessionState::from_bytes(br#"{"DeferredSequenceNumbers":null,"BlockedByEventId":""}"#)
                .expect("reads");
        assert!(!state.is_blocked());
        let state =
            SessionState::from_bytes(br#"{"DeferredCount":1,"SettledParkedEventIds":null}"#)
                .expect("reads");
        assert!(state.settled_parked_events.is_empty());
        assert!(SessionState::from_bytes(b"{").is_err());
        assert!(SessionState::from_bytes(br#"{"DeferredCount":-1}"#).is_err());
    }
}
