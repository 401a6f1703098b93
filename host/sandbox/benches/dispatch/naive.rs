//! The reference point of target (a): the set-ups `DESIGN.md` measured
//! ("fresh `Store` + instance from `InstancePre` + one call carrying a
//! ~300-byte payload: 38.6 µs with the default allocator; 22 µs pooled with
//! defaults"), rebuilt here so they run in the same process and moment as the
//! sandbox. The engine is `Config::default()` (on-demand allocation) or the
//! pooling allocator with its default settings (nothing kept resident); the
//! component is cargo's own build (not slimmed); the linker carries all of
//! WASI preview 2; each event gets a `Store` with a fresh `WasiCtx`. The
//! host's imports do the least they can.
//!
//! The "about 22 µs" is the pooled figure. Measured beside the
//! sandbox, it shows which of the machine's speed states a run is in.

use wasmtime::component::{Component, HasData, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "handler",
});

use nimbus::handler::{config, delivery, log, publish, types};

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for State {}

impl log::Host for State {
    fn write(&mut self, _: log::Level, _: String, _: Vec<(String, String)>) {}

    fn panicked(&mut self, _: String) {}
}

impl config::Host for State {
    fn get(&mut self, _: String) -> Option<String> {
        None
    }

    fn get_all(&mut self) -> Vec<(String, String)> {
        Vec::new()
    }
}

impl delivery::Host for State {
    fn count(&mut self) -> u32 {
        1
    }

    fn message_type(&mut self) -> String {
        "EventRequest".to_owned()
    }

    fn from(&mut self) -> Option<String> {
        None
    }
}

impl publish::Host for State {
    fn send(&mut self, _: types::FollowUp) -> Result<(), types::HostError> {
        Ok(())
    }
}

struct Data;
impl HasData for Data {
    type Data<'a> = &'a mut State;
}

/// A component loaded the naive way.
pub(crate) struct Naive {
    engine: Engine,
    pre: HandlerPre<State>,
}

impl Naive {
    /// `pooled`: the pooling allocator with its defaults, else on-demand.
    pub(crate) fn new(bytes: &[u8], pooled: bool) -> Self {
        let mut config = Config::default();
        if pooled {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(
                PoolingAllocationConfig::default(),
            ));
        }
        let engine = Engine::new(&config).unwrap();
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
        Handler::add_to_linker::<State, Data>(&mut linker, |state| state).unwrap();
        let component = Component::new(&engine, bytes).unwrap();
        let pre = HandlerPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        Self { engine, pre }
    }

    /// One event: a fresh store and instance, then the call. Whether the
    /// handler completed.
    pub(crate) fn invoke(&self, event_type: &str, payload: &str) -> bool {
        let state = State {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        };
        let mut store = Store::new(&self.engine, state);
        let handler = self.pre.instantiate(&mut store).unwrap();
        let event = types::Event {
            event_id: "e-1".into(),
            event_type: event_type.into(),
            message_id: "m-1".into(),
            session_id: "o-100234".into(),
            correlation_id: None,
            parent_message_id: None,
            originating_message_id: None,
            retry_count: 0,
            enqueued_time: 0,
            payload: payload.into(),
            properties: Vec::new(),
        };
        let result = handler
            .nimbus_handler_dispatch()
            .call_handle(&mut store, &event)
            .unwrap();
        matches!(result, Ok(types::Outcome::Completed))
    }
}
