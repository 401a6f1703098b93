//! `noop`: claims `Noop` and completes immediately, whatever the payload (it
//! is skipped, not decoded into anything). For benchmarking the sandbox's
//! own per-event cost.

use nimbus_guest::{Context, Error, Event, Handler, Outcome};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// Any JSON payload, not looked at.
#[derive(Deserialize)]
pub struct Noop(IgnoredAny);

impl Event for Noop {
    const EVENT_TYPE: &'static str = "Noop";
}

/// Does nothing.
pub struct NoopHandler;

impl Handler<Noop> for NoopHandler {
    fn handle(&self, _: Noop, _: &Context) -> Result<Outcome, Error> {
        Ok(Outcome::Completed)
    }
}

nimbus_guest::export!(NoopHandler => Noop);
