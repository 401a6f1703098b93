//! Host bindings generated from `wit/handler.wit`. Nothing else lives here:
//! each imported interface is implemented in its own file under `host/`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "handler",
});

pub(crate) use nimbus::handler::{config, log, publish, types};
