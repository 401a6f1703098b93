//! The endpoint's dead-letter queues: list without losing, replay one or
//! all, remove the ones whose event has since been settled.
//!
//! The transport has no browse (peek) operation, so listing receives every
//! dead-lettered message under a peek-lock and then closes the receiver,
//! which releases them all. A clean release does not count a delivery, so a
//! listing changes nothing (decision 0071). Replay uses the transport's
//! atomic `replay_dead_letter`: the message leaves the dead-letter queue and
//! returns to the end of its subscription in one step.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use nimbus_resolver::{ReplayNote, Status};
use nimbus_transport::{
    Admin, ErrorKind, ReceivedMessage, Receiver, SubQueue, SubscriptionPath, Transport,
};
use nimbus_wire::addr::RESOLVER;
use nimbus_wire::prop;
use serde::Serialize;

use crate::error::ManagerError;
use crate::operations::Manager;

/// How many dead-lettered messages one listing returns at most by default.
pub const DEFAULT_DEAD_LETTER_LIMIT: usize = 1000;

/// How long a listing waits for the next message before deciding the queue
/// is read to the end. Messages already dead-lettered are returned at once;
/// this only bounds the wait at the end of the queue.
const END_OF_QUEUE_WAIT: Duration = Duration::from_millis(50);

/// One dead-lettered message, as an operator needs to see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetter {
    /// The endpoint; for a message a forwarder could not forward, the
    /// topic it was published to (an endpoint's, or a producer's).
    pub endpoint: String,
    /// The subscription whose dead-letter queue holds it (`E` for the
    /// endpoint's own, `Resolver` for the copy bound to the Resolver,
    /// `Deferred` or `DeferredProcessor`, or a forwarder to a consumer's
    /// topic, named after the consumer). For the Resolver's own queue
    /// both this and [`DeadLetter::endpoint`] are `Resolver`.
    pub subscription: String,
    /// The broker sequence number.
    pub sequence_number: i64,
    /// The broker message id.
    pub message_id: Option<String>,
    /// The session.
    pub session_id: Option<String>,
    /// The NimBus message type.
    pub message_type: Option<String>,
    /// The event id.
    pub event_id: Option<String>,
    /// The event type.
    pub event_type: Option<String>,
    /// Why it was dead-lettered.
    pub reason: Option<String>,
    /// The dead-letter description.
    pub description: Option<String>,
    /// How many deliveries it had had.
    pub delivery_count: u32,
    /// When it was enqueued; in JSON an ISO 8601 UTC time, as the bus
    /// writes times.
    #[serde(serialize_with = "iso_8601")]
    pub enqueued_time: SystemTime,
    /// The status the Resolver shows now for the message's event at the
    /// endpoint, in a listing of the endpoint's own queue: `Completed` or
    /// `Skipped` means it was fixed since, and the message can go (`dlq
    /// remove --settled`). `None` elsewhere, or when the Resolver does not
    /// know the event.
    pub event_status: Option<Status>,
}

fn iso_8601<S: serde::Serializer>(at: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&nimbus_wire::format_round_trip(*at))
}

/// Which dead-lettered message to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterId {
    /// By broker message id.
    MessageId(String),
    /// By broker sequence number.
    SequenceNumber(i64),
}

impl std::fmt::Display for DeadLetterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeadLetterId::MessageId(id) => write!(f, "with MessageId '{id}'"),
            DeadLetterId::SequenceNumber(n) => write!(f, "with sequence number {n}"),
        }
    }
}

impl DeadLetterId {
    fn matches(&self, message: &ReceivedMessage) -> bool {
        match self {
            DeadLetterId::MessageId(id) => message.message.message_id.as_deref() == Some(id),
            DeadLetterId::SequenceNumber(n) => message.sequence_number == *n,
        }
    }
}

/// A dead-lettered message moved back to its subscription.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replayed {
    /// The message as it was in the dead-letter queue.
    pub message: DeadLetter,
}

/// What [`Manager::replay_all_dead_letters`] did.
#[derive(Debug, Default)]
pub struct ReplayedAll {
    /// The messages moved back, as they were in the dead-letter queue.
    pub replayed: Vec<DeadLetter>,
    /// The messages left dead-lettered, each with why.
    pub left: Vec<(DeadLetter, ManagerError)>,
    /// Why the pass stopped before the end, if it did: what it moved until
    /// then is in `replayed` (and may be running already).
    pub stopped: Option<ManagerError>,
}

/// What [`Manager::remove_settled_dead_letters`] did.
#[derive(Debug, Default)]
pub struct RemovedAll {
    /// The messages removed, as they were in the dead-letter queue.
    pub removed: Vec<DeadLetter>,
    /// The messages kept, each with why (most often: its event is still
    /// open, so the message may be what fixes it).
    pub kept: Vec<(DeadLetter, ManagerError)>,
    /// Why the pass stopped before the end, if it did: what it removed
    /// until then is in `removed`.
    pub stopped: Option<ManagerError>,
}

/// The subscriptions of endpoint `E` whose dead-letter queues the Manager
/// reads: its own session subscription, the forwarding one to the
/// Resolver, the parking one (`Deferred`) and the replay triggers'
/// (`DeferredProcessor`). A message dead-letters in the last two only when
/// the replayer failed it over and over, or it carried a TTL of its own;
/// rare, but an operator must see it, since it is a parked event.
///
/// `Resolver` (a name no endpoint may take) names the Resolver's own
/// subscription, where the Resolver dead-letters what it cannot decode and
/// the bus what it failed to record at every delivery (a store that kept
/// failing): audit records an operator must be able to see and replay.
fn subscriptions(endpoint: &str) -> Vec<SubscriptionPath> {
    if endpoint == RESOLVER {
        return vec![SubscriptionPath::new(RESOLVER, RESOLVER)];
    }
    vec![
        SubscriptionPath::new(endpoint, endpoint),
        SubscriptionPath::new(endpoint, RESOLVER),
        SubscriptionPath::new(endpoint, nimbus_wire::addr::DEFERRED),
        SubscriptionPath::new(endpoint, nimbus_wire::addr::DEFERRED_PROCESSOR),
    ]
}

/// Whether `path` is a forwarder of `endpoint`'s topic to a consumer's
/// topic, rather than one of the endpoint's own subscriptions.
fn is_forwarder(endpoint: &str, path: &SubscriptionPath) -> bool {
    !subscriptions(endpoint).contains(path)
}

/// Checks that `subscription` names one of `endpoint`'s dead-letter queues
/// or one of `forwarders` (its topic's).
fn check_named_queue(
    endpoint: &str,
    subscription: &str,
    forwarders: Option<&[SubscriptionPath]>,
) -> Result<(), ManagerError> {
    let fixed = check_dead_letter_queue(endpoint, subscription);
    let forwarder = forwarders
        .unwrap_or_default()
        .iter()
        .any(|path| path.subscription == subscription);
    if forwarder { Ok(()) } else { fixed }
}

/// Whether `path` holds copies bound to the Resolver (an endpoint's
/// forwarding subscription, or the Resolver's own): a copy there is what
/// the audit trail lacks, never something a handler runs.
fn bound_to_resolver(path: &SubscriptionPath) -> bool {
    path.subscription == RESOLVER
}

/// Why a dead-lettered parked copy is not replayed: it would go back to
/// the `Deferred` subscription, where nothing replays it unless its
/// session is blocked again.
fn parked_copy_not_replayable(
    path: &SubscriptionPath,
    which: &DeadLetterId,
) -> Option<ManagerError> {
    (path.subscription == nimbus_wire::addr::DEFERRED).then(|| ManagerError::NotReplayable {
        which: which.to_string(),
        subscription: path.to_string(),
    })
}

/// Checks that `subscription` names one of `endpoint`'s dead-letter queues.
///
/// # Errors
///
/// [`ManagerError::UnknownDeadLetterQueue`] naming both.
pub fn check_dead_letter_queue(endpoint: &str, subscription: &str) -> Result<(), ManagerError> {
    if subscriptions(endpoint)
        .iter()
        .any(|path| path.subscription == subscription)
    {
        return Ok(());
    }
    Err(ManagerError::UnknownDeadLetterQueue {
        endpoint: endpoint.to_owned(),
        subscription: subscription.to_owned(),
    })
}

impl<T: Transport + Admin> Manager<T> {
    /// The forwarders of topic `topic` to its consumers' topics (all its
    /// forwarding subscriptions but the one to the Resolver, which is the
    /// endpoint's own), by name. A message dead-letters there when it cannot
    /// be forwarded (its target topic is gone, a rule failed on it), so no
    /// endpoint and no Resolver ever saw it: only its dead-letter queue
    /// tells an operator that a publish went nowhere. `None` when the topic
    /// does not exist, or its subscriptions cannot be listed (Service Bus
    /// over AMQP: then the endpoint's own queues, whose names are known,
    /// are read, and a name that is none of them is unknown).
    async fn forwarders(&self, topic: &str) -> Result<Option<Vec<SubscriptionPath>>, ManagerError> {
        match self.transport.list_subscriptions(topic).await {
            Ok(subscriptions) => Ok(Some(
                subscriptions
                    .into_iter()
                    .filter(|s| s.settings.forward_to.is_some() && s.name != RESOLVER)
                    .map(|s| SubscriptionPath::new(s.topic, s.name))
                    .collect(),
            )),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                tracing::debug!(
                    topic,
                    error = %e,
                    "the forwarders' dead-letter queues are not read: they cannot be listed"
                );
                Ok(None)
            }
            Err(source) => Err(ManagerError::ListForwarders {
                topic: topic.to_owned(),
                source,
            }),
        }
    }

    /// Every dead-letter queue of `endpoint` (see [`subscriptions`]) and
    /// of its topic's forwarders; for a producer's topic, which has no
    /// endpoint subscriptions, the forwarders' alone (none when nothing
    /// consumes what it publishes). An error when there is no such topic.
    async fn open_queues(
        &self,
        endpoint: &str,
        only: Option<&str>,
    ) -> Result<Vec<(SubscriptionPath, T::Receiver)>, ManagerError> {
        let forwarders = self.forwarders(endpoint).await?;
        if let Some(subscription) = only {
            check_named_queue(endpoint, subscription, forwarders.as_deref())?;
        }
        let topic_exists = forwarders.is_some();
        let forwarders = forwarders.unwrap_or_default();
        let mut open = Vec::new();
        for path in subscriptions(endpoint)
            .into_iter()
            .chain(forwarders.iter().cloned())
        {
            if only.is_some_and(|s| s != path.subscription) {
                continue;
            }
            match self.open_dead_letters(endpoint, &path).await {
                Ok(Some(receiver)) => open.push((path, receiver)),
                Ok(None) => {}
                // A producer's topic: its forwarders are all it has.
                Err(ManagerError::UnknownEndpoint { .. }) if topic_exists => {}
                Err(e) => {
                    for (_, receiver) in open {
                        receiver.close().await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(open)
    }

    /// The dead-lettered messages of `endpoint` (its own subscription's
    /// queue, then the Resolver forwarding subscription's, `Deferred`'s,
    /// `DeferredProcessor`'s and its topic's forwarders'), in queue order
    /// in each (a replayed message keeps the place it was given when it
    /// went back, so one dead-lettered again comes after the others), at most `limit` (default [`DEFAULT_DEAD_LETTER_LIMIT`]). Nothing
    /// is removed and no delivery is counted.
    pub async fn dead_letters(
        &self,
        endpoint: &str,
        limit: Option<usize>,
    ) -> Result<Vec<DeadLetter>, ManagerError> {
        let limit = limit.unwrap_or(DEFAULT_DEAD_LETTER_LIMIT);
        let mut listed = Vec::new();
        let mut queues = self.open_queues(endpoint, None).await?.into_iter();
        for (path, receiver) in queues.by_ref() {
            let held = read_all(&receiver, &path, limit.saturating_sub(listed.len())).await;
            // Closing releases every held message without counting a delivery.
            receiver.close().await;
            for message in held? {
                let mut described = describe(endpoint, &path, &message);
                described.event_status = self.event_status_now(endpoint, &path, &described).await;
                listed.push(described);
            }
            if listed.len() >= limit {
                break;
            }
        }
        for (_, receiver) in queues {
            receiver.close().await;
        }
        Ok(listed)
    }

    /// Moves one dead-lettered message of `endpoint` back to the end of its
    /// subscription, with a fresh delivery count. `subscription` narrows the
    /// search to one queue; without it, a message found in both queues is an
    /// error rather than a guess.
    ///
    /// Unless `force`, a message for the endpoint whose event the Resolver
    /// has since recorded as Completed or Skipped stays where it is
    /// ([`ManagerError::EventAlreadySettled`]): replaying it would run the
    /// handler on that event again, e.g. on the payload of a resubmission
    /// that failed before a later one fixed the event. So does one whose
    /// event the Resolver no longer knows ([`ManagerError::EventNotRecorded`]),
    /// since retention removes settled events.
    pub async fn replay_dead_letter(
        &self,
        endpoint: &str,
        subscription: Option<&str>,
        which: &DeadLetterId,
        force: bool,
    ) -> Result<Replayed, ManagerError> {
        let (path, receiver, message) = self.locate(endpoint, subscription, which).await?;
        let mut described = describe(endpoint, &path, &message);
        if is_forwarder(endpoint, &path) {
            receiver.close().await;
            return Err(ManagerError::NotForwarded {
                which: which.to_string(),
                subscription: path.to_string(),
            });
        }
        if let Some(refusal) = parked_copy_not_replayable(&path, which) {
            receiver.close().await;
            return Err(refusal);
        }
        if !force {
            let refusal = match self.refusal(endpoint, &path, &described, which).await {
                Ok(refusal) => refusal,
                Err(e) => {
                    receiver.close().await;
                    return Err(e);
                }
            };
            if let Some(refusal) = refusal {
                // Closing releases the message without counting a delivery.
                receiver.close().await;
                return Err(refusal);
            }
        }
        receiver
            .replay_dead_letter(message)
            .await
            .map_err(|source| ManagerError::Replay {
                which: which.to_string(),
                subscription: path.to_string(),
                source,
            })?;
        tracing::info!(
            subscription = %path,
            sequence_number = described.sequence_number,
            "manager: dead-lettered message replayed"
        );
        self.note_replay(&mut described).await;
        Ok(Replayed { message: described })
    }

    /// Removes one dead-lettered message of `endpoint` for good: for a
    /// message whose event has since been settled (fixed by a resubmission,
    /// or skipped), which `dlq list` and the dead-letter gauge would show
    /// for ever otherwise.
    ///
    /// Unless `force`, only a message of the endpoint's own queue whose
    /// event the Resolver shows Completed or Skipped is removed; any other
    /// is kept ([`ManagerError::DeadLetterStillNeeded`]), since it may be
    /// the only copy of an event still open, or what the Resolver's history
    /// of the event lacks.
    pub async fn remove_dead_letter(
        &self,
        endpoint: &str,
        subscription: Option<&str>,
        which: &DeadLetterId,
        force: bool,
    ) -> Result<DeadLetter, ManagerError> {
        let (path, receiver, message) = self.locate(endpoint, subscription, which).await?;
        let mut described = describe(endpoint, &path, &message);
        if !force {
            let keep = match self
                .removal_refusal(endpoint, &path, &mut described, which)
                .await
            {
                Ok(keep) => keep,
                Err(e) => {
                    receiver.close().await;
                    return Err(e);
                }
            };
            if let Some(keep) = keep {
                // Closing releases the message without counting a delivery.
                receiver.close().await;
                return Err(keep);
            }
        }
        let removed = receiver.complete(message).await;
        // Releases what the search held before the match.
        receiver.close().await;
        removed.map_err(|source| ManagerError::Remove {
            which: which.to_string(),
            subscription: path.to_string(),
            source,
        })?;
        tracing::info!(
            subscription = %path,
            sequence_number = described.sequence_number,
            event_id = described.event_id.as_deref().unwrap_or(""),
            forced = force,
            "manager: dead-lettered message removed"
        );
        Ok(described)
    }

    /// Removes every message of `endpoint`'s event-bearing dead-letter
    /// queues (its own, `Deferred`, `DeferredProcessor`) whose event the
    /// Resolver shows Completed or Skipped, and keeps the rest (named in
    /// [`RemovedAll::kept`] with why). The Resolver forwarding
    /// subscription's queue is not touched: a message there is removed
    /// only by name, with force.
    pub async fn remove_settled_dead_letters(
        &self,
        endpoint: &str,
    ) -> Result<RemovedAll, ManagerError> {
        let mut done = RemovedAll::default();
        for path in subscriptions(endpoint) {
            if bound_to_resolver(&path) {
                continue;
            }
            let Some(receiver) = self.open_dead_letters(endpoint, &path).await? else {
                continue;
            };
            let pass = self
                .remove_settled_in(endpoint, &path, &receiver, &mut done)
                .await;
            // Closing releases the messages kept without counting a delivery.
            receiver.close().await;
            if let Err(stopped) = pass {
                done.stopped = Some(stopped);
                break;
            }
        }
        tracing::info!(
            endpoint,
            removed = done.removed.len(),
            kept = done.kept.len(),
            "manager: dead letters of settled events removed"
        );
        Ok(done)
    }

    async fn remove_settled_in(
        &self,
        endpoint: &str,
        path: &SubscriptionPath,
        receiver: &T::Receiver,
        done: &mut RemovedAll,
    ) -> Result<(), ManagerError> {
        let mut seen = HashSet::new();
        while let Some(message) = next_unseen(receiver, path, &mut seen).await? {
            let mut described = describe(endpoint, path, &message);
            let which = DeadLetterId::SequenceNumber(message.sequence_number);
            if let Some(keep) = self
                .removal_refusal(endpoint, path, &mut described, &which)
                .await?
            {
                done.kept.push((described, keep));
                continue;
            }
            match receiver.complete(message).await {
                Ok(()) => done.removed.push(described),
                // Still dead-lettered; another pass will find it.
                Err(source) if source.kind() == ErrorKind::LockLost => {
                    let why = ManagerError::Remove {
                        which: which.to_string(),
                        subscription: path.to_string(),
                        source,
                    };
                    done.kept.push((described, why));
                }
                Err(source) => {
                    return Err(ManagerError::Remove {
                        which: which.to_string(),
                        subscription: path.to_string(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Finds `which` in `endpoint`'s dead-letter queues (`subscription`
    /// narrows the search to one), held by the receiver returned with it,
    /// which also holds every message received before it until it closes.
    /// A message found in both queues is an error rather than a guess.
    async fn locate(
        &self,
        endpoint: &str,
        subscription: Option<&str>,
        which: &DeadLetterId,
    ) -> Result<(SubscriptionPath, T::Receiver, ReceivedMessage), ManagerError> {
        let mut found: Vec<(SubscriptionPath, T::Receiver, ReceivedMessage)> = Vec::new();
        let mut searched = Vec::new();
        for (path, receiver) in self.open_queues(endpoint, subscription).await? {
            searched.push(path.to_string());
            // Every message received before the match stays locked by this
            // receiver until it closes, so the scan sees each message once.
            if let Some(message) = find(&receiver, &path, which).await? {
                found.push((path, receiver, message));
            }
        }
        if found.len() > 1 {
            return Err(ManagerError::AmbiguousDeadLetter {
                endpoint: endpoint.to_owned(),
                which: which.to_string(),
                subscriptions: found
                    .iter()
                    .map(|(p, _, _)| p.subscription.clone())
                    .collect(),
            });
        }
        found.pop().ok_or_else(|| ManagerError::DeadLetterNotFound {
            endpoint: endpoint.to_owned(),
            which: which.to_string(),
            searched,
        })
    }

    /// Moves every message dead-lettered on `endpoint` back to the end of
    /// its subscription (`subscription` narrows it to one queue), with no
    /// cap on how many.
    ///
    /// One pass per queue, each message replayed as soon as it is received
    /// (so no lock lapses however long the queue). A message whose id this
    /// pass replayed is held and left: one that fails and is dead-lettered
    /// again during the pass is not replayed a second time, so the pass
    /// ends. Messages it does not move
    /// (an event since settled or no longer known, unless `force`; a lapsed
    /// lock) stay dead-lettered and are named in [`ReplayedAll::left`] with
    /// the reason. A failure part-way ends the pass but still answers
    /// what was done ([`ReplayedAll::stopped`]); only a refusal before
    /// anything moved is an `Err`.
    pub async fn replay_all_dead_letters(
        &self,
        endpoint: &str,
        subscription: Option<&str>,
        force: bool,
    ) -> Result<ReplayedAll, ManagerError> {
        if let Some(subscription) = subscription
            && check_dead_letter_queue(endpoint, subscription).is_err()
        {
            let forwarders = self.forwarders(endpoint).await?;
            // Named and not one of the endpoint's own: a forwarder, whose
            // messages are never replayed, or an error naming the choices.
            check_named_queue(endpoint, subscription, forwarders.as_deref())?;
            return Err(ManagerError::NotForwarded {
                which: "every message".to_owned(),
                subscription: SubscriptionPath::new(endpoint, subscription).to_string(),
            });
        }
        let mut done = ReplayedAll::default();
        for path in subscriptions(endpoint) {
            if subscription.is_some_and(|s| s != path.subscription) {
                continue;
            }
            let Some(receiver) = self.open_dead_letters(endpoint, &path).await? else {
                continue;
            };
            let pass = self
                .replay_queue(endpoint, &path, &receiver, force, &mut done)
                .await;
            // Closing releases the messages left without counting a delivery.
            receiver.close().await;
            if let Err(stopped) = pass {
                done.stopped = Some(stopped);
                break;
            }
        }
        tracing::info!(
            endpoint,
            replayed = done.replayed.len(),
            left = done.left.len(),
            "manager: dead-letter queues replayed"
        );
        Ok(done)
    }

    /// [`Manager::replay_all_dead_letters`] on one queue.
    async fn replay_queue(
        &self,
        endpoint: &str,
        path: &SubscriptionPath,
        receiver: &T::Receiver,
        force: bool,
        done: &mut ReplayedAll,
    ) -> Result<(), ManagerError> {
        let mut replayed_ids = HashSet::new();
        let mut seen = HashSet::new();
        while let Some(message) = next_unseen(receiver, path, &mut seen).await? {
            let mut described = describe(endpoint, path, &message);
            let which = DeadLetterId::SequenceNumber(message.sequence_number);
            if let Some(refusal) = parked_copy_not_replayable(path, &which) {
                done.left.push((described, refusal));
                continue;
            }
            // Another entry with a message id this pass replayed: most often
            // the message itself, which failed and came back. Held (so not
            // received again), left, and said so.
            if let Some(id) = &message.message.message_id
                && replayed_ids.contains(id)
            {
                done.left.push((
                    described,
                    ManagerError::SeenInThisPass {
                        message_id: id.clone(),
                        which: which.to_string(),
                    },
                ));
                continue;
            }
            if !force
                && let Some(refusal) = self.refusal(endpoint, path, &described, &which).await?
            {
                done.left.push((described, refusal));
                continue;
            }
            let message_id = message.message.message_id.clone();
            match receiver.replay_dead_letter(message).await {
                Ok(()) => {
                    replayed_ids.extend(message_id);
                    self.note_replay(&mut described).await;
                    done.replayed.push(described);
                }
                // Still dead-lettered; another pass will find it.
                Err(source) if source.kind() == ErrorKind::LockLost => {
                    let why = ManagerError::Replay {
                        which: which.to_string(),
                        subscription: path.to_string(),
                        source,
                    };
                    done.left.push((described, why));
                }
                Err(source) => {
                    return Err(ManagerError::Replay {
                        which: which.to_string(),
                        subscription: path.to_string(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Adds a replay from an endpoint's own dead-letter queue (its handler
    /// runs the event again) to the event's history, so the audit trail says
    /// who sent it back and when. Copies bound to the Resolver are recorded
    /// as themselves when they arrive. Not noting it leaves the replay done,
    /// so a failure is logged, not returned. Sets the event's status as the
    /// Resolver shows it, for the result.
    async fn note_replay(&self, replayed: &mut DeadLetter) {
        let (Some(event_id), true) = (
            replayed.event_id.clone(),
            replayed.subscription == replayed.endpoint && replayed.endpoint != RESOLVER,
        ) else {
            return;
        };
        let note = ReplayNote {
            endpoint: replayed.endpoint.clone(),
            event_id,
            at_ms: nimbus_wire::unix_millis(SystemTime::now()),
            note: format!(
                "replayed from the dead-letter queue (message {}, dead-lettered: {})",
                replayed.message_id.as_deref().unwrap_or("-"),
                replayed.reason.as_deref().unwrap_or("-")
            ),
        };
        let store = std::sync::Arc::clone(&self.store);
        let recorded = tokio::task::spawn_blocking(move || {
            let recorded = store.record_replay(&note);
            (note, recorded)
        })
        .await;
        match recorded {
            Ok((_, Ok(Some(status)))) => replayed.event_status = Some(status),
            Ok((note, Ok(None))) => tracing::debug!(
                endpoint = %note.endpoint,
                event_id = %note.event_id,
                "manager: the Resolver has no record of the replayed event to note the replay in"
            ),
            Ok((note, Err(error))) => tracing::warn!(
                endpoint = %note.endpoint,
                event_id = %note.event_id,
                %error,
                "manager: the replay is done, but noting it in the event's history failed"
            ),
            Err(join) => tracing::warn!(error = %join, "manager: noting a replay panicked"),
        }
    }

    /// Why a dead-lettered message should not be replayed without `force`,
    /// if it should not: only a message of the endpoint's own queue runs
    /// the handler, and only for an event the Resolver shows still open.
    async fn refusal(
        &self,
        endpoint: &str,
        path: &SubscriptionPath,
        message: &DeadLetter,
        which: &DeadLetterId,
    ) -> Result<Option<ManagerError>, ManagerError> {
        // A copy bound to the Resolver only adds to the audit trail, whose
        // stale-write guard keeps a late copy from rolling a status back.
        if path.subscription != endpoint || bound_to_resolver(path) {
            return Ok(None);
        }
        let Some(event_id) = message.event_id.as_deref() else {
            return Ok(None);
        };
        match self.find(event_id, Some(endpoint)).await {
            Ok(record) if matches!(record.status, Status::Completed | Status::Skipped) => {
                Ok(Some(ManagerError::EventAlreadySettled {
                    event_id: event_id.to_owned(),
                    endpoint: endpoint.to_owned(),
                    status: record.status,
                    which: which.to_string(),
                }))
            }
            Ok(_) => Ok(None),
            Err(ManagerError::UnknownEvent { .. } | ManagerError::NotAtEndpoint { .. }) => {
                Ok(Some(ManagerError::EventNotRecorded {
                    event_id: event_id.to_owned(),
                    endpoint: endpoint.to_owned(),
                    which: which.to_string(),
                }))
            }
            Err(other) => Err(other),
        }
    }

    /// The Resolver's status now of a message's event, for a message of
    /// the endpoint's own queue. A listing is for reading: a lookup that
    /// fails leaves the status out rather than failing the listing.
    async fn event_status_now(
        &self,
        endpoint: &str,
        path: &SubscriptionPath,
        message: &DeadLetter,
    ) -> Option<Status> {
        if bound_to_resolver(path) || is_forwarder(endpoint, path) {
            return None;
        }
        let event_id = message.event_id.as_deref()?;
        self.find(event_id, Some(endpoint))
            .await
            .ok()
            .map(|record| record.status)
    }

    /// Why a dead-lettered message should be kept rather than removed
    /// (without `force`), if it should: removing is safe only for a message
    /// of the endpoint's own queue whose event is settled. Notes the
    /// event's status in `message` when it looks it up.
    async fn removal_refusal(
        &self,
        endpoint: &str,
        path: &SubscriptionPath,
        message: &mut DeadLetter,
        which: &DeadLetterId,
    ) -> Result<Option<ManagerError>, ManagerError> {
        let keep = |why: String| {
            Ok(Some(ManagerError::DeadLetterStillNeeded {
                which: which.to_string(),
                subscription: path.to_string(),
                why,
            }))
        };
        if is_forwarder(endpoint, path) {
            return keep(
                "it was never forwarded, so nothing shows its event was published again".to_owned(),
            );
        }
        if bound_to_resolver(path) {
            return keep(
                "it is a copy the Resolver could not record: removing it loses what it \
                 adds to the event's history (replay it to record it)"
                    .to_owned(),
            );
        }
        let Some(event_id) = message.event_id.as_deref() else {
            return keep("it names no event, so nothing shows it was dealt with".to_owned());
        };
        let found = self.find(event_id, Some(endpoint)).await;
        if let Ok(record) = &found {
            message.event_status = Some(record.status);
        }
        match found {
            Ok(record) if matches!(record.status, Status::Completed | Status::Skipped) => Ok(None),
            Ok(record) => keep(format!(
                "its event '{event_id}' is {}, not settled: it may be what fixes it (replay \
                 it), or resubmit or skip the event first",
                record.status
            )),
            Err(ManagerError::UnknownEvent { .. } | ManagerError::NotAtEndpoint { .. }) => {
                keep(format!(
                    "the Resolver has no record of its event '{event_id}' at '{endpoint}', so \
                     nothing shows it was settled"
                ))
            }
            Err(other) => Err(other),
        }
    }

    /// A receiver on the dead-letter queue of `path`; `None` for a missing
    /// Resolver forwarding subscription (an endpoint need not have one), an
    /// error for a missing endpoint subscription.
    async fn open_dead_letters(
        &self,
        endpoint: &str,
        path: &SubscriptionPath,
    ) -> Result<Option<T::Receiver>, ManagerError> {
        match self.transport.receiver(path, SubQueue::DeadLetter).await {
            Ok(receiver) => Ok(Some(receiver)),
            Err(e) if e.kind() == ErrorKind::NotFound && path.subscription == endpoint => {
                Err(ManagerError::UnknownEndpoint {
                    endpoint: endpoint.to_owned(),
                    subscription: path.to_string(),
                    source: e,
                })
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ManagerError::OpenDeadLetters {
                subscription: path.to_string(),
                source,
            }),
        }
    }
}

/// Receives (and holds) up to `limit` messages of a dead-letter queue.
async fn read_all<R: Receiver>(
    receiver: &R,
    path: &SubscriptionPath,
    limit: usize,
) -> Result<Vec<ReceivedMessage>, ManagerError> {
    let mut held = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while held.len() < limit {
        match receiver.receive(END_OF_QUEUE_WAIT).await {
            // A message seen again had its lock lapse during a long read:
            // the queue has been read round to where it started.
            Ok(Some(message)) if !seen.insert(message.sequence_number) => break,
            Ok(Some(message)) => held.push(message),
            Ok(None) => break,
            Err(source) => {
                return Err(ManagerError::ReadDeadLetters {
                    subscription: path.to_string(),
                    source,
                });
            }
        }
    }
    Ok(held)
}

/// The next message of a pass over a dead-letter queue not seen in it
/// before (one seen again is a held message whose lock lapsed); `None` at
/// the end of the queue.
async fn next_unseen<R: Receiver>(
    receiver: &R,
    path: &SubscriptionPath,
    seen: &mut HashSet<i64>,
) -> Result<Option<ReceivedMessage>, ManagerError> {
    loop {
        match receiver.receive(END_OF_QUEUE_WAIT).await {
            Ok(Some(message)) if !seen.insert(message.sequence_number) => {}
            Ok(message) => return Ok(message),
            Err(source) => {
                return Err(ManagerError::ReadDeadLetters {
                    subscription: path.to_string(),
                    source,
                });
            }
        }
    }
}

/// Receives until `which` turns up (holding everything before it).
async fn find<R: Receiver>(
    receiver: &R,
    path: &SubscriptionPath,
    which: &DeadLetterId,
) -> Result<Option<ReceivedMessage>, ManagerError> {
    loop {
        match receiver.receive(END_OF_QUEUE_WAIT).await {
            Ok(Some(message)) if which.matches(&message) => return Ok(Some(message)),
            Ok(Some(_)) => {}
            Ok(None) => return Ok(None),
            Err(source) => {
                return Err(ManagerError::ReadDeadLetters {
                    subscription: path.to_string(),
                    source,
                });
            }
        }
    }
}

fn describe(endpoint: &str, path: &SubscriptionPath, message: &ReceivedMessage) -> DeadLetter {
    let property = |name: &str| message.message.property_str(name).map(str::to_owned);
    DeadLetter {
        endpoint: endpoint.to_owned(),
        subscription: path.subscription.clone(),
        sequence_number: message.sequence_number,
        message_id: message.message.message_id.clone(),
        session_id: message.message.session_id.clone(),
        message_type: property(prop::MESSAGE_TYPE),
        event_id: property(prop::EVENT_ID),
        event_type: property(prop::EVENT_TYPE_ID),
        reason: message.dead_letter_reason.clone(),
        description: message.dead_letter_description.clone(),
        delivery_count: message.delivery_count,
        enqueued_time: message.enqueued_time,
        event_status: None,
    }
}
