//! `panicker`: claims `Panic` and panics with [`PANIC_MESSAGE`]. The SDK's
//! panic hook records the message (`log.panicked`) before the instance traps,
//! so the host must report `failed`/`Panic` with a message that contains it.

use nimbus_guest::{Context, Error, Event, Handler, Outcome};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// The exact text the guest panics with.
pub const PANIC_MESSAGE: &str = "panicker: deliberate panic for the host's tests";

/// Any JSON payload.
#[derive(Deserialize)]
pub struct Panic(IgnoredAny);

impl Event for Panic {
    const EVENT_TYPE: &'static str = "Panic";
}

/// Panics.
pub struct Panicker;

impl Handler<Panic> for Panicker {
    fn handle(&self, _: Panic, ctx: &Context) -> Result<Outcome, Error> {
        ctx.info("panicker: about to panic");
        panic!("{PANIC_MESSAGE}");
    }
}

nimbus_guest::export!(Panicker => Panic);
