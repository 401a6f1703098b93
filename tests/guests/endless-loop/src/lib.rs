//! `endless-loop`: claims `Loop` and never returns, so the host's wall-clock
//! deadline (epoch interruption) must stop it and report `failed`/`Timeout`.

use std::hint::black_box;

use nimbus_guest::{Context, Error, Event, Handler, Outcome};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// Any JSON payload.
#[derive(Deserialize)]
pub struct Loop(IgnoredAny);

impl Event for Loop {
    const EVENT_TYPE: &'static str = "Loop";
}

/// Spins forever.
pub struct EndlessLoop;

impl Handler<Loop> for EndlessLoop {
    fn handle(&self, _: Loop, ctx: &Context) -> Result<Outcome, Error> {
        ctx.info("endless-loop: entering the loop");
        let mut spins: u64 = 0;
        // `black_box` keeps the optimiser from proving anything about the
        // loop; it has no exit.
        loop {
            spins = black_box(spins.wrapping_add(1));
        }
    }
}

nimbus_guest::export!(EndlessLoop => Loop);
