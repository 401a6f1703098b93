//! Routing follows the handlers directory while the host runs: a handler
//! dropped in for a new event type (in a new endpoint) gets its topology
//! provisioned and receives that type's events; removing it stops the
//! forwarding.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use crate::support;

use nimbus_resolver::Status;
use nimbus_runtime::DEFAULT_PRODUCER;
use nimbus_transport::{Admin, SubscriptionPath};
use support::{eventually, install, publish, start_host, wait_status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_dropped_in_for_a_new_event_type_is_routed_its_events_while_the_host_runs() {
    let root = tempfile::tempdir().unwrap();
    let handlers = root.path().join("handlers");
    install(&handlers, "billing", "orders", "orders");
    let host = start_host(root.path(), 10).await;
    let broker = host.broker().unwrap().clone();

    // No endpoint consumes `Noop` yet: nothing forwards it.
    let forwarder = SubscriptionPath::new(DEFAULT_PRODUCER, "shipping");
    assert!(broker.get_subscription(&forwarder).await.unwrap().is_none());

    install(&handlers, "shipping", "noop", "noop");
    eventually("the new endpoint's forwarder is provisioned", || {
        futures_lite_poll(broker.get_subscription(&forwarder))
    })
    .await;
    // Created with its rule in one step: the moment the forwarder exists it
    // forwards `Noop`, so nothing published from now on is dropped.
    assert!(forwards(&broker, &forwarder, "Noop"));

    publish(&broker, "Noop", "s-1", "noop-1", &serde_json::json!({})).await;
    let record = wait_status(
        &**host.resolver(),
        "shipping",
        "s-1",
        "noop-1",
        Status::Completed,
    )
    .await;
    assert!(
        record.handler_version.is_some(),
        "the version that ran is recorded"
    );

    // Removing the handler prunes the forwarding rule for its type.
    std::fs::remove_file(handlers.join("shipping").join("noop.wasm")).unwrap();
    eventually("the forwarding for the removed type is pruned", || {
        !futures_lite_poll(broker.get_subscription(&forwarder))
    })
    .await;
    host.shutdown().await;
}

/// Whether `path` has a rule whose filter names `event_type`, answered
/// synchronously from within the polling closure.
fn forwards(broker: &nimbus_broker::Broker, path: &SubscriptionPath, event_type: &str) -> bool {
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current()
            .block_on(broker.list_rules(path))
            .map(|rules| rules.iter().any(|r| r.filter.contains(event_type)))
            .unwrap_or(false)
    })
}

/// Whether the subscription exists, answered synchronously from within the
/// polling closure (the embedded broker answers admin reads without I/O).
fn futures_lite_poll<F>(future: F) -> bool
where
    F: std::future::Future<
            Output = Result<
                Option<nimbus_transport::SubscriptionDescription>,
                nimbus_transport::AdminError,
            >,
        >,
{
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current()
            .block_on(future)
            .unwrap()
            .is_some()
    })
}

/// A handler that does not load when the host starts (a broken deploy, no
/// earlier version to keep serving) must not make the broker drop its
/// events: its endpoint's forwarding stays as the last run provisioned it,
/// the events wait in the endpoint's queue, and the fixed handler runs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_for_a_handler_that_does_not_load_at_start_up_wait_until_it_is_fixed() {
    let root = tempfile::tempdir().unwrap();
    let handlers = root.path().join("handlers");
    let component = install(&handlers, "shipping", "noop", "noop");
    let host = start_host(root.path(), 10).await;
    publish(
        &host.broker().unwrap().clone(),
        "Noop",
        "s-1",
        "before",
        &serde_json::json!({}),
    )
    .await;
    wait_status(
        &**host.resolver(),
        "shipping",
        "s-1",
        "before",
        Status::Completed,
    )
    .await;
    host.shutdown().await;

    std::fs::write(&component, b"not a component").unwrap();
    let host = start_host(root.path(), 10).await;
    let broker = host.broker().unwrap().clone();
    let status = host.registry().snapshot();
    let broken = status.handlers().next().expect("the handler is listed");
    assert!(
        broken.serving.is_none() && broken.last_error.is_some(),
        "{broken:?}"
    );
    let forwarder = SubscriptionPath::new(DEFAULT_PRODUCER, "shipping");
    assert!(
        forwards(&broker, &forwarder, "Noop"),
        "the forwarding of an endpoint whose handler does not load is pruned"
    );
    publish(
        &broker,
        "Noop",
        "s-1",
        "while-broken",
        &serde_json::json!({}),
    )
    .await;

    install(&handlers, "shipping", "noop", "noop");
    wait_status(
        &**host.resolver(),
        "shipping",
        "s-1",
        "while-broken",
        Status::Completed,
    )
    .await;
    host.shutdown().await;
}
