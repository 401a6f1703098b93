//! A client of Azure Service Bus's AMQP dialect: what the transport that
//! runs the host on a Service Bus namespace (or on another host's AMQP
//! endpoint) speaks (issue 29).
//!
//! It connects with a connection string ([`ConnectionString`]), signs its
//! own tokens with the key and keeps one on `$cbs` for the namespace, and
//! publishes through a topic's `$management` node (`schedule-message`),
//! the one way Service Bus answers a publish with its sequence numbers and
//! takes several messages as one (decision 0137). It is a
//! [`Transport`](nimbus_transport::Transport): sessions and peek-lock
//! receivers are receive links, each settlement answered by the broker
//! (read off the wire, as fe2o3 does not wait for it), session state and
//! renewal go through the subscription's `$management`, and a settlement's
//! steps go in the order that makes a crash between them harmless, the
//! inbox kept in the session's state.
//!
//! The dialect itself (addresses, tokens, operations, conditions, message
//! conversion, frame bounds) is `nimbus-dialect`'s, shared with the
//! endpoint; this crate does not depend on the endpoint (`nimbus-amqp`),
//! and so builds no AMQP server. Only its tests and benchmark do: they
//! serve nimbus's own endpoint to test the client against.

mod client;
mod connection;
mod connection_string;
mod link;
mod locks;
mod management;
mod outcomes;
mod session_state;
mod tls;
mod transport;

pub use client::ServiceBus;
pub use connection::ConnectError;
pub use connection_string::{ConnectionString, ConnectionStringError};
pub use locks::{ServiceBusReceiver, ServiceBusSession};
pub use tls::{RootsError, TrustedRoots};
