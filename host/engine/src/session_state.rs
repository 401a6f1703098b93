//! The session guard and the settlement table: for each entry point, what a
//! session state and a handler outcome lead to (SEMANTICS.md §2.4–§2.6, §3,
//! §6; upstream's tables in nimbus-semantics.md §4.2–§4.7 and §4.11).
//!
//! Pure decisions over [`SessionState`]: the engine carries a [`Plan`] out
//! in SEMANTICS.md's settlement order — response, session state, scheduled
//! retry, complete — and builds each message with `nimbus_wire::build`.
//! Where nimbus differs from upstream, the variant says which flag.

use nimbus_wire::{MessageType, SessionState};

use crate::classifier::Disposition;

/// The entry points of the strict procedure (messages on the endpoint's
/// session subscription).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// An event: publish, forward or replay.
    EventRequest,
    /// An automatic retry.
    RetryRequest,
    /// The operator resubmits (no session guard).
    ResubmissionRequest,
    /// The operator skips (handler never runs).
    SkipRequest,
    /// The external job finished (handler never runs).
    HandoffCompletedRequest,
    /// The external job failed (handler never runs).
    HandoffFailedRequest,
}

impl Entry {
    /// The entry point for a message type; `None` for types an endpoint does
    /// not handle (responses, ProcessDeferredRequest, Unknown), which are
    /// dead-lettered with `Failed to handle message.`. `UnsupportedResponse`
    /// takes the EventRequest procedure, as upstream (F12).
    pub fn for_message_type(kind: MessageType) -> Option<Entry> {
        match kind {
            MessageType::EventRequest | MessageType::UnsupportedResponse => {
                Some(Entry::EventRequest)
            }
            MessageType::RetryRequest => Some(Entry::RetryRequest),
            MessageType::ResubmissionRequest => Some(Entry::ResubmissionRequest),
            MessageType::SkipRequest => Some(Entry::SkipRequest),
            MessageType::HandoffCompletedRequest => Some(Entry::HandoffCompletedRequest),
            MessageType::HandoffFailedRequest => Some(Entry::HandoffFailedRequest),
            _ => None,
        }
    }

    /// Whether this entry point runs the handler.
    pub fn runs_handler(self) -> bool {
        matches!(
            self,
            Entry::EventRequest | Entry::RetryRequest | Entry::ResubmissionRequest
        )
    }

    /// Whether the sender must be the Manager (`From = Manager`).
    pub fn requires_manager(self) -> bool {
        matches!(
            self,
            Entry::ResubmissionRequest
                | Entry::SkipRequest
                | Entry::HandoffCompletedRequest
                | Entry::HandoffFailedRequest
        )
    }
}

/// Why a message is completed without a handler and without a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silent {
    /// An EventRequest whose EventId owns the block: a redelivery of the
    /// blocker; the block stays (F3, F4; upstream parked it behind itself).
    BlockerRedelivery,
    /// A RetryRequest for an event that no longer owns the block (the
    /// operator resubmitted or skipped it): stale (F14; upstream answered
    /// ResolutionResponse, which could flip a Skipped row to Completed).
    StaleRetry,
}

/// Which `DeferralSequence` a parked message gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkSequence {
    /// A new arrival: the next sequence of the session ([`SessionState::park`]).
    Next,
    /// A replayed copy that met a block again keeps its place (decision 0050,
    /// rule 2); it is still counted as parked, so the state does not change.
    Keep(u32),
}

/// What the session guard says before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// Go on: run the handler (or, for operator requests, act on the block).
    Proceed,
    /// DeferralResponse, park, complete.
    Park {
        /// The EventId that owns the block; `None` when nothing blocks the
        /// session but earlier events are still parked (decision 0050's
        /// gate, rule 1): the event waits behind them.
        blocked_by: Option<String>,
        /// The sequence to park under.
        sequence: ParkSequence,
    },
    /// Complete without a handler and without a response.
    CompleteSilently(Silent),
}

/// The session guard for `event_id` arriving at `entry` (SEMANTICS.md §2.4,
/// §4). `replayed` is the message's
/// [`replayed_sequence`](nimbus_wire::NimbusMessage::replayed_sequence): a
/// replayed copy of a parked message may run while others are still parked;
/// a new arrival may not.
pub fn guard(entry: Entry, state: &SessionState, event_id: &str, replayed: Option<u32>) -> Guard {
    let sequence = replayed.map_or(ParkSequence::Next, ParkSequence::Keep);
    match entry {
        Entry::EventRequest => match state.blocked_by() {
            Some(_) if state.is_blocked_by(event_id) => {
                Guard::CompleteSilently(Silent::BlockerRedelivery)
            }
            Some(owner) => Guard::Park {
                blocked_by: Some(owner.to_owned()),
                sequence,
            },
            None if replayed.is_none() && state.has_parked() => Guard::Park {
                blocked_by: None,
                sequence,
            },
            None => Guard::Proceed,
        },
        Entry::RetryRequest if !state.is_blocked_by(event_id) => {
            Guard::CompleteSilently(Silent::StaleRetry)
        }
        _ => Guard::Proceed,
    }
}

/// Whether `message_id` at `entry` is a RetryRequest its session no longer
/// waits for: the block's owner was resubmitted since and scheduled a retry
/// of its own, or schedules none (SEMANTICS.md §2.4's stale retry, F14).
pub fn superseded_retry(entry: Entry, state: &SessionState, message_id: Option<&str>) -> bool {
    entry == Entry::RetryRequest && state.is_superseded_retry(message_id)
}

/// Whether a replayed copy may go on now (decision 0050, rule 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Not a replayed copy, or the lowest one parked: the usual checks
    /// decide.
    Go,
    /// A lower one is still parked (or in flight from another replay): park
    /// this one again under its sequence. `counted` when the session is not
    /// blocked, so only a replay that should be running counts towards
    /// giving up on a lost parked message.
    Wait {
        /// The copy's sequence, which it keeps.
        sequence: u32,
        /// Whether it counts as a replay out of turn.
        counted: bool,
    },
    /// Lower ones were waited for through several whole replays and never
    /// came back (dead-lettered or removed by hand): give up on them and go
    /// on from this one.
    GiveUpBelow {
        /// The copy's sequence.
        sequence: u32,
        /// The lowest sequence still counted as parked.
        floor: u32,
    },
}

/// How many out-of-turn replays, with `parked` messages parked, mean the
/// lower ones are gone: each replay republishes every parked message, so a
/// message that exists comes back within two replays; four, and a margin
/// for small sets, leave no doubt.
fn gone_after(parked: u32) -> u32 {
    parked.saturating_mul(4).saturating_add(64)
}

/// Whether the replayed copy (`replayed`, its `DeferralSequence`) arriving
/// at `entry` may go on. Parked messages run strictly in sequence order:
/// a copy above the lowest one parked waits, whatever interleaved with the
/// replays (an operator's unblock between two replays' copies, say).
pub fn replay_turn(entry: Entry, state: &SessionState, replayed: Option<u32>) -> Turn {
    let Some(sequence) = replayed.filter(|_| entry == Entry::EventRequest) else {
        return Turn::Go;
    };
    let floor = state.replay_floor();
    if sequence <= floor {
        return Turn::Go;
    }
    if state.is_blocked() {
        return Turn::Wait {
            sequence,
            counted: false,
        };
    }
    if state.out_of_turn_replays >= gone_after(state.deferred_count) {
        return Turn::GiveUpBelow { sequence, floor };
    }
    Turn::Wait {
        sequence,
        counted: true,
    }
}

/// Whether `event_id` arriving at `entry` is a replayed copy (parked under
/// `replayed`) of an event the operator settled while it was parked: it is
/// completed without a handler or a response, before any other check, the
/// inbox's included (decision 0110). Upstream ran it again, and its outcome
/// replaced the operator's.
pub fn settled_while_parked(
    entry: Entry,
    state: &SessionState,
    event_id: &str,
    replayed: Option<u32>,
) -> bool {
    entry == Entry::EventRequest
        && replayed.is_some_and(|sequence| state.was_settled_while_parked(event_id, sequence))
}

/// Parks one message in `state`: returns the `DeferralSequence` to send the
/// parked copy with.
pub fn park(state: &mut SessionState, sequence: ParkSequence) -> u32 {
    match sequence {
        ParkSequence::Next => state.park(),
        ParkSequence::Keep(n) => n,
    }
}

/// Whether, after a settlement was applied, the session is left unblocked
/// with messages parked, so the same commit must send a
/// ProcessDeferredRequest (`nimbus_wire::build::process_deferred_request`);
/// a crash then never strands parked messages. Extra triggers are harmless.
pub fn needs_replay_trigger(state: &SessionState) -> bool {
    !state.is_blocked() && state.has_parked()
}

/// What the handler (or the host on its behalf) reported, after the
/// classifier: the handler's `nimbus_handler::Outcome` or error, as the
/// outcome table reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Handled.
    Completed,
    /// Handed off to an external job.
    PendingHandoff,
    /// `failed` (or a trap, timeout, memory overrun), with the classifier's disposition.
    Failed(Disposition),
    /// `permanent`: dead-letter now.
    Permanent,
    /// `transient`: redeliver after a backoff.
    Transient,
    /// No handler for the event type.
    Unsupported,
}

/// The response to send, built with the matching `nimbus_wire::build` function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// `resolution_response` (a HandoffCompletedRequest answers with its own content).
    Resolution,
    /// `error_response`.
    Error,
    /// `handoff_failed_response`.
    HandoffFailed,
    /// `pending_handoff_response`.
    PendingHandoff,
    /// `deferral_response`.
    Deferral,
    /// `skip_response` (operator skip).
    Skip,
    /// `duplicate_response` (inbox duplicate).
    Duplicate,
    /// `discard_response`.
    Discard,
    /// `unsupported_response`.
    Unsupported,
    /// `dead_letter_notification`.
    DeadLetterNotification,
}

/// The session-state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockChange {
    /// Leave the block as it is.
    Keep,
    /// Block the session by this event.
    BlockByThis,
    /// Remove the block (this event owned it); then replay what is parked.
    Unblock,
}

/// How the inbound message is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Complete it.
    Complete,
    /// Dead-letter it (with `Permanent failure: {type}: {message}`).
    DeadLetter,
    /// Leave it to the broker: wait a backoff holding the session, then abandon.
    Abandon,
}

/// Everything one settlement does, in SEMANTICS.md's order: response →
/// session state → scheduled retry → settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The response to the Resolver, if any.
    pub response: Option<Response>,
    /// The block change.
    pub block: BlockChange,
    /// Schedule a RetryRequest if a retry policy matches and its budget allows.
    pub retry_if_policy_allows: bool,
    /// How the inbound message is settled.
    pub settle: Settle,
    /// Send the handler's held follow-up events (only after `completed` or
    /// `pending-handoff`, SEMANTICS.md §9).
    pub send_follow_ups: bool,
    /// Record the message in the inbox (only after `completed`).
    pub record_inbox: bool,
    /// Remember the event as settled while parked, so its parked copy does
    /// not run when it is replayed: an operator skip, or a resubmission that
    /// completes, hands off or discards it, of an event that does not own
    /// the block while messages are parked.
    pub remember_settled: bool,
}

impl Plan {
    fn new(response: Option<Response>, block: BlockChange, settle: Settle) -> Plan {
        Plan {
            response,
            block,
            retry_if_policy_allows: false,
            settle,
            send_follow_ups: false,
            record_inbox: false,
            remember_settled: false,
        }
    }

    /// Whether parked messages should now be replayed: only when this
    /// settlement actually unblocks the session (F13).
    pub fn drains(&self) -> bool {
        self.block == BlockChange::Unblock
    }

    /// Applies the plan to `state`: the block change and, when the settled
    /// message is a replayed copy (`replayed`), one fewer parked message —
    /// unless it is abandoned, which leaves it in flight.
    pub fn apply(&self, state: &mut SessionState, event_id: &str, replayed: bool) {
        match self.block {
            BlockChange::Keep => {}
            BlockChange::BlockByThis => state.block(event_id),
            BlockChange::Unblock => state.unblock(),
        }
        if self.remember_settled {
            state.remember_settled(event_id);
        }
        if replayed && self.settle != Settle::Abandon {
            state.unpark();
        }
    }
}

/// The settlement after the handler ran for `event_id` at `entry`, given the
/// session state *before* it ran (the guard already let it through).
pub fn after_handler(entry: Entry, state: &SessionState, event_id: &str, verdict: Verdict) -> Plan {
    use BlockChange::{BlockByThis, Keep, Unblock};
    let owns = state.is_blocked_by(event_id);
    let other = state.is_blocked_by_another(event_id);
    // Success-like outcomes release the block only if this event owns it.
    let release = if owns { Unblock } else { Keep };
    // A resubmission of an event that may be parked, to an outcome that
    // settles it (completed, handed off, discarded): its parked copy must
    // not run the handler again (decision 0110).
    let settles_parked = entry == Entry::ResubmissionRequest && !owns && state.has_parked();
    match verdict {
        Verdict::Completed => Plan {
            send_follow_ups: true,
            record_inbox: true,
            remember_settled: settles_parked,
            ..Plan::new(Some(Response::Resolution), release, Settle::Complete)
        },
        Verdict::PendingHandoff => Plan {
            send_follow_ups: true,
            remember_settled: settles_parked,
            // A resubmission while another event owns the block reports the
            // handoff but leaves that block alone (upstream §4.4).
            ..Plan::new(
                Some(Response::PendingHandoff),
                if other { Keep } else { BlockByThis },
                Settle::Complete,
            )
        },
        Verdict::Failed(Disposition::Retry) => {
            let (block, retry) = match entry {
                Entry::EventRequest => (BlockByThis, true),
                Entry::RetryRequest => (Keep, true),
                // F14: a failed resubmission of the blocker keeps the block
                // and starts a fresh retry budget; otherwise nothing changes.
                _ => (Keep, owns),
            };
            Plan {
                retry_if_policy_allows: retry,
                ..Plan::new(Some(Response::Error), block, Settle::Complete)
            }
        }
        Verdict::Failed(Disposition::DeadLetter) | Verdict::Permanent => {
            // Never blocks (F19); a blocker that dead-letters keeps its block
            // for the operator to resubmit or skip, as upstream (§4.3).
            Plan::new(
                Some(Response::DeadLetterNotification),
                Keep,
                Settle::DeadLetter,
            )
        }
        Verdict::Failed(Disposition::Discard) => Plan {
            remember_settled: settles_parked,
            ..Plan::new(Some(Response::Discard), release, Settle::Complete)
        },
        // F11: Unsupported on every entry point; a blocker's block stays until an operator acts.
        Verdict::Unsupported => Plan::new(Some(Response::Unsupported), Keep, Settle::Complete),
        Verdict::Transient => Plan::new(None, Keep, Settle::Abandon),
    }
}

/// The settlement of an operator request that never runs the handler.
/// `None` for entry points that run the handler.
pub fn operator_request(entry: Entry, state: &SessionState, event_id: &str) -> Option<Plan> {
    let owns = state.is_blocked_by(event_id);
    let plan = match (entry, owns) {
        (Entry::SkipRequest, true) => {
            Plan::new(Some(Response::Skip), BlockChange::Unblock, Settle::Complete)
        }
        // The event may be one of the parked ones: its parked copy must not
        // run when the session replays.
        (Entry::SkipRequest, false) => Plan {
            remember_settled: state.has_parked(),
            ..Plan::new(Some(Response::Skip), BlockChange::Keep, Settle::Complete)
        },
        (Entry::HandoffCompletedRequest, true) => Plan::new(
            Some(Response::Resolution),
            BlockChange::Unblock,
            Settle::Complete,
        ),
        (Entry::HandoffCompletedRequest, false) => Plan::new(
            Some(Response::Resolution),
            BlockChange::Keep,
            Settle::Complete,
        ),
        // The session stays blocked: the operator then resubmits or skips.
        (Entry::HandoffFailedRequest, true) => Plan::new(
            Some(Response::HandoffFailed),
            BlockChange::Keep,
            Settle::Complete,
        ),
        // Not the blocker: a response could mis-target another event.
        (Entry::HandoffFailedRequest, false) => {
            Plan::new(None, BlockChange::Keep, Settle::Complete)
        }
        _ => return None,
    };
    Some(plan)
}

/// The settlement of an inbox duplicate at `entry` (the handler does not
/// run): Duplicate SkipResponse and complete; a retry or resubmission of the
/// blocker releases its block, since the earlier delivery already succeeded.
pub fn duplicate(entry: Entry, state: &SessionState, event_id: &str) -> Plan {
    let releases = matches!(entry, Entry::RetryRequest | Entry::ResubmissionRequest)
        && state.is_blocked_by(event_id);
    Plan::new(
        Some(Response::Duplicate),
        if releases {
            BlockChange::Unblock
        } else {
            BlockChange::Keep
        },
        Settle::Complete,
    )
}

#[cfg(test)]
mod tests;
