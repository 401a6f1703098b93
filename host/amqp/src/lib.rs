//! The Service Bus dialect of AMQP 1.0, as Microsoft's SDKs speak it to an
//! emulator (`../shared/reference/servicebus-amqp.md`, issue 29).
//!
//! The dialect's rules stand alone and hold no I/O: shared access
//! signatures checked against the configured keys ([`sas`]), the link
//! addresses the SDKs write in three forms, read as one ([`address`]), and
//! an SDK's message read into the broker's ([`convert`]). The endpoint
//! ([`Endpoint`]) serves them over TCP on fe2o3-amqp's acceptor: SASL
//! (`MSSBCBS`, `ANONYMOUS`), `$cbs`, links that publish to topics, a
//! topic's `$management` for scheduling (decision 0135), and links that
//! receive from sessions and dead-letter queues, settled by the broker's own
//! answer, with a subscription's `$management` for session state and locks.
//! What fe2o3 cannot do as a sender (lock-token tags, the broker's answer to
//! a settlement, credit) a frame tap between the socket and the library
//! does (decision 0136).

pub mod address;
mod admission;
pub mod bounds;
mod cbs;
pub mod convert;
mod endpoint;
pub mod frame_check;
pub mod frame_io;
#[cfg(test)]
mod fuzz;
mod guard;
mod held;
mod log_limit;
mod management;
mod publish;
mod receive;
mod reply;
pub mod sas;
mod sasl;
mod tap;
mod tls;

pub use address::{AddressError, EntityAddress, Node, SubQueue};
pub use endpoint::{
    Endpoint, IDLE_TIMEOUT, MAX_CONNECTIONS, MAX_PENDING_CONNECTIONS, PublishCheck, TOKEN_TIMEOUT,
};
pub use sas::{Grant, Right, Rights, SasError, SharedAccessKey};
pub use tls::{ServerTls, ServerTlsError};
