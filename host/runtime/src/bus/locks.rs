//! The session locks and receivers a [`Bus`](super::Bus) hands out: the
//! embedded broker's or the namespace's, each call passed on.

use std::time::{Duration, SystemTime};

use nimbus_broker::{BrokerReceiver, BrokerSession};
use nimbus_servicebus::{ServiceBusReceiver, ServiceBusSession};
use nimbus_transport::{
    ReceiveError, ReceivedMessage, Receiver, RenewError, SessionLock, SessionStateError,
    SettleError, SettleReceipt, Settlement,
};

/// A session lock on the bus the host runs on.
#[derive(Debug)]
pub enum BusSession {
    /// Held on the embedded broker.
    Embedded(BrokerSession),
    /// Held on a Service Bus namespace (boxed: it is several times the
    /// size of the broker's).
    ServiceBus(Box<ServiceBusSession>),
}

/// Passes a call to whichever lock or receiver is held.
macro_rules! each {
    ($held:expr, $inner:ident => $call:expr) => {
        match $held {
            Self::Embedded($inner) => $call,
            Self::ServiceBus($inner) => $call,
        }
    };
}

impl SessionLock for BusSession {
    fn session_id(&self) -> &str {
        each!(self, lock => lock.session_id())
    }

    fn locked_until(&self) -> SystemTime {
        each!(self, lock => lock.locked_until())
    }

    async fn receive(&self, max_wait: Duration) -> Result<Option<ReceivedMessage>, ReceiveError> {
        each!(self, lock => lock.receive(max_wait).await)
    }

    async fn get_state(&self) -> Result<Option<Vec<u8>>, SessionStateError> {
        each!(self, lock => lock.get_state().await)
    }

    async fn set_state(&self, state: Option<Vec<u8>>) -> Result<(), SessionStateError> {
        each!(self, lock => lock.set_state(state).await)
    }

    async fn renew(&self) -> Result<SystemTime, RenewError> {
        each!(self, lock => lock.renew().await)
    }

    async fn settle(&self, settlement: Settlement) -> Result<SettleReceipt, SettleError> {
        each!(self, lock => lock.settle(settlement).await)
    }

    async fn release(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        each!(self, lock => lock.release(message).await)
    }

    async fn close(self) {
        each!(self, lock => lock.close().await)
    }
}

/// A peek-lock receiver on the bus the host runs on.
#[derive(Debug)]
pub enum BusReceiver {
    /// On the embedded broker.
    Embedded(BrokerReceiver),
    /// On a Service Bus namespace (boxed, as the session).
    ServiceBus(Box<ServiceBusReceiver>),
}

impl Receiver for BusReceiver {
    async fn receive(&self, max_wait: Duration) -> Result<Option<ReceivedMessage>, ReceiveError> {
        each!(self, receiver => receiver.receive(max_wait).await)
    }

    async fn renew_lock(&self, message: &mut ReceivedMessage) -> Result<SystemTime, RenewError> {
        each!(self, receiver => receiver.renew_lock(message).await)
    }

    async fn settle(&self, settlement: Settlement) -> Result<SettleReceipt, SettleError> {
        each!(self, receiver => receiver.settle(settlement).await)
    }

    async fn release(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        each!(self, receiver => receiver.release(message).await)
    }

    async fn replay_dead_letter(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        each!(self, receiver => receiver.replay_dead_letter(message).await)
    }

    async fn close(self) {
        each!(self, receiver => receiver.close().await)
    }
}
