//! The exact strings of the NimBus wire: application property names and the
//! well-known `To`/`From` addresses.
//!
//! They are spelled exactly as upstream's `UserPropertyName` enum and topology
//! (nimbus-semantics.md §1, §2.2). Service Bus property names are
//! case-sensitive, so a typo here silently breaks interop with a NimBus
//! Resolver or WebApp; that is why every name lives here once.

/// Application property names (case-sensitive, as on the wire).
pub mod prop {
    /// Routing address: an endpoint, an EventTypeId (on publish), `Resolver`, `Retry`, ...
    pub const TO: &str = "To";
    /// Who sent the message: the producer (set by the forward rule), `Retry`, `Manager`, ...
    pub const FROM: &str = "From";
    /// The [`MessageType`](crate::MessageType) name.
    pub const MESSAGE_TYPE: &str = "MessageType";
    /// The logical event id per consumer; the session-block key.
    pub const EVENT_ID: &str = "EventId";
    /// The event type, e.g. `OrderPlaced`.
    pub const EVENT_TYPE_ID: &str = "EventTypeId";
    /// The first message of the lineage (`self` when this is it).
    pub const ORIGINATING_MESSAGE_ID: &str = "OriginatingMessageId";
    /// The immediate parent message (`self` when there is none).
    pub const PARENT_MESSAGE_ID: &str = "ParentMessageId";
    /// The automatic-retry attempt number (int).
    pub const RETRY_COUNT: &str = "RetryCount";
    /// The endpoint that originated the lineage (`self` when unknown).
    pub const ORIGINATING_FROM: &str = "OriginatingFrom";
    /// On parked copies: the session the message was parked from.
    pub const ORIGINAL_SESSION_ID: &str = "OriginalSessionId";
    /// On parked copies: the FIFO position of the park within its session (int).
    pub const DEFERRAL_SEQUENCE: &str = "DeferralSequence";
    /// On responses: enqueue → handler entry, in whole milliseconds (long).
    pub const QUEUE_TIME_MS: &str = "QueueTimeMs";
    /// On responses: handler entry → response, in milliseconds (long).
    pub const PROCESSING_TIME_MS: &str = "ProcessingTimeMs";
    /// On dead-letter notifications: the dead-letter reason and the
    /// description (whose presence the Resolver reads as "DeadLettered"),
    /// under Service Bus's own names for a dead-lettered message's.
    pub use nimbus_transport::{DEAD_LETTER_ERROR_DESCRIPTION, DEAD_LETTER_REASON};
    /// On PendingHandoffResponse: why the event is pending.
    pub const HANDOFF_REASON: &str = "HandoffReason";
    /// On PendingHandoffResponse: the external job id.
    pub const EXTERNAL_JOB_ID: &str = "ExternalJobId";
    /// On PendingHandoffResponse: the absolute deadline, ISO-8601 round-trip (`o`) in UTC.
    pub const EXPECTED_BY: &str = "ExpectedBy";
    /// Defined by upstream but never written or read; listed so nobody reuses the name.
    pub const RETRY_LIMIT: &str = "RetryLimit";
    /// On DeferredProcessor triggers: a session id fallback when the broker field is empty.
    pub const SESSION_ID: &str = "SessionId";
    /// On replies: `Success` or `Error`.
    pub const REPLY_STATUS: &str = "ReplyStatus";
    /// On error replies: the error type.
    pub const ERROR_TYPE: &str = "ErrorType";
    /// On error replies: the error text.
    pub const ERROR_TEXT: &str = "ErrorText";
    /// On the Manager's control messages: the HMAC that shows a nimbus host's
    /// Manager sent it (see [`control_signature`](crate::control_signature)).
    /// nimbus's own, not upstream's: NimBus trusts `From` alone.
    pub const CONTROL_SIGNATURE: &str = "NimbusControlSignature";
    /// On responses: the id of the handler version that produced the
    /// outcome (SEMANTICS.md §10), which the Resolver records. nimbus's
    /// own; not an envelope property: a response never reaches a handler,
    /// and NimBus tooling carries it as a user property.
    pub const HANDLER_VERSION: &str = "HandlerVersion";

    /// Every property nimbus owns: the typed
    /// [`NimbusMessage`](crate::NimbusMessage)'s fields, and the control
    /// signature, a seal on the transport message that is checked before
    /// decoding and never part of the model (so no handler sees it and no
    /// copy of the event carries it on). Any other property is a user
    /// property and is carried through as-is.
    pub const ENVELOPE: [&str; 19] = [
        TO,
        FROM,
        MESSAGE_TYPE,
        EVENT_ID,
        EVENT_TYPE_ID,
        ORIGINATING_MESSAGE_ID,
        PARENT_MESSAGE_ID,
        RETRY_COUNT,
        ORIGINATING_FROM,
        ORIGINAL_SESSION_ID,
        DEFERRAL_SEQUENCE,
        QUEUE_TIME_MS,
        PROCESSING_TIME_MS,
        DEAD_LETTER_REASON,
        DEAD_LETTER_ERROR_DESCRIPTION,
        HANDOFF_REASON,
        EXTERNAL_JOB_ID,
        EXPECTED_BY,
        CONTROL_SIGNATURE,
    ];

    /// Whether `name` is one of the [`ENVELOPE`] properties (exact match).
    pub fn is_envelope(name: &str) -> bool {
        ENVELOPE.contains(&name)
    }
}

/// Well-known values of `To` and `From`, and other reserved strings.
pub mod addr {
    /// `To` of every response: the Resolver's forwarding subscription picks it up.
    pub const RESOLVER: &str = "Resolver";
    /// `To` of a RetryRequest; the endpoint subscription rewrites it to `To = E, From = Retry`.
    pub const RETRY: &str = "Retry";
    /// `To` of a legacy ContinuationRequest.
    pub const CONTINUATION: &str = "Continuation";
    /// `To` of a parked copy: it lands in the endpoint's `Deferred` subscription.
    pub const DEFERRED: &str = "Deferred";
    /// `To` of a ProcessDeferredRequest.
    pub const DEFERRED_PROCESSOR: &str = "DeferredProcessor";
    /// `From` of operator control messages.
    pub const MANAGER: &str = "Manager";
    /// The wire value of an absent lineage field (`ParentMessageId`, ...).
    pub const SELF: &str = "self";
    /// The prefix of a forwarding subscription whose consumer is the
    /// producer itself (`fwd-{E}` on topic `E`, whose own name `E` is the
    /// endpoint's inbox); an endpoint name may not start with it.
    pub const SELF_FORWARDER_PREFIX: &str = "fwd-";
    /// The reserved EventTypeId of heartbeat probes.
    pub const HEARTBEAT_EVENT_TYPE: &str = "NimBus.Platform.Heartbeat";
    /// The session heartbeat probes are sent on (shared by all endpoints).
    pub const HEARTBEAT_SESSION: &str = "Heartbeat";
}
