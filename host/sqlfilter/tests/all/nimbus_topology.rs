//! The filters and actions NimBus's topology provisions (reference §2.3),
//! verbatim, against the messages that flow through it.

#![allow(clippy::unwrap_used, reason = "tests")]

use nimbus_sqlfilter::{PropertyBag, SqlFilter, SqlRuleAction, Value};

fn msg(user: &[(&str, &str)]) -> PropertyBag {
    let mut bag = PropertyBag::new();
    for (name, value) in user {
        bag.insert_user(*name, *value);
    }
    bag
}

fn filter(text: &str) -> SqlFilter {
    let f = SqlFilter::parse(text).unwrap_or_else(|e| panic!("`{text}` should parse: {e}"));
    assert_eq!(
        f.text(),
        text,
        "the exact text is kept for provisioning to compare"
    );
    f
}

#[test]
fn endpoint_inbox_rule_matches_its_own_name_only() {
    let f = filter("user.To = 'billing'");
    assert!(f.evaluate(&msg(&[("To", "billing")])).unwrap());
    assert!(!f.evaluate(&msg(&[("To", "shipping")])).unwrap());
    assert!(!f.evaluate(&msg(&[("To", "Billing")])).unwrap());
    assert!(!f.evaluate(&msg(&[])).unwrap());
}

#[test]
fn forwarding_rule_matches_original_publishes_of_its_event_type_only() {
    let f = filter("user.EventTypeId = 'OrderPlaced' AND user.From IS NULL");
    assert!(
        f.evaluate(&msg(&[
            ("EventTypeId", "OrderPlaced"),
            ("To", "OrderPlaced")
        ]))
        .unwrap()
    );
    assert!(
        !f.evaluate(&msg(&[
            ("EventTypeId", "OrderPlaced"),
            ("From", "storefront")
        ]))
        .unwrap(),
        "a forwarded copy carries From, which stops forwarding loops"
    );
    assert!(
        !f.evaluate(&msg(&[("EventTypeId", "OrderShipped")]))
            .unwrap()
    );
}

#[test]
fn unqualified_forwarding_filter_means_the_same() {
    let f = filter("MessageType = 'EventRequest' AND From IS NULL");
    assert!(
        f.evaluate(&msg(&[("MessageType", "EventRequest")]))
            .unwrap()
    );
    assert!(
        !f.evaluate(&msg(&[("MessageType", "EventRequest"), ("From", "x")]))
            .unwrap()
    );
    assert!(
        !f.evaluate(&msg(&[("MessageType", "ResolutionResponse")]))
            .unwrap()
    );
    assert_eq!(
        f.canonical(),
        "user.MessageType = 'EventRequest' AND user.From IS NULL"
    );
}

#[test]
fn deferred_rule_needs_the_original_session() {
    let f = filter("user.To = 'Deferred' AND user.OriginalSessionId IS NOT NULL");
    assert!(
        f.evaluate(&msg(&[
            ("To", "Deferred"),
            ("OriginalSessionId", "order-7")
        ]))
        .unwrap()
    );
    assert!(!f.evaluate(&msg(&[("To", "Deferred")])).unwrap());
    assert!(
        !f.evaluate(&msg(&[("To", "billing"), ("OriginalSessionId", "order-7")]))
            .unwrap()
    );
}

#[test]
fn forwarding_action_stamps_from_a_fresh_event_id_and_the_consumer() {
    let action = SqlRuleAction::parse(
        "SET user.From = 'storefront'; SET user.EventId = newid(); SET user.To = 'billing';",
    )
    .expect("parses");
    let mut first = msg(&[
        ("EventTypeId", "OrderPlaced"),
        ("To", "OrderPlaced"),
        ("EventId", "original"),
    ]);
    let mut second = first.clone();
    action.apply(&mut first).unwrap();
    action.apply(&mut second).unwrap();
    assert_eq!(first.user_value("From"), Some(&Value::from("storefront")));
    assert_eq!(first.user_value("To"), Some(&Value::from("billing")));
    assert_eq!(
        first.user_value("EventTypeId"),
        Some(&Value::from("OrderPlaced"))
    );
    let id1 = first
        .user_value("EventId")
        .and_then(Value::as_str)
        .unwrap()
        .to_owned();
    let id2 = second
        .user_value("EventId")
        .and_then(Value::as_str)
        .unwrap()
        .to_owned();
    assert_ne!(id1, "original");
    assert_ne!(id1, id2, "every consumer's copy gets its own EventId");
    // The forwarded copy no longer matches the forwarding rule: no loop.
    let forwarding = filter("user.EventTypeId = 'OrderPlaced' AND user.From IS NULL");
    assert!(!forwarding.evaluate(&first).unwrap());
    // It does match the consumer's inbox rule.
    assert!(filter("user.To = 'billing'").evaluate(&first).unwrap());
}

#[test]
fn retry_action_readdresses_to_the_endpoint() {
    let retry = filter("user.To = 'Retry'");
    let action = SqlRuleAction::parse("SET user.To = 'billing'; SET user.From = 'Retry'").unwrap();
    let mut m = msg(&[("To", "Retry")]);
    assert!(retry.evaluate(&m).unwrap());
    action.apply(&mut m).unwrap();
    assert_eq!(m.user_value("To"), Some(&Value::from("billing")));
    assert_eq!(m.user_value("From"), Some(&Value::from("Retry")));
    assert!(!retry.evaluate(&m).unwrap());
}

#[test]
fn topology_filters_are_already_canonical_where_upstream_writes_them_so() {
    for text in [
        "user.To = 'billing'",
        "user.EventTypeId = 'OrderPlaced' AND user.From IS NULL",
        "user.To = 'Deferred' AND user.OriginalSessionId IS NOT NULL",
    ] {
        assert_eq!(filter(text).canonical(), text);
    }
}
