//! NimBus topology provisioning (`nimbus_wire::topology`) on the real
//! embedded broker in a temporary directory: the layout it creates, zero
//! churn, pruning, and end-to-end routing through the created rules
//! (scenarios EF-02, EF-04, EF-05).
//!
//! Routing is synchronous in the broker (a publish places every copy,
//! forwarded ones included, before it returns), so "nothing arrived" is
//! checked after the publish has returned and cannot pass by being early.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions, Durability, ManualClock};
use nimbus_transport::{
    Admin, ErrorKind, Message, PropertyValue, ReceivedMessage, Receiver, RuleDescription,
    SessionLock, SessionSelector, SubQueue, SubscriptionPath, SubscriptionSettings, Transport,
};
use nimbus_wire::topology::{
    Endpoint, Mutation, ProvisionError, Requirement, Topology, TopologyError, forwarding_rule,
    provision, prune, requirements,
};

/// Bounds only a failing wait: receives return as soon as a message is there.
const ARRIVES: Duration = Duration::from_secs(10);
/// Used only to assert absence, after the publish that would have placed
/// the message has returned.
const ABSENT: Duration = Duration::from_millis(50);

struct Fixture {
    broker: Broker,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

async fn broker() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::at_fixed_start();
    let broker = Broker::open(
        BrokerOptions::new(dir.path())
            .durability(Durability::Os)
            .clock(std::sync::Arc::new(clock.clone())),
    )
    .await
    .expect("open broker");
    Fixture {
        broker,
        clock,
        _dir: dir,
    }
}

/// orders consumes its own follow-up `OrderPaid`; billing and shipping
/// both consume `OrderPlaced`.
fn shop() -> Topology {
    Topology::new()
        .endpoint(Endpoint::new("orders").consumes(["OrderPaid"]))
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]))
        .endpoint(Endpoint::new("shipping").consumes(["OrderPlaced", "OrderPaid"]))
}

fn path(topic: &str, subscription: &str) -> SubscriptionPath {
    SubscriptionPath::new(topic, subscription)
}

fn rule(name: &str, filter: &str, action: Option<&str>) -> RuleDescription {
    let rule = RuleDescription::new(name, filter);
    match action {
        Some(action) => rule.with_action(action),
        None => rule,
    }
}

fn prop<'a>(m: &'a ReceivedMessage, name: &str) -> Option<&'a str> {
    m.message.property_str(name)
}

/// A NimBus message with these user properties, on session `s1`.
fn nimbus_message(props: &[(&str, &str)]) -> Message {
    let mut m = Message::new(b"{}".to_vec());
    m.session_id = Some("s1".to_owned());
    for (k, v) in props {
        m.properties
            .insert((*k).to_owned(), PropertyValue::String((*v).to_owned()));
    }
    m
}

/// An original publish of `event_type`: To = event type, no From.
fn original_event(event_type: &str, event_id: &str) -> Message {
    nimbus_message(&[
        ("To", event_type),
        ("EventTypeId", event_type),
        ("MessageType", "EventRequest"),
        ("EventId", event_id),
    ])
}

/// Everything in a session subscription, completed.
async fn drain_sessions(broker: &Broker, p: &SubscriptionPath) -> Vec<ReceivedMessage> {
    let mut all = Vec::new();
    loop {
        let lock = match broker
            .accept_session(p, SessionSelector::NextAvailable, ABSENT)
            .await
        {
            Ok(lock) => lock,
            Err(e) if e.kind() == ErrorKind::NoSessionAvailable => return all,
            Err(e) => panic!("accept session on {p}: {e}"),
        };
        while let Some(m) = lock.receive(ABSENT).await.expect("receive") {
            all.push(m.clone());
            lock.complete(m).await.expect("complete");
        }
        lock.close().await;
    }
}

/// Everything in a non-session subscription, completed.
async fn drain_queue(broker: &Broker, p: &SubscriptionPath) -> Vec<ReceivedMessage> {
    let receiver = broker.receiver(p, SubQueue::Main).await.expect("receiver");
    let mut all = Vec::new();
    while let Some(m) = receiver.receive(ABSENT).await.expect("receive") {
        all.push(m.clone());
        receiver.complete(m).await.expect("complete");
    }
    all
}

/// Drains every subscription of every endpoint topic and the Resolver,
/// returning how many messages each held (empty ones left out).
async fn census(broker: &Broker) -> Vec<(String, usize)> {
    let mut counts = Vec::new();
    for topic in broker.list_topics().await.expect("topics") {
        for sub in broker
            .list_subscriptions(&topic.name)
            .await
            .expect("subscriptions")
        {
            let p = path(&topic.name, &sub.name);
            let n = if sub.settings.requires_session {
                drain_sessions(broker, &p).await.len()
            } else if sub.settings.forward_to.is_none() {
                drain_queue(broker, &p).await.len()
            } else {
                continue;
            };
            if n > 0 {
                counts.push((p.to_string(), n));
            }
        }
    }
    counts
}

#[tokio::test]
async fn full_topology_for_three_endpoints() {
    let f = broker().await;
    let b = &f.broker;
    let report = provision(b, &shop()).await.expect("provision");
    assert!(report.drift.is_empty(), "{:?}", report.drift);

    let topics: BTreeSet<String> = b
        .list_topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(
        topics,
        ["Resolver", "billing", "orders", "shipping"]
            .map(String::from)
            .into()
    );

    // The Resolver keeps `$Default`.
    let resolver = b
        .get_subscription(&path("Resolver", "Resolver"))
        .await
        .unwrap()
        .unwrap();
    assert!(resolver.settings.requires_session);
    assert_eq!(
        b.list_rules(&path("Resolver", "Resolver")).await.unwrap(),
        [rule("$Default", "1=1", None)]
    );

    for e in ["orders", "billing", "shipping"] {
        let inbox = b.get_subscription(&path(e, e)).await.unwrap().unwrap();
        assert!(inbox.settings.requires_session);
        assert_eq!(inbox.settings.forward_to, None);
        assert_eq!(inbox.settings.lock_duration, Duration::from_secs(30));
        assert_eq!(inbox.settings.max_delivery_count, 10);
        assert_eq!(
            b.list_rules(&path(e, e)).await.unwrap(),
            [
                rule(&format!("to-{e}"), &format!("user.To = '{e}'"), None),
                rule(
                    "retry",
                    "user.To = 'Retry'",
                    Some(&format!("SET user.To = '{e}'; SET user.From = 'Retry'"))
                ),
                rule(
                    "continuation",
                    "user.To = 'Continuation'",
                    Some(&format!(
                        "SET user.To = '{e}'; SET user.From = 'Continuation'"
                    ))
                ),
            ]
        );

        let fan = b
            .get_subscription(&path(e, "Resolver"))
            .await
            .unwrap()
            .unwrap();
        assert!(!fan.settings.requires_session);
        assert_eq!(fan.settings.forward_to.as_deref(), Some("Resolver"));
        assert_eq!(
            b.list_rules(&path(e, "Resolver")).await.unwrap(),
            [
                rule(
                    &format!("from-{e}"),
                    "user.To = 'Resolver'",
                    Some(&format!("SET user.From = '{e}'"))
                ),
                rule(&format!("to-{e}"), &format!("user.To = '{e}'"), None),
            ]
        );

        // Parked messages never expire silently (F9).
        let deferred = b
            .get_subscription(&path(e, "Deferred"))
            .await
            .unwrap()
            .unwrap();
        assert!(deferred.settings.requires_session);
        assert_eq!(deferred.settings.default_message_ttl, None);
        assert!(deferred.settings.dead_letter_on_expiry);
        assert_eq!(
            b.list_rules(&path(e, "Deferred")).await.unwrap(),
            [rule(
                "DeferredFilter",
                "user.To = 'Deferred' AND user.OriginalSessionId IS NOT NULL",
                None
            )]
        );

        let processor = b
            .get_subscription(&path(e, "DeferredProcessor"))
            .await
            .unwrap()
            .unwrap();
        assert!(!processor.settings.requires_session);
        assert_eq!(
            b.list_rules(&path(e, "DeferredProcessor")).await.unwrap(),
            [rule(
                "DeferredProcessorFilter",
                "user.To = 'DeferredProcessor'",
                None
            )]
        );
    }

    // Forwarders: on every endpoint topic, one per consumer, the consumer's
    // own topic included under `fwd-`.
    for producer in ["orders", "billing", "shipping"] {
        let names: BTreeSet<String> = b
            .list_subscriptions(producer)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        let mut expected: BTreeSet<String> =
            [producer, "Resolver", "Deferred", "DeferredProcessor"]
                .map(String::from)
                .into();
        for consumer in ["orders", "billing", "shipping"] {
            let name = if consumer == producer {
                format!("fwd-{consumer}")
            } else {
                consumer.to_owned()
            };
            let p = path(producer, &name);
            let sub = b.get_subscription(&p).await.unwrap().unwrap();
            assert!(!sub.settings.requires_session, "{p}");
            assert_eq!(sub.settings.forward_to.as_deref(), Some(consumer), "{p}");
            let consumes: &[&str] = match consumer {
                "orders" => &["OrderPaid"],
                "billing" => &["OrderPlaced"],
                _ => &["OrderPaid", "OrderPlaced"],
            };
            let rules: Vec<RuleDescription> = consumes
                .iter()
                .map(|et| forwarding_rule(producer, consumer, et))
                .collect();
            assert_eq!(b.list_rules(&p).await.unwrap(), rules, "{p}");
            expected.insert(name);
        }
        assert_eq!(names, expected, "subscriptions of {producer}");
    }

    // 4 topics; 1 + 3*4 endpoint subscriptions + 9 forwarders, each
    // created with its rules in one step (no `$Default` to delete after).
    let count = |pred: fn(&Mutation) -> bool| report.mutations.iter().filter(|m| pred(m)).count();
    assert_eq!(count(|m| matches!(m, Mutation::TopicCreated { .. })), 4);
    assert_eq!(
        count(|m| matches!(m, Mutation::SubscriptionCreated { .. })),
        22
    );
    assert_eq!(report.mutations.len(), 4 + 22, "{:?}", report.mutations);
}

/// A transport that cannot create entities checks each one
/// `requirements` lists: it must list exactly what `provision` makes, each
/// subscription with the settings and rules it was made with.
#[tokio::test]
async fn requirements_list_exactly_what_provision_makes() {
    let f = broker().await;
    let topology = shop()
        .producer_topic("publisher")
        .lock_duration(Duration::from_secs(20));
    provision(&f.broker, &topology).await.unwrap();
    let needed = requirements(&topology).unwrap();

    let mut topics = BTreeSet::new();
    let mut subscriptions = BTreeSet::new();
    for requirement in &needed {
        match requirement {
            Requirement::Topic { name } => {
                assert!(f.broker.get_topic(name).await.unwrap().is_some(), "{name}");
                topics.insert(name.clone());
            }
            Requirement::Subscription {
                path,
                settings,
                rules,
            } => {
                let made = f.broker.get_subscription(path).await.unwrap().unwrap();
                assert_eq!(&made.settings, settings, "{path}");
                assert_eq!(&f.broker.list_rules(path).await.unwrap(), rules, "{path}");
                subscriptions.insert(path.to_string());
            }
            other => panic!("unexpected requirement {other:?}"),
        }
    }
    let made_topics: BTreeSet<String> = f
        .broker
        .list_topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(topics, made_topics);
    let mut made_subscriptions = BTreeSet::new();
    for topic in &made_topics {
        for subscription in f.broker.list_subscriptions(topic).await.unwrap() {
            made_subscriptions.insert(path(topic, &subscription.name).to_string());
        }
    }
    assert_eq!(subscriptions, made_subscriptions);
    let shown = needed
        .iter()
        .map(ToString::to_string)
        .find(|line| line.starts_with("subscription orders/orders"))
        .unwrap();
    assert!(
        shown.contains("requires sessions")
            && shown.contains("lock duration 20s")
            && shown.contains("[retry: user.To = 'Retry' / SET user.To = 'orders'"),
        "{shown}"
    );
}

#[tokio::test]
async fn applying_twice_makes_no_mutations() {
    let f = broker().await;
    let first = provision(&f.broker, &shop()).await.expect("first");
    assert!(!first.is_unchanged());
    let second = provision(&f.broker, &shop()).await.expect("second");
    assert_eq!(second.mutations, []);
    assert_eq!(second.drift, []);
}

#[tokio::test]
async fn adding_an_event_type_adds_only_its_rules() {
    let f = broker().await;
    let two = Topology::new()
        .endpoint(Endpoint::new("orders"))
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]));
    provision(&f.broker, &two).await.expect("provision");
    let more = Topology::new()
        .endpoint(Endpoint::new("orders"))
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced", "OrderCancelled"]))
        .producer_topic("shop");
    let report = provision(&f.broker, &more).await.expect("add type");
    // The new producer topic gets its topic and forwarder; each existing
    // forwarder to billing gets exactly the one new rule.
    assert_eq!(
        report.mutations,
        [
            Mutation::TopicCreated {
                topic: "shop".into()
            },
            Mutation::RuleCreated {
                path: path("orders", "billing"),
                rule: "OrderCancelled".into()
            },
            Mutation::RuleCreated {
                path: path("billing", "fwd-billing"),
                rule: "OrderCancelled".into()
            },
            Mutation::SubscriptionCreated {
                path: path("shop", "billing")
            },
        ]
    );
    assert_eq!(
        f.broker
            .list_rules(&path("shop", "billing"))
            .await
            .unwrap()
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["OrderCancelled", "OrderPlaced"]
    );
    // And without the new producer topic: one rule per existing forwarder.
    let f = broker().await;
    provision(&f.broker, &two).await.expect("provision");
    let one_more = Topology::new()
        .endpoint(Endpoint::new("orders"))
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced", "OrderCancelled"]));
    let report = provision(&f.broker, &one_more).await.expect("add type");
    assert_eq!(report.mutations.len(), 2, "{:?}", report.mutations);
    assert!(report.mutations.iter().all(|m| matches!(
        m,
        Mutation::RuleCreated { rule, .. } if rule == "OrderCancelled"
    )));
}

#[tokio::test]
async fn settings_come_from_the_description() {
    let f = broker().await;
    let topology = Topology::new()
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]))
        .lock_duration(Duration::from_secs(45))
        .max_delivery_count(4);
    provision(&f.broker, &topology).await.expect("provision");
    for sub in f.broker.list_subscriptions("billing").await.unwrap() {
        assert_eq!(
            sub.settings.lock_duration,
            Duration::from_secs(45),
            "{}",
            sub.name
        );
        assert_eq!(sub.settings.max_delivery_count, 4, "{}", sub.name);
    }
    // Changing them later is reported as drift, never applied: the only
    // way would be to re-create the subscriptions and lose their messages.
    let report = provision(&f.broker, &topology.clone().max_delivery_count(10))
        .await
        .expect("again");
    assert!(report.is_unchanged());
    assert_eq!(report.drift.len(), 6, "{:?}", report.drift);
    assert!(
        report
            .drift
            .iter()
            .all(|d| d.setting == "max_delivery_count" && d.expected == "10" && d.actual == "4")
    );
}

#[tokio::test]
async fn original_event_fans_out_to_each_consumer_with_a_fresh_event_id() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    b.publish("orders", vec![original_event("OrderPlaced", "e-1")])
        .await
        .expect("publish");

    let mut event_ids = BTreeSet::new();
    for consumer in ["billing", "shipping"] {
        let got = drain_sessions(b, &path(consumer, consumer)).await;
        assert_eq!(got.len(), 1, "{consumer}: {got:?}");
        let m = &got[0];
        assert_eq!(prop(m, "From"), Some("orders"));
        assert_eq!(prop(m, "To"), Some(consumer));
        assert_eq!(prop(m, "EventTypeId"), Some("OrderPlaced"));
        assert_eq!(m.message.session_id.as_deref(), Some("s1"));
        let id = prop(m, "EventId").expect("EventId").to_owned();
        assert_ne!(id, "e-1");
        event_ids.insert(id);
    }
    assert_eq!(
        event_ids.len(),
        2,
        "each consumer's copy has its own EventId"
    );

    // Each consumer's Resolver forwarder copied its request to the Resolver
    // with the same EventId; orders does not consume OrderPlaced.
    let resolved = drain_sessions(b, &path("Resolver", "Resolver")).await;
    let seen: BTreeSet<(String, String)> = resolved
        .iter()
        .map(|m| {
            (
                prop(m, "To").unwrap().to_owned(),
                prop(m, "EventId").unwrap().to_owned(),
            )
        })
        .collect();
    let copies: BTreeSet<String> = seen.iter().map(|(_, id)| id.clone()).collect();
    assert_eq!(resolved.len(), 2);
    assert_eq!(copies, event_ids);
    assert_eq!(census(b).await, []);
}

#[tokio::test]
async fn an_endpoint_receives_its_own_follow_ups_it_consumes() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    b.publish("orders", vec![original_event("OrderPaid", "e-2")])
        .await
        .expect("publish");
    let own = drain_sessions(b, &path("orders", "orders")).await;
    assert_eq!(own.len(), 1);
    assert_eq!(prop(&own[0], "From"), Some("orders"));
    assert_eq!(prop(&own[0], "To"), Some("orders"));
    let shipping = drain_sessions(b, &path("shipping", "shipping")).await;
    assert_eq!(shipping.len(), 1);
    assert_eq!(prop(&shipping[0], "From"), Some("orders"));
    assert_eq!(
        census(b).await,
        [("Resolver/Resolver".to_owned(), 2)],
        "only the two Resolver copies remain"
    );
}

#[tokio::test]
async fn a_message_that_has_a_from_is_never_forwarded() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    // EF-04: republished deferred messages, Manager messages, probes all
    // carry a From; so does a forwarded copy arriving on its consumer topic.
    let mut with_from = original_event("OrderPlaced", "e-3");
    with_from
        .properties
        .insert("From".into(), PropertyValue::String("Manager".into()));
    // Not an EventRequest (e.g. a response of the same type): not forwarded.
    let mut response = original_event("OrderPlaced", "e-4");
    response.properties.insert(
        "MessageType".into(),
        PropertyValue::String("ResolutionResponse".into()),
    );
    b.publish("orders", vec![with_from, response])
        .await
        .expect("publish");
    assert_eq!(census(b).await, []);
}

#[tokio::test]
async fn resolver_bound_messages_are_stamped_with_their_endpoint() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    b.publish(
        "billing",
        vec![nimbus_message(&[
            ("To", "Resolver"),
            ("MessageType", "ResolutionResponse"),
            ("EventId", "e-5"),
        ])],
    )
    .await
    .expect("publish");
    let got = drain_sessions(b, &path("Resolver", "Resolver")).await;
    assert_eq!(got.len(), 1);
    assert_eq!(prop(&got[0], "From"), Some("billing"));
    assert_eq!(prop(&got[0], "EventId"), Some("e-5"));
    assert_eq!(census(b).await, []);
}

#[tokio::test]
async fn requests_to_an_endpoint_reach_it_and_the_resolver() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    let mut manager = nimbus_message(&[("To", "billing"), ("MessageType", "ResubmissionRequest")]);
    manager
        .properties
        .insert("From".into(), PropertyValue::String("Manager".into()));
    b.publish("billing", vec![manager]).await.expect("publish");
    let inbox = drain_sessions(b, &path("billing", "billing")).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(prop(&inbox[0], "From"), Some("Manager"));
    assert_eq!(
        census(b).await,
        [("Resolver/Resolver".to_owned(), 1)],
        "a copy for the Resolver"
    );
}

#[tokio::test]
async fn retries_and_continuations_are_rewritten_to_the_endpoint_only() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    for control in ["Retry", "Continuation"] {
        b.publish("billing", vec![nimbus_message(&[("To", control)])])
            .await
            .expect("publish");
        let got = drain_sessions(b, &path("billing", "billing")).await;
        assert_eq!(got.len(), 1, "{control}");
        assert_eq!(prop(&got[0], "To"), Some("billing"));
        assert_eq!(prop(&got[0], "From"), Some(control));
        // The rewritten copy exists only in the inbox: no Resolver copy.
        assert_eq!(census(b).await, [], "{control}");
    }
}

#[tokio::test]
async fn parked_and_replay_messages_land_only_in_their_subscriptions() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    let mut parked = nimbus_message(&[("To", "Deferred"), ("OriginalSessionId", "s1")]);
    parked.session_id = Some("s1".to_owned());
    let orphan = nimbus_message(&[("To", "Deferred")]);
    b.publish("billing", vec![parked, orphan])
        .await
        .expect("publish");
    let got = drain_sessions(b, &path("billing", "Deferred")).await;
    assert_eq!(got.len(), 1, "only the one with an OriginalSessionId");
    assert_eq!(prop(&got[0], "OriginalSessionId"), Some("s1"));
    assert_eq!(census(b).await, []);

    let mut trigger = Message::new(Vec::new());
    trigger.properties.insert(
        "To".into(),
        PropertyValue::String("DeferredProcessor".into()),
    );
    b.publish("billing", vec![trigger]).await.expect("publish");
    assert_eq!(
        census(b).await,
        [("billing/DeferredProcessor".to_owned(), 1)]
    );
}

#[tokio::test]
async fn a_parked_message_that_expires_is_dead_lettered_not_dropped() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    let mut parked = nimbus_message(&[("To", "Deferred"), ("OriginalSessionId", "s1")]);
    parked.time_to_live = Some(Duration::from_secs(60));
    b.publish("billing", vec![parked]).await.expect("publish");
    f.clock.advance(Duration::from_secs(120));
    let dlq = b
        .receiver(&path("billing", "Deferred"), SubQueue::DeadLetter)
        .await
        .expect("dlq");
    let dead = dlq
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("dead-lettered");
    assert_eq!(prop(&dead, "OriginalSessionId"), Some("s1"));
    assert!(dead.dead_letter_reason.is_some());
}

#[tokio::test]
async fn unknown_entities_are_left_alone_and_differing_rules_replaced() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");
    // An operator's tap subscription and extra rule: not ours to delete.
    b.create_subscription(&path("billing", "tap"), SubscriptionSettings::default())
        .await
        .unwrap();
    b.create_rule(
        &path("billing", "billing"),
        RuleDescription::new("custom", "user.X = 1"),
    )
    .await
    .unwrap();
    // A rule whose text drifted.
    b.delete_rule(&path("billing", "billing"), "to-billing")
        .await
        .unwrap();
    b.create_rule(
        &path("billing", "billing"),
        RuleDescription::new("to-billing", "user.To = 'Billing'"),
    )
    .await
    .unwrap();
    let report = provision(b, &shop()).await.expect("provision");
    assert_eq!(
        report.mutations,
        [Mutation::RuleReplaced {
            path: path("billing", "billing"),
            rule: "to-billing".into()
        }]
    );
    let rules = b.list_rules(&path("billing", "billing")).await.unwrap();
    assert!(rules.contains(&rule("to-billing", "user.To = 'billing'", None)));
    assert!(rules.iter().any(|r| r.name == "custom"));
    assert!(
        b.get_subscription(&path("billing", "tap"))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_subscription_with_the_wrong_session_flag_or_target_is_recreated() {
    let f = broker().await;
    let b = &f.broker;
    b.create_topic("billing", Default::default()).await.unwrap();
    b.create_topic("orders", Default::default()).await.unwrap();
    // Deferred without sessions, and a billing forwarder pointing at orders.
    b.create_subscription(
        &path("billing", "Deferred"),
        SubscriptionSettings::default(),
    )
    .await
    .unwrap();
    b.create_subscription(
        &path("orders", "billing"),
        SubscriptionSettings::forwarding_to("orders"),
    )
    .await
    .unwrap();
    let topology = Topology::new()
        .endpoint(Endpoint::new("orders"))
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]));
    let report = provision(b, &topology).await.expect("provision");
    let recreated: Vec<String> = report
        .mutations
        .iter()
        .filter_map(|m| match m {
            Mutation::SubscriptionRecreated { path, .. } => Some(path.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(recreated, ["billing/Deferred", "orders/billing"]);
    let deferred = b
        .get_subscription(&path("billing", "Deferred"))
        .await
        .unwrap()
        .unwrap();
    assert!(deferred.settings.requires_session);
    let forwarder = b
        .get_subscription(&path("orders", "billing"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(forwarder.settings.forward_to.as_deref(), Some("billing"));
    assert!(provision(b, &topology).await.unwrap().is_unchanged());
}

#[tokio::test]
async fn prune_removes_only_forwarding_no_longer_consumed() {
    let f = broker().await;
    let b = &f.broker;
    provision(b, &shop()).await.expect("provision");

    // shipping's OrderPaid handler is deleted: provisioning deletes nothing.
    let fewer = Topology::new()
        .endpoint(Endpoint::new("orders").consumes(["OrderPaid"]))
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]))
        .endpoint(Endpoint::new("shipping").consumes(["OrderPlaced"]));
    assert!(provision(b, &fewer).await.unwrap().is_unchanged());
    let report = prune(b, &fewer, &[]).await.expect("prune");
    let deleted: BTreeSet<String> = report.mutations.iter().map(ToString::to_string).collect();
    assert_eq!(
        deleted,
        [
            "deleted rule OrderPaid on orders/shipping",
            "deleted rule OrderPaid on billing/shipping",
            "deleted rule OrderPaid on shipping/fwd-shipping",
        ]
        .map(String::from)
        .into()
    );
    assert!(prune(b, &fewer, &[]).await.unwrap().is_unchanged());
    b.publish("orders", vec![original_event("OrderPaid", "e-6")])
        .await
        .unwrap();
    assert!(
        drain_sessions(b, &path("shipping", "shipping"))
            .await
            .is_empty()
    );
    assert_eq!(drain_sessions(b, &path("orders", "orders")).await.len(), 1);

    // An operator's forwarding tap: not named after its target, so not ours.
    b.create_subscription(
        &path("orders", "tap"),
        SubscriptionSettings::forwarding_to("billing"),
    )
    .await
    .unwrap();
    // shipping consumes nothing any more: its forwarders go entirely; the
    // tap (not named after its target) and the endpoint's own
    // subscriptions stay.
    let none = Topology::new()
        .endpoint(Endpoint::new("orders").consumes(["OrderPaid"]))
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]))
        .endpoint(Endpoint::new("shipping"));
    // While one of shipping's handlers does not load, what shipping
    // consumes is unknown: its forwarding is kept, any case of its name.
    assert!(prune(b, &none, &["SHIPPING"]).await.unwrap().is_unchanged());
    let report = prune(b, &none, &[]).await.expect("prune");
    let deleted: BTreeSet<String> = report.mutations.iter().map(ToString::to_string).collect();
    assert_eq!(
        deleted,
        [
            "deleted subscription orders/shipping",
            "deleted subscription billing/shipping",
            "deleted subscription shipping/fwd-shipping",
        ]
        .map(String::from)
        .into()
    );
    assert!(
        b.get_subscription(&path("orders", "tap"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        b.get_subscription(&path("shipping", "shipping"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(provision(b, &none).await.unwrap().is_unchanged());
}

#[tokio::test]
async fn an_invalid_topology_changes_nothing() {
    let f = broker().await;
    let bad = shop().endpoint(Endpoint::new("Retry"));
    let error = provision(&f.broker, &bad).await.expect_err("invalid");
    assert!(matches!(
        error,
        ProvisionError::Invalid(TopologyError::InvalidName { .. })
    ));
    assert!(
        error.to_string().contains("'Retry' is a NimBus fixed id"),
        "{error}"
    );
    assert!(f.broker.list_topics().await.unwrap().is_empty());
}

/// The real broker behind an `Admin` that refuses the `fail_at`-th
/// mutation (create or delete) with a transient error, as a flaky network
/// to Service Bus would.
struct Flaky<'a> {
    broker: &'a Broker,
    fail_at: usize,
    mutations: std::sync::atomic::AtomicUsize,
}

impl Flaky<'_> {
    fn mutate(&self) -> Result<(), nimbus_transport::AdminError> {
        let n = self
            .mutations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n + 1 == self.fail_at {
            Err(nimbus_transport::TransientError::new("connection reset").into())
        } else {
            Ok(())
        }
    }
}

impl Admin for Flaky<'static> {
    async fn create_topic(
        &self,
        name: &str,
        settings: nimbus_transport::TopicSettings,
    ) -> Result<(), nimbus_transport::AdminError> {
        self.mutate()?;
        self.broker.create_topic(name, settings).await
    }
    async fn get_topic(
        &self,
        name: &str,
    ) -> Result<Option<nimbus_transport::TopicDescription>, nimbus_transport::AdminError> {
        self.broker.get_topic(name).await
    }
    async fn list_topics(
        &self,
    ) -> Result<Vec<nimbus_transport::TopicDescription>, nimbus_transport::AdminError> {
        self.broker.list_topics().await
    }
    async fn delete_topic(&self, name: &str) -> Result<(), nimbus_transport::AdminError> {
        self.mutate()?;
        self.broker.delete_topic(name).await
    }
    async fn create_subscription(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
    ) -> Result<(), nimbus_transport::AdminError> {
        self.mutate()?;
        self.broker.create_subscription(path, settings).await
    }
    async fn create_subscription_with_rules(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
        rules: Vec<RuleDescription>,
    ) -> Result<(), nimbus_transport::AdminError> {
        self.mutate()?;
        self.broker
            .create_subscription_with_rules(path, settings, rules)
            .await
    }
    async fn get_subscription(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Option<nimbus_transport::SubscriptionDescription>, nimbus_transport::AdminError>
    {
        self.broker.get_subscription(path).await
    }
    async fn list_subscriptions(
        &self,
        topic: &str,
    ) -> Result<Vec<nimbus_transport::SubscriptionDescription>, nimbus_transport::AdminError> {
        self.broker.list_subscriptions(topic).await
    }
    async fn delete_subscription(
        &self,
        path: &SubscriptionPath,
    ) -> Result<(), nimbus_transport::AdminError> {
        self.mutate()?;
        self.broker.delete_subscription(path).await
    }
    async fn create_rule(
        &self,
        path: &SubscriptionPath,
        rule: RuleDescription,
    ) -> Result<(), nimbus_transport::AdminError> {
        self.mutate()?;
        self.broker.create_rule(path, rule).await
    }
    async fn delete_rule(
        &self,
        path: &SubscriptionPath,
        rule: &str,
    ) -> Result<(), nimbus_transport::AdminError> {
        self.mutate()?;
        self.broker.delete_rule(path, rule).await
    }
    async fn list_sessions(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Vec<nimbus_transport::SessionInfo>, nimbus_transport::AdminError> {
        self.broker.list_sessions(path).await
    }
    async fn list_rules(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Vec<RuleDescription>, nimbus_transport::AdminError> {
        self.broker.list_rules(path).await
    }
}

#[tokio::test]
async fn a_failure_midway_reports_what_was_applied_and_a_rerun_finishes() {
    // The mutations a clean run makes, for reference.
    let clean = broker().await;
    let all = provision(&clean.broker, &shop()).await.expect("clean run");

    // Every point at which a mutation can fail.
    for fail_at in 1..=all.mutations.len() {
        let f = broker().await;
        // `Admin` implementors are 'static: leak this test's broker (its
        // directory is removed when `f._dir` drops; the open files stay valid).
        let b: &'static Broker = Box::leak(Box::new(f.broker));
        let flaky = Flaky {
            broker: b,
            fail_at,
            mutations: Default::default(),
        };
        let error = provision(&flaky, &shop()).await.expect_err("fails");
        let ProvisionError::Admin {
            applied, source, ..
        } = &error
        else {
            panic!("expected an Admin error, got {error:?}");
        };
        assert_eq!(source.kind(), ErrorKind::Transient, "{error}");
        assert_eq!(
            applied[..],
            all.mutations[..fail_at - 1],
            "applied before mutation {fail_at}"
        );
        assert!(error.to_string().contains("connection reset"), "{error}");
        // Running again does exactly the rest; a third run nothing.
        let rest = provision(b, &shop()).await.expect("rerun");
        assert_eq!(
            rest.mutations[..],
            all.mutations[fail_at - 1..],
            "the rest after failing at {fail_at}"
        );
        assert!(provision(b, &shop()).await.unwrap().is_unchanged());
    }
}
