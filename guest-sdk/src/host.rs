//! The seam between the SDK and the host's imports.
//!
//! Everything the SDK asks of the host goes through [`Host`], so the SDK's own
//! logic (payload decoding, dispatch, error mapping) is unit-tested natively
//! against a recording fake, while a real component uses [`ComponentHost`],
//! which calls the WIT imports.

use crate::bindings::nimbus::handler::{config, delivery, log, publish, types as wit};
use crate::level::Level;

/// What the SDK needs from the host. `Sync` because the panic hook, which
/// must be `'static + Sync`, holds one.
pub(crate) trait Host: Sync {
    fn log(&self, level: Level, message: &str, fields: &[(String, String)]);
    fn panicked(&self, message: &str);
    fn publish(&self, follow_up: &wit::FollowUp) -> Result<(), wit::HostError>;
    fn config(&self, key: &str) -> Option<String>;
    fn config_all(&self) -> Vec<(String, String)>;
    fn delivery_count(&self) -> u32;
    fn message_type(&self) -> String;
    fn sender(&self) -> Option<String>;
}

/// The real host, reached through the component's imports.
pub(crate) struct ComponentHost;

impl Host for ComponentHost {
    fn log(&self, level: Level, message: &str, fields: &[(String, String)]) {
        let level = match level {
            Level::Trace => log::Level::Trace,
            Level::Debug => log::Level::Debug,
            Level::Info => log::Level::Info,
            Level::Warn => log::Level::Warn,
            Level::Error => log::Level::Error,
        };
        log::write(level, message, fields);
    }

    fn panicked(&self, message: &str) {
        log::panicked(message);
    }

    fn publish(&self, follow_up: &wit::FollowUp) -> Result<(), wit::HostError> {
        publish::send(follow_up)
    }

    fn config(&self, key: &str) -> Option<String> {
        config::get(key)
    }

    fn config_all(&self) -> Vec<(String, String)> {
        config::get_all()
    }

    fn delivery_count(&self) -> u32 {
        delivery::count()
    }

    fn message_type(&self) -> String {
        delivery::message_type()
    }

    fn sender(&self) -> Option<String> {
        delivery::from()
    }
}
