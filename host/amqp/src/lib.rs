//! The Service Bus dialect of AMQP 1.0, as Microsoft's SDKs speak it to an
//! emulator (`../shared/reference/servicebus-amqp.md`, issue 29).
//!
//! The dialect's rules stand alone and hold no I/O: shared access
//! signatures checked against the configured keys ([`sas`]), the link
//! addresses the SDKs write in three forms, read as one ([`address`]), and
//! an SDK's message read into the broker's ([`convert`]). The endpoint
//! ([`Endpoint`]) serves them over TCP on fe2o3-amqp's acceptor: SASL
//! (`MSSBCBS`, `ANONYMOUS`), `$cbs`, links that publish to topics, and a
//! topic's `$management` for scheduling (decision 0135).

pub mod address;
mod cbs;
pub mod convert;
mod endpoint;
mod held;
mod management;
mod publish;
mod receive;
mod reply;
pub mod sas;
mod sasl;
mod tap;

pub use address::{AddressError, EntityAddress, Node, SubQueue};
pub use endpoint::Endpoint;
pub use sas::{Grant, SasError, SharedAccessKey};
