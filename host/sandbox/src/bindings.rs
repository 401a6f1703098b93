//! Host bindings generated from `wit/handler.wit`. Nothing else lives here:
//! each imported interface is implemented in its own file under `host/`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "handler",
});

pub(crate) use nimbus::handler::{config, delivery, log, publish, types};

/// The same world with `dispatch` called asynchronously, for
/// [`crate::HandlerVersion::invoke_async`]. The imported interfaces are the
/// ones above (one implementation of each serves both).
pub(crate) mod asynchronous {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "handler",
        exports: { default: async },
        with: {
            "nimbus:handler/types": crate::bindings::nimbus::handler::types,
            "nimbus:handler/log": crate::bindings::nimbus::handler::log,
            "nimbus:handler/publish": crate::bindings::nimbus::handler::publish,
            "nimbus:handler/config": crate::bindings::nimbus::handler::config,
            "nimbus:handler/delivery": crate::bindings::nimbus::handler::delivery,
        },
    });
}
