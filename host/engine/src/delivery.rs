//! One delivery on an endpoint's session subscription, start to finish:
//! decode and validate, guard, run the handler, settle — the whole
//! settlement (responses, follow-ups, session state, scheduled retry, replay
//! trigger, disposal) in one atomic commit under the session lock.
//!
//! What a handled event's settlement does is decided by
//! [`settlement::plan`]; [`Delivery::carry_out`] builds the messages it
//! names, commits, and logs.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;

use nimbus_handler::error_type::{FOLLOW_UPS_REFUSED, PANIC};
use nimbus_handler::{Event, FollowUp, HandlerError, Outcome, Report};
use nimbus_transport::{
    Disposition, ErrorKind, Message, Properties, PropertyValue, ReceivedMessage, SessionLock,
    SettleError, Settlement, TransientError, Transport,
};
use nimbus_wire::build::{self, Handoff, ResponseTimes};
use nimbus_wire::{
    ControlKey, Defect, Failure, InboxKey, MessageType, NimbusMessage, SessionState,
    control_signature, dead_letter, prop,
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::handler::Handlers;
use crate::policies::Policies;
use crate::retrying::{Retrying, TransientAttempt};
use crate::session_state::{self, BlockChange, Entry, Guard, Plan, Response, Turn};
use crate::settlement::{self, Commit, Decision, Facts};

/// Everything the engine knows about one endpoint.
pub struct Endpoint {
    /// The endpoint's name: its topic and its session subscription.
    pub name: String,
    /// The handlers it dispatches to.
    pub handlers: Arc<dyn Handlers>,
    /// Its failure policies.
    pub policies: Arc<Policies>,
    /// The subscription's max delivery count: at that delivery a transient
    /// failure is dead-lettered by the engine, so the Resolver is told.
    pub max_delivery_count: u32,
    /// How often to renew the session lock while a handler runs.
    pub renew_every: Duration,
    /// The version the heartbeat answer reports.
    pub sdk_version: String,
    /// How long the endpoint's inbox remembers a handled message id; `None`
    /// for no inbox (no duplicate check, no record).
    pub inbox_retention: Option<Duration>,
    /// Where the endpoint notes the events it is delivering again after a
    /// transient failure (shared by the host's endpoints, read by its API).
    pub retrying: Arc<Retrying>,
    /// Whether an operator paused it: its processor then takes no session.
    pub paused: crate::Paused,
    /// The key the hosts' Manager signs control requests with: one not
    /// signed with it is refused unread (decision 0141).
    pub control_key: ControlKey,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .field("max_delivery_count", &self.max_delivery_count)
            .finish_non_exhaustive()
    }
}

/// Why a delivery could not be settled. The message is left to the broker
/// (its lock lapses and it is redelivered); the session should be dropped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeliveryError {
    // The transport's error already names the message or session.
    #[error("settling failed: {source}")]
    Settle {
        #[source]
        source: SettleError,
    },
    #[error("renewing the session lock while the handler ran failed: {0}")]
    Renew(nimbus_transport::RenewError),
    #[error("checking the inbox failed: {0}")]
    Inbox(TransientError),
}

impl DeliveryError {
    /// Whether the session lock is gone (no further use of it can succeed).
    pub(crate) fn lost_session(&self) -> bool {
        match self {
            DeliveryError::Settle { source, .. } => {
                matches!(source, SettleError::SessionLockLost { .. })
            }
            DeliveryError::Renew(e) => {
                nimbus_transport::Error::from(e.clone()).kind() == ErrorKind::SessionLockLost
            }
            DeliveryError::Inbox(_) => false,
        }
    }
}

/// The clock readings a delivery reports in its responses.
#[derive(Debug, Clone, Copy)]
struct Timing {
    enqueued: SystemTime,
    started: SystemTime,
}

impl Timing {
    fn times(&self) -> ResponseTimes {
        let now = SystemTime::now();
        ResponseTimes {
            queue_time_ms: Some(whole_ms(self.started.duration_since(self.enqueued).ok())),
            processing_time_ms: Some(whole_ms(now.duration_since(self.started).ok())),
        }
    }
}

fn whole_ms(duration: Option<Duration>) -> u64 {
    duration.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One delivery in progress: the endpoint, the transport and the lock it
/// arrived under, and the session state as that lock last committed it.
pub(crate) struct Delivery<'a, T: Transport> {
    pub(crate) endpoint: &'a Endpoint,
    pub(crate) transport: &'a T,
    pub(crate) lock: &'a T::Session,
    pub(crate) state: &'a mut SessionState,
    /// The host's shutdown: it cuts a transient backoff short (the message
    /// is abandoned at once), since no handler is running to let finish.
    pub(crate) shutdown: &'a CancellationToken,
    /// After the engine panicked on this delivery: the report its second
    /// pass settles with, instead of running the handler again.
    forced: Option<Report>,
    /// Whether the broker took this delivery's settlement.
    committed: bool,
}

impl<'a, T: Transport> Delivery<'a, T> {
    /// A delivery on `lock`, whose session state is `state`.
    pub(crate) fn new(
        endpoint: &'a Endpoint,
        transport: &'a T,
        lock: &'a T::Session,
        state: &'a mut SessionState,
        shutdown: &'a CancellationToken,
    ) -> Self {
        Delivery {
            endpoint,
            transport,
            lock,
            state,
            shutdown,
            forced: None,
            committed: false,
        }
    }

    /// Handles `received` and settles it, as [`Self::run`] does, and makes
    /// a panic in the engine's own code on the way (a bug, but one a
    /// guest's value might reach) settle like any failure: the event fails
    /// with the error type `Panic` and the failure policy applies (retry,
    /// block, dead-letter). Left to unwind, the panic ended the session's
    /// task with the message unsettled, and the broker redelivered it to
    /// panic again, thousands of times a second (issue 28).
    ///
    /// A panic after the settlement committed changes nothing: the event
    /// is settled. If the second pass, which runs no handler, panics too,
    /// the message is dead-lettered with the reason `Panic`.
    pub(crate) async fn run_guarded(
        &mut self,
        received: ReceivedMessage,
    ) -> Result<(), DeliveryError> {
        // Kept for a second pass: the first consumes the message.
        let copy = received.clone();
        let first = match AssertUnwindSafe(self.run(received)).catch_unwind().await {
            Ok(settled) => return settled,
            Err(panic) => panic_text(&*panic),
        };
        let session = self.lock.session_id().to_owned();
        let message_id = copy.message.message_id.clone().unwrap_or_default();
        if self.committed {
            error!(endpoint = %self.endpoint.name, %session, %message_id, panic = %first, "the host panicked after settling a message; its settlement stands (a nimbus bug: please report it)");
            return Ok(());
        }
        error!(endpoint = %self.endpoint.name, %session, %message_id, panic = %first, "the host panicked handling a message: it is settled as a failure of type Panic, without running the handler again (a nimbus bug: please report it)");
        self.forced = Some(engine_panicked(&first));
        let last_resort = copy.clone();
        let second = match AssertUnwindSafe(self.run(copy)).catch_unwind().await {
            Ok(settled) => return settled,
            Err(_) if self.committed => return Ok(()),
            Err(panic) => panic_text(&*panic),
        };
        error!(endpoint = %self.endpoint.name, %session, %message_id, panic = %second, "the host panicked again settling the message as failed: dead-lettering it");
        self.dead_letter_panicked(last_resort, &first).await
    }

    /// The last resort after two panics: dead-letter the message with the
    /// reason `Panic`, telling the Resolver when building that notice does
    /// not panic too.
    async fn dead_letter_panicked(
        &mut self,
        received: ReceivedMessage,
        panic: &str,
    ) -> Result<(), DeliveryError> {
        let timing = Timing {
            enqueued: received.enqueued_time,
            started: SystemTime::now(),
        };
        let description =
            format!("{PANIC}: the host panicked handling this message, twice: {panic}");
        // Should decoding itself panic, the notice names only the ids.
        let readable = std::panic::catch_unwind(AssertUnwindSafe(|| {
            NimbusMessage::decode_received(received.clone()).0
        }))
        .unwrap_or_else(|_| {
            received.clone().map(|content| NimbusMessage {
                message_id: content.message_id,
                session_id: content.session_id,
                ..NimbusMessage::default()
            })
        });
        let rejected = AssertUnwindSafe(self.reject(&readable, &description, timing))
            .catch_unwind()
            .await;
        match rejected {
            Ok(settled) => settled,
            Err(_) if self.committed => Ok(()),
            Err(_) => {
                let settlement = Settlement::dead_letter(received, PANIC, description);
                self.commit(settlement, None).await
            }
        }
    }

    /// Handles `received` and settles it.
    pub(crate) async fn run(&mut self, received: ReceivedMessage) -> Result<(), DeliveryError> {
        let timing = Timing {
            enqueued: received.enqueued_time,
            started: SystemTime::now(),
        };
        // Checked on the message as it travelled, before anything reads it.
        if let Some(kind) = control_signature::control_type(&received.message)
            && let Some(why) = self.not_from_manager(kind, &received.message)
        {
            return self.refuse_control(received, kind, &why).await;
        }
        // From here on the message is one received message, its content
        // decoded: the settlement takes its lock from it.
        let (received, defect) = NimbusMessage::decode_received(received);
        let message = &received.message;
        if let Some(defect) = defect {
            return self.reject(&received, &defect.to_string(), timing).await;
        }
        if let Err(defect) = message.validate() {
            return self.reject(&received, &defect.to_string(), timing).await;
        }
        let answers_heartbeat = matches!(
            message.message_type,
            MessageType::EventRequest | MessageType::UnsupportedResponse
        ) && message.is_heartbeat();
        if answers_heartbeat {
            let response = build::heartbeat_response(
                message,
                timing.times(),
                SystemTime::now(),
                &self.endpoint.sdk_version,
            );
            let settlement = Settlement::complete(&received)
                .publish(self.endpoint.name.clone(), response.to_transport());
            return self.commit(settlement, None).await;
        }
        let Some(entry) = Entry::for_message_type(message.message_type) else {
            return self.not_for_endpoint(&received, timing).await;
        };
        // `validate` guarantees an EventId on every entry point.
        let event_id = message.event_id.clone().unwrap_or_default();
        let replayed = message.replayed_sequence();
        match session_state::replay_turn(entry, self.state, replayed) {
            Turn::Go => {}
            Turn::Wait { sequence, counted } => {
                debug!(endpoint = %self.endpoint.name, %event_id, sequence, floor = self.state.replay_floor(), "a replayed copy came back before a lower parked one: parked again in its place");
                // Blocked, this is what the guard would do; unblocked, the
                // event is recorded as parked already, so nothing is said.
                let why = match self.state.blocked_by() {
                    Some(owner) if !counted => ParkedBy::Block(owner.to_owned()),
                    _ => ParkedBy::OutOfTurn,
                };
                let sequence = session_state::ParkSequence::Keep(sequence);
                return self.park(&received, why, sequence, timing).await;
            }
            Turn::GiveUpBelow { sequence, floor } => {
                error!(
                    endpoint = %self.endpoint.name,
                    session = message.session_id.as_deref().unwrap_or(""),
                    %event_id,
                    missing = %format_args!("{floor}..{sequence}"),
                    "parked messages of this session never came back through several replays \
                     (dead-lettered or removed by hand?): going on without them; look for them \
                     with `nimbus dlq list`"
                );
                self.state.give_up_parked_below(sequence);
            }
        }
        if session_state::settled_while_parked(entry, self.state, &event_id, replayed) {
            info!(endpoint = %self.endpoint.name, %event_id, "the operator settled this parked event out of turn: its replayed copy is dropped without running");
            return self.complete_silently(&received, replayed.is_some()).await;
        }
        let inbox_key = self.inbox_key(entry, message);
        if let Some(key) = &inbox_key
            && self
                .transport
                .inbox_contains(&self.endpoint.name, &key.to_hex())
                .await
                .map_err(DeliveryError::Inbox)?
        {
            info!(endpoint = %self.endpoint.name, %event_id, message_id = ?message.message_id, "inbox: duplicate, not handled again");
            let plan = session_state::duplicate(entry, self.state, &event_id);
            let settled = Settled {
                message,
                event_id: &event_id,
                entry,
                replayed: replayed.is_some(),
                report: None,
                failure: None,
                decided_by: None,
                retry_after: None,
                timing,
                inbox_key: None,
            };
            return self.carry_out(&received, plan, settled).await;
        }
        if session_state::superseded_retry(entry, self.state, message.message_id.as_deref()) {
            debug!(endpoint = %self.endpoint.name, %event_id, message_id = ?message.message_id, "a retry the block no longer waits for: completed without a handler");
            return self.complete_silently(&received, false).await;
        }
        match session_state::guard(entry, self.state, &event_id, replayed) {
            Guard::Park {
                blocked_by,
                sequence,
            } => {
                let why = blocked_by.map_or(ParkedBy::EarlierParked, ParkedBy::Block);
                self.park(&received, why, sequence, timing).await
            }
            Guard::CompleteSilently(why) => {
                debug!(endpoint = %self.endpoint.name, %event_id, ?why, "completed without a handler or a response");
                self.complete_silently(&received, replayed.is_some()).await
            }
            Guard::Proceed => match session_state::operator_request(entry, self.state, &event_id) {
                Some(plan) => {
                    let settled = Settled {
                        message,
                        event_id: &event_id,
                        entry,
                        replayed: replayed.is_some(),
                        report: None,
                        failure: None,
                        decided_by: None,
                        retry_after: None,
                        timing,
                        inbox_key: None,
                    };
                    self.carry_out(&received, plan, settled).await
                }
                None => {
                    self.dispatch(&received, entry, &event_id, timing, inbox_key)
                        .await
                }
            },
        }
    }

    /// Completes `received` without a handler and without a response; a
    /// replayed copy leaves the session's parked messages.
    async fn complete_silently(
        &mut self,
        received: &ReceivedMessage<NimbusMessage>,
        replayed: bool,
    ) -> Result<(), DeliveryError> {
        let mut next = self.state.clone();
        if replayed {
            next.unpark();
        }
        let settlement = self.with_state(Settlement::complete(received), &next);
        self.commit(settlement, Some(next)).await
    }

    /// Runs the handler and settles by its outcome.
    async fn dispatch(
        &mut self,
        received: &ReceivedMessage<NimbusMessage>,
        entry: Entry,
        event_id: &str,
        timing: Timing,
        inbox_key: Option<InboxKey>,
    ) -> Result<(), DeliveryError> {
        let message = &received.message;
        let event = Event {
            event_id: event_id.to_owned(),
            event_type: message.event_type().unwrap_or_default().to_owned(),
            message_id: message.message_id.clone().unwrap_or_default(),
            session_id: message.session_id.clone().unwrap_or_default(),
            correlation_id: message.correlation_id.clone(),
            parent_message_id: message.parent_message_id.clone(),
            originating_message_id: message.originating_message_id.clone(),
            retry_count: message.retry_count,
            enqueued_time: received.enqueued_time,
            payload: message.event_json().unwrap_or("null").to_owned(),
            properties: message.properties.clone(),
            delivery: nimbus_handler::Delivery {
                count: received.delivery_count,
                message_type: message.message_type.as_str(),
                from: message.from.clone(),
            },
        };
        let report = self.invoke(event).await?;
        let event_type = message.event_type();
        if report.is_none() {
            // Settled without running: an author who removed or swapped
            // the handler that served this type needs to hear of it.
            warn!(
                endpoint = %self.endpoint.name,
                %event_id,
                event_type = event_type.unwrap_or_default(),
                message_type = %message.message_type,
                "no handler at this endpoint serves the event's type: answered UnsupportedResponse"
            );
        }
        // A settlement with follow-ups can be refused for good (too large
        // for one request): kept to settle the event as failed instead.
        let sends_follow_ups = report
            .as_ref()
            .is_some_and(|r| !r.follow_ups.is_empty() && r.result.is_ok());
        let handled = Handled {
            message,
            entry,
            event_id,
            timing,
            inbox_key,
        };
        let settled = self.settle_report(received, handled, report.as_ref());
        let refusal = match settled.await {
            Err(DeliveryError::Settle {
                source: SettleError::Invalid { reason },
            }) => reason,
            other => return other,
        };
        let (true, Some(report)) = (sends_follow_ups, report) else {
            return Err(DeliveryError::Settle {
                source: SettleError::Invalid { reason: refusal },
            });
        };
        let failed = follow_ups_refused(report, &refusal);
        warn!(
            endpoint = %self.endpoint.name,
            session = message.session_id.as_deref().unwrap_or(""),
            %event_id,
            event_type = event_type.unwrap_or_default(),
            reason = %refusal,
            "the broker refused the event's settlement with its follow-ups: none is sent, and \
             the event fails as if its handler had"
        );
        self.settle_report(received, handled, Some(&failed)).await
    }

    /// Settles `received` by the handler's report (`None`: no handler
    /// serves the type).
    async fn settle_report(
        &mut self,
        received: &ReceivedMessage<NimbusMessage>,
        handled: Handled<'_>,
        report: Option<&Report>,
    ) -> Result<(), DeliveryError> {
        let Handled {
            message,
            entry,
            event_id,
            timing,
            inbox_key,
        } = handled;
        let reported = settlement::read_report(
            report,
            message.event_type(),
            &self.endpoint.policies.classifier,
        );
        let plan = session_state::after_handler(entry, self.state, event_id, reported.verdict);
        let settled = Settled {
            message,
            event_id,
            entry,
            replayed: message.replayed_sequence().is_some(),
            report,
            failure: reported.failure.as_ref(),
            decided_by: reported.decided_by.as_deref(),
            retry_after: reported.retry_after,
            timing,
            inbox_key,
        };
        self.carry_out(received, plan, settled).await
    }

    /// The inbox key of a message at an entry point that uses the inbox
    /// (events, retries, resubmissions), when the endpoint has an inbox and
    /// the message id is usable; `None` bypasses the inbox.
    fn inbox_key(&self, entry: Entry, message: &NimbusMessage) -> Option<InboxKey> {
        self.endpoint.inbox_retention?;
        if !entry.runs_handler() {
            return None;
        }
        InboxKey::new(&self.endpoint.name, message.message_id.as_deref()?)
    }

    /// Runs the handler on this task, renewing the session lock while it
    /// runs. A panic in it (building its future or polling it) is the
    /// handler's `failed` outcome with the error type `Panic`, as a guest's
    /// panic in the sandbox is: the failure policy applies and an operator
    /// sees it, where leaving the message to the broker would redeliver it
    /// without counting, forever.
    async fn invoke(&self, event: Event) -> Result<Option<Report>, DeliveryError> {
        if let Some(report) = &self.forced {
            return Ok(Some(report.clone()));
        }
        let handlers = &self.endpoint.handlers;
        let name = &self.endpoint.name;
        let call =
            AssertUnwindSafe(async move { handlers.invoke(name, event).await }).catch_unwind();
        tokio::pin!(call);
        // The first renewal is one period in. (Awaiting `interval`'s
        // immediate first tick instead waited for the timer's next
        // millisecond tick, adding up to 1 ms to every call; decision 0104.)
        let mut renew = tokio::time::interval_at(
            tokio::time::Instant::now() + self.endpoint.renew_every,
            self.endpoint.renew_every,
        );
        loop {
            tokio::select! {
                ended = &mut call => {
                    return Ok(ended.unwrap_or_else(|panic| Some(panicked(&*panic))));
                }
                _ = renew.tick() => {
                    self.lock.renew().await.map_err(DeliveryError::Renew)?;
                }
            }
        }
    }

    /// Carries a plan out: [`settlement::plan`] decides, this builds the
    /// messages it names into one transport settlement, commits it, and
    /// says what happened.
    async fn carry_out(
        &mut self,
        received: &ReceivedMessage<NimbusMessage>,
        plan: Plan,
        settled: Settled<'_>,
    ) -> Result<(), DeliveryError> {
        let facts = Facts {
            entry: settled.entry,
            state: &*self.state,
            message: settled.message,
            event_id: settled.event_id,
            replayed: settled.replayed,
            delivery_count: received.delivery_count,
            max_delivery_count: self.endpoint.max_delivery_count,
            plan,
            failure: settled.failure,
            retry_after: settled.retry_after,
        };
        let commit = match settlement::plan(&facts, &*self.endpoint.policies) {
            Decision::Abandon {
                backoff,
                first_failure,
            } => {
                return self
                    .abandon_and_hold(received, &settled, backoff, first_failure)
                    .await;
            }
            Decision::Commit(commit) => *commit,
        };
        let Commit {
            plan,
            mut next,
            retry,
            expects_retry,
            replay_trigger,
            disposition,
            blocks_for_good,
        } = commit;
        // Said in the response and, once committed, in the log.
        let dead_lettered = match &disposition {
            Disposition::DeadLetter {
                reason,
                description,
            } => Some((reason.clone(), description.clone())),
            _ => None,
        };
        let topic = self.endpoint.name.clone();
        self.endpoint.retrying.clear(&topic, settled.event_id);
        let mut settlement = Settlement::new();
        if let Some(response) = plan.response {
            let response = self.response(response, &settled, dead_lettered.as_ref());
            settlement = settlement.publish(topic.clone(), response.to_transport());
        }
        let mut follow_ups = None;
        if plan.send_follow_ups
            && let Some(report) = settled.report
        {
            for follow_up in &report.follow_ups {
                let publish = build::follow_up_publish(settled.message, follow_up, &topic);
                settlement = settlement.publish(topic.clone(), publish.to_transport());
            }
            follow_ups = Some(report.follow_ups.as_slice());
        }
        if plan.record_inbox
            && let (Some(key), Some(retention)) = (settled.inbox_key, self.endpoint.inbox_retention)
        {
            settlement = settlement.record_inbox(
                self.endpoint.name.clone(),
                key.to_hex(),
                // Configured: no overflow, at most the last writable time.
                nimbus_wire::saturating_add(SystemTime::now(), retention),
            );
        }
        let retry = retry.map(|scheduled| {
            let at = crate::horizon::after(SystemTime::now(), scheduled.delay);
            let mut retry = build::retry_request(settled.message, at);
            // Known before it is sent: the state names the one retry the
            // block waits for.
            retry.message_id = Some(build::new_message_id());
            retry.retry_count = scheduled.retry_count;
            retry
        });
        let retry_at = retry.as_ref().and_then(|r| r.scheduled_enqueue_time);
        if expects_retry {
            next.expect_retry(
                retry
                    .as_ref()
                    .and_then(|r| Some((r.message_id.as_deref()?, r.scheduled_enqueue_time?))),
            );
        }
        if let Some(retry) = retry {
            settlement = settlement.publish(topic.clone(), retry.to_transport());
        }
        // The state is a field of the settlement, applied with it whatever
        // the order of these calls.
        settlement = self.with_state(settlement, &next);
        if replay_trigger {
            let trigger = build::process_deferred_request(settled.message);
            settlement = settlement.publish(topic.clone(), trigger.to_transport());
        }
        let settlement = settlement.with_outcome(received, disposition);
        self.commit(settlement, Some(next)).await?;
        // The outcome is said once committed: a settlement the broker
        // refused changed nothing, and the message comes back to run again.
        let said = Said {
            dead_lettered,
            blocks: plan.block == BlockChange::BlockByThis,
            blocks_for_good,
            retry_at,
            follow_ups,
        };
        log_settled(&topic, &settled, said);
        Ok(())
    }

    /// Carries out [`Decision::Abandon`]: notes the failure for the API,
    /// abandons the message, then holds the session for `backoff`
    /// (SEMANTICS.md §3).
    async fn abandon_and_hold(
        &mut self,
        received: &ReceivedMessage<NimbusMessage>,
        settled: &Settled<'_>,
        backoff: Duration,
        first_failure: bool,
    ) -> Result<(), DeliveryError> {
        let endpoint = self.endpoint;
        let topic = &endpoint.name;
        let (error_type, error) = settled.error();
        // Said once per event at the default level: no response is sent
        // (SEMANTICS.md §3), so this line is all an operator sees until the
        // event completes or is dead-lettered.
        if first_failure {
            warn!(
                endpoint = %topic,
                session = %settled.session(),
                event_id = %settled.event_id,
                %error_type,
                %error,
                max_deliveries = endpoint.max_delivery_count,
                "event failed transiently: its session waits while it is delivered again \
                 after a backoff, until it succeeds or reaches the max delivery count \
                 and is dead-lettered"
            );
        }
        info!(endpoint = %topic, event_id = settled.event_id, ?backoff, delivery = received.delivery_count, "transient failure: abandoning, then holding the session for the backoff");
        let failed_at = SystemTime::now();
        endpoint.retrying.note(
            topic,
            settled.event_id,
            TransientAttempt {
                delivery: received.delivery_count,
                max_deliveries: endpoint.max_delivery_count,
                error_type: error_type.to_owned(),
                error: error.to_owned(),
                failed_at,
                next_delivery_after: crate::horizon::after(failed_at, backoff),
            },
        );
        // Abandoned before the wait, still holding the session, so the
        // message is first in it when the wait ends and no one else can
        // take it meanwhile; and its raised delivery count is on disk, so a
        // host killed during the backoff does not deliver it again as if
        // this failure had not happened (a crash loop would never reach the
        // max delivery count).
        let settlement = Settlement::abandon(received, Properties::new());
        self.commit(settlement, None).await?;
        self.hold(backoff).await
    }

    /// Builds the Resolver-bound response a plan asks for; `dead_lettered`
    /// is the reason and description of the settlement's dead-letter.
    fn response(
        &self,
        response: Response,
        settled: &Settled<'_>,
        dead_lettered: Option<&(String, String)>,
    ) -> NimbusMessage {
        let message = settled.message;
        let times = settled.timing.times();
        let failure = settled
            .failure
            .cloned()
            .unwrap_or_else(|| Failure::new("Unknown", "no error recorded"));
        let mut response = match response {
            Response::Resolution => build::resolution_response(message, times),
            Response::Error => build::error_response(message, times, &failure),
            Response::HandoffFailed => build::handoff_failed_response(message, times),
            Response::PendingHandoff => {
                let handoff = match settled.report.map(|r| &r.result) {
                    Some(Ok(Outcome::PendingHandoff(handoff))) => Handoff {
                        reason: handoff.reason.clone(),
                        external_job_id: handoff.external_job_id.clone(),
                        // The guest's duration: any u64 of milliseconds.
                        expected_by: handoff
                            .expected_by
                            .map(|d| crate::horizon::after(SystemTime::now(), d)),
                    },
                    _ => Handoff::default(),
                };
                build::pending_handoff_response(message, times, &handoff)
            }
            Response::Deferral => {
                build::deferral_response_behind_parked(message, times, self.state.deferred_count)
            }
            Response::Skip => build::skip_response(message, times),
            Response::Duplicate => build::duplicate_response(message, times),
            Response::Discard => build::discard_response(
                message,
                times,
                &failure,
                settled.decided_by.unwrap_or("nimbus classifier"),
            ),
            Response::Unsupported => build::unsupported_response(message, times),
            Response::DeadLetterNotification => {
                // `settlement::plan` sends this notice only with a
                // dead-letter; should that ever change, the notice says
                // what the broker's own dead-letter would.
                let (reason, description) = dead_lettered.map_or(
                    (dead_letter::FAILED_TO_HANDLE, "no handler failure recorded"),
                    |(reason, description)| (reason.as_str(), description.as_str()),
                );
                build::dead_letter_notification(
                    message,
                    times,
                    reason,
                    description,
                    settled.failure,
                )
            }
        };
        // No version ran when the handler did not load.
        if let Some(report) = settled.report.filter(|r| !r.version.is_empty()) {
            response.properties.insert(
                prop::HANDLER_VERSION.to_owned(),
                PropertyValue::String(report.version.clone()),
            );
        }
        response
    }

    /// Parks the message behind the block (or behind the session's parked
    /// messages): DeferralResponse, the parked copy, the state, complete.
    async fn park(
        &mut self,
        received: &ReceivedMessage<NimbusMessage>,
        why: ParkedBy,
        sequence: session_state::ParkSequence,
        timing: Timing,
    ) -> Result<(), DeliveryError> {
        let message = &received.message;
        let topic = self.endpoint.name.clone();
        let mut next = self.state.clone();
        let sequence = session_state::park(&mut next, sequence);
        let response = match &why {
            ParkedBy::Block(owner) => {
                Some(build::deferral_response(message, timing.times(), owner))
            }
            ParkedBy::EarlierParked => Some(build::deferral_response_behind_parked(
                message,
                timing.times(),
                self.state.deferred_count,
            )),
            ParkedBy::OutOfTurn => {
                next.out_of_turn_replays = next.out_of_turn_replays.saturating_add(1);
                None
            }
        };
        let mut settlement = Settlement::complete(received);
        if let Some(response) = response {
            settlement = settlement.publish(topic.clone(), response.to_transport());
        }
        let parked = build::parked_copy(message, sequence);
        settlement = settlement.publish(topic.clone(), parked.to_transport());
        settlement = self.with_state(settlement, &next);
        if !matches!(why, ParkedBy::Block(_)) && session_state::needs_replay_trigger(&next) {
            // Not parked by a block: make sure a replay will pick it up.
            let trigger = build::process_deferred_request(message);
            settlement = settlement.publish(topic, trigger.to_transport());
        }
        debug!(endpoint = %self.endpoint.name, event_id = ?message.event_id, sequence, ?why, "parked");
        self.commit(settlement, Some(next)).await
    }

    /// A message that fails validation: dead-letter it with the defect as
    /// the reason and tell the Resolver with whatever could be read.
    async fn reject(
        &mut self,
        received: &ReceivedMessage<NimbusMessage>,
        reason: &str,
        timing: Timing,
    ) -> Result<(), DeliveryError> {
        let readable = &received.message;
        warn!(endpoint = %self.endpoint.name, message_id = %received.message.message_id.as_deref().unwrap_or(""), %reason, "dead-lettering an invalid message");
        let description = format!(
            "{reason} (message {} on '{}')",
            received.message.message_id.as_deref().unwrap_or("<no id>"),
            self.endpoint.name
        );
        let mut settlement = Settlement::dead_letter(received, reason, description.clone());
        if readable
            .event_id
            .as_deref()
            .is_some_and(|id| !id.trim().is_empty())
        {
            let notice = build::dead_letter_notification(
                readable,
                timing.times(),
                reason,
                &description,
                None,
            );
            settlement = settlement.publish(self.endpoint.name.clone(), notice.to_transport());
        }
        // A replayed copy that cannot run still leaves the parked set: else
        // its session would count it as parked for ever, and park every
        // later event behind it.
        if readable.replayed_sequence().is_some() && self.state.has_parked() {
            let mut next = self.state.clone();
            next.unpark();
            let settlement = self.with_state(settlement, &next);
            return self.commit(settlement, Some(next)).await;
        }
        self.commit(settlement, None).await
    }

    /// Why a control request of type `kind` did not come from this host's
    /// Manager, or `None` when it did: it says `From = Manager` and carries
    /// the Manager's signature under the hosts' control key. On a namespace
    /// any client with a Send key can write `From` (issue 40).
    fn not_from_manager(&self, kind: MessageType, message: &Message) -> Option<String> {
        if !control_signature::claims_manager(message) {
            return Some(Defect::NotFromManager(kind).to_string());
        }
        control_signature::verify(&self.endpoint.control_key, message)
            .err()
            .map(|why| format!("{kind} refused: {why}"))
    }

    /// A control request that is not the Manager's: dead-lettered with why,
    /// and nothing else. The Resolver is not told, since the message is not
    /// the event and marking the event DeadLettered would refuse the
    /// operator's own handoff completion; the session state is not touched,
    /// since nothing about the session changed. The operator's resubmit,
    /// skip and handoff work as before.
    async fn refuse_control(
        &mut self,
        received: ReceivedMessage,
        kind: MessageType,
        why: &str,
    ) -> Result<(), DeliveryError> {
        let event_id = received
            .message
            .property_str(prop::EVENT_ID)
            .unwrap_or_default()
            .to_owned();
        let message_id = received
            .message
            .message_id
            .as_deref()
            .unwrap_or("<no id>")
            .to_owned();
        // One line per message: each is dead-lettered, and a forged control
        // message is what an operator must hear of.
        warn!(
            endpoint = %self.endpoint.name,
            session = self.lock.session_id(),
            %event_id,
            %message_id,
            message_type = %kind,
            reason = %why,
            "dead-lettering a control request that is not from this host's Manager; its event \
             is left as it was"
        );
        let description = format!(
            "{why} (message {message_id} on '{}', about event '{event_id}'). The event is left \
             as it was: resubmit, skip or complete its handoff with nimbus",
            self.endpoint.name
        );
        let description = dead_letter::truncate_description(&description).into_owned();
        let settlement =
            Settlement::dead_letter(received, dead_letter::UNAUTHORIZED_CONTROL, description);
        self.commit(settlement, None).await
    }

    /// A valid NimBus message that this endpoint does not handle here.
    async fn not_for_endpoint(
        &mut self,
        received: &ReceivedMessage<NimbusMessage>,
        timing: Timing,
    ) -> Result<(), DeliveryError> {
        if received.message.message_type == MessageType::ContinuationRequest {
            // NimBus v4 logs and completes any ContinuationRequest it still receives.
            info!(endpoint = %self.endpoint.name, "completing a legacy ContinuationRequest");
            return self.commit(Settlement::complete(received), None).await;
        }
        let reason = format!(
            "Unsupported MessageType: '{}'",
            received.message.message_type
        );
        self.reject(received, &reason, timing).await
    }

    /// Adds the session state write to `settlement` if `next` differs.
    fn with_state(&self, settlement: Settlement, next: &SessionState) -> Settlement {
        if next == self.state {
            return settlement;
        }
        let blob = if next.is_empty() {
            None
        } else {
            Some(next.to_bytes())
        };
        settlement.set_session_state(blob)
    }

    /// Holds the session for `duration`, renewing its lock; until shutdown
    /// begins, if sooner.
    async fn hold(&self, duration: Duration) -> Result<(), DeliveryError> {
        let until = tokio::time::Instant::now() + crate::horizon::capped(duration);
        loop {
            let now = tokio::time::Instant::now();
            if now >= until || self.shutdown.is_cancelled() {
                return Ok(());
            }
            tokio::select! {
                () = self.shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep((until - now).min(self.endpoint.renew_every)) => {}
            }
            if tokio::time::Instant::now() < until {
                self.lock.renew().await.map_err(DeliveryError::Renew)?;
            }
        }
    }

    /// Commits a settlement; on success adopts `next` as the session state.
    async fn commit(
        &mut self,
        settlement: Settlement,
        next: Option<SessionState>,
    ) -> Result<(), DeliveryError> {
        self.lock
            .settle(settlement)
            .await
            .map_err(|source| DeliveryError::Settle { source })?;
        self.committed = true;
        if let Some(next) = next {
            *self.state = next;
        }
        Ok(())
    }
}

/// The event a handler ran on, as its settlement needs it.
#[derive(Clone, Copy)]
struct Handled<'a> {
    message: &'a NimbusMessage,
    entry: Entry,
    event_id: &'a str,
    timing: Timing,
    inbox_key: Option<InboxKey>,
}

/// Why a message is parked, which says what the Resolver is told.
#[derive(Debug)]
enum ParkedBy {
    /// This event blocks the session: DeferralResponse naming it.
    Block(String),
    /// Nothing blocks, but earlier events are parked (the gate):
    /// DeferralResponse saying it waits behind them.
    EarlierParked,
    /// A replayed copy back before a lower parked one (decision 0050, rule
    /// 4): already recorded as parked, so no response; counted towards
    /// giving up on a lost parked message.
    OutOfTurn,
}

/// What a settlement knows about the delivery it settles.
struct Settled<'a> {
    message: &'a NimbusMessage,
    event_id: &'a str,
    entry: Entry,
    replayed: bool,
    report: Option<&'a Report>,
    failure: Option<&'a Failure>,
    decided_by: Option<&'a str>,
    /// The handler's retry-after hint, given with its failure.
    retry_after: Option<Duration>,
    timing: Timing,
    inbox_key: Option<InboxKey>,
}

impl Settled<'_> {
    /// The session, for log lines (`""` without one).
    fn session(&self) -> &str {
        self.message.session_id.as_deref().unwrap_or("")
    }

    /// The failure's type and message, for log lines (`""` without one).
    fn error(&self) -> (&str, &str) {
        self.failure
            .map_or(("", ""), |f| (f.error_type.as_str(), f.message.as_str()))
    }
}

/// What a committed settlement tells the log.
struct Said<'a> {
    /// The dead-letter reason and description, if it dead-lettered.
    dead_lettered: Option<(String, String)>,
    /// Whether it blocked the session by this event.
    blocks: bool,
    /// Whether the blocker failed again with no retry left.
    blocks_for_good: bool,
    /// When the retry it scheduled is due.
    retry_at: Option<SystemTime>,
    /// The follow-ups it published.
    follow_ups: Option<&'a [FollowUp]>,
}

/// Says what a committed settlement did: a dead-letter or a block at warn
/// (an operator has to act), each follow-up at info.
fn log_settled(topic: &str, settled: &Settled<'_>, said: Said<'_>) {
    if let Some((reason, description)) = said.dead_lettered {
        // What an operator on call looks for in the log, at the
        // default level: the event, where it is, and why.
        warn!(
            endpoint = %topic,
            session = %settled.session(),
            event_id = %settled.event_id,
            event_type = %settled.message.event_type().unwrap_or(""),
            %reason,
            // A permanent failure's reason already holds its text.
            description = (!reason.contains(&description)).then_some(description.as_str()),
            "event dead-lettered (`nimbus dlq list`; `nimbus dlq replay` once fixed)"
        );
    }
    if said.blocks {
        log_block(topic, settled, said.retry_at);
    } else if said.blocks_for_good {
        // A retry or a resubmission of the blocker failed with no retry
        // left: from now on only an operator unblocks the session.
        let (error_type, error) = settled.error();
        warn!(
            endpoint = %topic,
            session = %settled.session(),
            event_id = %settled.event_id,
            %error_type,
            %error,
            "event failed again and no retry is left: its session stays blocked until it is \
             resubmitted or skipped (`nimbus event ID`)"
        );
    }
    for follow_up in said.follow_ups.into_iter().flatten() {
        // A follow-up nothing consumes leaves no other trace: the
        // author checking that theirs went out reads it here (-v).
        info!(
            endpoint = %topic,
            event_id = %settled.event_id,
            follow_up_type = %follow_up.event_type,
            follow_up_message_id = %follow_up.message_id,
            "follow-up published with the event's settlement"
        );
    }
}

/// Says why a session is now blocked: a failure at warn (the default level
/// shows it; the operator has to act), a handoff at info (the job settles it).
fn log_block(endpoint: &str, settled: &Settled<'_>, retry_at: Option<SystemTime>) {
    let session = settled.session();
    let event_type = settled.message.event_type().unwrap_or("");
    if let Some(Ok(Outcome::PendingHandoff(handoff))) = settled.report.map(|r| &r.result) {
        info!(
            %endpoint,
            %session,
            event_id = %settled.event_id,
            %event_type,
            reason = %handoff.reason,
            job = %handoff.external_job_id.as_deref().unwrap_or(""),
            "event handed off: its session waits until the handoff is completed or failed"
        );
        return;
    }
    let (error_type, error) = settled.error();
    let what = if retry_at.is_some() {
        "event failed: its session is blocked and its later events are parked; a retry is \
         scheduled (`nimbus event ID`)"
    } else {
        "event failed and no retry policy applies: its session is blocked and its later events \
         are parked until it is resubmitted or skipped (`nimbus event ID`)"
    };
    warn!(
        %endpoint,
        %session,
        event_id = %settled.event_id,
        %event_type,
        %error_type,
        %error,
        retry_at = retry_at
            .map(nimbus_wire::format_round_trip)
            .map(tracing::field::display),
        "{what}"
    );
}

/// The report a refused settlement turns `report` into: failed, with the
/// broker's reason, without follow-ups, by the same handler version.
fn follow_ups_refused(report: Report, refusal: &str) -> Report {
    let count = report.follow_ups.len();
    let error = HandlerError::failed(
        FOLLOW_UPS_REFUSED,
        format!(
            "the handler succeeded, but the broker refused its settlement with {count} \
             follow-up(s), so none was sent: {refusal}"
        ),
    );
    Report::failed(error, report.version)
}

/// A panic's message.
fn panic_text(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The report a delivery is settled with after the engine itself
/// panicked on it: `failed`, of type `Panic`, naming the host. No version
/// is named: which one ran, if any, is lost with the panic.
fn engine_panicked(panic: &str) -> Report {
    let error = HandlerError::failed(
        PANIC,
        format!(
            "the host panicked handling the event (a nimbus bug; the handler is not run again \
             for this delivery): {panic}"
        ),
    );
    Report::failed(error, String::new())
}

/// The report of a handler that panicked: `failed`, with the panic's
/// message. No version ran to the end, so none is named.
fn panicked(panic: &(dyn Any + Send)) -> Report {
    let message = panic_text(panic);
    warn!(%message, "the handler panicked");
    let error = HandlerError::failed(PANIC, format!("the handler panicked: {message}"));
    Report::failed(error, "unknown".to_owned())
}
