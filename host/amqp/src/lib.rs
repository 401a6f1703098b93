//! The Service Bus dialect of AMQP 1.0, as Microsoft's SDKs speak it to an
//! emulator (`../shared/reference/servicebus-amqp.md`, issue 29): the
//! shared-access-signature tokens a client puts on `$cbs`, checked against
//! the configured keys ([`sas`]), and the link addresses the SDKs write in
//! three forms, read as one ([`address`]).
//!
//! These parts hold no connection state and no I/O: the endpoint that
//! serves the protocol builds on them.

pub mod address;
pub mod sas;

pub use address::{AddressError, EntityAddress, Node, SubQueue};
pub use sas::{Grant, SasError, SharedAccessKey};
