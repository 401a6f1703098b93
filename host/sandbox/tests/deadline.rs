//! An endless loop is stopped by its deadline while other handlers keep
//! serving on other threads.
//!
//! The test learns that the loop is running from the handler's own log line
//! ("entering the loop"), which the sandbox emits to `tracing` as it is
//! written; a tiny subscriber turns it into a signal. No sleeping.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nimbus_sandbox::{ErrorKind, Limits, Outcome};
use support::{event, guest, sandbox};

/// Sends every event's `message` field that contains `needle` to a channel.
struct Signal {
    needle: &'static str,
    sender: Mutex<mpsc::Sender<()>>,
    next_id: AtomicU64,
}

struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Signal {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut visitor = MessageVisitor(String::new());
        event.record(&mut visitor);
        if visitor.0.contains(self.needle) {
            let _ = self.sender.lock().expect("lock").send(());
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn an_endless_loop_is_stopped_by_its_deadline_while_other_handlers_keep_serving() {
    let (sender, entered) = mpsc::channel();
    tracing::subscriber::set_global_default(Signal {
        needle: "endless-loop: entering the loop",
        sender: Mutex::new(sender),
        next_id: AtomicU64::new(0),
    })
    .expect("first subscriber");

    let sandbox = sandbox();
    let load = |name: &str, limits: Limits| {
        let bytes = std::fs::read(guest(name)).expect("read guest");
        Arc::new(
            sandbox
                .load_bytes(name, &bytes, limits, BTreeMap::new())
                .expect("loads"),
        )
    };
    // Generous: the other handlers' calls must fit well inside it even on a
    // loaded CI machine. Only the error type is asserted, never a duration.
    let endless = load(
        "endless-loop",
        Limits {
            timeout: Duration::from_secs(3),
            ..Limits::default()
        },
    );
    let noop = load("noop", Limits::default());
    let orders = load("orders", Limits::default());

    let loop_finished = Arc::new(AtomicBool::new(false));
    let looping = {
        let endless = Arc::clone(&endless);
        let loop_finished = Arc::clone(&loop_finished);
        std::thread::spawn(move || {
            let invocation = endless.invoke(event("Loop", "{}"));
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
            noop.invoke(event("Noop", "{}")).result,
            Ok(Outcome::Completed)
        );
        assert_eq!(
            orders.invoke(event("OrderPlaced", order)).result,
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
    let error = invocation.result.expect_err("the loop is stopped");
    assert_eq!(error.kind, ErrorKind::Failed);
    assert_eq!(error.detail.error_type, "Timeout", "{error}");
}
