//! The export macro and the logging macros.

/// Makes this crate a nimbus handler component: registers each handler for
/// its event types and generates the component's `dispatch` export.
///
/// One line per handler value: `HANDLER => EventType, OtherEventType`,
/// separated by `;`. The handler is an expression, evaluated afresh for each
/// event it handles and only for those (a unit struct's name is enough).
///
/// `nimbus_guest::export!(Orders => OrderPlaced, OrderCancelled);` for one
/// handler; for several:
///
/// ```no_run
/// # use nimbus_guest::{Context, Error, Event, Handler, Outcome};
/// # macro_rules! event { ($($t:ident),*) => { $(
/// #     #[derive(serde::Deserialize)] struct $t {}
/// #     impl Event for $t { const EVENT_TYPE: &'static str = stringify!($t); }
/// # )* } }
/// # event!(OrderPlaced, OrderCancelled, InvoiceDue);
/// # macro_rules! handles { ($h:ty: $($e:ty),*) => { $(
/// #     impl Handler<$e> for $h {
/// #         fn handle(&self, _: $e, _: &Context) -> Result<Outcome, Error> { Ok(Outcome::Completed) }
/// #     }
/// # )* } }
/// struct Orders;
/// struct Billing { currency: &'static str }
/// # handles!(Orders: OrderPlaced, OrderCancelled);
/// # handles!(Billing: InvoiceDue);
///
/// nimbus_guest::export! {
///     Orders => OrderPlaced, OrderCancelled;
///     Billing { currency: "EUR" } => InvoiceDue;
/// }
/// # fn main() {}
/// ```
///
/// `subscriptions` answers the listed event types; `handle` routes by event
/// type, and an event type that is not listed is `permanent` with error type
/// `UnknownEventType`. Use the macro once per component, at the crate root.
/// Registering an event type twice, or a type with an empty name, fails to
/// compile.
#[macro_export]
macro_rules! export {
    ($($handler:expr => $($event:ty),+ $(,)?);+ $(;)?) => {
        /// Present so that a second `nimbus_guest::export!` in the same module
        /// fails with "defined multiple times": a component has one dispatch
        /// export.
        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code, reason = "a marker named to explain the error it causes")]
        struct nimbus_guest_export_may_be_used_only_once_per_component;

        $( $( const _: () = $crate::__private::require_payload::<$event>(); )+ )+

        const _: () = $crate::__private::assert_registrations(&[
            $($( <$event as $crate::Event>::EVENT_TYPE ),+),+
        ]);

        #[allow(unsafe_code, reason = "the wit-bindgen export glue defines the component's exported C ABI functions")]
        const _: () = {
            struct NimbusDispatch;

            impl $crate::__bindings::exports::nimbus::handler::dispatch::Guest for NimbusDispatch {
                fn subscriptions() -> ::std::vec::Vec<::std::string::String> {
                    $crate::__private::subscriptions(&[
                        $($( <$event as $crate::Event>::EVENT_TYPE ),+),+
                    ])
                }

                fn handle(
                    event: $crate::__private::WitEvent,
                ) -> ::core::result::Result<$crate::__private::WitOutcome, $crate::__private::WitError> {
                    $crate::__private::handle(event, &[
                        $($(
                            &$crate::__private::HandlerRoute::<_, _, $event>::new(|| $handler)
                                as &dyn $crate::__private::Route
                        ),+),+
                    ])
                }
            }

            $crate::__bindings::__export_handler_world!(NimbusDispatch with_types_in $crate::__bindings);
        };
    };
    () => {
        ::core::compile_error!(
            "nimbus_guest::export! needs at least one registration, e.g. `nimbus_guest::export!(Orders => OrderPlaced);`"
        );
    };
    ($($other:tt)*) => {
        ::core::compile_error!(
            "nimbus_guest::export! expects `HANDLER => EventType, ...` lines separated by `;`, e.g. `nimbus_guest::export!(Orders => OrderPlaced, OrderCancelled);` where `Orders` implements `nimbus_guest::Handler<OrderPlaced>` and `nimbus_guest::Handler<OrderCancelled>`"
        );
    };
}

/// Logs through the host at a [`Level`](crate::Level), with optional
/// structured fields in braces before the `format!` arguments.
///
/// ```no_run
/// # fn f(ctx: &nimbus_guest::Context) {
/// use nimbus_guest::Level;
/// let order_id = "o-1001";
/// nimbus_guest::log!(ctx, Level::Info, "order {order_id} accepted");
/// nimbus_guest::log!(ctx, Level::Info, { order_id: order_id, total: 150.0 }, "order accepted");
/// # }
/// ```
#[macro_export]
macro_rules! log {
    ($ctx:expr, $level:expr, { $($key:ident : $value:expr),* $(,)? }, $($fmt:tt)+) => {
        $crate::Context::log(
            &$ctx,
            $level,
            &::std::format!($($fmt)+),
            &[$( (::core::stringify!($key), &$value as &dyn ::core::fmt::Display) ),*],
        )
    };
    ($ctx:expr, $level:expr, $($fmt:tt)+) => {
        $crate::Context::log(&$ctx, $level, &::std::format!($($fmt)+), &[])
    };
}

/// [`log!`] at [`Level::Trace`](crate::Level::Trace): `trace!(ctx, "..", args)` or `trace!(ctx, { key: value }, "..")`.
#[macro_export]
macro_rules! trace {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::Level::Trace, $($rest)+) };
}

/// [`log!`] at [`Level::Debug`](crate::Level::Debug): `debug!(ctx, "..", args)` or `debug!(ctx, { key: value }, "..")`.
#[macro_export]
macro_rules! debug {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::Level::Debug, $($rest)+) };
}

/// [`log!`] at [`Level::Info`](crate::Level::Info): `info!(ctx, "..", args)` or `info!(ctx, { key: value }, "..")`.
#[macro_export]
macro_rules! info {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::Level::Info, $($rest)+) };
}

/// [`log!`] at [`Level::Warn`](crate::Level::Warn): `warn!(ctx, "..", args)` or `warn!(ctx, { key: value }, "..")`.
#[macro_export]
macro_rules! warn {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::Level::Warn, $($rest)+) };
}

/// [`log!`] at [`Level::Error`](crate::Level::Error): `error!(ctx, "..", args)` or `error!(ctx, { key: value }, "..")`.
#[macro_export]
macro_rules! error {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::Level::Error, $($rest)+) };
}
