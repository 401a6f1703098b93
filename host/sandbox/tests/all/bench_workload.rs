//! The dispatch benchmark's wasm workload, `tests/guests/order-decision`,
//! really does the deserialize-and-decide work it is measured for: through
//! the real sandbox it reaches `examples/orders`' decision on every kind of
//! payload, and it writes no log line (unlike `orders`). A guest that skipped
//! the work would complete all of these and fail here.

use crate::support;

use std::collections::BTreeMap;

use nimbus_handler::{ErrorKind, Outcome};
use nimbus_sandbox::{HandlerVersion, Invocation, Limits};
use support::{event, guest, sandbox};

const ORDER: &str = r#"{"OrderId":"o-7","Customer":"acme","Total":150.0,"Lines":[{"Sku":"A-1","Quantity":2,"UnitPrice":50.0},{"Sku":"B-7","Quantity":1,"UnitPrice":50.0}]}"#;

fn load(crate_name: &str) -> HandlerVersion {
    let bytes = std::fs::read(guest(crate_name)).expect("read guest");
    sandbox()
        .load_bytes(crate_name, &bytes, Limits::default(), BTreeMap::new())
        .expect("guest loads")
}

/// The result as `(kind, error type)`, `None` for completed.
fn decision(invocation: &Invocation) -> Option<(ErrorKind, String)> {
    match &invocation.report.result {
        Ok(outcome) => {
            assert_eq!(outcome, &Outcome::Completed);
            None
        }
        Err(error) => Some((error.kind, error.error_type.clone())),
    }
}

#[test]
fn order_decision_decides_every_payload_as_the_orders_example_does() {
    let benched = load("order-decision");
    let example = load("orders");
    let payloads = [
        (ORDER.to_owned(), None),
        (
            ORDER.replace("\"Lines\"", "\"Fail\":true,\"Lines\""),
            Some((ErrorKind::Failed, "OrderRejected")),
        ),
        (
            ORDER.replace("acme", "fail"),
            Some((ErrorKind::Failed, "OrderRejected")),
        ),
        (
            r#"{"OrderId":"o-8","Customer":"acme","Total":0,"Lines":[]}"#.to_owned(),
            Some((ErrorKind::Permanent, "EmptyOrder")),
        ),
        (
            ORDER.replace("\"Quantity\":2", "\"Quantity\":\"two\""),
            Some((ErrorKind::Permanent, "InvalidPayload")),
        ),
    ];
    for (payload, expected) in payloads {
        let expected = expected.map(|(kind, error_type)| (kind, error_type.to_owned()));
        let ran = benched.invoke(event("OrderPlaced", &payload));
        assert_eq!(decision(&ran), expected, "order-decision on {payload}");
        assert_eq!(
            decision(&example.invoke(event("OrderPlaced", &payload))),
            expected,
            "orders on {payload}"
        );
        assert!(ran.logs.is_empty(), "no log line expected: {:?}", ran.logs);
    }
    let rejected = benched.invoke(event(
        "OrderPlaced",
        &ORDER.replace("\"Lines\"", "\"Fail\":true,\"Lines\""),
    ));
    let message = rejected.report.result.expect_err("rejected").message;
    assert_eq!(message, "order o-7 rejected: the payload asked to fail");
}

#[test]
fn the_orders_example_logs_each_accepted_order() {
    let logged = load("orders").invoke(event("OrderPlaced", ORDER));
    assert_eq!(logged.logs.len(), 1, "{:?}", logged.logs);
    assert_eq!(logged.logs[0].message, "order o-7 accepted");
}
