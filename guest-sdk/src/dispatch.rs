//! What the `export!` macro expands to call: routing an event to its handler,
//! decoding the payload, and turning a panic into a reported failure.
//!
//! Public only because the macro expands in the handler's crate; not part of
//! the SDK's API (`#[doc(hidden)]` at the root).

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use crate::bindings::nimbus::handler::types as wit;
use crate::host::{ComponentHost, Host};
use crate::{Context, Error, Event, Handler, Outcome};

/// The event record the `dispatch.handle` export receives.
pub type WitEvent = wit::Event;
/// The outcome record the `dispatch.handle` export returns.
pub type WitOutcome = wit::Outcome;
/// The error variant the `dispatch.handle` export returns.
pub type WitError = wit::Error;

/// One registered (handler, event type) pair, with the types erased so the
/// macro can put several in one slice.
pub trait Route {
    /// The event type this route handles.
    fn event_type(&self) -> &'static str;
    /// Decodes the payload and runs the handler.
    ///
    /// # Errors
    ///
    /// `permanent`/`InvalidPayload` when the payload does not decode, else
    /// whatever the handler returns.
    fn call(&self, ctx: &Context) -> Result<Outcome, Error>;
}

/// An event type whose payload can be decoded: exists only to say, when it
/// cannot, what to do about it.
#[diagnostic::on_unimplemented(
    message = "the payload of `{Self}` cannot be deserialized",
    label = "`{Self}` does not implement `serde::Deserialize`",
    note = "derive it: `#[derive(serde::Deserialize)]` on `{Self}` (and `#[serde(rename_all = \"PascalCase\")]` for NimBus-style payloads)"
)]
pub trait Payload: DeserializeOwned {}

impl<T: DeserializeOwned> Payload for T {}

/// Named by `export!` for each registered event type, so a payload type
/// that cannot be deserialized is reported with [`Payload`]'s advice.
pub const fn require_payload<E: Event + Payload>() {}

/// The [`Route`] for event type `E`, handled by the handler `make` builds.
/// The handler is built only when an event of type `E` arrives, so a
/// component with several handlers builds just the one it needs.
pub struct HandlerRoute<F, H, E> {
    make: F,
    types: PhantomData<fn() -> (H, E)>,
}

impl<F, H, E> HandlerRoute<F, H, E>
where
    F: Fn() -> H,
    H: Handler<E>,
    E: Event + DeserializeOwned,
{
    /// Registers the handler `make` builds for `E`.
    pub fn new(make: F) -> Self {
        Self {
            make,
            types: PhantomData,
        }
    }
}

impl<F, H, E> Route for HandlerRoute<F, H, E>
where
    F: Fn() -> H,
    H: Handler<E>,
    E: Event + DeserializeOwned,
{
    fn event_type(&self) -> &'static str {
        E::EVENT_TYPE
    }

    fn call(&self, ctx: &Context) -> Result<Outcome, Error> {
        let event = decode::<E>(ctx.payload())?;
        (self.make)().handle(event, ctx)
    }
}

/// Checks the registrations when the component compiles: no empty event
/// type name, no event type twice.
pub const fn assert_registrations(event_types: &[&str]) {
    let mut i = 0;
    while i < event_types.len() {
        if event_types[i].is_empty() {
            panic!("nimbus_guest::export!: an event type has an empty EVENT_TYPE name");
        }
        let mut j = i + 1;
        while j < event_types.len() {
            if const_str_eq(event_types[i], event_types[j]) {
                panic!(
                    "nimbus_guest::export!: an event type is registered twice; each event type may have only one handler in a component"
                );
            }
            j += 1;
        }
        i += 1;
    }
}

const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The `dispatch.subscriptions` export: the registered event types.
pub fn subscriptions(event_types: &[&'static str]) -> Vec<String> {
    event_types.iter().map(|t| (*t).to_owned()).collect()
}

/// The `dispatch.handle` export: installs the panic hook and routes the
/// event to its handler.
pub fn handle(event: WitEvent, routes: &[&dyn Route]) -> Result<WitOutcome, WitError> {
    install_panic_hook(&ComponentHost);
    route(event, routes, &ComponentHost)
}

pub(crate) fn route(
    event: WitEvent,
    routes: &[&dyn Route],
    host: &'static dyn Host,
) -> Result<WitOutcome, WitError> {
    let ctx = Context::new(event, host);
    let result = match routes.iter().find(|r| r.event_type() == ctx.event_type()) {
        Some(route) => route.call(&ctx),
        None => Err(unknown_event_type(ctx.event_type(), routes)),
    };
    result.map(Into::into).map_err(Into::into)
}

fn unknown_event_type(event_type: &str, routes: &[&dyn Route]) -> Error {
    let handled: Vec<&str> = routes.iter().map(|r| r.event_type()).collect();
    unknown_event_type_error(event_type, &handled)
}

/// `permanent`/`UnknownEventType`, naming the type and what is handled.
pub(crate) fn unknown_event_type_error(event_type: &str, handled: &[&str]) -> Error {
    Error::permanent(
        "UnknownEventType",
        format!(
            "this component has no handler for event type `{event_type}`; it handles: {}",
            handled.join(", ")
        ),
    )
}

/// Deserializes a payload into `E`; a mismatch is `permanent` (the event can
/// never succeed) with error type `InvalidPayload` and a message that names
/// the offending field by its path, e.g. `Lines[0].Quantity`.
///
/// The happy path is plain `serde_json`; only a payload that fails is decoded
/// a second time through `serde_path_to_error`, so tracking the path costs
/// nothing per event.
pub(crate) fn decode<E: Event + DeserializeOwned>(payload: &str) -> Result<E, Error> {
    match serde_json::from_str::<E>(payload) {
        Ok(value) => Ok(value),
        Err(plain) => Err(Error::permanent(
            "InvalidPayload",
            explain_invalid::<E>(payload, &plain),
        )),
    }
}

fn explain_invalid<E: Event + DeserializeOwned>(
    payload: &str,
    plain: &serde_json::Error,
) -> String {
    let event_type = E::EVENT_TYPE;
    let mut de = serde_json::Deserializer::from_str(payload);
    match serde_path_to_error::deserialize::<_, E>(&mut de) {
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if inner.to_string().starts_with("recursion limit exceeded") {
                format!(
                    "the payload of `{event_type}` is nested too deeply (serde_json reads at most 128 levels): {inner}"
                )
            } else if inner.is_syntax() || inner.is_eof() {
                format!("the payload of `{event_type}` is not valid JSON: {inner}")
            } else if path == "." {
                format!("the payload does not match `{event_type}`: {inner}")
            } else {
                format!("the payload does not match `{event_type}` at field `{path}`: {inner}")
            }
        }
        // The document itself decoded, so what failed was what follows it.
        Ok(_) => format!(
            "the payload of `{event_type}` has trailing characters after the JSON document: {plain}"
        ),
    }
}

/// On wasm32-wasip2 a panic aborts (traps) without unwinding, so the only
/// chance to report its message is the hook: it hands the message to the host
/// (`log.panicked`), which reports the trap as `failed`/`Panic` with it.
fn install_panic_hook(host: &'static dyn Host) {
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload_as_str()
            .unwrap_or("panic with a non-string payload");
        let text = match info.location() {
            Some(at) => format!("{message} (at {}:{}:{})", at.file(), at.line(), at.column()),
            None => message.to_owned(),
        };
        host.panicked(&text);
    }));
}
