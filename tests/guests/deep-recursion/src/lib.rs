//! `deep-recursion`: claims `Recurse` and recurses without bound, so the stack
//! overflows and the instance traps; the host must report `failed`/`Trap`.

use std::hint::black_box;

use nimbus_guest::{Context, Error, Event, Handler, Outcome};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// Any JSON payload.
#[derive(Deserialize)]
pub struct Recurse(IgnoredAny);

impl Event for Recurse {
    const EVENT_TYPE: &'static str = "Recurse";
}

/// Recurses until the stack runs out.
pub struct DeepRecursion;

/// Each frame keeps a 256-byte buffer alive across the recursive call, and
/// `black_box` hides the exit, so the optimiser can neither drop the frames
/// nor turn the recursion into a loop.
#[inline(never)]
fn descend(depth: u64) -> u64 {
    let frame = black_box([depth; 32]);
    if black_box(depth == u64::MAX) {
        return frame[0];
    }
    descend(depth + 1).wrapping_add(black_box(frame)[31])
}

impl Handler<Recurse> for DeepRecursion {
    fn handle(&self, _: Recurse, ctx: &Context) -> Result<Outcome, Error> {
        ctx.info("deep-recursion: descending");
        let depth = descend(0);
        Err(Error::failed(
            "Unreachable",
            format!("the recursion returned at depth {depth}; the stack should have overflowed"),
        ))
    }
}

nimbus_guest::export!(DeepRecursion => Recurse);
