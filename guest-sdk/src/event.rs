//! The trait that names an event type: what a handler's payload type
//! implements, and what a follow-up is published under.

/// A type that is the payload of one NimBus event type.
///
/// `EVENT_TYPE` is the wire's `EventTypeId`: the host routes an event to the
/// component whose `export!` lists the type with that name, and a follow-up
/// built with [`FollowUp::event`](crate::FollowUp::event) is published under it.
///
/// ```
/// #[derive(serde::Deserialize)]
/// #[serde(rename_all = "PascalCase")]
/// struct OrderPlaced {
///     order_id: String,
/// }
///
/// impl nimbus_guest::Event for OrderPlaced {
///     const EVENT_TYPE: &'static str = "OrderPlaced";
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a nimbus event type",
    label = "no `impl nimbus_guest::Event for {Self}`",
    note = "give it its event type name: `impl nimbus_guest::Event for {Self} {{ const EVENT_TYPE: &'static str = \"{Self}\"; }}`"
)]
pub trait Event {
    /// The event type name (`EventTypeId`), e.g. `"OrderPlaced"`. It must not
    /// be empty, and one component may register it only once (both are checked
    /// when the component compiles).
    const EVENT_TYPE: &'static str;
}
