//! `endless-loop`: claims `Loop` and never returns, so the host's wall-clock
//! deadline (epoch interruption) must stop it and report `failed`/`Timeout`;
//! and `Sleep`, which waits an hour inside a WASI call, where no epoch check
//! runs, so the host's deadline must stop the wait itself.

use std::hint::black_box;
use std::time::Duration;

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

/// Any JSON payload.
#[derive(Deserialize)]
pub struct Sleep(IgnoredAny);

impl Event for Sleep {
    const EVENT_TYPE: &'static str = "Sleep";
}

impl Handler<Sleep> for EndlessLoop {
    fn handle(&self, _: Sleep, ctx: &Context) -> Result<Outcome, Error> {
        ctx.info("endless-loop: going to sleep");
        std::thread::sleep(Duration::from_secs(3600));
        Ok(Outcome::Completed)
    }
}

nimbus_guest::export!(EndlessLoop => Loop, Sleep);
