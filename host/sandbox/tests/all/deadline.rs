//! An endless loop is stopped by its deadline while other handlers keep
//! serving on other threads, and, called asynchronously, on its own thread.
//!
//! The test learns that the loop is running from the handler's own log line
//! ("entering the loop"), which the sandbox emits to `tracing` as it is
//! written; a tiny subscriber turns it into a signal. No sleeping.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nimbus_handler::{ErrorKind, Outcome};
use nimbus_sandbox::{HandlerVersion, Limits, Sandbox};
use support::{event, guest, sandbox};

/// Signals, per event id, that the handler wrote a log line containing
/// `needle` (the endless loop's "entering the loop").
struct Signal {
    needle: &'static str,
    waiting: Mutex<Vec<(String, mpsc::Sender<()>)>>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Visitor {
    message: String,
    event_id: String,
}

impl tracing::field::Visit for Visitor {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "event_id" {
            self.event_id = value.to_owned();
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "event_id" => self.event_id = format!("{value:?}").trim_matches('"').to_owned(),
            _ => {}
        }
    }
}

impl tracing::Subscriber for &'static Signal {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut visitor = Visitor::default();
        event.record(&mut visitor);
        if visitor.message.contains(self.needle) {
            let waiting = self.waiting.lock().expect("lock");
            for (event_id, sender) in waiting.iter() {
                if *event_id == visitor.event_id {
                    let _ = sender.send(());
                }
            }
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A receiver that fires once the endless loop running `event_id` has
/// entered its loop.
fn loop_entered(event_id: &str) -> mpsc::Receiver<()> {
    static SIGNAL: OnceLock<&'static Signal> = OnceLock::new();
    let signal = SIGNAL.get_or_init(|| {
        let signal: &'static Signal = Box::leak(Box::new(Signal {
            needle: "endless-loop: entering the loop",
            waiting: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
        }));
        tracing::subscriber::set_global_default(signal).expect("first subscriber");
        signal
    });
    let (sender, receiver) = mpsc::channel();
    signal
        .waiting
        .lock()
        .expect("lock")
        .push((event_id.to_owned(), sender));
    receiver
}

fn load(sandbox: &Sandbox, name: &str, limits: Limits) -> Arc<HandlerVersion> {
    let bytes = std::fs::read(guest(name)).expect("read guest");
    Arc::new(
        sandbox
            .load_bytes(name, &bytes, limits, BTreeMap::new())
            .expect("loads"),
    )
}

/// `endless-loop` with a deadline that is generous: other handlers' calls
/// must fit well inside it even on a loaded CI machine. Only the error type
/// is asserted, never a duration.
fn load_endless_loop(sandbox: &Sandbox) -> Arc<HandlerVersion> {
    let limits = Limits {
        timeout: Duration::from_secs(3),
        ..Limits::default()
    };
    load(sandbox, "endless-loop", limits)
}

fn loop_event(event_id: &str) -> nimbus_handler::Event {
    let mut looping = event("Loop", "{}");
    looping.event_id = event_id.to_owned();
    looping
}

#[test]
fn an_endless_loop_is_stopped_by_its_deadline_while_other_handlers_keep_serving() {
    let entered = loop_entered("deadline-loop");
    let sandbox = sandbox();
    let endless = load_endless_loop(&sandbox);
    let noop = load(&sandbox, "noop", Limits::default());
    let orders = load(&sandbox, "orders", Limits::default());

    let loop_finished = Arc::new(AtomicBool::new(false));
    let looping = {
        let endless = Arc::clone(&endless);
        let loop_finished = Arc::clone(&loop_finished);
        std::thread::spawn(move || {
            let invocation = endless.invoke(loop_event("deadline-loop"));
            loop_finished.store(true, Ordering::SeqCst);
            invocation
        })
    };
    entered
        .recv_timeout(Duration::from_secs(120))
        .expect("the endless loop starts");

    let order = r#"{"OrderId":"o-1","Customer":"acme","Total":10.0,"Lines":[{"Sku":"A","Quantity":1,"UnitPrice":10.0}]}"#;
    let mut served_while_looping = 0;
    for _ in 0..10 {
        assert_eq!(
            noop.invoke(event("Noop", "{}")).report.result,
            Ok(Outcome::Completed)
        );
        assert_eq!(
            orders.invoke(event("OrderPlaced", order)).report.result,
            Ok(Outcome::Completed)
        );
        if !loop_finished.load(Ordering::SeqCst) {
            served_while_looping += 1;
        }
    }
    assert!(
        served_while_looping > 0,
        "other handlers must be served while the loop runs"
    );

    let invocation = looping.join().expect("loop thread");
    let error = invocation.report.result.expect_err("the loop is stopped");
    assert_eq!(error.kind, ErrorKind::Failed);
    assert_eq!(error.error_type, "Timeout", "{error}");
}

#[test]
fn an_async_endless_loop_yields_its_thread_to_other_handlers_until_its_deadline() {
    // One thread for everything: the loop and the other handlers' calls
    // are tasks on a current-thread runtime. They are served while the
    // loop runs only if the loop yields the thread at its epoch ticks.
    let entered = loop_entered("async-loop");
    let sandbox = sandbox();
    let endless = load_endless_loop(&sandbox);
    let noop = load(&sandbox, "noop", Limits::default());
    let (served_while_looping, looped) = on_one_thread(async {
        let looping = tokio::spawn({
            let endless = Arc::clone(&endless);
            async move { endless.invoke_async(loop_event("async-loop")).await }
        });
        while entered.try_recv().is_err() {
            tokio::task::yield_now().await;
        }
        let mut served_while_looping = 0;
        for _ in 0..10 {
            let invocation = noop.invoke_async(event("Noop", "{}")).await;
            assert_eq!(invocation.report.result, Ok(Outcome::Completed));
            if !looping.is_finished() {
                served_while_looping += 1;
            }
        }
        (served_while_looping, looping.await.expect("loop task"))
    });
    assert!(
        served_while_looping > 0,
        "the loop must yield its thread while it runs"
    );
    let error = looped.report.result.expect_err("the loop is stopped");
    assert_eq!(error.kind, ErrorKind::Failed);
    assert_eq!(error.error_type, "Timeout", "{error}");
}

/// Runs `test` on a current-thread runtime with its timer, failing it
/// rather than hanging if it has not finished in two minutes.
fn on_one_thread<T>(test: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(120), test)
                .await
                .expect("the test finishes within two minutes")
        })
}

#[test]
fn an_async_handler_asleep_in_a_wasi_call_is_stopped_at_its_deadline() {
    // No guest code runs while it waits, so no epoch check can stop it;
    // only the host's cut-off of the wait does.
    let sandbox = sandbox();
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let sleeper = load(&sandbox, "endless-loop", limits);
    let invocation = on_one_thread(sleeper.invoke_async(event("Sleep", "{}")));
    let error = invocation.report.result.expect_err("the sleep is cut off");
    assert_eq!(error.kind, ErrorKind::Failed);
    assert_eq!(error.error_type, "Timeout", "{error}");
    assert!(
        invocation
            .logs
            .iter()
            .any(|r| r.message.contains("endless-loop: going to sleep")),
        "{:?}",
        invocation.logs
    );
}

#[test]
fn an_async_handler_dropped_mid_run_gives_its_instance_slot_back() {
    // A pool of one: if cancelling the loop's call leaked its instance (or
    // its fiber stack), the next event would be `SandboxBusy`.
    let entered = loop_entered("dropped-loop");
    let sandbox = support::sandbox_with(None, |config| config.max_concurrent_instances = 1);
    let endless = load_endless_loop(&sandbox);
    let noop = load(&sandbox, "noop", Limits::default());
    let served = on_one_thread(async {
        let looping = tokio::spawn({
            let endless = Arc::clone(&endless);
            async move { endless.invoke_async(loop_event("dropped-loop")).await }
        });
        while entered.try_recv().is_err() {
            tokio::task::yield_now().await;
        }
        looping.abort();
        assert!(looping.await.is_err_and(|e| e.is_cancelled()));
        noop.invoke_async(event("Noop", "{}")).await
    });
    assert_eq!(served.report.result, Ok(Outcome::Completed));
}

#[test]
fn when_every_instance_slot_is_busy_the_event_is_transient_sandbox_busy() {
    // A pool of one: while the endless loop holds the only slot, another
    // event cannot get an instance. That is not the handler's fault, so it
    // is `transient` (redeliver), not `failed`.
    let entered = loop_entered("busy-loop");
    let sandbox = support::sandbox_with(None, |config| config.max_concurrent_instances = 1);
    let endless = load_endless_loop(&sandbox);
    let noop = load(&sandbox, "noop", Limits::default());
    let looping = {
        let endless = Arc::clone(&endless);
        std::thread::spawn(move || endless.invoke(loop_event("busy-loop")))
    };
    entered
        .recv_timeout(Duration::from_secs(120))
        .expect("the endless loop starts");
    let busy = noop.invoke(event("Noop", "{}"));
    let looped = looping.join().expect("loop thread");
    assert_eq!(
        looped.report.result.expect_err("stopped").error_type,
        "Timeout"
    );
    let error = busy.report.result.expect_err("no slot while the loop runs");
    assert_eq!(error.kind, ErrorKind::Transient, "{error}");
    assert_eq!(error.error_type, "SandboxBusy", "{error}");
    // The slot is free again once the loop is stopped.
    assert_eq!(
        noop.invoke(event("Noop", "{}")).report.result,
        Ok(Outcome::Completed)
    );
}
