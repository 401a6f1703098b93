//! The `wit-bindgen` output for `wit/handler.wit`, kept behind the SDK.
//!
//! Handler authors never name these types: the SDK converts them into its own
//! (`Outcome`, `Error`, `FollowUp`, ...) so the generated shapes can change with
//! `wit-bindgen` without breaking handler code. The module is `pub` only so the
//! `export!` macro, which expands in the handler's crate, can reach it.

wit_bindgen::generate!({
    // The one contract, shared with the host: read in place rather than
    // copied, so the SDK and the host can never disagree about it.
    path: "../wit",
    world: "handler",
    pub_export_macro: true,
    export_macro_name: "__export_handler_world",
    default_bindings_module: "::nimbus_guest::__bindings",
    // Lets the SDK's tests compare what crosses the boundary.
    additional_derives: [PartialEq],
});
