//! The settlement decision against SEMANTICS.md, one table row per entry
//! point and outcome it states (§2.4–§2.6, §3, §4, §5, §6), with exact
//! delays: no clock, no randomness, no broker.

use std::time::Duration;

use nimbus_handler::{HandlerError, Outcome, PendingHandoff, Report};
use nimbus_wire::{Failure, NimbusMessage, SessionState};

use super::*;
use crate::classifier::Disposition as Classified;

/// The settled event; `OTHER` owns the block when the row says another does.
const THIS: &str = "e1";
const OTHER: &str = "e0";
/// The subscription's max delivery count in every row.
const MAX_DELIVERIES: u32 = 5;
/// The retries the default policy allows.
const BUDGET: u32 = 3;

fn boom() -> Failure {
    Failure::new("Boom", "it broke")
}

/// The delays, as a table: a transient backoff of 100 ms per delivery (at
/// least the hint), and retry `attempt` after `attempt + 1` seconds while
/// the budget lasts.
struct Table {
    budget: u32,
}

impl Delays for Table {
    fn transient_backoff(&self, delivery_count: u32, hint: Option<Duration>) -> Duration {
        let backoff = Duration::from_millis(100) * delivery_count;
        hint.map_or(backoff, |hint| backoff.max(hint))
    }

    fn retry_delay(
        &self,
        _event_type: Option<&str>,
        _failure: &Failure,
        attempt: u32,
        _hint: Option<Duration>,
    ) -> Option<Duration> {
        (attempt < self.budget).then(|| Duration::from_secs(u64::from(attempt) + 1))
    }
}

/// What settles: the handler's verdict, an operator request that runs no
/// handler, or an inbox duplicate.
#[derive(Debug, Clone, Copy)]
enum Ran {
    Handler(Verdict),
    Operator,
    Duplicate,
}

/// One row: a delivery, and what SEMANTICS.md says its settlement does.
struct Row {
    /// The section checked, and the case in words.
    spec: &'static str,
    entry: Entry,
    blocked_by: Option<&'static str>,
    parked: u32,
    ran: Ran,
    delivery: u32,
    replayed: bool,
    retry_count: u32,
    budget: u32,
    hint: Option<Duration>,
    gives: Expect,
}

fn row(spec: &'static str, entry: Entry, ran: Ran, gives: Expect) -> Row {
    Row {
        spec,
        entry,
        blocked_by: None,
        parked: 0,
        ran,
        delivery: 1,
        replayed: false,
        retry_count: 0,
        budget: BUDGET,
        hint: None,
        gives,
    }
}

impl Row {
    fn blocked_by(self, owner: &'static str) -> Row {
        Row {
            blocked_by: Some(owner),
            ..self
        }
    }

    fn parked(self, parked: u32) -> Row {
        Row { parked, ..self }
    }

    fn delivery(self, delivery: u32) -> Row {
        Row { delivery, ..self }
    }

    fn replayed(self) -> Row {
        Row {
            replayed: true,
            ..self
        }
    }

    fn retry_count(self, retry_count: u32) -> Row {
        Row {
            retry_count,
            ..self
        }
    }

    /// No retry policy matches the failure.
    fn no_policy(self) -> Row {
        Row { budget: 0, ..self }
    }

    fn hint_ms(self, ms: u64) -> Row {
        Row {
            hint: Some(Duration::from_millis(ms)),
            ..self
        }
    }

    fn state(&self) -> SessionState {
        let mut state = SessionState::default();
        for _ in 0..self.parked {
            state.park();
        }
        if let Some(owner) = self.blocked_by {
            state.block(owner);
        }
        state
    }

    /// Decides this row's settlement.
    fn decide(&self) -> Decision {
        let state = self.state();
        let failure = boom();
        let (plan, failed) = match self.ran {
            Ran::Handler(verdict) => (
                session_state::after_handler(self.entry, &state, THIS, verdict),
                matches!(
                    verdict,
                    Verdict::Failed(_) | Verdict::Transient | Verdict::Permanent
                ),
            ),
            Ran::Operator => (
                session_state::operator_request(self.entry, &state, THIS)
                    .unwrap_or_else(|| panic!("{}: not an operator request", self.spec)),
                false,
            ),
            Ran::Duplicate => (session_state::duplicate(self.entry, &state, THIS), false),
        };
        let message = NimbusMessage {
            event_id: Some(THIS.to_owned()),
            retry_count: self.retry_count,
            ..NimbusMessage::default()
        };
        let facts = Facts {
            entry: self.entry,
            state: &state,
            message: &message,
            event_id: THIS,
            replayed: self.replayed,
            delivery_count: self.delivery,
            max_delivery_count: MAX_DELIVERIES,
            plan,
            failure: failed.then_some(&failure),
            retry_after: self.hint,
        };
        super::plan(
            &facts,
            &Table {
                budget: self.budget,
            },
        )
    }
}

/// A decision, flattened to what a row states.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Abandon {
        backoff: Duration,
        first_failure: bool,
    },
    Commit(Settles),
}

/// What a committed settlement does, as a row states it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Settles {
    response: Option<Response>,
    /// Who blocks the session after it.
    blocked_by: Option<String>,
    /// How many messages are parked after it.
    parked: u32,
    follow_ups: bool,
    inbox: bool,
    retry: Option<ScheduledRetry>,
    expects_retry: bool,
    replay_trigger: bool,
    /// Dead-lettered with this reason and description; completed if `None`.
    dead_letter: Option<(String, String)>,
    blocks_for_good: bool,
}

fn abandon(backoff_ms: u64, first_failure: bool) -> Expect {
    Expect::Abandon {
        backoff: Duration::from_millis(backoff_ms),
        first_failure,
    }
}

fn responds(response: Response) -> Settles {
    Settles {
        response: Some(response),
        ..Settles::default()
    }
}

fn silent() -> Settles {
    Settles::default()
}

impl Settles {
    fn blocked_by(self, owner: &str) -> Settles {
        Settles {
            blocked_by: Some(owner.to_owned()),
            ..self
        }
    }

    fn parked(self, parked: u32) -> Settles {
        Settles { parked, ..self }
    }

    fn follow_ups(self) -> Settles {
        Settles {
            follow_ups: true,
            ..self
        }
    }

    fn inbox(self) -> Settles {
        Settles {
            inbox: true,
            ..self
        }
    }

    fn retry(self, delay_secs: u64, retry_count: u32) -> Settles {
        Settles {
            retry: Some(ScheduledRetry {
                delay: Duration::from_secs(delay_secs),
                retry_count,
            }),
            ..self
        }
    }

    fn expects_retry(self) -> Settles {
        Settles {
            expects_retry: true,
            ..self
        }
    }

    fn replay_trigger(self) -> Settles {
        Settles {
            replay_trigger: true,
            ..self
        }
    }

    fn dead_letter_permanent(self) -> Settles {
        Settles {
            dead_letter: Some((
                "Permanent failure: Boom: it broke".to_owned(),
                "Boom: it broke".to_owned(),
            )),
            ..self
        }
    }

    fn dead_letter_max_delivery(self) -> Settles {
        Settles {
            dead_letter: Some((
                "MaxDeliveryCountExceeded".to_owned(),
                format!(
                    "Transient failure on delivery {MAX_DELIVERIES} of {MAX_DELIVERIES}: Boom: it broke"
                ),
            )),
            ..self
        }
    }

    fn blocks_for_good(self) -> Settles {
        Settles {
            blocks_for_good: true,
            ..self
        }
    }

    fn done(self) -> Expect {
        Expect::Commit(self)
    }
}

fn observed(decision: Decision) -> Expect {
    let commit = match decision {
        Decision::Abandon {
            backoff,
            first_failure,
        } => {
            return Expect::Abandon {
                backoff,
                first_failure,
            };
        }
        Decision::Commit(commit) => *commit,
    };
    let dead_letter = match &commit.disposition {
        Disposition::Complete => None,
        Disposition::DeadLetter {
            reason,
            description,
        } => Some((reason.clone(), description.clone())),
        Disposition::Abandon { .. } => panic!("a commit never abandons"),
    };
    Expect::Commit(Settles {
        response: commit.plan.response,
        blocked_by: commit.next.blocked_by().map(str::to_owned),
        parked: commit.next.deferred_count,
        follow_ups: commit.plan.send_follow_ups,
        inbox: commit.plan.record_inbox,
        retry: commit.retry,
        expects_retry: commit.expects_retry,
        replay_trigger: commit.replay_trigger,
        dead_letter,
        blocks_for_good: commit.blocks_for_good,
    })
}

// One row per case, as a table reads: rustfmt would spread each over ten lines.
#[rustfmt::skip]
fn table() -> Vec<Row> {
    use Entry::{
        EventRequest, HandoffCompletedRequest, HandoffFailedRequest, ResubmissionRequest,
        RetryRequest, SkipRequest,
    };
    use Response::{
        DeadLetterNotification, Discard, Duplicate, Error, HandoffFailed, PendingHandoff,
        Resolution, Skip, Unsupported,
    };
    let completed = Ran::Handler(Verdict::Completed);
    let handoff = Ran::Handler(Verdict::PendingHandoff);
    let failed = Ran::Handler(Verdict::Failed(Classified::Retry));
    let classified_dead_letter = Ran::Handler(Verdict::Failed(Classified::DeadLetter));
    let discarded = Ran::Handler(Verdict::Failed(Classified::Discard));
    let permanent = Ran::Handler(Verdict::Permanent);
    let transient = Ran::Handler(Verdict::Transient);
    let unsupported = Ran::Handler(Verdict::Unsupported);
    vec![
        // ---- EventRequest on a free session.
        row("§3 completed: ResolutionResponse, follow-ups (§9), inbox record, complete",
            EventRequest, completed, responds(Resolution).follow_ups().inbox().done()),
        row("§3, §6 pending handoff: PendingHandoffResponse, block by this event, follow-ups, no inbox record",
            EventRequest, handoff, responds(PendingHandoff).blocked_by(THIS).follow_ups().done()),
        row("§3, §5 failed with a retry policy: ErrorResponse, block, RetryRequest scheduled and expected",
            EventRequest, failed, responds(Error).blocked_by(THIS).retry(1, 1).expects_retry().done()),
        row("§3, §5 failed, no policy matches: ErrorResponse, block, the block waits for no retry",
            EventRequest, failed, responds(Error).blocked_by(THIS).expects_retry().done()).no_policy(),
        row("§3 failed, classified DeadLetter: dead-letter now, the Resolver told, not blocked",
            EventRequest, classified_dead_letter, responds(DeadLetterNotification).dead_letter_permanent().done()),
        row("§3 failed, classified Discard: SkipResponse with the reason (DiscardResponse), complete",
            EventRequest, discarded, responds(Discard).done()),
        row("§3 permanent: dead-letter with `Permanent failure: {type}: {message}`, not blocked (F19)",
            EventRequest, permanent, responds(DeadLetterNotification).dead_letter_permanent().done()),
        row("§3 transient before the last delivery: abandon after the backoff, said once (F1)",
            EventRequest, transient, abandon(100, true)),
        row("§3 transient, a later delivery: the backoff grows, said no more",
            EventRequest, transient, abandon(300, false)).delivery(3),
        row("§3 transient with a retry-after hint: the backoff is at least the hint",
            EventRequest, transient, abandon(700, false)).delivery(2).hint_ms(700),
        row("§3 transient at the last delivery: the engine dead-letters it, MaxDeliveryCountExceeded, Resolver told (F1, F29)",
            EventRequest, transient, responds(DeadLetterNotification).dead_letter_max_delivery().done()).delivery(MAX_DELIVERIES),
        row("§2.6 unsupported (F11): UnsupportedResponse, complete",
            EventRequest, unsupported, responds(Unsupported).done()),
        // ---- RetryRequest of the blocker (§2.4 let it through).
        row("§3 a retry completes: ResolutionResponse, unblock; nothing parked, no replay",
            RetryRequest, completed, responds(Resolution).follow_ups().inbox().done()).blocked_by(THIS).retry_count(1),
        row("§2.6, §4 a retry completes with messages parked: unblock and replay them (F13)",
            RetryRequest, completed, responds(Resolution).follow_ups().inbox().parked(2).replay_trigger().done()).blocked_by(THIS).parked(2).retry_count(1),
        row("§5 a retry fails with budget left: stays blocked, the next retry scheduled and expected",
            RetryRequest, failed, responds(Error).blocked_by(THIS).retry(2, 2).expects_retry().done()).blocked_by(THIS).retry_count(1),
        row("§5 a retry fails with the budget spent: stays blocked, no retry, blocked for good",
            RetryRequest, failed, responds(Error).blocked_by(THIS).expects_retry().blocks_for_good().done()).blocked_by(THIS).retry_count(BUDGET),
        row("§3 a retry fails transiently before the last delivery: abandon, the block waits as it did",
            RetryRequest, transient, abandon(200, false)).blocked_by(THIS).retry_count(1).delivery(2),
        row("§3 a retry fails transiently at the last delivery: dead-lettered, block unchanged, it waits for no retry",
            RetryRequest, transient, responds(DeadLetterNotification).blocked_by(THIS).expects_retry().dead_letter_max_delivery().done()).blocked_by(THIS).retry_count(1).delivery(MAX_DELIVERIES),
        row("§3 a retry fails permanently: dead-lettered, the blocker keeps its block (upstream §4.3)",
            RetryRequest, permanent, responds(DeadLetterNotification).blocked_by(THIS).expects_retry().dead_letter_permanent().done()).blocked_by(THIS).retry_count(1),
        row("§6 a retry hands off: PendingHandoffResponse, still blocked, waits for no older retry",
            RetryRequest, handoff, responds(PendingHandoff).blocked_by(THIS).follow_ups().expects_retry().done()).blocked_by(THIS).retry_count(1),
        row("§3 a retry is discarded: unblock and replay what is parked",
            RetryRequest, discarded, responds(Discard).parked(1).replay_trigger().done()).blocked_by(THIS).parked(1).retry_count(1),
        row("§2.6 a retry finds no handler (F11): UnsupportedResponse, the block stays until an operator acts",
            RetryRequest, unsupported, responds(Unsupported).blocked_by(THIS).expects_retry().done()).blocked_by(THIS).retry_count(1),
        // ---- ResubmissionRequest (no guard, §2.4).
        row("§2.6 a resubmission of the blocker fails: keeps the block, fresh budget (attempt 0, RetryCount 1; F14)",
            ResubmissionRequest, failed, responds(Error).blocked_by(THIS).retry(1, 1).expects_retry().done()).blocked_by(THIS).retry_count(BUDGET),
        row("§2.6 a resubmission of the blocker fails, no policy: stays blocked for good (F14)",
            ResubmissionRequest, failed, responds(Error).blocked_by(THIS).expects_retry().blocks_for_good().done()).blocked_by(THIS).no_policy(),
        row("§2.6 a resubmission of the blocker completes: unblock and replay the parked (F13)",
            ResubmissionRequest, completed, responds(Resolution).follow_ups().inbox().parked(1).replay_trigger().done()).blocked_by(THIS).parked(1),
        row("§2.6 a resubmission of an event that does not own the block fails: that block stays, no retry",
            ResubmissionRequest, failed, responds(Error).blocked_by(OTHER).done()).blocked_by(OTHER),
        row("§2.6 a resubmission on a free session completes: ResolutionResponse, nothing to replay",
            ResubmissionRequest, completed, responds(Resolution).follow_ups().inbox().done()),
        // ---- Operator requests that run no handler (§6).
        row("§2.6 skip of the blocker: SkipResponse, unblock, replay the parked (F13)",
            SkipRequest, Ran::Operator, responds(Skip).parked(2).replay_trigger().done()).blocked_by(THIS).parked(2),
        row("§2.6 skip of the blocker, nothing parked: unblock, no replay",
            SkipRequest, Ran::Operator, responds(Skip).done()).blocked_by(THIS),
        row("§2.6 skip of an event that does not own the block: SkipResponse, that block stays",
            SkipRequest, Ran::Operator, responds(Skip).blocked_by(OTHER).done()).blocked_by(OTHER),
        row("§6 handoff completed: ResolutionResponse, unblock, replay the parked",
            HandoffCompletedRequest, Ran::Operator, responds(Resolution).parked(1).replay_trigger().done()).blocked_by(THIS).parked(1),
        row("§6 handoff completed for an event that does not own the block: ResolutionResponse, the block stays",
            HandoffCompletedRequest, Ran::Operator, responds(Resolution).blocked_by(OTHER).done()).blocked_by(OTHER),
        row("§6 handoff failed: HandoffFailedResponse, stays blocked for the operator, waits for no retry",
            HandoffFailedRequest, Ran::Operator, responds(HandoffFailed).blocked_by(THIS).expects_retry().done()).blocked_by(THIS),
        row("§6 handoff failed for an event that does not own the block: no response, complete",
            HandoffFailedRequest, Ran::Operator, silent().blocked_by(OTHER).done()).blocked_by(OTHER),
        // ---- Inbox duplicates (§2.3).
        row("§2.3 an inbox duplicate event: Duplicate SkipResponse, complete",
            EventRequest, Ran::Duplicate, responds(Duplicate).done()),
        row("§2.3 a duplicate retry of the blocker: the earlier delivery succeeded, so unblock",
            RetryRequest, Ran::Duplicate, responds(Duplicate).done()).blocked_by(THIS).retry_count(1),
        // ---- Replayed copies of parked messages (§4).
        row("§4 a replayed copy dead-lettered at the last delivery leaves the parked set",
            EventRequest, transient, responds(DeadLetterNotification).parked(1).dead_letter_max_delivery().done()).parked(2).replayed().delivery(MAX_DELIVERIES),
        row("§4 a replayed copy abandoned stays in flight: no state change",
            EventRequest, transient, abandon(100, true)).parked(2).replayed(),
        row("§4 a replayed copy completes: one fewer parked, no trigger (the replay goes on)",
            EventRequest, completed, responds(Resolution).follow_ups().inbox().parked(1).done()).parked(2).replayed(),
        row("§4 a replayed copy fails: blocks again, the rest stay parked in order",
            EventRequest, failed, responds(Error).blocked_by(THIS).parked(1).retry(1, 1).expects_retry().done()).parked(2).replayed(),
    ]
}

#[test]
fn every_entry_point_and_outcome_settles_as_semantics_md_says() {
    let rows = table();
    for row in &rows {
        assert_eq!(observed(row.decide()), row.gives, "{}", row.spec);
    }
    assert_eq!(rows.len(), 40, "a row added or lost");
}

#[test]
fn a_dead_letter_notification_always_goes_with_a_dead_letter() {
    for row in table() {
        if let Decision::Commit(commit) = row.decide() {
            assert_eq!(
                commit.plan.response == Some(Response::DeadLetterNotification),
                matches!(commit.disposition, Disposition::DeadLetter { .. }),
                "{}",
                row.spec
            );
        }
    }
}

#[test]
fn the_report_is_read_through_the_classifier_for_failed_only() {
    let classifier = Classifier::default();
    let read = |result| {
        let report = Report {
            result,
            follow_ups: Vec::new(),
            version: "v1".to_owned(),
        };
        read_report(Some(&report), Some("Order"), &classifier)
    };
    let unsupported = read_report(None, Some("Order"), &classifier);
    assert_eq!(unsupported.verdict, Verdict::Unsupported, "§2.6, F11");
    assert_eq!(unsupported.failure, None);

    assert_eq!(read(Ok(Outcome::Completed)).verdict, Verdict::Completed);
    let handoff = read(Ok(Outcome::PendingHandoff(PendingHandoff {
        reason: "waits for the partner".to_owned(),
        external_job_id: None,
        expected_by: None,
    })));
    assert_eq!(handoff.verdict, Verdict::PendingHandoff);

    let failed = read(Err(HandlerError::failed("Boom", "it broke".to_owned())));
    assert_eq!(
        failed.verdict,
        Verdict::Failed(Classified::Retry),
        "§3: Retry by default"
    );
    assert_eq!(failed.failure, Some(boom()));
    assert_eq!(
        failed.decided_by.as_deref(),
        Some("nimbus classifier default")
    );

    let mut transient = HandlerError::new(
        nimbus_handler::ErrorKind::Transient,
        "Boom",
        "it broke".to_owned(),
    );
    transient.retry_after = Some(Duration::from_secs(2));
    let transient = read(Err(transient));
    assert_eq!(transient.verdict, Verdict::Transient);
    assert_eq!(transient.decided_by, None, "not classified");
    assert_eq!(transient.retry_after, Some(Duration::from_secs(2)));

    let permanent = read(Err(HandlerError::new(
        nimbus_handler::ErrorKind::Permanent,
        "Boom",
        "it broke".to_owned(),
    )));
    assert_eq!(permanent.verdict, Verdict::Permanent);
    assert_eq!(permanent.failure, Some(boom()));
}
