//! What the host runs on: its embedded broker, or a Service Bus namespace
//! reached over AMQP (`[broker] kind`, issue 29). The engine, the Resolver
//! and the Manager are generic over the transport; the host holds one of
//! two, so [`Bus`] is the one type they are given, each call passed to
//! the transport it holds.
//!
//! On Service Bus the entities are the namespace's: nimbus reaches it over
//! AMQP only, and creating or listing topics, subscriptions, rules and
//! sessions is the namespace's management API (ATOM over HTTPS), which it
//! does not call. Those [`Admin`] operations answer
//! [`AdminError::Unsupported`], and the host checks instead that every
//! entity its handlers need is there ([`Bus::missing`]).

mod locks;

use std::sync::Arc;
use std::time::Duration;

use nimbus_broker::Broker;
use nimbus_servicebus::ServiceBus;
use nimbus_transport::{
    AcceptSessionError, Admin, AdminError, CancelError, Message, OpenReceiverError, PublishError,
    ReceiveError, ReceivedMessage, RuleDescription, SessionInfo, SessionSelector, SubQueue,
    SubscriptionDescription, SubscriptionPath, SubscriptionSettings, TopicDescription,
    TopicSettings, TransientError, Transport,
};
use nimbus_wire::topology::{Requirement, Topology, TopologyError, requirements};

pub use locks::{BusReceiver, BusSession};

/// The transport the host runs on.
pub enum Bus {
    /// The broker in the data directory.
    Embedded(Arc<Broker>),
    /// A Service Bus namespace (or an emulator, or another host's AMQP
    /// endpoint).
    ServiceBus(ServiceBus),
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bus::Embedded(_) => f.write_str("Bus::Embedded"),
            Bus::ServiceBus(_) => f.write_str("Bus::ServiceBus"),
        }
    }
}

/// Why an entity listing or change cannot be made on Service Bus.
fn not_over_amqp(operation: &'static str) -> AdminError {
    AdminError::Unsupported {
        operation,
        reason: "nimbus reaches Service Bus over AMQP only, and this is the namespace's \
                 management API (Azure portal, Bicep, `az servicebus`), which nimbus does not \
                 call yet"
            .to_owned(),
    }
}

impl Bus {
    /// The embedded broker, when the host runs on it.
    pub fn embedded(&self) -> Option<&Arc<Broker>> {
        match self {
            Bus::Embedded(broker) => Some(broker),
            Bus::ServiceBus(_) => None,
        }
    }

    /// Why the bus cannot take work now, if it cannot: the embedded
    /// broker cannot write its log (a full disk, an I/O error), or the
    /// namespace's connection dropped and could not be opened again.
    pub fn failure(&self) -> Option<String> {
        match self {
            Bus::Embedded(broker) => broker.write_failure(),
            Bus::ServiceBus(namespace) => namespace.unreachable(),
        }
    }

    /// Makes every acknowledged write durable (the embedded broker's
    /// group commit); nothing to do on Service Bus.
    ///
    /// # Errors
    ///
    /// When the broker cannot write.
    pub async fn flush(&self) -> Result<(), TransientError> {
        match self {
            Bus::Embedded(broker) => broker.flush().await,
            Bus::ServiceBus(_) => Ok(()),
        }
    }

    /// The entities `topology` needs that the namespace does not have, in
    /// the order to create them (topics first). Always none on the
    /// embedded broker, which the host provisions itself.
    ///
    /// Only their existence is checked: a subscription's settings and
    /// rules are the management API's to read.
    ///
    /// # Errors
    ///
    /// A bad topology, or a namespace that does not answer.
    pub async fn missing(&self, topology: &Topology) -> Result<Vec<Requirement>, MissingError> {
        let Bus::ServiceBus(namespace) = self else {
            return Ok(Vec::new());
        };
        let mut missing = Vec::new();
        for requirement in requirements(topology)? {
            let exists = match &requirement {
                Requirement::Topic { name } => namespace.topic_exists(name).await?,
                Requirement::Subscription { path, .. } => {
                    namespace.subscription_exists(path).await?
                }
                _ => true,
            };
            if !exists {
                missing.push(requirement);
            }
        }
        Ok(missing)
    }
}

/// Why [`Bus::missing`] could not tell.
#[derive(Debug, thiserror::Error)]
pub enum MissingError {
    /// The handlers' topology is not valid.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The namespace did not answer.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

impl Transport for Bus {
    type Session = BusSession;
    type Receiver = BusReceiver;

    async fn publish(&self, topic: &str, messages: Vec<Message>) -> Result<Vec<i64>, PublishError> {
        match self {
            Bus::Embedded(broker) => broker.publish(topic, messages).await,
            Bus::ServiceBus(namespace) => Transport::publish(namespace, topic, messages).await,
        }
    }

    async fn cancel_scheduled(&self, topic: &str, sequence_number: i64) -> Result<(), CancelError> {
        match self {
            Bus::Embedded(broker) => broker.cancel_scheduled(topic, sequence_number).await,
            Bus::ServiceBus(namespace) => {
                Transport::cancel_scheduled(namespace, topic, sequence_number).await
            }
        }
    }

    async fn accept_session(
        &self,
        path: &SubscriptionPath,
        selector: SessionSelector,
        timeout: Duration,
    ) -> Result<BusSession, AcceptSessionError> {
        match self {
            Bus::Embedded(broker) => broker
                .accept_session(path, selector, timeout)
                .await
                .map(BusSession::Embedded),
            Bus::ServiceBus(namespace) => namespace
                .accept_session(path, selector, timeout)
                .await
                .map(|session| BusSession::ServiceBus(Box::new(session))),
        }
    }

    async fn receiver(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
    ) -> Result<BusReceiver, OpenReceiverError> {
        match self {
            Bus::Embedded(broker) => broker
                .receiver(path, queue)
                .await
                .map(BusReceiver::Embedded),
            Bus::ServiceBus(namespace) => namespace
                .receiver(path, queue)
                .await
                .map(|receiver| BusReceiver::ServiceBus(Box::new(receiver))),
        }
    }

    async fn peek(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
        session_id: Option<&str>,
        from_sequence_number: i64,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        match self {
            Bus::Embedded(broker) => {
                broker
                    .peek(path, queue, session_id, from_sequence_number, max)
                    .await
            }
            Bus::ServiceBus(namespace) => {
                namespace
                    .peek(path, queue, session_id, from_sequence_number, max)
                    .await
            }
        }
    }

    async fn inbox_contains(&self, scope: &str, key: &str) -> Result<bool, TransientError> {
        match self {
            Bus::Embedded(broker) => broker.inbox_contains(scope, key).await,
            Bus::ServiceBus(namespace) => namespace.inbox_contains(scope, key).await,
        }
    }
}

impl Admin for Bus {
    async fn create_topic(&self, name: &str, settings: TopicSettings) -> Result<(), AdminError> {
        match self {
            Bus::Embedded(broker) => broker.create_topic(name, settings).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("creating a topic")),
        }
    }

    async fn get_topic(&self, name: &str) -> Result<Option<TopicDescription>, AdminError> {
        match self {
            Bus::Embedded(broker) => broker.get_topic(name).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("describing a topic")),
        }
    }

    async fn list_topics(&self) -> Result<Vec<TopicDescription>, AdminError> {
        match self {
            Bus::Embedded(broker) => broker.list_topics().await,
            Bus::ServiceBus(_) => Err(not_over_amqp("listing topics")),
        }
    }

    async fn delete_topic(&self, name: &str) -> Result<(), AdminError> {
        match self {
            Bus::Embedded(broker) => broker.delete_topic(name).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("deleting a topic")),
        }
    }

    async fn create_subscription(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
    ) -> Result<(), AdminError> {
        match self {
            Bus::Embedded(broker) => broker.create_subscription(path, settings).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("creating a subscription")),
        }
    }

    async fn create_subscription_with_rules(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
        rules: Vec<RuleDescription>,
    ) -> Result<(), AdminError> {
        match self {
            Bus::Embedded(broker) => {
                broker
                    .create_subscription_with_rules(path, settings, rules)
                    .await
            }
            Bus::ServiceBus(_) => Err(not_over_amqp("creating a subscription")),
        }
    }

    async fn get_subscription(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Option<SubscriptionDescription>, AdminError> {
        match self {
            Bus::Embedded(broker) => broker.get_subscription(path).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("describing a subscription")),
        }
    }

    async fn list_subscriptions(
        &self,
        topic: &str,
    ) -> Result<Vec<SubscriptionDescription>, AdminError> {
        match self {
            Bus::Embedded(broker) => broker.list_subscriptions(topic).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("listing subscriptions")),
        }
    }

    async fn delete_subscription(&self, path: &SubscriptionPath) -> Result<(), AdminError> {
        match self {
            Bus::Embedded(broker) => broker.delete_subscription(path).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("deleting a subscription")),
        }
    }

    async fn create_rule(
        &self,
        path: &SubscriptionPath,
        rule: RuleDescription,
    ) -> Result<(), AdminError> {
        match self {
            Bus::Embedded(broker) => broker.create_rule(path, rule).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("creating a rule")),
        }
    }

    async fn delete_rule(&self, path: &SubscriptionPath, rule: &str) -> Result<(), AdminError> {
        match self {
            Bus::Embedded(broker) => broker.delete_rule(path, rule).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("deleting a rule")),
        }
    }

    async fn list_rules(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Vec<RuleDescription>, AdminError> {
        match self {
            Bus::Embedded(broker) => broker.list_rules(path).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("listing rules")),
        }
    }

    async fn list_sessions(&self, path: &SubscriptionPath) -> Result<Vec<SessionInfo>, AdminError> {
        match self {
            Bus::Embedded(broker) => broker.list_sessions(path).await,
            Bus::ServiceBus(_) => Err(not_over_amqp("listing sessions")),
        }
    }
}
