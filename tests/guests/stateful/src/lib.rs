//! `stateful`: claims `Stateful`, increments a static counter and publishes
//! its value as a `StatefulCount` follow-up (`{"Count":n}`, message id
//! `{event id}:count`). Each event runs in a fresh instance, so the count
//! must be 1 every time: two events in a row share no state.

use std::sync::atomic::{AtomicU64, Ordering};

use nimbus_guest::{Context, Error, Event, FollowUp, Handler, Outcome};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// Any JSON payload.
#[derive(Deserialize)]
pub struct Stateful(IgnoredAny);

impl Event for Stateful {
    const EVENT_TYPE: &'static str = "Stateful";
}

/// The follow-up's payload.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct StatefulCount {
    /// Events handled by the instance that published it.
    pub count: u64,
}

impl Event for StatefulCount {
    const EVENT_TYPE: &'static str = "StatefulCount";
}

/// Events handled by this instance; it would grow if instances were reused.
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Counts.
pub struct Counter;

impl Handler<Stateful> for Counter {
    fn handle(&self, _: Stateful, ctx: &Context) -> Result<Outcome, Error> {
        let count = HANDLED.fetch_add(1, Ordering::Relaxed) + 1;
        nimbus_guest::info!(ctx, { count: count }, "stateful: event number {count} in this instance");
        ctx.publish(FollowUp::event(
            format!("{}:count", ctx.event_id()),
            &StatefulCount { count },
        ))?;
        Ok(Outcome::Completed)
    }
}

nimbus_guest::export!(Counter => Stateful);
