//! The settlement as a value: what one settled delivery does, decided
//! before anything is sent (SEMANTICS.md §2.6, §3, §5, §6, §9).
//!
//! [`session_state`](crate::session_state) says what an outcome means for
//! the session ([`Plan`]); this module adds what depends on the delivery
//! and the endpoint's configuration: whether a transient failure is
//! redelivered after a backoff or, at the last delivery, dead-lettered by
//! the engine; which retry is scheduled, with which budget; whether the
//! block waits for it; whether parked messages must be replayed; the
//! dead-letter reason. [`plan`] is pure — the delays come through
//! [`Delays`], so a test gives a fixed table where production draws jitter
//! — and the delivery (`delivery.rs`) only carries the [`Decision`] out:
//! it builds the messages, commits, and logs.
//!
//! Key decision: what cannot be known before the commit is built stays
//! with the executor — the retry's fresh message id and due time, taken
//! from the clock as it is sent — so the [`Commit`] says *that* the state
//! expects the retry ([`Commit::expects_retry`]), and the executor writes
//! which one.

use std::time::Duration;

use nimbus_handler::{ErrorKind, Outcome, Report};
use nimbus_transport::Disposition;
use nimbus_wire::{Failure, NimbusMessage, SessionState, dead_letter};

use crate::classifier::Classifier;
use crate::policies::Policies;
use crate::session_state::{self, BlockChange, Entry, Plan, Response, Settle, Verdict};

/// The delays a settlement schedules, from the endpoint's policies
/// (SEMANTICS.md §3, §5). A trait so that tests give exact values where
/// production draws retry jitter.
pub(crate) trait Delays {
    /// How long to hold the session after a transient failure of delivery
    /// `delivery_count` (1 for the first) before abandoning it, at least
    /// the handler's retry-after `hint` (§3).
    fn transient_backoff(&self, delivery_count: u32, hint: Option<Duration>) -> Duration;

    /// The delay before automatic retry `attempt` (0 for the first) of
    /// `failure`, honouring the handler's `hint`; `None` when no policy
    /// matches or its budget is spent (§5).
    fn retry_delay(
        &self,
        event_type: Option<&str>,
        failure: &Failure,
        attempt: u32,
        hint: Option<Duration>,
    ) -> Option<Duration>;
}

impl Delays for Policies {
    fn transient_backoff(&self, delivery_count: u32, hint: Option<Duration>) -> Duration {
        self.transient.delay(delivery_count, hint)
    }

    fn retry_delay(
        &self,
        event_type: Option<&str>,
        failure: &Failure,
        attempt: u32,
        hint: Option<Duration>,
    ) -> Option<Duration> {
        // The inherent method (random jitter under the policies' lock), not
        // this one: a path names the inherent method first.
        Policies::retry_delay(self, event_type, failure, attempt, hint)
    }
}

/// What the handler's report says, as the settlement reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reported {
    /// The outcome, after the classifier.
    pub(crate) verdict: Verdict,
    /// The failure, when the handler failed.
    pub(crate) failure: Option<Failure>,
    /// The classifier rule that decided a `failed` outcome, for a
    /// DiscardResponse's text.
    pub(crate) decided_by: Option<String>,
    /// The handler's retry-after hint, when it failed with one.
    pub(crate) retry_after: Option<Duration>,
}

/// Reads the handler's report (`None`: no handler serves the type) for an
/// event of `event_type` (SEMANTICS.md §3): an ordinary failure goes
/// through the classifier; transient and permanent ones do not.
pub(crate) fn read_report(
    report: Option<&Report>,
    event_type: Option<&str>,
    classifier: &Classifier,
) -> Reported {
    let (verdict, failure, decided_by, retry_after) = match report.map(|r| &r.result) {
        // F11: no handler for the type.
        None => (Verdict::Unsupported, None, None, None),
        Some(Ok(Outcome::Completed)) => (Verdict::Completed, None, None, None),
        Some(Ok(Outcome::PendingHandoff(_))) => (Verdict::PendingHandoff, None, None, None),
        Some(Err(error)) => {
            let failure = Failure::new(error.error_type.clone(), error.message.clone());
            let (verdict, decided_by) = match error.kind {
                ErrorKind::Failed => {
                    let classification = classifier.classify(&failure.error_type, event_type);
                    (
                        Verdict::Failed(classification.disposition),
                        Some(classification.decided_by()),
                    )
                }
                ErrorKind::Transient => (Verdict::Transient, None),
                ErrorKind::Permanent => (Verdict::Permanent, None),
            };
            (verdict, Some(failure), decided_by, error.retry_after)
        }
    };
    Reported {
        verdict,
        failure,
        decided_by,
        retry_after,
    }
}

/// What a settlement is decided from: the delivery, the session state it
/// found, and the plan the outcome table gave for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    /// The entry point the message took.
    pub(crate) entry: Entry,
    /// The session state before this settlement.
    pub(crate) state: &'a SessionState,
    /// The message settled: its event type and `RetryCount` choose the
    /// retry, and the state keeps it when it owns the block (decision 0140).
    pub(crate) message: &'a NimbusMessage,
    /// Its EventId.
    pub(crate) event_id: &'a str,
    /// Whether it is a replayed copy of a parked message.
    pub(crate) replayed: bool,
    /// The broker's delivery count (1 for the first delivery).
    pub(crate) delivery_count: u32,
    /// The subscription's max delivery count.
    pub(crate) max_delivery_count: u32,
    /// What the outcome table says ([`session_state::after_handler`],
    /// [`session_state::operator_request`] or [`session_state::duplicate`]).
    pub(crate) plan: Plan,
    /// The handler's failure, if it failed.
    pub(crate) failure: Option<&'a Failure>,
    /// The handler's retry-after hint, if it gave one with its failure.
    pub(crate) retry_after: Option<Duration>,
}

/// What one settled delivery does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// A transient failure before the last delivery (§3; F1, F29): abandon
    /// the message now, alone — no response, no state change — then hold
    /// the session for `backoff`, so the broker redelivers it first in its
    /// session with its delivery count raised.
    Abandon {
        /// How long to hold the session.
        backoff: Duration,
        /// Whether this is the event's first delivery, so the operator is
        /// told once, at the default level: no response says it (§3).
        first_failure: bool,
    },
    /// Everything else: one atomic commit, in SEMANTICS.md's order
    /// (response → session state → scheduled retry → complete).
    Commit(Box<Commit>),
}

/// A settlement committed in one go (§2.6).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Commit {
    /// The plan as carried out: the response, the block change, follow-ups
    /// and inbox record. At the last delivery a transient failure's plan is
    /// a dead-letter with a DeadLetterNotification.
    pub(crate) plan: Plan,
    /// The session state to write, before the executor records the retry
    /// it waits for ([`Self::expects_retry`]).
    pub(crate) next: SessionState,
    /// The RetryRequest to schedule, if a policy allows one (§5).
    pub(crate) retry: Option<ScheduledRetry>,
    /// Whether the state records which retry the block waits for — this
    /// one, or none when `retry` is `None` (F14).
    pub(crate) expects_retry: bool,
    /// Whether to send a ProcessDeferredRequest: this settlement unblocks
    /// the session and messages are parked (§4, F13).
    pub(crate) replay_trigger: bool,
    /// Complete, or dead-letter with the reason and description the broker
    /// records and the Resolver is told.
    pub(crate) disposition: Disposition,
    /// A retry or resubmission of the blocker failed with no retry left:
    /// only an operator unblocks the session now, which the log says.
    pub(crate) blocks_for_good: bool,
}

/// A RetryRequest to schedule (§5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScheduledRetry {
    /// How long from now it is due.
    pub(crate) delay: Duration,
    /// Its `RetryCount`.
    pub(crate) retry_count: u32,
}

/// Decides the settlement of one delivery (SEMANTICS.md §2.6, §3, §5, §6).
pub(crate) fn plan(facts: &Facts<'_>, delays: &impl Delays) -> Decision {
    let mut plan = facts.plan;
    // §3 transient: hand the message back and hold the session for the
    // backoff, so the broker redelivers it first in its session. At the
    // last delivery the engine dead-letters it itself, in the broker's
    // stead, so the Resolver is told in the same commit (F1, F29).
    let transient = plan.settle == Settle::Abandon;
    if transient {
        if facts.delivery_count < facts.max_delivery_count {
            return Decision::Abandon {
                backoff: delays.transient_backoff(facts.delivery_count, facts.retry_after),
                first_failure: facts.delivery_count <= 1,
            };
        }
        plan.response = Some(Response::DeadLetterNotification);
        plan.settle = Settle::DeadLetter;
    }

    // After the transient decision: a replayed copy that is dead-lettered
    // leaves the parked set, one that is abandoned stays in flight.
    let mut next = facts.state.clone();
    plan.apply(&mut next, facts.event_id, facts.replayed);
    // The blocked message leaves the broker with this settlement: the
    // state keeps what an operator needs to act on the block should the
    // Resolver lose its record of the event (decision 0140).
    next.note_blocker(
        facts.message,
        plan.response == Some(Response::PendingHandoff),
    );

    let retry = scheduled_retry(facts, &plan, delays);
    // The block waits for this retry, or none: any earlier one of its
    // owner is stale from now on (F14). So it is after every settled run
    // of the owner's retry or resubmission, whatever its outcome: one that
    // hands off, fails for good or schedules no other leaves the block
    // waiting for none (an older chain must not run the handler again, nor
    // start a second external job); and after a failed handoff, which
    // waits for an operator. One abandoned ([`Decision::Abandon`]) comes
    // back, so the block still waits as it did.
    let owner_ran = matches!(
        facts.entry,
        Entry::RetryRequest | Entry::ResubmissionRequest | Entry::HandoffFailedRequest
    );
    let expects_retry =
        (plan.retry_if_policy_allows || owner_ran) && next.is_blocked_by(facts.event_id);

    // §4, F13: parked messages are replayed only when this settlement
    // actually unblocks; the trigger rides in the same commit, so a crash
    // never strands them.
    let replay_trigger = facts.state.is_blocked()
        && !next.is_blocked()
        && session_state::needs_replay_trigger(&next);

    let disposition = match plan.settle {
        Settle::Complete => Disposition::Complete,
        Settle::DeadLetter | Settle::Abandon => {
            let (reason, description) = dead_letter_reason(facts, transient);
            Disposition::DeadLetter {
                reason,
                description,
            }
        }
    };

    let blocks_for_good = plan.block != BlockChange::BlockByThis
        && plan.retry_if_policy_allows
        && retry.is_none()
        && next.is_blocked_by(facts.event_id);

    Decision::Commit(Box::new(Commit {
        plan,
        next,
        retry,
        expects_retry,
        replay_trigger,
        disposition,
        blocks_for_good,
    }))
}

/// The retry to schedule when the plan allows one and a policy matches
/// (§5). A resubmission of the blocker starts a fresh budget: attempt 0,
/// and the retry it schedules is the first (F14).
fn scheduled_retry(facts: &Facts<'_>, plan: &Plan, delays: &impl Delays) -> Option<ScheduledRetry> {
    if !plan.retry_if_policy_allows {
        return None;
    }
    let failure = facts.failure?;
    let fresh_budget = facts.entry == Entry::ResubmissionRequest;
    let attempt = if fresh_budget {
        0
    } else {
        facts.message.retry_count
    };
    let delay = delays.retry_delay(
        facts.message.event_type(),
        failure,
        attempt,
        facts.retry_after,
    )?;
    let retry_count = if fresh_budget {
        1
    } else {
        facts.message.retry_count.saturating_add(1)
    };
    Some(ScheduledRetry { delay, retry_count })
}

/// The dead-letter reason and description of a failure: upstream's
/// `Permanent failure: {type}: {message}` (§3, F19), or the broker's
/// max-delivery reason when a `transient` failure used up the deliveries
/// (F1, F29).
fn dead_letter_reason(facts: &Facts<'_>, transient: bool) -> (String, String) {
    match facts.failure {
        Some(failure) if transient => (
            dead_letter::MAX_DELIVERY_COUNT_EXCEEDED.to_owned(),
            format!(
                "Transient failure on delivery {} of {}: {}",
                facts.delivery_count,
                facts.max_delivery_count,
                failure.text()
            ),
        ),
        Some(failure) => (
            dead_letter::permanent_failure_reason(failure),
            failure.text(),
        ),
        None => (
            dead_letter::FAILED_TO_HANDLE.to_owned(),
            "no handler failure recorded".to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests;
