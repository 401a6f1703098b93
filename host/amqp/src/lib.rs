//! The AMQP endpoint: the Service Bus dialect of AMQP 1.0 served to
//! Microsoft's SDKs as an emulator would serve it
//! (`../shared/reference/servicebus-amqp.md`, issue 29).
//!
//! The dialect's rules (addresses, shared access signatures, message
//! conversion, the bounds on what a peer sends) are `nimbus-dialect`'s,
//! shared with the client; this crate serves them. The endpoint
//! ([`Endpoint`]) listens on TCP over fe2o3-amqp's acceptor: SASL
//! (`MSSBCBS`, `ANONYMOUS`), `$cbs`, links that publish to topics, a
//! topic's `$management` for scheduling (decision 0135), and links that
//! receive from sessions and dead-letter queues, settled by the broker's own
//! answer, with a subscription's `$management` for session state and locks.
//! What fe2o3 cannot do as a sender (lock-token tags, the broker's answer to
//! a settlement, credit) a frame tap between the socket and the library
//! does (decision 0136).

mod admission;
mod cbs;
mod endpoint;
#[cfg(test)]
mod fuzz;
mod grants;
mod guard;
mod held;
mod incoming;
mod log_limit;
mod management;
mod publish;
mod receive;
mod reply;
mod sasl;
mod tap;
#[cfg(test)]
mod test_frames;
mod tls;

pub use endpoint::{
    Endpoint, IDLE_TIMEOUT, MAX_CONNECTIONS, MAX_PENDING_CONNECTIONS, TOKEN_TIMEOUT,
};
pub use publish::PublishCheck;
pub use tls::{ServerTls, ServerTlsError};
