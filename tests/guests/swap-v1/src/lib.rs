//! `swap-v1`: version 1 of the handler for `Swap` (`swap-v1` and `swap-v2`
//! claim the same event type, for hot-swap tests). It logs its version and
//! publishes a `SwapServed` follow-up `{"Version":1}` with message id
//! `{event id}:swap`, then completes.
//!
//! Version 1 has a "bug": a payload `{"Bug":true}` fails with
//! `failed`/`SwapV1Bug`, which version 2 fixes, so a test can show
//! block → drop in the fix → resubmit.

use nimbus_guest::{Context, Error, Event, FollowUp, Handler, Outcome};
use serde::{Deserialize, Serialize};

/// The version this component reports.
pub const VERSION: u32 = 1;

/// The `Swap` payload.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Swap {
    /// Triggers version 1's bug.
    #[serde(default)]
    pub bug: bool,
}

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

/// Version 1.
pub struct SwapV1;

impl Handler<Swap> for SwapV1 {
    fn handle(&self, swap: Swap, ctx: &Context) -> Result<Outcome, Error> {
        nimbus_guest::info!(ctx, { version: VERSION }, "swap served by version {VERSION}");
        if swap.bug {
            return Err(Error::failed(
                "SwapV1Bug",
                "version 1 cannot handle Bug=true; version 2 can",
            ));
        }
        ctx.publish(FollowUp::event(
            format!("{}:swap", ctx.event_id()),
            &SwapServed { version: VERSION },
        ))?;
        Ok(Outcome::Completed)
    }
}

nimbus_guest::export!(SwapV1 => Swap);
