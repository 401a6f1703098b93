//! A client of Azure Service Bus's AMQP dialect: what the transport that
//! runs the host on a Service Bus namespace (or on another host's AMQP
//! endpoint) speaks (issue 29).
//!
//! It connects with a connection string ([`ConnectionString`]), signs its
//! own tokens with the key and keeps one on `$cbs` for the namespace, and
//! publishes through a topic's `$management` node (`schedule-message`),
//! the one way Service Bus answers a publish with its sequence numbers and
//! takes several messages as one (decision 0137). Receiving, sessions and
//! settlement come next; until then this is a client, not a `Transport`.

mod client;
mod connection_string;
mod management;

pub use client::{ConnectError, ServiceBus};
pub use connection_string::{ConnectionString, ConnectionStringError};
