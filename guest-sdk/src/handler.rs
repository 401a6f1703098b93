//! The trait a handler author implements for each event type it handles;
//! the type itself is an [`Event`](crate::Event).

use crate::event::Event;
use crate::{Context, Error, Outcome};

/// Handles events of type `E`.
///
/// The host calls it once per event, each time in a fresh WebAssembly
/// instance: nothing survives from one call to the next, not even statics.
/// The handler only says what happened to this one event; ordering, retries,
/// parking and dead-lettering belong to the host.
///
/// Return
/// - `Ok(Outcome::Completed)` (or `Ok(().into())`) when the event was handled;
/// - `Ok(pending_handoff("reason").into())` when an external job will settle it;
/// - `Err(Error::failed(..))` for an ordinary failure (blocks the session, retry
///   policy may apply), `Err(Error::transient(..))` for a passing
///   infrastructure problem (redelivered), `Err(Error::permanent(..))` when
///   the event can never succeed (dead-lettered).
///
/// A panic is reported as `failed` with error type `Panic` and the panic
/// message.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not handle `{E}` events",
    label = "`{Self}` has no `impl nimbus_guest::Handler<{E}>`",
    note = "implement it: `impl nimbus_guest::Handler<{E}> for {Self} {{ fn handle(&self, event: {E}, ctx: &nimbus_guest::Context) -> Result<nimbus_guest::Outcome, nimbus_guest::Error> {{ .. }} }}`",
    note = "or remove `{E}` from the handler's line in `nimbus_guest::export!`"
)]
pub trait Handler<E: Event> {
    /// Handles one event whose payload has been deserialized into `E`.
    ///
    /// # Errors
    ///
    /// The [`Error`] says how the host should treat the failure: see its
    /// constructors.
    fn handle(&self, event: E, ctx: &Context) -> Result<Outcome, Error>;
}
