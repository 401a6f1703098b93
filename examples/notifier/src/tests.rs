//! The follow-up, run natively through the SDK's test host.
#![allow(clippy::unwrap_used, reason = "tests")]

use nimbus_guest::testing::{Refusal, TestEvent, TestHost};
use nimbus_guest::{ErrorKind, Outcome};

use super::Notifier;

const SHIPPED: &str =
    r#"{"OrderId":"o-1001","Customer":"acme","Carrier":"DHL","TrackingNumber":"JD0001"}"#;

#[test]
fn a_shipped_order_publishes_one_notification_with_a_derived_message_id() {
    let event = TestEvent::new("OrderShipped", SHIPPED).event_id("ev-3");
    let run = TestHost::new().handle(&Notifier, event);
    assert_eq!(run.result, Ok(Outcome::Completed));
    assert_eq!(run.follow_ups.len(), 1);
    let notice = &run.follow_ups[0];
    assert_eq!(notice.event_type, "CustomerNotified");
    assert_eq!(notice.message_id, "ev-3:customer-notified");
    assert_eq!(notice.session_id, None);
    assert_eq!(
        notice.payload,
        r#"{"OrderId":"o-1001","Customer":"acme","Channel":"email","Text":"Your order o-1001 is on its way with DHL (tracking JD0001)."}"#
    );
}

#[test]
fn the_channel_comes_from_config() {
    let run = TestHost::new()
        .config("channel", "sms")
        .handle(&Notifier, TestEvent::new("OrderShipped", SHIPPED));
    assert!(run.follow_ups[0].payload.contains(r#""Channel":"sms""#));
}

#[test]
fn a_refused_notification_fails_the_event() {
    let run = TestHost::new()
        .refuse_publish(Refusal::LimitExceeded("at most 0 follow-ups".to_owned()))
        .handle(&Notifier, TestEvent::new("OrderShipped", SHIPPED));
    let err = run.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.error_type(), "PublishRejected");
    assert!(err.message().contains("at most 0 follow-ups"));
}
