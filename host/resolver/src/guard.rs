//! The stale-write guard: which message may change an event's status.
//!
//! Nothing orders the copies of one event by causality: an auto-forwarded
//! request copy can lag behind the response that settled it. So the store,
//! not arrival order, decides (SEMANTICS.md §7, the seed's "Which messages
//! may reopen a settled row"). History is written for every message
//! regardless; only the status write is guarded.

use crate::status::{MessageKind, Status};

/// What the store knows about an event's row before a write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    /// The current status.
    pub(crate) status: Status,
    /// The message kind that set it.
    pub(crate) source: MessageKind,
}

/// Whether a status write may apply, or why it may not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Apply,
    Refuse(String),
}

/// Decides whether a message of `kind` may write its status over `row`.
///
/// `already_recorded` says the history already holds this very message (same
/// message id and kind): a rescheduled or replayed copy.
pub(crate) fn judge(row: Option<Row>, kind: MessageKind, already_recorded: bool) -> Verdict {
    let Some(row) = row else {
        return Verdict::Apply;
    };
    if kind.is_control_request() {
        // Operator or manager intent reopens a settled row, except a copy of
        // a request the row already answers.
        if already_recorded && row.source != kind {
            return Verdict::Refuse(format!(
                "a repeated copy of a {} the event already answered with {} ({})",
                kind.as_str(),
                row.source.as_str(),
                row.status
            ));
        }
        return Verdict::Apply;
    }
    match kind {
        MessageKind::EventRequest | MessageKind::DeferralResponse => {
            if in_request_stage(row) {
                Verdict::Apply
            } else {
                Verdict::Refuse(format!(
                    "a late {} cannot replace status {} set by {}",
                    kind.as_str(),
                    row.status,
                    row.source.as_str()
                ))
            }
        }
        MessageKind::PendingHandoffResponse => match row.status {
            Status::Completed | Status::Skipped => Verdict::Refuse(format!(
                "a handoff park cannot replace status {} set by {}",
                row.status,
                row.source.as_str()
            )),
            _ => Verdict::Apply,
        },
        // Terminal writes always apply.
        _ => Verdict::Apply,
    }
}

/// A row still in the request stage: only request copies and deferrals have
/// written it.
fn in_request_stage(row: Row) -> bool {
    matches!(
        row.source,
        MessageKind::EventRequest | MessageKind::DeferralResponse
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: Status, source: MessageKind) -> Option<Row> {
        Some(Row { status, source })
    }

    #[test]
    fn first_message_of_an_event_always_applies() {
        assert_eq!(
            judge(None, MessageKind::EventRequest, false),
            Verdict::Apply
        );
        assert_eq!(
            judge(None, MessageKind::ResolutionResponse, false),
            Verdict::Apply
        );
    }

    #[test]
    fn late_request_copy_never_replaces_a_settled_row() {
        for settled in [
            row(Status::Completed, MessageKind::ResolutionResponse),
            row(Status::Failed, MessageKind::ErrorResponse),
            row(Status::Skipped, MessageKind::SkipResponse),
            row(Status::Pending, MessageKind::PendingHandoffResponse),
            row(Status::Pending, MessageKind::ResubmissionRequest),
        ] {
            assert!(matches!(
                judge(settled, MessageKind::EventRequest, false),
                Verdict::Refuse(_)
            ));
            assert!(matches!(
                judge(settled, MessageKind::DeferralResponse, false),
                Verdict::Refuse(_)
            ));
        }
    }

    #[test]
    fn request_copy_and_deferral_refresh_a_row_in_the_request_stage() {
        let pending = row(Status::Pending, MessageKind::EventRequest);
        assert_eq!(
            judge(pending, MessageKind::DeferralResponse, false),
            Verdict::Apply
        );
        let deferred = row(Status::Deferred, MessageKind::DeferralResponse);
        assert_eq!(
            judge(deferred, MessageKind::EventRequest, false),
            Verdict::Apply
        );
    }

    #[test]
    fn control_requests_reopen_settled_rows() {
        for kind in [
            MessageKind::ResubmissionRequest,
            MessageKind::SkipRequest,
            MessageKind::RetryRequest,
            MessageKind::HandoffCompletedRequest,
            MessageKind::HandoffFailedRequest,
        ] {
            let failed = row(Status::Failed, MessageKind::ErrorResponse);
            assert_eq!(judge(failed, kind, false), Verdict::Apply, "{kind:?}");
        }
    }

    #[test]
    fn replayed_copy_of_an_answered_control_request_is_refused() {
        let answered = row(Status::Completed, MessageKind::ResolutionResponse);
        assert!(matches!(
            judge(answered, MessageKind::ResubmissionRequest, true),
            Verdict::Refuse(_)
        ));
    }

    #[test]
    fn handoff_park_is_refused_only_over_completed_and_skipped() {
        for (status, source, refused) in [
            (Status::Completed, MessageKind::ResolutionResponse, true),
            (Status::Skipped, MessageKind::SkipResponse, true),
            (Status::Failed, MessageKind::ErrorResponse, false),
            (Status::DeadLettered, MessageKind::ErrorResponse, false),
            (Status::Unsupported, MessageKind::UnsupportedResponse, false),
            (Status::Pending, MessageKind::RetryRequest, false),
        ] {
            let verdict = judge(
                row(status, source),
                MessageKind::PendingHandoffResponse,
                false,
            );
            assert_eq!(matches!(verdict, Verdict::Refuse(_)), refused, "{status:?}");
        }
    }

    #[test]
    fn terminal_writes_always_apply() {
        let completed = row(Status::Completed, MessageKind::ResolutionResponse);
        for kind in [
            MessageKind::ResolutionResponse,
            MessageKind::ErrorResponse,
            MessageKind::SkipResponse,
            MessageKind::UnsupportedResponse,
        ] {
            assert_eq!(judge(completed, kind, true), Verdict::Apply);
        }
    }
}
