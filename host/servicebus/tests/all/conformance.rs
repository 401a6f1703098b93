//! The transport conformance suite on the AMQP transport, against nimbus's
//! own AMQP endpoint in process on a loopback port over an embedded broker:
//! the same behaviours as in process (issue 29).
//!
//! The data plane goes through AMQP; topology goes to the broker directly,
//! since the endpoint serves no management API (Service Bus's is ATOM over
//! HTTPS, decision 0137). The broker's clock is the system's, which the
//! harness cannot move: behaviours that need time to pass are skipped, as
//! is restarting. Settlements are not atomic over Service Bus; the suite
//! checks the weaker promise there.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nimbus_broker::Broker;
use nimbus_servicebus::{ServiceBus, ServiceBusReceiver, ServiceBusSession};
use nimbus_transport::conformance::Harness;
use nimbus_transport::{
    AcceptSessionError, Admin, AdminError, CancelError, Message, OpenReceiverError, PublishError,
    ReceiveError, ReceivedMessage, RuleDescription, SessionInfo, SessionSelector, SubQueue,
    SubscriptionDescription, SubscriptionPath, SubscriptionSettings, TopicDescription,
    TopicSettings, TransientError, Transport,
};

use crate::common;

use common::Served;

/// The AMQP transport for the data plane, the broker for topology.
struct Through {
    bus: ServiceBus,
    admin: Arc<Broker>,
}

struct OverAmqp {
    through: Through,
    _served: Served,
}

async fn harness() -> OverAmqp {
    let served = Served::start().await;
    let bus = ServiceBus::connect(&served.connection_string())
        .await
        .unwrap();
    OverAmqp {
        through: Through {
            bus,
            admin: Arc::clone(&served.broker),
        },
        _served: served,
    }
}

impl Harness for OverAmqp {
    type Transport = Through;

    fn transport(&self) -> &Through {
        &self.through
    }

    fn advance(&self, _by: Duration) -> bool {
        false
    }

    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn atomic_settlement(&self) -> bool {
        false
    }

    async fn restart(self) -> Option<Self> {
        None
    }
}

impl Transport for Through {
    type Session = ServiceBusSession;
    type Receiver = ServiceBusReceiver;

    async fn publish(&self, topic: &str, messages: Vec<Message>) -> Result<Vec<i64>, PublishError> {
        self.bus.publish(topic, messages).await
    }
    async fn cancel_scheduled(&self, topic: &str, sequence_number: i64) -> Result<(), CancelError> {
        self.bus.cancel_scheduled(topic, sequence_number).await
    }
    async fn accept_session(
        &self,
        path: &SubscriptionPath,
        selector: SessionSelector,
        timeout: Duration,
    ) -> Result<ServiceBusSession, AcceptSessionError> {
        self.bus.accept_session(path, selector, timeout).await
    }
    async fn receiver(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
    ) -> Result<ServiceBusReceiver, OpenReceiverError> {
        self.bus.receiver(path, queue).await
    }
    async fn peek(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
        session_id: Option<&str>,
        from_sequence_number: i64,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        self.bus
            .peek(path, queue, session_id, from_sequence_number, max)
            .await
    }
    async fn inbox_contains(&self, scope: &str, key: &str) -> Result<bool, TransientError> {
        self.bus.inbox_contains(scope, key).await
    }
}

impl Admin for Through {
    async fn create_topic(&self, name: &str, settings: TopicSettings) -> Result<(), AdminError> {
        self.admin.create_topic(name, settings).await
    }
    async fn get_topic(&self, name: &str) -> Result<Option<TopicDescription>, AdminError> {
        self.admin.get_topic(name).await
    }
    async fn list_topics(&self) -> Result<Vec<TopicDescription>, AdminError> {
        self.admin.list_topics().await
    }
    async fn delete_topic(&self, name: &str) -> Result<(), AdminError> {
        self.admin.delete_topic(name).await
    }
    async fn create_subscription(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
    ) -> Result<(), AdminError> {
        self.admin.create_subscription(path, settings).await
    }
    async fn create_subscription_with_rules(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
        rules: Vec<RuleDescription>,
    ) -> Result<(), AdminError> {
        self.admin
            .create_subscription_with_rules(path, settings, rules)
            .await
    }
    async fn get_subscription(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Option<SubscriptionDescription>, AdminError> {
        self.admin.get_subscription(path).await
    }
    async fn list_subscriptions(
        &self,
        topic: &str,
    ) -> Result<Vec<SubscriptionDescription>, AdminError> {
        self.admin.list_subscriptions(topic).await
    }
    async fn delete_subscription(&self, path: &SubscriptionPath) -> Result<(), AdminError> {
        self.admin.delete_subscription(path).await
    }
    async fn create_rule(
        &self,
        path: &SubscriptionPath,
        rule: RuleDescription,
    ) -> Result<(), AdminError> {
        self.admin.create_rule(path, rule).await
    }
    async fn delete_rule(&self, path: &SubscriptionPath, rule: &str) -> Result<(), AdminError> {
        self.admin.delete_rule(path, rule).await
    }
    async fn list_rules(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Vec<RuleDescription>, AdminError> {
        self.admin.list_rules(path).await
    }
    async fn list_sessions(&self, path: &SubscriptionPath) -> Result<Vec<SessionInfo>, AdminError> {
        self.admin.list_sessions(path).await
    }
}

nimbus_transport::transport_conformance!(harness);
