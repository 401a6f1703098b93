//! The one trait the engine talks to, shaped like Azure Service Bus.
//!
//! The engine publishes, accepts sessions, receives, settles and keeps
//! session state only through this crate. Implementations (the embedded
//! broker, Azure Service Bus) live in their own crates and only implement it;
//! the engine never names one.

mod message;

pub use message::{Message, Properties, PropertyValue, ReceivedMessage};
