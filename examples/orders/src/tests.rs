//! The decision, run natively through the SDK's test host.
#![allow(clippy::unwrap_used, reason = "tests")]

use nimbus_guest::testing::{TestEvent, TestHost};
use nimbus_guest::{ErrorKind, Level, Outcome};

use super::Orders;

const ORDER: &str = r#"{"OrderId":"o-1001","Customer":"acme","Total":150.0,"Lines":[{"Sku":"A-1","Quantity":2,"UnitPrice":50.0},{"Sku":"B-7","Quantity":1,"UnitPrice":50.0}]}"#;

fn order(payload: &str) -> TestEvent {
    TestEvent::new("OrderPlaced", payload)
}

#[test]
fn a_valid_order_completes_and_is_logged_with_its_fields() {
    let run = TestHost::new().handle(&Orders, order(ORDER));
    assert_eq!(run.result, Ok(Outcome::Completed));
    assert_eq!(run.logs.len(), 1);
    assert_eq!(run.logs[0].level, Level::Info);
    assert_eq!(run.logs[0].message, "order o-1001 accepted");
    assert!(
        run.logs[0]
            .fields
            .contains(&("lines".to_owned(), "2".to_owned()))
    );
}

#[test]
fn the_fail_flag_and_the_fail_customer_are_rejected_as_failed() {
    for payload in [
        ORDER.replace("\"Lines\"", "\"Fail\":true,\"Lines\""),
        ORDER.replace("acme", "fail"),
    ] {
        let err = TestHost::new()
            .handle(&Orders, order(&payload))
            .result
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Failed);
        assert_eq!(err.error_type(), "OrderRejected");
        assert!(err.message().contains("o-1001"), "{}", err.message());
    }
}

#[test]
fn a_total_over_the_configured_limit_is_rejected() {
    let host = TestHost::new().config("reject_over_total", "100");
    let err = host.handle(&Orders, order(ORDER)).result.unwrap_err();
    assert_eq!(err.error_type(), "OrderRejected");
    assert!(
        err.message().contains("over reject_over_total 100"),
        "{}",
        err.message()
    );

    let host = TestHost::new().config("reject_over_total", "1000");
    assert_eq!(
        host.handle(&Orders, order(ORDER)).result,
        Ok(Outcome::Completed)
    );
}

#[test]
fn an_unparsable_limit_is_an_invalid_config_failure() {
    let host = TestHost::new().config("reject_over_total", "lots");
    let err = host.handle(&Orders, order(ORDER)).result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.error_type(), "InvalidConfig");
}

#[test]
fn an_order_without_lines_is_permanent() {
    let payload = r#"{"OrderId":"o-1","Customer":"acme","Total":0.0,"Lines":[]}"#;
    let err = TestHost::new()
        .handle(&Orders, order(payload))
        .result
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert_eq!(err.error_type(), "EmptyOrder");
}

#[test]
fn a_malformed_line_is_permanent_and_names_the_field() {
    let payload = ORDER.replace("\"Quantity\":1", "\"Quantity\":-1");
    let err = TestHost::new()
        .handle(&Orders, order(&payload))
        .result
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert_eq!(err.error_type(), "InvalidPayload");
    assert!(
        err.message().contains("`Lines[1].Quantity`"),
        "{}",
        err.message()
    );
}
