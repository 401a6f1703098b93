//! `swap-v2`: version 2 of the handler for `Swap` (`swap-v1` and `swap-v2`
//! claim the same event type, for hot-swap tests). It logs its version and
//! publishes a `SwapServed` follow-up `{"Version":2}` with message id
//! `{event id}:swap`, then completes.
//!
//! Unlike version 1, it also handles `{"Bug":true}`.

use nimbus_guest::{Context, Error, Event, FollowUp, Handler, Outcome};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// The version this component reports.
pub const VERSION: u32 = 2;

/// The `Swap` payload; version 2 needs nothing from it.
#[derive(Deserialize)]
pub struct Swap(IgnoredAny);

impl Event for Swap {
    const EVENT_TYPE: &'static str = "Swap";
}

/// The follow-up saying which version served the event.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SwapServed {
    /// The serving version.
    pub version: u32,
}

impl Event for SwapServed {
    const EVENT_TYPE: &'static str = "SwapServed";
}

/// Version 2.
pub struct SwapV2;

impl Handler<Swap> for SwapV2 {
    fn handle(&self, _: Swap, ctx: &Context) -> Result<Outcome, Error> {
        nimbus_guest::info!(ctx, { version: VERSION }, "swap served by version {VERSION}");
        ctx.publish(FollowUp::event(
            format!("{}:swap", ctx.event_id()),
            &SwapServed { version: VERSION },
        ))?;
        Ok(Outcome::Completed)
    }
}

nimbus_guest::export!(SwapV2 => Swap);
