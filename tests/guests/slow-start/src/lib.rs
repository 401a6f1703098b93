//! `slow-start`: its `subscriptions` waits an hour inside a WASI call before
//! it answers `SlowStart`. No epoch check runs during the wait, so only the
//! host's own cut-off can end it: loading this component must fail at its
//! deadline, not hang the loader (the registry's watcher thread, which then
//! could not swap in anything else).
//!
//! It implements the dispatch export by hand, because `nimbus_guest::export!`
//! generates a `subscriptions` that answers at once.

use std::time::Duration;

use nimbus_guest::__private::{WitError, WitEvent, WitOutcome, handle};

struct SlowStart;

impl nimbus_guest::__bindings::exports::nimbus::handler::dispatch::Guest for SlowStart {
    fn subscriptions() -> Vec<String> {
        std::thread::sleep(Duration::from_secs(3600));
        vec!["SlowStart".to_owned()]
    }

    fn handle(event: WitEvent) -> Result<WitOutcome, WitError> {
        // No routes: every event is `permanent`/`UnknownEventType`.
        handle(event, &[])
    }
}

#[allow(
    unsafe_code,
    reason = "the wit-bindgen export glue defines the component's exported C ABI functions"
)]
const _: () = {
    nimbus_guest::__bindings::__export_handler_world!(SlowStart with_types_in nimbus_guest::__bindings);
};
