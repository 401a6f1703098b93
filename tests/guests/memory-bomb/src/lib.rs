//! `memory-bomb`: claims `MemoryBomb` and allocates (and touches) 1 MiB blocks
//! until the host's memory limit stops it; the host must report
//! `failed`/`MemoryLimit` and keep serving.

use std::hint::black_box;

use nimbus_guest::{Context, Error, Event, Handler, Outcome};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// Any JSON payload.
#[derive(Deserialize)]
pub struct MemoryBomb(IgnoredAny);

impl Event for MemoryBomb {
    const EVENT_TYPE: &'static str = "MemoryBomb";
}

const BLOCK: usize = 1 << 20;

/// Allocates without end.
pub struct Bomb;

impl Handler<MemoryBomb> for Bomb {
    fn handle(&self, _: MemoryBomb, ctx: &Context) -> Result<Outcome, Error> {
        ctx.info("memory-bomb: allocating until stopped");
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            // Filled, not just reserved, so the memory is really committed.
            hoard.push(black_box(vec![0xA5; BLOCK]));
            black_box(&hoard);
        }
    }
}

nimbus_guest::export!(Bomb => MemoryBomb);
