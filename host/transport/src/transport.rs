//! The traits: [`Transport`] (data plane), [`SessionLock`] and [`Receiver`]
//! (what you receive and settle through), [`Admin`] (topology).
//!
//! Methods return `impl Future + Send` (native async in traits) so a generic
//! engine (`T: Transport`) can spawn work on tokio; see
//! `docs/decisions/0020-native-async-transport-trait.md`.

use std::future::Future;
use std::time::{Duration, SystemTime};

use crate::{
    AcceptSessionError, AdminError, CancelError, Message, OpenReceiverError, Properties,
    PublishError, ReceiveError, ReceivedMessage, RenewError, RuleDescription, SessionStateError,
    SettleError, SettleReceipt, Settlement, SubscriptionDescription, SubscriptionSettings,
    TopicDescription, TopicSettings, TransientError,
};

/// A subscription, named by its topic and its own name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubscriptionPath {
    /// The topic.
    pub topic: String,
    /// The subscription.
    pub subscription: String,
}

impl SubscriptionPath {
    /// The subscription `subscription` of `topic`.
    pub fn new(topic: impl Into<String>, subscription: impl Into<String>) -> Self {
        SubscriptionPath {
            topic: topic.into(),
            subscription: subscription.into(),
        }
    }
}

impl std::fmt::Display for SubscriptionPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.subscription)
    }
}

/// Which queue of a subscription a [`Receiver`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubQueue {
    /// The subscription's own messages (non-session subscriptions only).
    Main,
    /// The subscription's dead-letter queue (any subscription).
    DeadLetter,
}

/// Which session to accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionSelector {
    /// The unlocked session whose oldest ready message is the oldest.
    NextAvailable,
    /// This session, even if it has no messages yet. If another receiver
    /// holds it, wait (up to the timeout) for it to be released.
    Named(String),
}

/// The data plane: publish, schedule, accept sessions, open receivers.
///
/// The engine uses only this trait (and [`Admin`] to provision); it never
/// names a backend.
pub trait Transport: Send + Sync + 'static {
    /// The session lock this transport hands out.
    type Session: SessionLock;
    /// The peek-lock receiver this transport hands out.
    type Receiver: Receiver;

    /// Publishes `messages` to `topic` as one atomic unit: all are stored or
    /// none. A message with a future `scheduled_enqueue_time` is scheduled.
    /// Returns the sequence number assigned to each message, in order (for a
    /// scheduled one, the number to cancel it with; for a duplicate dropped
    /// by duplicate detection, the original's).
    fn publish(
        &self,
        topic: &str,
        messages: Vec<Message>,
    ) -> impl Future<Output = Result<Vec<i64>, PublishError>> + Send;

    /// Cancels a scheduled message that has not been enqueued yet.
    fn cancel_scheduled(
        &self,
        topic: &str,
        sequence_number: i64,
    ) -> impl Future<Output = Result<(), CancelError>> + Send;

    /// Accepts a session on a session-enabled subscription and holds its
    /// exclusive lock until the returned lock is closed or dropped, or the
    /// lock lapses. Waits up to `timeout` for a session to become available.
    fn accept_session(
        &self,
        path: &SubscriptionPath,
        selector: SessionSelector,
        timeout: Duration,
    ) -> impl Future<Output = Result<Self::Session, AcceptSessionError>> + Send;

    /// Opens a peek-lock receiver on a non-session subscription, or on any
    /// subscription's dead-letter queue.
    fn receiver(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
    ) -> impl Future<Output = Result<Self::Receiver, OpenReceiverError>> + Send;

    /// Up to `max` messages of a subscription's queue, without locking or
    /// changing them, in sequence order from `from_sequence_number` on (and
    /// only `session_id`'s, when given): what an operator or a client looks
    /// at without receiving. Locked messages are included. A peeked
    /// message's `lock_token` and `locked_until` mean nothing.
    fn peek(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
        session_id: Option<&str>,
        from_sequence_number: i64,
        max: usize,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, ReceiveError>> + Send;

    /// Whether `scope`'s inbox holds an unexpired record of `key` (written
    /// by [`Settlement::record_inbox`]).
    fn inbox_contains(
        &self,
        scope: &str,
        key: &str,
    ) -> impl Future<Output = Result<bool, TransientError>> + Send;
}

/// An exclusive lock on one session of a subscription.
///
/// It covers every message of the session: messages received through it stay
/// locked as long as the session lock does. Dropping it (or [`close`]) releases
/// the session cleanly: messages received and not settled go back first in
/// the session, and their delivery count is not raised.
///
/// [`close`]: SessionLock::close
pub trait SessionLock: Send + Sync + std::fmt::Debug + 'static {
    /// The session id.
    fn session_id(&self) -> &str;

    /// When the session lock lapses unless renewed.
    fn locked_until(&self) -> SystemTime;

    /// The next message of the session, in order, waiting up to `max_wait`
    /// for one to arrive. `Ok(None)` when none arrived.
    fn receive(
        &self,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Option<ReceivedMessage>, ReceiveError>> + Send;

    /// The session state (`None` when never set or cleared).
    fn get_state(&self) -> impl Future<Output = Result<Option<Vec<u8>>, SessionStateError>> + Send;

    /// Replaces the session state (`None` clears it). Durable on return.
    fn set_state(
        &self,
        state: Option<Vec<u8>>,
    ) -> impl Future<Output = Result<(), SessionStateError>> + Send;

    /// Extends the session lock by the subscription's lock duration from now.
    fn renew(&self) -> impl Future<Output = Result<SystemTime, RenewError>> + Send;

    /// Applies `settlement` atomically under this session lock: the outcome
    /// of a message received through this lock, publishes, session state.
    /// On error nothing took effect.
    fn settle(
        &self,
        settlement: Settlement,
    ) -> impl Future<Output = Result<SettleReceipt, SettleError>> + Send;

    /// Completes `message`. On error the message is unchanged (still locked,
    /// or already redelivered if the lock was lost).
    fn complete(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        async move { self.settle(Settlement::complete(message)).await.map(drop) }
    }

    /// Abandons `message` (delivery count + 1, `properties` merged in): it is
    /// redelivered first in the session, or dead-lettered at the max delivery
    /// count. On error the message is unchanged.
    fn abandon(
        &self,
        message: ReceivedMessage,
        properties: Properties,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        async move {
            self.settle(Settlement::abandon(message, properties))
                .await
                .map(drop)
        }
    }

    /// Moves `message` to the dead-letter queue with `reason` and
    /// `description`. On error the message is unchanged.
    fn dead_letter(
        &self,
        message: ReceivedMessage,
        reason: String,
        description: String,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        async move {
            self.settle(Settlement::dead_letter(message, reason, description))
                .await
                .map(drop)
        }
    }

    /// Gives `message` back unsettled: it is next again in the session, its
    /// delivery count unchanged (a client that did not want it yet, as an
    /// AMQP `released` outcome). On error the message is unchanged.
    fn release(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send;

    /// Releases the session cleanly (as dropping does): unsettled messages
    /// return without a delivery counted, and another receiver may accept it.
    fn close(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized,
    {
        async move { drop(self) }
    }
}

/// A peek-lock receiver on a non-session subscription or a dead-letter queue.
///
/// Dropping it (or [`close`](Receiver::close)) releases the messages it holds
/// locked without counting a delivery.
pub trait Receiver: Send + Sync + std::fmt::Debug + 'static {
    /// The next available message, locked for the subscription's lock
    /// duration, waiting up to `max_wait`. `Ok(None)` when none arrived.
    fn receive(
        &self,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Option<ReceivedMessage>, ReceiveError>> + Send;

    /// Extends the lock on `message`, updating its `locked_until`.
    fn renew_lock(
        &self,
        message: &mut ReceivedMessage,
    ) -> impl Future<Output = Result<SystemTime, RenewError>> + Send;

    /// Applies `settlement` atomically (it may not set session state).
    fn settle(
        &self,
        settlement: Settlement,
    ) -> impl Future<Output = Result<SettleReceipt, SettleError>> + Send;

    /// Completes `message`. On error the message is unchanged.
    fn complete(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        async move { self.settle(Settlement::complete(message)).await.map(drop) }
    }

    /// Abandons `message`. On error the message is unchanged.
    fn abandon(
        &self,
        message: ReceivedMessage,
        properties: Properties,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        async move {
            self.settle(Settlement::abandon(message, properties))
                .await
                .map(drop)
        }
    }

    /// Dead-letters `message`. On error the message is unchanged.
    fn dead_letter(
        &self,
        message: ReceivedMessage,
        reason: String,
        description: String,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        async move {
            self.settle(Settlement::dead_letter(message, reason, description))
                .await
                .map(drop)
        }
    }

    /// Gives `message` back unlocked at its place, its delivery count
    /// unchanged (AMQP `released`). On error the message is unchanged.
    fn release(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send;

    /// Replays a message received from a dead-letter queue: atomically
    /// removes it from the dead-letter queue and enqueues it again at the end
    /// of its subscription, with a fresh delivery count and the dead-letter
    /// reason cleared. Only valid on a [`SubQueue::DeadLetter`] receiver.
    fn replay_dead_letter(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send;

    /// Releases held messages without counting a delivery (as dropping does).
    fn close(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized,
    {
        async move { drop(self) }
    }
}

/// Topology management: what provisioning needs, on any transport.
///
/// Create operations fail with `AlreadyExists` rather than overwrite, so a
/// provisioner can count its mutations.
pub trait Admin: Send + Sync + 'static {
    /// Creates a topic.
    fn create_topic(
        &self,
        name: &str,
        settings: TopicSettings,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;

    /// A topic, or `None`.
    fn get_topic(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<TopicDescription>, AdminError>> + Send;

    /// Every topic, by name.
    fn list_topics(&self)
    -> impl Future<Output = Result<Vec<TopicDescription>, AdminError>> + Send;

    /// Deletes a topic with its subscriptions and messages.
    fn delete_topic(&self, name: &str) -> impl Future<Output = Result<(), AdminError>> + Send;

    /// Creates a subscription with the `$Default` rule (`1=1`). A
    /// `forward_to` topic must exist.
    fn create_subscription(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;

    /// Creates a subscription with exactly `rules` (no `$Default` unless
    /// listed), all at once: no message published meanwhile meets the
    /// subscription with some of its rules missing. Duplicate rule names
    /// and invalid filters are refused before anything is created.
    fn create_subscription_with_rules(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
        rules: Vec<RuleDescription>,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;

    /// A subscription, or `None`.
    fn get_subscription(
        &self,
        path: &SubscriptionPath,
    ) -> impl Future<Output = Result<Option<SubscriptionDescription>, AdminError>> + Send;

    /// The subscriptions of a topic, by name.
    fn list_subscriptions(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Vec<SubscriptionDescription>, AdminError>> + Send;

    /// Deletes a subscription with its messages.
    fn delete_subscription(
        &self,
        path: &SubscriptionPath,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;

    /// Adds a rule. A filter or action that does not parse is rejected with
    /// the position of the error.
    fn create_rule(
        &self,
        path: &SubscriptionPath,
        rule: RuleDescription,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;

    /// Removes a rule.
    fn delete_rule(
        &self,
        path: &SubscriptionPath,
        rule: &str,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;

    /// The rules of a subscription, in creation order.
    fn list_rules(
        &self,
        path: &SubscriptionPath,
    ) -> impl Future<Output = Result<Vec<RuleDescription>, AdminError>> + Send;

    /// The sessions of a session-enabled subscription that hold messages or
    /// a state, by session id. Operators use it to find blocked sessions;
    /// it neither locks nor changes anything.
    fn list_sessions(
        &self,
        path: &SubscriptionPath,
    ) -> impl Future<Output = Result<Vec<SessionInfo>, AdminError>> + Send;
}

/// A session as listed by [`Admin::list_sessions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session id.
    pub session_id: String,
    /// The session state blob, if one is set.
    pub state: Option<Vec<u8>>,
    /// Messages in the session (available or locked; deferred included).
    pub active_messages: u64,
    /// Whether a receiver holds the session's lock now.
    pub locked: bool,
}
