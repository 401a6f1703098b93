//! Resubmit or skip every Failed event a selection names: what an operator
//! does once a downstream outage is over and many sessions are blocked, one
//! control message per event, as [`Manager::resubmit`] and
//! [`Manager::skip`] send them (upstream's WebApp has it as "bulk resubmit
//! failed", with a preview and an age threshold).
//!
//! Only `Failed` events are chosen: they are the ones blocking a session
//! for an operator. An event whose block waits for a scheduled retry is
//! left out unless asked for: the retry would run it anyway, and sending
//! both runs the handler twice. A dry run chooses and sends nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nimbus_resolver::{EventFilter, EventRecord, Status};
use nimbus_transport::{Admin, AdminError, SubscriptionPath, Transport};
use nimbus_wire::SessionState;
use serde::Serialize;

use crate::error::ManagerError;
use crate::operations::{Manager, Sent};

/// How many events one bulk operation acts on at most by default.
pub const DEFAULT_BULK_LIMIT: usize = 1000;

/// How many Failed events one pass reads from the store at most, before
/// the selection's other filters: a pass that reads this many says there
/// may be more.
const EXAMINED_AT_MOST: usize = 10_000;

/// Which Failed events a bulk operation acts on.
#[derive(Debug, Clone, Default)]
pub struct BulkSelection {
    /// Only events at this endpoint.
    pub endpoint: Option<String>,
    /// Only events of this session.
    pub session_id: Option<String>,
    /// Only events of this type (`EventTypeId`).
    pub event_type: Option<String>,
    /// Only events whose recorded error has this type.
    pub error_type: Option<String>,
    /// Only events whose status has not changed for at least this long.
    pub not_updated_for: Option<Duration>,
    /// Also events whose block waits for a scheduled retry.
    pub include_awaiting_retry: bool,
    /// At most this many events are acted on ([`DEFAULT_BULK_LIMIT`] when
    /// `None`); a pass that chose this many says more may match.
    pub limit: Option<usize>,
    /// Choose, but send nothing.
    pub dry_run: bool,
}

/// What a bulk operation does to each event it chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Run the handler again on the recorded payload.
    Resubmit,
    /// Settle it as Skipped without running the handler.
    Skip,
}

/// One event a bulk operation chose, as an operator reviews it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chosen {
    /// The endpoint.
    pub endpoint: String,
    /// The event.
    pub event_id: String,
    /// Its session.
    pub session_id: Option<String>,
    /// Its type.
    pub event_type: Option<String>,
    /// The recorded error's type.
    pub error_type: Option<String>,
    /// The recorded error's text.
    pub error_text: Option<String>,
    /// When its status last changed, in milliseconds since the Unix epoch.
    pub updated_ms: i64,
}

impl Chosen {
    fn of(record: &EventRecord) -> Chosen {
        Chosen {
            endpoint: record.endpoint.clone(),
            event_id: record.event_id.clone(),
            session_id: record.session_id.clone(),
            event_type: record.event_type.clone(),
            error_type: record.error_type.clone(),
            error_text: record.error_text.clone(),
            updated_ms: record.updated_ms,
        }
    }
}

/// A matching event left out because its block waits for a retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AwaitingRetry {
    /// The event.
    #[serde(flatten)]
    pub event: Chosen,
    /// When the retry is due, in milliseconds since the Unix epoch, if the
    /// session state says.
    pub retry_at_ms: Option<i64>,
}

/// A chosen event the operation could not act on, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotSent {
    /// The event.
    #[serde(flatten)]
    pub event: Chosen,
    /// Why nothing was sent for it.
    pub error: String,
}

/// What a bulk operation did.
#[derive(Debug, Clone, Serialize)]
pub struct BulkOutcome {
    /// What it did to each chosen event.
    pub action: BulkAction,
    /// Whether it only chose.
    pub dry_run: bool,
    /// The events chosen, oldest change first: what was (or in a dry run,
    /// would be) sent for.
    pub chosen: Vec<Chosen>,
    /// The control messages sent, in the order of `chosen`.
    pub sent: Vec<Sent>,
    /// Chosen events nothing was sent for, each with why.
    pub not_sent: Vec<NotSent>,
    /// Matching events left out because a retry is scheduled for them.
    pub awaiting_retry: Vec<AwaitingRetry>,
    /// Whether more events may match than this pass chose (the limit was
    /// reached, or more Failed events exist than one pass reads): run it
    /// again once these have settled.
    pub more: bool,
}

impl<T: Transport + Admin> Manager<T> {
    /// Resubmits (or skips) every Failed event `selection` names, one
    /// control message each, oldest change first. An event whose block
    /// waits for a scheduled retry is left out (listed in
    /// [`BulkOutcome::awaiting_retry`]) unless
    /// [`BulkSelection::include_awaiting_retry`]. One refused operation does
    /// not stop the rest; a broker that refuses a publish does, and the
    /// events not reached are listed as not sent.
    pub async fn act_on_failed(
        &self,
        action: BulkAction,
        selection: &BulkSelection,
    ) -> Result<BulkOutcome, ManagerError> {
        let limit = selection.limit.unwrap_or(DEFAULT_BULK_LIMIT);
        if limit == 0 {
            return Err(ManagerError::InvalidSelection {
                reason: "the limit must be at least 1".to_owned(),
            });
        }
        if let Some(endpoint) = &selection.endpoint {
            self.check_endpoint(endpoint).await?;
        }
        let (records, examined_all) = self.failed_events(selection).await?;
        let blocks = self.blocks_awaiting_retry(&records).await?;
        let mut outcome = BulkOutcome {
            action,
            dry_run: selection.dry_run,
            chosen: Vec::new(),
            sent: Vec::new(),
            not_sent: Vec::new(),
            awaiting_retry: Vec::new(),
            more: !examined_all,
        };
        for record in &records {
            let retry = blocks.get(&(record.endpoint.clone(), record.event_id.clone()));
            match retry {
                Some(retry_at_ms) if !selection.include_awaiting_retry => {
                    outcome.awaiting_retry.push(AwaitingRetry {
                        event: Chosen::of(record),
                        retry_at_ms: *retry_at_ms,
                    });
                }
                _ if outcome.chosen.len() >= limit => outcome.more = true,
                _ => outcome.chosen.push(Chosen::of(record)),
            }
        }
        if !selection.dry_run {
            self.send_each(action, &mut outcome).await;
        }
        tracing::info!(
            action = ?action,
            dry_run = selection.dry_run,
            chosen = outcome.chosen.len(),
            sent = outcome.sent.len(),
            not_sent = outcome.not_sent.len(),
            awaiting_retry = outcome.awaiting_retry.len(),
            "manager: bulk operation on Failed events"
        );
        Ok(outcome)
    }

    async fn send_each(&self, action: BulkAction, outcome: &mut BulkOutcome) {
        let mut stopped: Option<String> = None;
        for chosen in &outcome.chosen {
            if let Some(why) = &stopped {
                outcome.not_sent.push(NotSent {
                    event: chosen.clone(),
                    error: format!("not attempted: {why}"),
                });
                continue;
            }
            let endpoint = Some(chosen.endpoint.as_str());
            let sent = match action {
                BulkAction::Resubmit => self.resubmit(&chosen.event_id, endpoint, None).await,
                BulkAction::Skip => self.skip(&chosen.event_id, endpoint).await,
            };
            match sent {
                Ok(sent) => outcome.sent.push(sent),
                Err(error) => {
                    // The broker refusing one publish will refuse the next.
                    if matches!(error, ManagerError::Publish { .. }) {
                        stopped = Some(error.to_string());
                    }
                    outcome.not_sent.push(NotSent {
                        event: chosen.clone(),
                        error: error.to_string(),
                    });
                }
            }
        }
    }

    /// The Failed events the selection's filters keep, oldest change first,
    /// and whether the store had no more Failed events than were read.
    async fn failed_events(
        &self,
        selection: &BulkSelection,
    ) -> Result<(Vec<EventRecord>, bool), ManagerError> {
        let filter = EventFilter {
            endpoint: selection.endpoint.clone(),
            status: Some(Status::Failed),
            sub_status: None,
            session_id: selection.session_id.clone(),
            limit: Some(EXAMINED_AT_MOST + 1),
        };
        let store = Arc::clone(&self.store);
        let mut records = tokio::task::spawn_blocking(move || store.events(&filter))
            .await
            .map_err(|join| nimbus_resolver::StoreError::Panicked(join.to_string()))??;
        let examined_all = records.len() <= EXAMINED_AT_MOST;
        records.truncate(EXAMINED_AT_MOST);
        let changed_before = selection
            .not_updated_for
            .map(|age| nimbus_wire::unix_millis(SystemTime::now()).saturating_sub(millis(age)));
        records.retain(|r| {
            same(selection.event_type.as_deref(), r.event_type.as_deref())
                && same(selection.error_type.as_deref(), r.error_type.as_deref())
                && changed_before.is_none_or(|before| r.updated_ms <= before)
        });
        records.sort_by_key(|r| r.updated_ms);
        Ok((records, examined_all))
    }

    /// The events among `records` whose session's block waits for a
    /// scheduled retry, with when it is due: one session listing per
    /// endpoint.
    async fn blocks_awaiting_retry(
        &self,
        records: &[EventRecord],
    ) -> Result<HashMap<(String, String), Option<i64>>, ManagerError> {
        let mut awaiting = HashMap::new();
        let mut endpoints: Vec<&str> = records.iter().map(|r| r.endpoint.as_str()).collect();
        endpoints.sort_unstable();
        endpoints.dedup();
        for endpoint in endpoints {
            let path = SubscriptionPath::new(endpoint, endpoint);
            let sessions = match self.transport.list_sessions(&path).await {
                Ok(sessions) => sessions,
                // An endpoint removed since: nothing of it waits.
                Err(AdminError::NotFound { .. }) => continue,
                Err(source) => {
                    return Err(ManagerError::ReadEndpoint {
                        endpoint: endpoint.to_owned(),
                        source,
                    });
                }
            };
            for session in sessions {
                let Some(state) = session
                    .state
                    .as_deref()
                    .and_then(|bytes| SessionState::from_bytes(bytes).ok())
                else {
                    continue;
                };
                if let (Some(blocker), Some(true)) = (state.blocked_by(), state.awaits_retry()) {
                    awaiting.insert(
                        (endpoint.to_owned(), blocker.to_owned()),
                        state.pending_retry_at_ms,
                    );
                }
            }
        }
        Ok(awaiting)
    }

    /// An error naming the endpoint when the broker has no topic of that
    /// name, so a typo is not a silent "nothing matched".
    async fn check_endpoint(&self, endpoint: &str) -> Result<(), ManagerError> {
        match self.transport.get_topic(endpoint).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) | Err(AdminError::NotFound { .. }) => Err(ManagerError::NoSuchEndpoint {
                endpoint: endpoint.to_owned(),
            }),
            Err(source) => Err(ManagerError::ReadEndpoint {
                endpoint: endpoint.to_owned(),
                source,
            }),
        }
    }
}

/// Whether a filter (if any) keeps a value; event and error types compare
/// ignoring case, as operators type them.
fn same(wanted: Option<&str>, value: Option<&str>) -> bool {
    wanted.is_none_or(|w| value.is_some_and(|v| v.eq_ignore_ascii_case(w)))
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
