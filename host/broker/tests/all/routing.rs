//! Routing hands the published message itself to its last placement and
//! clones it for the others (docs/decisions/0102-event-path-cpu.md): every
//! placement must still get the whole message, in rule order, in memory and
//! after a restart (the stored rows are encoded from the moved copies).

use std::sync::Arc;
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions, Durability, ManualClock};
use nimbus_transport::{
    Admin, Message, PropertyValue, ReceivedMessage, Receiver, RuleDescription, SubQueue,
    SubscriptionPath, SubscriptionSettings, TopicSettings, Transport,
};

const ARRIVES: Duration = Duration::from_secs(10);
const ABSENT: Duration = Duration::from_millis(100);

async fn open(dir: &std::path::Path, clock: &ManualClock) -> Broker {
    Broker::open(
        BrokerOptions::new(dir)
            .durability(Durability::Os)
            .clock(Arc::new(clock.clone())),
    )
    .await
    .expect("open")
}

fn published() -> Message {
    let mut m = Message::new(br#"{"order":42,"lines":[1,2,3]}"#.to_vec());
    m.message_id = Some("m-1".into());
    m.correlation_id = Some("c-1".into());
    m.subject = Some("OrderPlaced".into());
    m.properties
        .insert("EventTypeId".into(), "OrderPlaced".into());
    m.properties.insert("Amount".into(), PropertyValue::Int(7));
    m
}

/// `t` has six subscriptions: `plain` (one plain rule), `both` (a plain
/// rule and an action rule: two copies), `broken` (a filter that fails at
/// evaluation: the original is dead-lettered there), `broken-action` (an
/// action that fails: likewise), `fwd` (forwards to `u`, whose `us` takes
/// everything) and `tagged` (an action rule only; last in name order, so
/// its copy is made from the original itself).
async fn topology(broker: &Broker) {
    for topic in ["t", "u"] {
        broker
            .create_topic(topic, TopicSettings::default())
            .await
            .expect("topic");
    }
    let sub = |t: &str, s: &str| SubscriptionPath::new(t, s);
    let subscriptions = [
        (
            "plain",
            SubscriptionSettings::default(),
            vec![RuleDescription::new("all", "1=1")],
        ),
        (
            "both",
            SubscriptionSettings::default(),
            vec![
                RuleDescription::new("a-all", "1=1"),
                RuleDescription::new("b-tagged", "1=1").with_action("SET Copy = 'yes'"),
            ],
        ),
        (
            "broken",
            SubscriptionSettings::default(),
            vec![RuleDescription::new("div", "Amount / 0 = 1")],
        ),
        (
            "broken-action",
            SubscriptionSettings::default(),
            vec![RuleDescription::new("div", "1=1").with_action("SET Amount = Amount / 0")],
        ),
        (
            "fwd",
            SubscriptionSettings::default().with_forward_to(Some("u".into())),
            vec![RuleDescription::new("all", "1=1")],
        ),
        (
            "tagged",
            SubscriptionSettings::default(),
            vec![RuleDescription::new("tag", "1=1").with_action("SET Copy = 'yes'")],
        ),
    ];
    for (name, settings, rules) in subscriptions {
        broker
            .create_subscription_with_rules(&sub("t", name), settings, rules)
            .await
            .expect(name);
    }
    broker
        .create_subscription(&sub("u", "us"), SubscriptionSettings::default())
        .await
        .expect("us");
}

/// A broker in a fresh temp dir, with [`topology`] made.
async fn routed() -> (tempfile::TempDir, ManualClock, Broker) {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock).await;
    topology(&broker).await;
    (dir, clock, broker)
}

async fn drain(broker: &Broker, topic: &str, sub: &str, queue: SubQueue) -> Vec<ReceivedMessage> {
    drain_within(broker, topic, sub, queue, ARRIVES).await
}

async fn drain_within(
    broker: &Broker,
    topic: &str,
    sub: &str,
    queue: SubQueue,
    first: Duration,
) -> Vec<ReceivedMessage> {
    let receiver = broker
        .receiver(&SubscriptionPath::new(topic, sub), queue)
        .await
        .expect("receiver");
    let mut got = Vec::new();
    let mut wait = first;
    while let Some(m) = receiver.receive(wait).await.expect("receive") {
        got.push(m);
        wait = ABSENT;
    }
    got
}

fn assert_whole(m: &ReceivedMessage, copy: bool) {
    let original = published();
    assert_eq!(m.message.body, original.body);
    assert_eq!(m.message.message_id, original.message_id);
    assert_eq!(m.message.correlation_id, original.correlation_id);
    assert_eq!(m.message.subject, original.subject);
    assert_eq!(m.message.property_str("EventTypeId"), Some("OrderPlaced"));
    assert_eq!(
        m.message.properties.get("Amount"),
        Some(&PropertyValue::Int(7))
    );
    let expected_copy = copy.then_some("yes");
    assert_eq!(m.message.property_str("Copy"), expected_copy);
}

/// The one message `t/sub` holds, which is in its dead-letter queue and
/// whole (the original, not a half-modified copy).
async fn only_dead_lettered(broker: &Broker, sub: &str) -> ReceivedMessage {
    assert!(
        drain_within(broker, "t", sub, SubQueue::Main, ABSENT)
            .await
            .is_empty(),
        "{sub}: nothing delivered"
    );
    let mut dead = drain(broker, "t", sub, SubQueue::DeadLetter).await;
    assert_eq!(dead.len(), 1, "{sub}: dead-lettered");
    let dead = dead.remove(0);
    assert_whole(&dead, false);
    dead
}

async fn assert_every_placement_whole(broker: &Broker) {
    let plain = drain(broker, "t", "plain", SubQueue::Main).await;
    assert_eq!(plain.len(), 1, "plain");
    assert_whole(&plain[0], false);

    let both = drain(broker, "t", "both", SubQueue::Main).await;
    assert_eq!(both.len(), 2, "both: the plain match and the action copy");
    // Rule order: the plain match first, then the copy.
    assert_whole(&both[0], false);
    assert_whole(&both[1], true);

    let dead = only_dead_lettered(broker, "broken").await;
    assert_eq!(
        dead.dead_letter_reason.as_deref(),
        Some("FilterEvaluationException")
    );
    let dead = only_dead_lettered(broker, "broken-action").await;
    assert!(
        dead.dead_letter_description
            .as_deref()
            .is_some_and(|d| d.contains("rule 'div' action failed")),
        "{:?}",
        dead.dead_letter_description
    );

    let forwarded = drain(broker, "u", "us", SubQueue::Main).await;
    assert_eq!(forwarded.len(), 1, "forwarded");
    assert_whole(&forwarded[0], false);

    let tagged = drain(broker, "t", "tagged", SubQueue::Main).await;
    assert_eq!(tagged.len(), 1, "tagged");
    assert_whole(&tagged[0], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_placement_of_a_fanned_out_message_gets_all_of_it() {
    let (_dir, _clock, broker) = routed().await;
    broker
        .publish("t", vec![published()])
        .await
        .expect("publish");
    assert_every_placement_whole(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_placement_of_a_fanned_out_message_survives_a_restart_whole() {
    let (dir, clock, broker) = routed().await;
    broker
        .publish("t", vec![published()])
        .await
        .expect("publish");
    drop(broker);
    let broker = open(dir.path(), &clock).await;
    assert_every_placement_whole(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_publishes_its_messages_whole_and_in_order() {
    let (_dir, _clock, broker) = routed().await;
    broker
        .publish("u", vec![Message::new(b"trigger".to_vec())])
        .await
        .expect("publish");
    let receiver = broker
        .receiver(&SubscriptionPath::new("u", "us"), SubQueue::Main)
        .await
        .expect("receiver");
    let trigger = receiver
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("trigger");
    let mut second = published();
    second.message_id = Some("m-2".into());
    let settlement = nimbus_transport::Settlement::complete(trigger)
        .publish("t", published())
        .publish("t", second);
    receiver.settle(settlement).await.expect("settle");
    let plain = drain(&broker, "t", "plain", SubQueue::Main).await;
    let ids: Vec<_> = plain
        .iter()
        .map(|m| m.message.message_id.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(ids, ["m-1", "m-2"]);
    assert_whole(&plain[0], false);
    assert_eq!(plain[1].message.body, published().body);
    let forwarded = drain(&broker, "u", "us", SubQueue::Main).await;
    assert_eq!(forwarded.len(), 2, "both forwarded, the trigger completed");
}
