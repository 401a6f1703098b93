//! Routing follows the handlers directory while the host runs: a handler
//! dropped in for a new event type (in a new endpoint) gets its topology
//! provisioned and receives that type's events; removing it stops the
//! forwarding.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod support;

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
    let broker = host.broker().clone();

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
