//! The host side of the handler's imports: one file per WIT interface, each
//! implemented on its own view of the per-event state, plus the conversions
//! between the generated bindings and the public types.

use wasmtime::component::{HasData, Linker};

use crate::bindings;
use crate::state::{ConfigView, DeliveryView, InvocationState, LogView, PublishView};

pub(crate) mod config;
pub(crate) mod convert;
pub(crate) mod delivery;
pub(crate) mod log;
pub(crate) mod publish;

struct LogData;
impl HasData for LogData {
    type Data<'a> = LogView<'a>;
}

struct PublishData;
impl HasData for PublishData {
    type Data<'a> = PublishView<'a>;
}

struct ConfigData;
impl HasData for ConfigData {
    type Data<'a> = ConfigView<'a>;
}

struct DeliveryData;
impl HasData for DeliveryData {
    type Data<'a> = DeliveryView<'a>;
}

struct TypesData;
impl HasData for TypesData {
    type Data<'a> = &'a mut InvocationState;
}

impl bindings::types::Host for InvocationState {}

/// Adds the `nimbus:handler` imports and WASI preview 2 to `linker`, for
/// instances called synchronously.
pub(crate) fn add_to_linker(linker: &mut Linker<InvocationState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    add_nimbus_imports(linker)
}

/// The same for instances called asynchronously: WASI's async host
/// functions (its sync ones would block on a runtime inside the runtime).
/// The `nimbus:handler` imports never wait, so they are the same functions.
pub(crate) fn add_to_linker_async(linker: &mut Linker<InvocationState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    add_nimbus_imports(linker)
}

fn add_nimbus_imports(linker: &mut Linker<InvocationState>) -> wasmtime::Result<()> {
    bindings::types::add_to_linker::<InvocationState, TypesData>(linker, |state| state)?;
    bindings::log::add_to_linker::<InvocationState, LogData>(linker, InvocationState::log_view)?;
    bindings::publish::add_to_linker::<InvocationState, PublishData>(
        linker,
        InvocationState::publish_view,
    )?;
    bindings::config::add_to_linker::<InvocationState, ConfigData>(
        linker,
        InvocationState::config_view,
    )?;
    bindings::delivery::add_to_linker::<InvocationState, DeliveryData>(
        linker,
        InvocationState::delivery_view,
    )?;
    Ok(())
}
