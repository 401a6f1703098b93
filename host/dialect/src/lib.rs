//! The Service Bus dialect of AMQP 1.0: what an endpoint and a client of it
//! share (`../shared/reference/servicebus-amqp.md`, issue 35).
//!
//! nimbus speaks the dialect from both ends: `nimbus-amqp` serves it to
//! Microsoft's SDKs, and `nimbus-servicebus` speaks it to a namespace or to
//! another host's endpoint. Whatever one end writes and the other reads is
//! defined here once: link addresses ([`address`]), shared access
//! signatures ([`sas`]), the attach's session filter and lock expiry
//! ([`attach`]), the request/response nodes' operations and keys
//! ([`management`]), error conditions and the error kinds they read as
//! ([`condition`]), a settlement's outcome ([`outcome`]), and a message in
//! the wire's form and the broker's ([`convert`]). Frames are read whole
//! ([`frame_io`]) and every value a peer sends is bounded before the
//! library decodes it ([`bounds`], [`frame_check`]).
//!
//! It holds rules and encodings, no connections: it builds on fe2o3-amqp's
//! types and frame codec only, without its acceptor, so a client does not
//! compile a server.

pub mod address;
pub mod attach;
pub mod bounds;
pub mod condition;
pub mod convert;
pub mod frame_check;
pub mod frame_io;
pub mod management;
pub mod outcome;
pub mod sas;

pub use address::{AddressError, EntityAddress, Node, SubQueue};
pub use outcome::Outcome;
pub use sas::{Grant, Right, Rights, SasError, SharedAccessKey};
