//! The session guard and settlement table, entry point by entry point
//! (SEMANTICS.md §2–§4, §6, with scenarios.md's RP-22/23/25).

use nimbus_wire::{MessageType, SessionState};

use super::*;
use crate::classifier::Disposition;

fn blocked_by(event_id: &str) -> SessionState {
    let mut state = SessionState::default();
    state.block(event_id);
    state
}

fn free() -> SessionState {
    SessionState::default()
}

#[test]
fn entry_points_follow_the_message_type() {
    assert_eq!(
        Entry::for_message_type(MessageType::EventRequest),
        Some(Entry::EventRequest)
    );
    assert_eq!(
        Entry::for_message_type(MessageType::UnsupportedResponse),
        Some(Entry::EventRequest),
        "F12, as upstream"
    );
    for unhandled in [
        MessageType::Unknown,
        MessageType::ErrorResponse,
        MessageType::ResolutionResponse,
        MessageType::DeferralResponse,
        MessageType::SkipResponse,
        MessageType::PendingHandoffResponse,
        MessageType::ProcessDeferredRequest,
        MessageType::ContinuationRequest,
    ] {
        assert_eq!(Entry::for_message_type(unhandled), None, "{unhandled}");
    }
    assert!(Entry::SkipRequest.requires_manager());
    assert!(!Entry::RetryRequest.requires_manager());
    assert!(!Entry::SkipRequest.runs_handler());
}

#[test]
fn an_event_on_a_free_session_runs() {
    assert_eq!(
        guard(Entry::EventRequest, &free(), "e1", None),
        Guard::Proceed
    );
}

#[test]
fn an_event_on_a_session_blocked_by_another_is_parked() {
    assert_eq!(
        guard(Entry::EventRequest, &blocked_by("e1"), "e2", None),
        Guard::Park {
            blocked_by: Some("e1".into()),
            sequence: ParkSequence::Next,
        }
    );
}

#[test]
fn a_redelivered_blocker_completes_silently_and_keeps_the_block() {
    assert_eq!(
        guard(Entry::EventRequest, &blocked_by("E1"), "e1", None),
        Guard::CompleteSilently(Silent::BlockerRedelivery),
        "F3/F4; event ids compared ignoring case"
    );
}

#[test]
fn rp22_a_retry_for_an_event_that_no_longer_blocks_completes_silently() {
    // SEMANTICS.md §2.4 (F14) wins over upstream's ResolutionResponse.
    assert_eq!(
        guard(
            Entry::RetryRequest,
            &blocked_by("different-event"),
            "e1",
            None
        ),
        Guard::CompleteSilently(Silent::StaleRetry)
    );
    assert_eq!(
        guard(Entry::RetryRequest, &free(), "e1", None),
        Guard::CompleteSilently(Silent::StaleRetry)
    );
    assert_eq!(
        guard(Entry::RetryRequest, &blocked_by("e1"), "e1", None),
        Guard::Proceed
    );
}

#[test]
fn a_resubmission_has_no_guard() {
    assert_eq!(
        guard(Entry::ResubmissionRequest, &blocked_by("other"), "e1", None),
        Guard::Proceed
    );
}

#[test]
fn event_request_outcomes() {
    let state = free();
    let plan = after_handler(Entry::EventRequest, &state, "e1", Verdict::Completed);
    assert_eq!(plan.response, Some(Response::Resolution));
    assert_eq!(plan.block, BlockChange::Keep);
    assert!(plan.send_follow_ups && plan.record_inbox);
    assert_eq!(plan.settle, Settle::Complete);

    let plan = after_handler(Entry::EventRequest, &state, "e1", Verdict::PendingHandoff);
    assert_eq!(plan.response, Some(Response::PendingHandoff));
    assert_eq!(plan.block, BlockChange::BlockByThis);
    assert!(plan.send_follow_ups, "a handoff keeps its follow-ups");
    assert!(!plan.record_inbox, "no inbox record for a pending handoff");

    let plan = after_handler(
        Entry::EventRequest,
        &state,
        "e1",
        Verdict::Failed(Disposition::Retry),
    );
    assert_eq!(plan.response, Some(Response::Error));
    assert_eq!(plan.block, BlockChange::BlockByThis);
    assert!(plan.retry_if_policy_allows);
    assert!(
        !plan.send_follow_ups,
        "a failed attempt never leaks an event"
    );

    for outcome in [Verdict::Permanent, Verdict::Failed(Disposition::DeadLetter)] {
        let plan = after_handler(Entry::EventRequest, &state, "e1", outcome);
        assert_eq!(plan.response, Some(Response::DeadLetterNotification));
        assert_eq!(plan.block, BlockChange::Keep, "F19: never blocks");
        assert_eq!(plan.settle, Settle::DeadLetter);
    }

    let plan = after_handler(
        Entry::EventRequest,
        &state,
        "e1",
        Verdict::Failed(Disposition::Discard),
    );
    assert_eq!(plan.response, Some(Response::Discard));
    assert_eq!(plan.block, BlockChange::Keep);

    let plan = after_handler(Entry::EventRequest, &state, "e1", Verdict::Unsupported);
    assert_eq!(plan.response, Some(Response::Unsupported));
    assert_eq!(plan.settle, Settle::Complete);

    let plan = after_handler(Entry::EventRequest, &state, "e1", Verdict::Transient);
    assert_eq!(plan.response, None);
    assert_eq!(plan.settle, Settle::Abandon);
    assert!(!plan.send_follow_ups);
}

#[test]
fn a_successful_retry_unblocks_and_drains() {
    let plan = after_handler(
        Entry::RetryRequest,
        &blocked_by("e1"),
        "e1",
        Verdict::Completed,
    );
    assert_eq!(plan.block, BlockChange::Unblock);
    assert!(plan.drains());
    assert_eq!(plan.response, Some(Response::Resolution));
}

#[test]
fn rp23_a_failed_retry_keeps_the_block_and_may_retry_again() {
    let plan = after_handler(
        Entry::RetryRequest,
        &blocked_by("e1"),
        "e1",
        Verdict::Failed(Disposition::Retry),
    );
    assert_eq!(plan.response, Some(Response::Error));
    assert_eq!(plan.block, BlockChange::Keep);
    assert!(!plan.drains());
    assert!(plan.retry_if_policy_allows);
    assert_eq!(plan.settle, Settle::Complete);
}

#[test]
fn rp25_no_handler_on_a_retry_answers_unsupported_and_keeps_the_block() {
    // SEMANTICS.md §2.6 (F11) wins over upstream's generic dead-letter.
    let plan = after_handler(
        Entry::RetryRequest,
        &blocked_by("e1"),
        "e1",
        Verdict::Unsupported,
    );
    assert_eq!(plan.response, Some(Response::Unsupported));
    assert_eq!(plan.block, BlockChange::Keep);
    assert_eq!(plan.settle, Settle::Complete);
}

#[test]
fn a_discarded_retry_releases_the_block() {
    let plan = after_handler(
        Entry::RetryRequest,
        &blocked_by("e1"),
        "e1",
        Verdict::Failed(Disposition::Discard),
    );
    assert_eq!(plan.response, Some(Response::Discard));
    assert!(plan.drains());
}

#[test]
fn a_resubmission_drains_only_when_it_actually_unblocks() {
    let plan = after_handler(
        Entry::ResubmissionRequest,
        &blocked_by("e1"),
        "e1",
        Verdict::Completed,
    );
    assert!(plan.drains());
    let plan = after_handler(
        Entry::ResubmissionRequest,
        &blocked_by("other"),
        "e1",
        Verdict::Completed,
    );
    assert_eq!(
        plan.block,
        BlockChange::Keep,
        "F13: another event owns the block"
    );
    assert!(!plan.drains());
    let plan = after_handler(
        Entry::ResubmissionRequest,
        &free(),
        "e1",
        Verdict::Completed,
    );
    assert!(!plan.drains());
}

#[test]
fn a_failed_resubmission_of_the_blocker_keeps_the_block_with_a_fresh_retry_budget() {
    let plan = after_handler(
        Entry::ResubmissionRequest,
        &blocked_by("e1"),
        "e1",
        Verdict::Failed(Disposition::Retry),
    );
    assert_eq!(plan.response, Some(Response::Error));
    assert_eq!(plan.block, BlockChange::Keep);
    assert!(plan.retry_if_policy_allows, "F14");
    let plan = after_handler(
        Entry::ResubmissionRequest,
        &free(),
        "e1",
        Verdict::Failed(Disposition::Retry),
    );
    assert!(!plan.retry_if_policy_allows);
    assert_eq!(plan.block, BlockChange::Keep);
}

#[test]
fn a_resubmitted_handoff_leaves_another_events_block_alone() {
    let plan = after_handler(
        Entry::ResubmissionRequest,
        &blocked_by("other"),
        "e1",
        Verdict::PendingHandoff,
    );
    assert_eq!(plan.response, Some(Response::PendingHandoff));
    assert_eq!(plan.block, BlockChange::Keep);
    let plan = after_handler(
        Entry::ResubmissionRequest,
        &blocked_by("e1"),
        "e1",
        Verdict::PendingHandoff,
    );
    assert_eq!(plan.block, BlockChange::BlockByThis);
}

#[test]
fn operator_skip_and_handoff_settlements() {
    let owns = blocked_by("e1");
    let other = blocked_by("other");
    let skip = operator_request(Entry::SkipRequest, &owns, "e1").unwrap();
    assert_eq!(skip.response, Some(Response::Skip));
    assert!(skip.drains());
    let skip = operator_request(Entry::SkipRequest, &other, "e1").unwrap();
    assert_eq!(skip.response, Some(Response::Skip));
    assert!(!skip.drains());

    let done = operator_request(Entry::HandoffCompletedRequest, &owns, "e1").unwrap();
    assert_eq!(done.response, Some(Response::Resolution));
    assert!(done.drains());
    let done = operator_request(Entry::HandoffCompletedRequest, &other, "e1").unwrap();
    assert_eq!(done.response, Some(Response::Resolution));
    assert!(!done.drains(), "a misaddressed completion does not unblock");

    let failed = operator_request(Entry::HandoffFailedRequest, &owns, "e1").unwrap();
    assert_eq!(failed.response, Some(Response::HandoffFailed));
    assert_eq!(failed.block, BlockChange::Keep, "the operator decides next");
    assert!(!failed.retry_if_policy_allows);
    let failed = operator_request(Entry::HandoffFailedRequest, &other, "e1").unwrap();
    assert_eq!(failed.response, None, "could mis-target another event");
    assert_eq!(failed.settle, Settle::Complete);

    assert_eq!(operator_request(Entry::EventRequest, &owns, "e1"), None);
}

#[test]
fn duplicates_are_skipped_and_release_only_their_own_block() {
    let plan = duplicate(Entry::EventRequest, &blocked_by("e1"), "e1");
    assert_eq!(plan.response, Some(Response::Duplicate));
    assert_eq!(plan.block, BlockChange::Keep);
    let plan = duplicate(Entry::RetryRequest, &blocked_by("e1"), "e1");
    assert!(plan.drains());
    let plan = duplicate(Entry::ResubmissionRequest, &blocked_by("other"), "e1");
    assert!(!plan.drains());
}

#[test]
fn plans_apply_to_the_session_state() {
    let mut state = free();
    let fail = after_handler(
        Entry::EventRequest,
        &state,
        "e1",
        Verdict::Failed(Disposition::Retry),
    );
    fail.apply(&mut state, "e1", false);
    assert!(state.is_blocked_by("e1"));
    assert_eq!(
        guard(Entry::EventRequest, &state, "e2", None),
        Guard::Park {
            blocked_by: Some("e1".into()),
            sequence: ParkSequence::Next,
        }
    );
    assert_eq!(park(&mut state, ParkSequence::Next), 0);
    let ok = after_handler(Entry::RetryRequest, &state, "e1", Verdict::Completed);
    ok.apply(&mut state, "e1", false);
    assert!(!state.is_blocked());
    assert!(state.has_parked(), "the drain replays what is parked");
    assert!(needs_replay_trigger(&state));
    let replayed = after_handler(Entry::EventRequest, &state, "e2", Verdict::Completed);
    replayed.apply(&mut state, "e2", true);
    assert!(!needs_replay_trigger(&state));
    assert!(state.to_bytes().is_empty());
}

#[test]
fn a_new_arrival_waits_behind_parked_messages_even_without_a_block() {
    let mut state = free();
    state.park();
    assert_eq!(
        guard(Entry::EventRequest, &state, "e9", None),
        Guard::Park {
            blocked_by: None,
            sequence: ParkSequence::Next,
        },
        "decision 0050, rule 1 (the gate)"
    );
    assert_eq!(
        guard(Entry::EventRequest, &state, "e2", Some(0)),
        Guard::Proceed,
        "a replayed copy runs"
    );
    assert!(
        needs_replay_trigger(&state),
        "a gate park must trigger the replay"
    );
}

#[test]
fn a_replayed_copy_that_meets_a_block_keeps_its_place() {
    let mut state = blocked_by("e1");
    state.park();
    state.park();
    let decision = guard(Entry::EventRequest, &state, "e3", Some(1));
    assert_eq!(
        decision,
        Guard::Park {
            blocked_by: Some("e1".into()),
            sequence: ParkSequence::Keep(1),
        }
    );
    let before = state.clone();
    assert_eq!(park(&mut state, ParkSequence::Keep(1)), 1);
    assert_eq!(state, before, "still counted once, next sequence untouched");
    assert_eq!(park(&mut state, ParkSequence::Next), 2);
    assert!(
        !needs_replay_trigger(&state),
        "blocked: nothing to replay yet"
    );
}

#[test]
fn an_abandoned_replayed_copy_stays_counted() {
    let mut state = free();
    state.park();
    let plan = after_handler(Entry::EventRequest, &state, "e2", Verdict::Transient);
    plan.apply(&mut state, "e2", true);
    assert_eq!(
        state.deferred_count, 1,
        "in flight: the broker redelivers it"
    );
    let plan = after_handler(Entry::EventRequest, &state, "e2", Verdict::Permanent);
    plan.apply(&mut state, "e2", true);
    assert_eq!(state.deferred_count, 0, "dead-lettered: settled");
}

#[test]
fn skipping_a_parked_event_drops_the_copies_parked_before_the_skip() {
    let mut state = blocked_by("e1");
    assert_eq!(state.park(), 0); // e2
    assert_eq!(state.park(), 1); // e3
    assert_eq!(state.park(), 2); // e3 again: its publisher sent it twice
    let plan = operator_request(Entry::SkipRequest, &state, "e3").expect("a skip plan");
    assert!(plan.remember_settled);
    assert_eq!(plan.block, BlockChange::Keep);
    assert_eq!(plan.response, Some(Response::Skip));
    plan.apply(&mut state, "e3", false);
    assert!(state.is_blocked_by("e1"));
    // Both of its parked copies are dropped, whether or not the session is
    // blocked again by then.
    for (id, sequence) in [("E3", 1), ("e3", 2)] {
        assert!(settled_while_parked(
            Entry::EventRequest,
            &state,
            id,
            Some(sequence)
        ));
    }
    // Not a new arrival, nor another parked event, nor a copy of the same
    // event id parked after the skip: those are guarded as any other.
    assert!(!settled_while_parked(
        Entry::EventRequest,
        &state,
        "e3",
        None
    ));
    assert!(!settled_while_parked(
        Entry::EventRequest,
        &state,
        "e2",
        Some(0)
    ));
    assert_eq!(state.park(), 3); // e3 published again after the skip
    assert!(!settled_while_parked(
        Entry::EventRequest,
        &state,
        "e3",
        Some(3)
    ));
    assert!(!settled_while_parked(
        Entry::RetryRequest,
        &state,
        "e3",
        Some(1)
    ));
    assert!(matches!(
        guard(Entry::EventRequest, &state, "e3", None),
        Guard::Park { .. }
    ));
}

#[test]
fn a_skip_with_nothing_parked_or_of_the_blocker_remembers_nothing() {
    let state = blocked_by("e1");
    let plan = operator_request(Entry::SkipRequest, &state, "e2").expect("a skip plan");
    assert!(!plan.remember_settled, "nothing parked");
    let mut parked = blocked_by("e1");
    parked.park();
    let plan = operator_request(Entry::SkipRequest, &parked, "e1").expect("a skip plan");
    assert!(!plan.remember_settled, "the blocker is not parked");
    assert_eq!(plan.block, BlockChange::Unblock);
}

#[test]
fn a_resubmission_of_a_parked_event_that_settles_it_drops_its_parked_copy() {
    let mut state = blocked_by("e1");
    state.park();
    for settles in [
        Verdict::Completed,
        Verdict::PendingHandoff,
        Verdict::Failed(Disposition::Discard),
    ] {
        let plan = after_handler(Entry::ResubmissionRequest, &state, "e3", settles);
        assert!(plan.remember_settled, "{settles:?}");
        assert_eq!(plan.block, BlockChange::Keep, "e1 still owns the block");
    }
    // Outcomes that leave the event to be run again: its parked copy runs
    // in its turn.
    for open in [
        Verdict::Failed(Disposition::Retry),
        Verdict::Failed(Disposition::DeadLetter),
        Verdict::Permanent,
        Verdict::Transient,
        Verdict::Unsupported,
    ] {
        let plan = after_handler(Entry::ResubmissionRequest, &state, "e3", open);
        assert!(!plan.remember_settled, "{open:?}");
    }
    let blocker = after_handler(Entry::ResubmissionRequest, &state, "e1", Verdict::Completed);
    assert!(!blocker.remember_settled, "the blocker is not parked");
    assert_eq!(blocker.block, BlockChange::Unblock);
    let replayed = after_handler(Entry::EventRequest, &state, "e3", Verdict::Completed);
    assert!(
        !replayed.remember_settled,
        "only an operator's resubmission"
    );
    let done = after_handler(Entry::ResubmissionRequest, &state, "e3", Verdict::Completed);
    done.apply(&mut state, "e3", false);
    assert!(settled_while_parked(
        Entry::EventRequest,
        &state,
        "e3",
        Some(0)
    ));
}

/// Decision 0050, rule 4: parked messages leave in sequence order; a copy
/// above the lowest one parked waits, counted only when nothing blocks the
/// session, and the lower ones are given up after several whole replays.
#[test]
fn a_replayed_copy_goes_on_only_in_its_turn() {
    let mut state = blocked_by("e1");
    for _ in 0..3 {
        state.park();
    }
    assert_eq!(state.replay_floor(), 0);
    let turn =
        |state: &SessionState, sequence| replay_turn(Entry::EventRequest, state, Some(sequence));
    assert_eq!(
        turn(&state, 1),
        Turn::Wait {
            sequence: 1,
            counted: false
        },
        "blocked: waits, uncounted"
    );
    state.unblock();
    assert_eq!(turn(&state, 0), Turn::Go);
    assert_eq!(
        turn(&state, 2),
        Turn::Wait {
            sequence: 2,
            counted: true
        }
    );
    assert_eq!(
        replay_turn(Entry::EventRequest, &state, None),
        Turn::Go,
        "a new arrival is the gate's to decide"
    );
    assert_eq!(replay_turn(Entry::RetryRequest, &state, Some(2)), Turn::Go);

    // The lowest leaves: the next one is in turn, and the count starts over.
    state.out_of_turn_replays = 5;
    state.unpark();
    assert_eq!((state.replay_floor(), state.out_of_turn_replays), (1, 0));
    assert_eq!(turn(&state, 1), Turn::Go);

    // Sequence 1 never comes back: after enough replays of 2 it is given up.
    state.out_of_turn_replays = 4 * 2 + 64;
    assert_eq!(
        turn(&state, 2),
        Turn::GiveUpBelow {
            sequence: 2,
            floor: 1
        }
    );
    state.give_up_parked_below(2);
    assert_eq!(state.deferred_count, 1);
    assert_eq!((state.replay_floor(), state.out_of_turn_replays), (2, 0));
    assert_eq!(turn(&state, 2), Turn::Go);
}
