//! Why an operator operation was refused or failed.

use nimbus_resolver::{Status, StoreError};
use nimbus_transport::{OpenReceiverError, PublishError, ReceiveError, SettleError};

/// An operator operation that did not happen. Nothing was sent or moved
/// unless the variant says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// The Resolver has no event with this id, and no session's state on
    /// the broker names it as its blocker.
    #[error(
        "no event '{event_id}' is known to the Resolver, nor is it the blocker of a session on \
         the broker"
    )]
    UnknownEvent {
        /// The id asked for.
        event_id: String,
    },
    /// The event exists at several endpoints and no endpoint was named.
    #[error(
        "event '{event_id}' is at several endpoints ({}); name the endpoint",
        endpoints.join(", ")
    )]
    AmbiguousEndpoint {
        /// The event id.
        event_id: String,
        /// Every endpoint that has it.
        endpoints: Vec<String>,
    },
    /// A message id (not an event id) that belongs to several events: a
    /// published message reaches every consuming endpoint as an event of
    /// its own.
    #[error(
        "'{message_id}' is not an event id but a message of several events ({}); name one of them by its event id, or give its endpoint (--endpoint)",
        events.join(", ")
    )]
    AmbiguousMessage {
        /// The id given.
        message_id: String,
        /// `'event' at 'endpoint'` for each.
        events: Vec<String>,
    },
    /// The event is known, but not at the endpoint named.
    #[error(
        "event '{event_id}' is not at endpoint '{endpoint}' (it is at {})",
        known.join(", ")
    )]
    NotAtEndpoint {
        /// The event id.
        event_id: String,
        /// The endpoint named.
        endpoint: String,
        /// Where the event is.
        known: Vec<String>,
    },
    /// A dead-lettered parked copy: replaying it would put it back among
    /// the parked messages, where nothing replays it unless its session is
    /// blocked again.
    #[error(
        "the dead-lettered message {which} in {subscription} is a parked copy of an event: \
         replayed, it would wait among the parked messages with nothing to replay it; resubmit or \
         skip its event instead (`nimbus resubmit` / `nimbus skip` with its event id), then remove \
         this copy (`nimbus dlq remove --settled`)"
    )]
    NotReplayable {
        /// The message.
        which: String,
        /// The subscription whose dead-letter queue holds it.
        subscription: String,
    },
    /// A message dead-lettered on a producer's forwarder: it never reached
    /// its consumer's topic, so there is nowhere to replay it to.
    #[error(
        "the dead-lettered message {which} in {subscription} was never forwarded, so no endpoint \
         and no Resolver has seen it: replayed, it would wait in a forwarder that forwards only \
         what is published. Fix what its reason names, publish the event again (`nimbus \
         publish`), then remove this copy (`nimbus dlq remove ... --force`)"
    )]
    NotForwarded {
        /// The message.
        which: String,
        /// The forwarder whose dead-letter queue holds it.
        subscription: String,
    },
    /// A dead-lettered message the Manager keeps unless forced: removing it
    /// could lose an event still open, or what its history lacks.
    #[error(
        "kept the dead-lettered message {which} in {subscription}: {why} (force removes it anyway)"
    )]
    DeadLetterStillNeeded {
        /// The message asked for.
        which: String,
        /// The subscription whose dead-letter queue holds it.
        subscription: String,
        /// Why it is kept.
        why: String,
    },
    /// A handoff operation on an event that is not pending a handoff.
    #[error(
        "event '{event_id}' at '{endpoint}' is not pending a handoff (status {status}{}); {}",
        sub_status.as_deref().map(|s| format!(", sub-status {s}")).unwrap_or_default(),
        not_pending_advice(*status)
    )]
    NotPendingHandoff {
        /// The event id.
        event_id: String,
        /// The endpoint.
        endpoint: String,
        /// Its status.
        status: Status,
        /// Its sub-status.
        sub_status: Option<String>,
    },
    /// An edited payload or handoff details that are not JSON.
    #[error("the {what} is not valid JSON: {reason}")]
    NotJson {
        /// `edited payload` or `handoff details`.
        what: &'static str,
        /// The parser's complaint, with line and column.
        reason: String,
    },
    /// A handoff failure without a reason.
    #[error("failing a handoff needs an error text saying why")]
    MissingErrorText,
    /// The Resolver has not (yet) seen what a control message must carry.
    #[error(
        "event '{event_id}' at '{endpoint}' has no {field} in the Resolver yet; wait for the Resolver to record the event's request, then retry"
    )]
    MissingCoordinate {
        /// The event id.
        event_id: String,
        /// The endpoint.
        endpoint: String,
        /// `SessionId`, `EventTypeId`, the request's `MessageId`, ...
        field: &'static str,
    },
    /// A resubmit with neither a recorded payload nor an edited one.
    #[error(
        "event '{event_id}' at '{endpoint}' has no recorded payload; resubmit it with an edited payload"
    )]
    MissingPayload {
        /// The event id.
        event_id: String,
        /// The endpoint.
        endpoint: String,
    },
    /// A resubmit of a session's blocker the Resolver has no record of,
    /// whose session state (written by an earlier build) keeps only its id.
    #[error(
        "event '{event_id}' at '{endpoint}' is known only by name, as the blocker of its session \
         (the Resolver has no record of it, and the broker's session state, written by an \
         earlier build, keeps neither its type nor its payload), so it cannot be resubmitted: \
         skip it (`nimbus skip {event_id}`), then publish it again"
    )]
    BlockerOnlyNamed {
        /// The event id.
        event_id: String,
        /// The endpoint.
        endpoint: String,
    },
    /// The endpoint has no such subscription to read dead letters from.
    #[error("endpoint '{endpoint}' has no subscription '{subscription}': {source}")]
    UnknownEndpoint {
        /// The endpoint.
        endpoint: String,
        /// The subscription looked for.
        subscription: String,
        /// The transport's answer.
        #[source]
        source: OpenReceiverError,
    },
    /// The dead-lettered message's event has since been settled: replaying
    /// it would run it again (a stale resubmission's old payload, say).
    #[error(
        "event '{event_id}' at '{endpoint}' is {status} since this message was dead-lettered; \
         replaying {which} would run it again (force the replay to do it anyway)"
    )]
    EventAlreadySettled {
        /// The event.
        event_id: String,
        /// The endpoint.
        endpoint: String,
        /// Its status now.
        status: nimbus_resolver::Status,
        /// The message asked for.
        which: String,
    },
    /// The dead-lettered message's event is not in the Resolver (any more):
    /// retention removes settled events, so replaying could run it again.
    #[error(
        "the Resolver has no record of event '{event_id}' at '{endpoint}' (events that need \
         nothing more are removed after [resolver] retention, so it may have been settled); \
         replaying {which} could run it again (force the replay to do it anyway)"
    )]
    EventNotRecorded {
        /// The event.
        event_id: String,
        /// The endpoint.
        endpoint: String,
        /// The message asked for.
        which: String,
    },
    /// A replay of a whole queue met a message id it had already seen in
    /// this pass: left for the operator to replay on its own.
    #[error(
        "dead-lettered message {which} has MessageId '{message_id}', like one this pass already \
         replayed (it failed and was dead-lettered again, or the id is reused); replay it on its \
         own if it should run again"
    )]
    SeenInThisPass {
        /// The MessageId.
        message_id: String,
        /// The message.
        which: String,
    },
    /// A dead-letter queue was named that the endpoint does not have.
    #[error(
        "endpoint '{endpoint}' has no subscription '{subscription}' with a dead-letter queue: name '{endpoint}' (its own), 'Resolver', 'Deferred', 'DeferredProcessor' or one of its topic's forwarders (a consumer's name)"
    )]
    UnknownDeadLetterQueue {
        /// The endpoint.
        endpoint: String,
        /// The subscription named.
        subscription: String,
    },
    /// No dead-lettered message matches.
    #[error("no dead-lettered message {which} on endpoint '{endpoint}' (looked in {})", searched.join(", "))]
    DeadLetterNotFound {
        /// The endpoint.
        endpoint: String,
        /// The message asked for.
        which: String,
        /// The dead-letter queues searched.
        searched: Vec<String>,
    },
    /// Several dead-lettered messages match; name the subscription.
    #[error(
        "dead-lettered message {which} is in several dead-letter queues of '{endpoint}' ({}); name the subscription",
        subscriptions.join(", ")
    )]
    AmbiguousDeadLetter {
        /// The endpoint.
        endpoint: String,
        /// The message asked for.
        which: String,
        /// Where it was found.
        subscriptions: Vec<String>,
    },
    /// A bulk operation named an endpoint the broker has no topic for.
    #[error("there is no endpoint '{endpoint}' (no topic of that name on the broker)")]
    NoSuchEndpoint {
        /// The endpoint named.
        endpoint: String,
    },
    /// A bulk operation's selection cannot be used.
    #[error("invalid selection: {reason}")]
    InvalidSelection {
        /// What is wrong with it.
        reason: String,
    },
    /// Reading an endpoint's topic or sessions from the broker failed.
    #[error("reading endpoint '{endpoint}' (its topic and sessions) from the broker: {source}")]
    ReadEndpoint {
        /// The endpoint.
        endpoint: String,
        /// The transport's answer.
        #[source]
        source: nimbus_transport::AdminError,
    },
    /// Reading the Resolver store failed.
    #[error("reading the Resolver store: {0}")]
    Store(#[from] StoreError),
    /// Publishing the control message failed; nothing was sent.
    #[error("sending the {message_type} to topic '{topic}': {source}")]
    Publish {
        /// The message type.
        message_type: &'static str,
        /// The endpoint's topic.
        topic: String,
        /// The transport's answer.
        #[source]
        source: PublishError,
    },
    /// Listing a topic's forwarders failed.
    #[error("listing the forwarders of topic '{topic}': {source}")]
    ListForwarders {
        /// The topic.
        topic: String,
        /// The transport's answer.
        #[source]
        source: nimbus_transport::AdminError,
    },
    /// Opening a dead-letter queue failed.
    #[error("opening the dead-letter queue of {subscription}: {source}")]
    OpenDeadLetters {
        /// The subscription.
        subscription: String,
        /// The transport's answer.
        #[source]
        source: OpenReceiverError,
    },
    /// Reading a dead-letter queue failed; what was read is released.
    #[error("reading the dead-letter queue of {subscription}: {source}")]
    ReadDeadLetters {
        /// The subscription.
        subscription: String,
        /// The transport's answer.
        #[source]
        source: ReceiveError,
    },
    /// Moving the dead-lettered message back failed; it stays dead-lettered.
    #[error("replaying dead-lettered message {which} of {subscription}: {source}")]
    Replay {
        /// The message.
        which: String,
        /// The subscription.
        subscription: String,
        /// The transport's answer.
        #[source]
        source: SettleError,
    },
    /// Removing the dead-lettered message failed; it stays dead-lettered.
    #[error("removing dead-lettered message {which} of {subscription}: {source}")]
    Remove {
        /// The message.
        which: String,
        /// The subscription.
        subscription: String,
        /// The transport's answer.
        #[source]
        source: SettleError,
    },
}

/// What to do about a handoff operation refused in `status`: the status
/// says whether the handoff was settled already, or a request for the event
/// is on its way (a second `complete` racing the first), or it never was a
/// handoff.
fn not_pending_advice(status: Status) -> &'static str {
    match status {
        Status::Pending => {
            "a request for it is on its way (a completion or failure already sent, or a \
             resubmission): wait for its outcome with `nimbus event`"
        }
        Status::Completed => "its handoff, if it had one, is already settled: nothing to do",
        Status::Failed => {
            "it failed (a failed handoff, or its handler): resubmit or skip it to settle it"
        }
        _ => "only an event handed off by its handler can be completed or failed",
    }
}
