//! The Service Bus behaviours every transport must have, written once
//! against the traits (STYLE habit 14).
//!
//! Each public `async fn` here is one behaviour, taking a fresh
//! [`Harness`]; it panics (asserts) when the transport misbehaves. A
//! backend runs all of them with [`transport_conformance!`](crate::transport_conformance):
//!
//! ```ignore
//! async fn harness() -> MyHarness { ... }
//! nimbus_transport::transport_conformance!(harness);
//! ```
//!
//! Time: behaviours that depend on lock expiry, schedules or TTL move the
//! transport's clock through [`Harness::advance`]; a backend whose clock
//! cannot be moved returns `false` and those behaviours are skipped (say so
//! where the backend is instantiated).

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, SystemTime};

use crate::{
    Admin, ErrorKind, Message, Properties, PropertyValue, Receiver, RuleDescription, SessionLock,
    SessionSelector, SettleError, Settlement, SubQueue, SubscriptionPath, SubscriptionSettings,
    TopicSettings, Transport,
};

/// Long enough for anything that is coming to arrive; receives return as
/// soon as it does, so this bounds only a failing test.
pub const ARRIVES: Duration = Duration::from_secs(10);
/// How long to wait before concluding nothing is delivered. Only ever used
/// to assert absence, so a slow machine cannot make a test fail.
pub const ABSENT: Duration = Duration::from_millis(100);

/// A transport under test, with control over its clock and lifetime.
pub trait Harness: Send + Sync + Sized + 'static {
    /// The transport.
    type Transport: Transport + Admin;

    /// The transport under test.
    fn transport(&self) -> &Self::Transport;

    /// Moves the transport's clock forward by `by`; `false` if it cannot.
    fn advance(&self, by: Duration) -> bool;

    /// The transport's current time.
    fn now(&self) -> SystemTime;

    /// Whether the transport applies a settlement as one unit. Service Bus
    /// cannot (decision 0137): there a failed settlement leaves the message
    /// unsettled and the session state unchanged, but what it published
    /// before the step that failed stays published.
    fn atomic_settlement(&self) -> bool {
        true
    }

    /// Closes the transport and opens it again on the same storage. Every
    /// session and receiver of the old one must have been dropped. `None`
    /// if the backend cannot restart.
    fn restart(self) -> impl Future<Output = Option<Self>> + Send;
}

/// Stamps out every behaviour as a `#[tokio::test]` for the backend whose
/// harness `$factory().await` builds.
#[macro_export]
macro_rules! transport_conformance {
    ($factory:path) => {
        $crate::transport_conformance!(@each $factory;
            publish_assigns_sequence_numbers_and_fresh_message_ids,
            publish_to_a_missing_topic_is_not_found,
            default_rule_delivers_everything_and_no_match_delivers_nothing,
            matching_rules_with_actions_yield_one_copy_each,
            malformed_filter_is_rejected_with_its_position,
            message_without_session_is_rejected_by_a_session_subscription,
            session_messages_arrive_in_order,
            abandoned_session_message_is_redelivered_before_later_ones,
            expired_session_lock_redelivers_first_and_counts_a_delivery,
            competing_receivers_never_hold_the_same_session,
            next_available_session_is_the_one_with_the_oldest_message,
            a_locked_named_session_cannot_be_locked_again,
            a_named_session_waits_for_its_release,
            session_state_round_trips_and_survives_restart,
            messages_survive_restart_and_settled_ones_stay_gone,
            expired_peek_lock_redelivers_with_a_higher_delivery_count,
            renewing_a_lock_keeps_the_message,
            settling_with_a_lost_lock_is_lock_lost,
            session_lock_lost_is_reported_after_expiry,
            dead_letters_after_max_delivery_count,
            dead_letter_queue_is_readable_settleable_and_replayable,
            closing_a_receiver_does_not_count_a_delivery,
            closing_a_session_does_not_count_a_delivery,
            a_released_message_comes_back_first_uncounted,
            peek_shows_messages_in_order_without_locking_them,
            scheduled_message_arrives_at_its_time_and_cancel_stops_it,
            ttl_expiry_dead_letters_when_the_subscription_asks,
            ttl_expiry_drops_silently_otherwise,
            auto_forward_chains_and_stops_at_the_hop_limit,
            duplicate_detection_drops_repeats_within_the_window,
            atomic_settlement_applies_all_or_nothing,
            admin_creates_lists_and_deletes_topology,
            a_subscription_created_with_its_rules_has_exactly_them,
            inbox_records_commit_with_the_settlement_expire_and_survive_restart,
        );
    };
    (@each $factory:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let harness = $factory().await;
                $crate::conformance::$name(harness).await;
            }
        )*
    };
}

fn msg(session: Option<&str>, body: &str) -> Message {
    let mut m = Message::new(body.as_bytes().to_vec());
    m.session_id = session.map(str::to_owned);
    m
}

fn body(m: &crate::ReceivedMessage) -> String {
    String::from_utf8_lossy(&m.message.body).into_owned()
}

async fn topic_with_sub<T: Transport + Admin>(
    t: &T,
    topic: &str,
    sub: &str,
    settings: SubscriptionSettings,
) -> SubscriptionPath {
    if t.get_topic(topic).await.expect("get topic").is_none() {
        t.create_topic(topic, TopicSettings::default())
            .await
            .expect("create topic");
    }
    let path = SubscriptionPath::new(topic, sub);
    t.create_subscription(&path, settings)
        .await
        .expect("create subscription");
    path
}

async fn drain_bodies<R: Receiver>(r: &R) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = r.receive(ABSENT).await.expect("receive") {
        out.push(body(&m));
        r.complete(m).await.expect("complete");
    }
    out
}

/// Every publish gets an increasing sequence number; a message without an
/// id gets a fresh unique one, a sender's id is kept.
pub async fn publish_assigns_sequence_numbers_and_fresh_message_ids<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "orders", "all", SubscriptionSettings::default()).await;
    let mut named = msg(None, "c");
    named.message_id = Some("chosen".into());
    let seqs = t
        .publish("orders", vec![msg(None, "a"), msg(None, "b"), named])
        .await
        .expect("publish");
    assert_eq!(seqs.len(), 3);
    assert!(seqs[0] < seqs[1] && seqs[1] < seqs[2], "{seqs:?}");
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    let mut ids = Vec::new();
    for expected in ["a", "b", "c"] {
        let m = r
            .receive(ARRIVES)
            .await
            .expect("receive")
            .expect("a message");
        assert_eq!(body(&m), expected);
        assert_eq!(m.delivery_count, 1);
        ids.push(m.message.message_id.clone().expect("id assigned"));
        r.complete(m).await.expect("complete");
    }
    assert_ne!(ids[0], ids[1]);
    assert!(!ids[0].is_empty());
    assert_eq!(ids[2], "chosen");
}

/// Publishing to a topic that does not exist names it.
pub async fn publish_to_a_missing_topic_is_not_found<H: Harness>(h: H) {
    let error = h
        .transport()
        .publish("nowhere", vec![msg(None, "x")])
        .await
        .expect_err("no such topic");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert!(error.to_string().contains("nowhere"), "{error}");
}

/// `$Default` (`1=1`) takes everything; a subscription whose only rule does
/// not match gets nothing.
pub async fn default_rule_delivers_everything_and_no_match_delivers_nothing<H: Harness>(h: H) {
    let t = h.transport();
    let all = topic_with_sub(t, "events", "all", SubscriptionSettings::default()).await;
    let none = topic_with_sub(t, "events", "billing", SubscriptionSettings::default()).await;
    let rules = t.list_rules(&none).await.expect("rules");
    assert_eq!(rules, vec![RuleDescription::new("$Default", "1=1")]);
    t.delete_rule(&none, "$Default").await.expect("delete");
    t.create_rule(
        &none,
        RuleDescription::new("only-billing", "user.To = 'billing'"),
    )
    .await
    .expect("rule");
    t.publish("events", vec![msg(None, "x")])
        .await
        .expect("publish");
    let r_all = t.receiver(&all, SubQueue::Main).await.expect("receiver");
    let r_none = t.receiver(&none, SubQueue::Main).await.expect("receiver");
    assert_eq!(drain_bodies(&r_all).await, vec!["x"]);
    assert!(drain_bodies(&r_none).await.is_empty());
}

/// A message matching several rules with actions yields one transformed copy
/// per such rule; action-less matches collapse into one untouched copy.
pub async fn matching_rules_with_actions_yield_one_copy_each<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "fan", "s", SubscriptionSettings::default()).await;
    t.create_rule(&path, RuleDescription::new("plain", "user.Kind = 'a'"))
        .await
        .expect("rule");
    t.create_rule(
        &path,
        RuleDescription::new("one", "user.Kind = 'a'").with_action("SET user.Copy = 'one'"),
    )
    .await
    .expect("rule");
    t.create_rule(
        &path,
        RuleDescription::new("two", "user.Kind = 'a'").with_action("SET user.Copy = 'two'"),
    )
    .await
    .expect("rule");
    let mut m = msg(None, "x");
    m.properties.insert("Kind".into(), "a".into());
    t.publish("fan", vec![m]).await.expect("publish");
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    let mut copies = BTreeSet::new();
    while let Some(m) = r.receive(ABSENT).await.expect("receive") {
        copies.insert(m.message.property_str("Copy").unwrap_or("none").to_owned());
        r.complete(m).await.expect("complete");
    }
    // `$Default` and `plain` collapse into one untouched copy.
    let expected: BTreeSet<String> = ["none", "one", "two"].map(String::from).into();
    assert_eq!(copies, expected);
}

/// A filter that does not parse is refused when the rule is created, with
/// the position of the error.
pub async fn malformed_filter_is_rejected_with_its_position<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "bad", "s", SubscriptionSettings::default()).await;
    let error = t
        .create_rule(&path, RuleDescription::new("broken", "user.To = = 'x'"))
        .await
        .expect_err("malformed");
    assert_eq!(error.kind(), ErrorKind::Invalid);
    match &error {
        crate::AdminError::InvalidRule { position, rule, .. } => {
            assert_eq!(rule, "broken");
            assert!(
                *position >= 8 && *position <= 10,
                "position {position}: {error}"
            );
        }
        other => panic!("expected InvalidRule, got {other:?}"),
    }
    let rules = t.list_rules(&path).await.expect("rules");
    assert_eq!(rules.len(), 1, "nothing was added: {rules:?}");
}

/// A session subscription refuses a message without a session id, and the
/// whole publish stores nothing.
pub async fn message_without_session_is_rejected_by_a_session_subscription<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "s", "inbox", SubscriptionSettings::sessions()).await;
    let error = t
        .publish("s", vec![msg(Some("a"), "ok"), msg(None, "no session")])
        .await
        .expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Invalid);
    assert!(error.to_string().contains("s/inbox"), "{error}");
    let got = t
        .accept_session(&path, SessionSelector::NextAvailable, ABSENT)
        .await;
    assert_eq!(
        got.expect_err("nothing stored").kind(),
        ErrorKind::NoSessionAvailable
    );
}

/// Within a session, messages arrive in publish order.
pub async fn session_messages_arrive_in_order<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "o", "s", SubscriptionSettings::sessions()).await;
    for i in 0..20 {
        let session = if i % 2 == 0 { "even" } else { "odd" };
        t.publish("o", vec![msg(Some(session), &i.to_string())])
            .await
            .expect("publish");
    }
    for session in ["even", "odd"] {
        let lock = t
            .accept_session(&path, SessionSelector::Named(session.into()), ARRIVES)
            .await
            .expect("accept");
        let mut got = Vec::new();
        while let Some(m) = lock.receive(ABSENT).await.expect("receive") {
            got.push(body(&m).parse::<i32>().expect("number"));
            lock.complete(m).await.expect("complete");
        }
        let start = if session == "even" { 0 } else { 1 };
        assert_eq!(got, (start..20).step_by(2).collect::<Vec<_>>());
    }
}

/// An abandoned message comes back first in its session, with its delivery
/// count raised and the abandon's property changes applied.
pub async fn abandoned_session_message_is_redelivered_before_later_ones<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "ab", "s", SubscriptionSettings::sessions()).await;
    t.publish("ab", vec![msg(Some("k"), "1"), msg(Some("k"), "2")])
        .await
        .expect("publish");
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let first = lock.receive(ARRIVES).await.expect("receive").expect("1");
    assert_eq!(body(&first), "1");
    let mut props = Properties::new();
    props.insert("Why".into(), PropertyValue::from("retry"));
    lock.abandon(first, props).await.expect("abandon");
    let again = lock
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("1 again");
    assert_eq!(body(&again), "1");
    assert_eq!(again.delivery_count, 2);
    assert_eq!(again.message.property_str("Why"), Some("retry"));
    lock.complete(again).await.expect("complete");
    let second = lock.receive(ARRIVES).await.expect("receive").expect("2");
    assert_eq!(body(&second), "2");
    assert_eq!(second.delivery_count, 1);
}

/// When a session lock lapses, the message it covered is redelivered first
/// to the next holder, with its delivery count raised.
pub async fn expired_session_lock_redelivers_first_and_counts_a_delivery<H: Harness>(h: H) {
    let t = h.transport();
    let settings = SubscriptionSettings::sessions().with_lock_duration(Duration::from_secs(30));
    let path = topic_with_sub(t, "ex", "s", settings).await;
    t.publish("ex", vec![msg(Some("k"), "1"), msg(Some("k"), "2")])
        .await
        .expect("publish");
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let first = lock.receive(ARRIVES).await.expect("receive").expect("1");
    if !h.advance(Duration::from_secs(31)) {
        return;
    }
    let next = t
        .accept_session(&path, SessionSelector::Named("k".into()), ARRIVES)
        .await
        .expect("re-accept after expiry");
    let again = next
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("1 again");
    assert_eq!(body(&again), "1");
    assert_eq!(again.delivery_count, 2);
    let error = lock.complete(first).await.expect_err("old lock is gone");
    assert_eq!(error.kind(), ErrorKind::SessionLockLost);
}

/// Many receivers accepting sessions at once never share one.
pub async fn competing_receivers_never_hold_the_same_session<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "c", "s", SubscriptionSettings::sessions()).await;
    for i in 0..8 {
        t.publish("c", vec![msg(Some(&format!("s{i}")), "x")])
            .await
            .expect("publish");
    }
    let mut locks = Vec::new();
    let accepts = (0..12).map(|_| t.accept_session(&path, SessionSelector::NextAvailable, ABSENT));
    for result in futures_join_all(accepts).await {
        match result {
            Ok(lock) => locks.push(lock),
            Err(e) => assert_eq!(e.kind(), ErrorKind::NoSessionAvailable, "{e}"),
        }
    }
    let ids: Vec<String> = locks.iter().map(|l| l.session_id().to_owned()).collect();
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), 8, "every session accepted once: {ids:?}");
    assert_eq!(unique.len(), ids.len(), "no session held twice: {ids:?}");
}

async fn futures_join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    // Run concurrently on one task: each accept is polled in turn.
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// Next-available picks the session whose oldest ready message is oldest.
pub async fn next_available_session_is_the_one_with_the_oldest_message<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "n", "s", SubscriptionSettings::sessions()).await;
    for session in ["b", "a", "c"] {
        t.publish("n", vec![msg(Some(session), session)])
            .await
            .expect("publish");
    }
    let mut order = Vec::new();
    let mut held = Vec::new();
    for _ in 0..3 {
        let lock = t
            .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
            .await
            .expect("accept");
        order.push(lock.session_id().to_owned());
        held.push(lock);
    }
    assert_eq!(order, vec!["b", "a", "c"]);
}

/// A named session held by another receiver cannot be locked.
pub async fn a_locked_named_session_cannot_be_locked_again<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "l", "s", SubscriptionSettings::sessions()).await;
    let _held = t
        .accept_session(&path, SessionSelector::Named("k".into()), ABSENT)
        .await
        .expect("an empty named session can be accepted");
    let error = t
        .accept_session(&path, SessionSelector::Named("k".into()), Duration::ZERO)
        .await
        .expect_err("held");
    assert_eq!(error.kind(), ErrorKind::SessionCannotBeLocked);
}

/// Accepting a named session that is held waits for its release.
pub async fn a_named_session_waits_for_its_release<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "w", "s", SubscriptionSettings::sessions()).await;
    let held = t
        .accept_session(&path, SessionSelector::Named("k".into()), ABSENT)
        .await
        .expect("accept");
    let waiting = t.accept_session(&path, SessionSelector::Named("k".into()), ARRIVES);
    let release = async move {
        tokio::task::yield_now().await;
        held.close().await;
    };
    let (got, ()) = tokio::join!(waiting, release);
    assert_eq!(got.expect("accepted after release").session_id(), "k");
}

/// Session state is bytes, read back as written, cleared by `None`, and
/// kept across a restart.
pub async fn session_state_round_trips_and_survives_restart<H: Harness>(h: H) {
    let path = topic_with_sub(h.transport(), "st", "s", SubscriptionSettings::sessions()).await;
    {
        let lock = h
            .transport()
            .accept_session(&path, SessionSelector::Named("k".into()), ABSENT)
            .await
            .expect("accept");
        assert_eq!(lock.get_state().await.expect("get"), None);
        lock.set_state(Some(vec![1, 2, 3])).await.expect("set");
        assert_eq!(lock.get_state().await.expect("get"), Some(vec![1, 2, 3]));
    }
    let Some(h) = h.restart().await else {
        return;
    };
    let lock = h
        .transport()
        .accept_session(&path, SessionSelector::Named("k".into()), ABSENT)
        .await
        .expect("accept after restart");
    assert_eq!(lock.get_state().await.expect("get"), Some(vec![1, 2, 3]));
    lock.set_state(None).await.expect("clear");
    assert_eq!(lock.get_state().await.expect("get"), None);
}

/// Acknowledged publishes survive a restart; completed messages stay gone;
/// dead-lettered ones stay dead-lettered.
pub async fn messages_survive_restart_and_settled_ones_stay_gone<H: Harness>(h: H) {
    let path = topic_with_sub(h.transport(), "d", "s", SubscriptionSettings::default()).await;
    let t = h.transport();
    t.publish("d", vec![msg(None, "1"), msg(None, "2"), msg(None, "3")])
        .await
        .expect("publish");
    {
        let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
        let one = r.receive(ARRIVES).await.expect("receive").expect("1");
        r.complete(one).await.expect("complete");
        let two = r.receive(ARRIVES).await.expect("receive").expect("2");
        r.dead_letter(two, "Bad".into(), "bad input".into())
            .await
            .expect("dead-letter");
    }
    let Some(h) = h.restart().await else {
        return;
    };
    let t = h.transport();
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    assert_eq!(drain_bodies(&r).await, vec!["3"]);
    let dlq = t.receiver(&path, SubQueue::DeadLetter).await.expect("dlq");
    let dead = dlq.receive(ARRIVES).await.expect("receive").expect("2");
    assert_eq!(body(&dead), "2");
    assert_eq!(dead.dead_letter_reason.as_deref(), Some("Bad"));
}

/// A peek-lock that lapses makes the message available again, with the
/// delivery count raised.
pub async fn expired_peek_lock_redelivers_with_a_higher_delivery_count<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "pl", "s", SubscriptionSettings::default()).await;
    t.publish("pl", vec![msg(None, "x")])
        .await
        .expect("publish");
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    let first = r.receive(ARRIVES).await.expect("receive").expect("x");
    assert!(
        r.receive(ABSENT).await.expect("receive").is_none(),
        "locked"
    );
    if !h.advance(Duration::from_secs(31)) {
        return;
    }
    let again = r
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("redelivered");
    assert_eq!(again.delivery_count, 2);
    assert_ne!(again.lock_token, first.lock_token);
    assert_eq!(
        r.complete(first).await.expect_err("stale token").kind(),
        ErrorKind::LockLost
    );
    r.complete(again).await.expect("complete");
}

/// Renewing a lock before it lapses keeps the message locked past the
/// original expiry.
pub async fn renewing_a_lock_keeps_the_message<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "rn", "s", SubscriptionSettings::default()).await;
    t.publish("rn", vec![msg(None, "x")])
        .await
        .expect("publish");
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    let mut m = r.receive(ARRIVES).await.expect("receive").expect("x");
    if !h.advance(Duration::from_secs(20)) {
        return;
    }
    let until = r.renew_lock(&mut m).await.expect("renew");
    assert_eq!(until, m.locked_until);
    assert!(until >= h.now() + Duration::from_secs(29));
    h.advance(Duration::from_secs(20));
    assert!(
        r.receive(ABSENT).await.expect("receive").is_none(),
        "still locked"
    );
    r.complete(m).await.expect("complete after renew");

    let path = topic_with_sub(t, "rn", "sess", SubscriptionSettings::sessions()).await;
    t.publish("rn", vec![msg(Some("k"), "y")])
        .await
        .expect("publish");
    let lock = t
        .accept_session(&path, SessionSelector::Named("k".into()), ABSENT)
        .await
        .expect("accept");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("y");
    h.advance(Duration::from_secs(20));
    let until = lock.renew().await.expect("renew session");
    assert_eq!(until, lock.locked_until());
    h.advance(Duration::from_secs(20));
    lock.complete(m)
        .await
        .expect("complete under renewed session lock");
}

/// Completing twice, or with a token from another delivery, is lock lost.
pub async fn settling_with_a_lost_lock_is_lock_lost<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "ll", "s", SubscriptionSettings::default()).await;
    t.publish("ll", vec![msg(None, "x")])
        .await
        .expect("publish");
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    let m = r.receive(ARRIVES).await.expect("receive").expect("x");
    let copy = m.clone();
    r.complete(m).await.expect("complete");
    let error = r.complete(copy).await.expect_err("settled already");
    assert_eq!(error.kind(), ErrorKind::LockLost);
}

/// After a session lock lapses, every operation on it says session lock lost.
pub async fn session_lock_lost_is_reported_after_expiry<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "sl", "s", SubscriptionSettings::sessions()).await;
    t.publish("sl", vec![msg(Some("k"), "x")])
        .await
        .expect("publish");
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("x");
    if !h.advance(Duration::from_secs(31)) {
        return;
    }
    assert_eq!(
        lock.receive(ABSENT).await.expect_err("lost").kind(),
        ErrorKind::SessionLockLost
    );
    assert_eq!(
        lock.get_state().await.expect_err("lost").kind(),
        ErrorKind::SessionLockLost
    );
    assert_eq!(
        lock.set_state(Some(vec![1]))
            .await
            .expect_err("lost")
            .kind(),
        ErrorKind::SessionLockLost
    );
    assert_eq!(
        lock.renew().await.expect_err("lost").kind(),
        ErrorKind::SessionLockLost
    );
    assert_eq!(
        lock.complete(m).await.expect_err("lost").kind(),
        ErrorKind::SessionLockLost
    );
}

/// Abandoning up to the max delivery count dead-letters the message with
/// reason `MaxDeliveryCountExceeded`, with no extra delivery.
pub async fn dead_letters_after_max_delivery_count<H: Harness>(h: H) {
    let t = h.transport();
    let settings = SubscriptionSettings::sessions().with_max_delivery_count(3);
    let path = topic_with_sub(t, "mx", "s", settings).await;
    t.publish("mx", vec![msg(Some("k"), "x"), msg(Some("k"), "next")])
        .await
        .expect("publish");
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    for attempt in 1..=3 {
        let m = lock.receive(ARRIVES).await.expect("receive").expect("x");
        assert_eq!(body(&m), "x");
        assert_eq!(m.delivery_count, attempt);
        lock.abandon(m, Properties::new()).await.expect("abandon");
    }
    let next = lock.receive(ARRIVES).await.expect("receive").expect("next");
    assert_eq!(body(&next), "next", "x left the session");
    let dlq = t.receiver(&path, SubQueue::DeadLetter).await.expect("dlq");
    let dead = dlq.receive(ARRIVES).await.expect("receive").expect("x");
    assert_eq!(body(&dead), "x");
    assert_eq!(
        dead.dead_letter_reason.as_deref(),
        Some("MaxDeliveryCountExceeded")
    );
    assert_eq!(
        dead.delivery_count, 4,
        "three failures, this is the fourth delivery"
    );
}

/// Dead-lettering keeps reason and description; the dead-letter queue can be
/// received from, completed, and replayed back into the subscription.
pub async fn dead_letter_queue_is_readable_settleable_and_replayable<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "dl", "s", SubscriptionSettings::sessions()).await;
    t.publish("dl", vec![msg(Some("k"), "a"), msg(Some("k"), "b")])
        .await
        .expect("publish");
    {
        let lock = t
            .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
            .await
            .expect("accept");
        for _ in 0..2 {
            let m = lock.receive(ARRIVES).await.expect("receive").expect("msg");
            lock.dead_letter(m, "Poison".into(), "cannot parse".into())
                .await
                .expect("dead-letter");
        }
    }
    let dlq = t.receiver(&path, SubQueue::DeadLetter).await.expect("dlq");
    let a = dlq.receive(ARRIVES).await.expect("receive").expect("a");
    assert_eq!(body(&a), "a");
    assert_eq!(a.dead_letter_reason.as_deref(), Some("Poison"));
    assert_eq!(a.dead_letter_description.as_deref(), Some("cannot parse"));
    dlq.complete(a).await.expect("complete from the DLQ");
    let b = dlq.receive(ARRIVES).await.expect("receive").expect("b");
    dlq.replay_dead_letter(b).await.expect("replay");
    assert!(
        dlq.receive(ABSENT).await.expect("receive").is_none(),
        "DLQ empty"
    );
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept replayed session");
    let replayed = lock.receive(ARRIVES).await.expect("receive").expect("b");
    assert_eq!(body(&replayed), "b");
    assert_eq!(replayed.delivery_count, 1);
    assert_eq!(replayed.dead_letter_reason, None);
}

/// Dropping a receiver with locked messages returns them uncounted.
pub async fn closing_a_receiver_does_not_count_a_delivery<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "cr", "s", SubscriptionSettings::default()).await;
    t.publish("cr", vec![msg(None, "x")])
        .await
        .expect("publish");
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    let m = r.receive(ARRIVES).await.expect("receive").expect("x");
    assert_eq!(m.delivery_count, 1);
    r.close().await;
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    let m = r.receive(ARRIVES).await.expect("receive").expect("x again");
    assert_eq!(m.delivery_count, 1);
}

/// Closing a session with a received, unsettled message returns it first,
/// uncounted.
pub async fn closing_a_session_does_not_count_a_delivery<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "cs", "s", SubscriptionSettings::sessions()).await;
    t.publish("cs", vec![msg(Some("k"), "1"), msg(Some("k"), "2")])
        .await
        .expect("publish");
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("1");
    assert_eq!(body(&m), "1");
    lock.close().await;
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept again");
    let m = lock
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("1 again");
    assert_eq!(body(&m), "1");
    assert_eq!(m.delivery_count, 1);
}

/// A released message is next again, in a session and on a receiver, with
/// its delivery count unchanged; releasing it twice is lock lost.
pub async fn a_released_message_comes_back_first_uncounted<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "rl", "s", SubscriptionSettings::sessions()).await;
    t.publish("rl", vec![msg(Some("k"), "1"), msg(Some("k"), "2")])
        .await
        .expect("publish");
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let first = lock.receive(ARRIVES).await.expect("receive").expect("1");
    let copy = first.clone();
    lock.release(first).await.expect("release");
    assert!(matches!(
        lock.release(copy).await,
        Err(SettleError::LockLost { .. })
    ));
    let again = lock
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("1 again");
    assert_eq!((body(&again).as_str(), again.delivery_count), ("1", 1));

    let plain = topic_with_sub(t, "rl", "p", SubscriptionSettings::default()).await;
    t.publish("rl", vec![msg(Some("k"), "3")])
        .await
        .expect("publish");
    let r = t.receiver(&plain, SubQueue::Main).await.expect("receiver");
    let m = r.receive(ARRIVES).await.expect("receive").expect("3");
    lock.release(again).await.expect("release in the session");
    r.release(m).await.expect("release");
    let m = r.receive(ARRIVES).await.expect("receive").expect("3 again");
    assert_eq!((body(&m).as_str(), m.delivery_count), ("3", 1));
}

/// Peek shows a queue's messages in sequence order, from a sequence number
/// on and for one session when asked, locked ones included, and changes
/// nothing: they are received afterwards, uncounted.
pub async fn peek_shows_messages_in_order_without_locking_them<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "pk", "s", SubscriptionSettings::sessions()).await;
    let numbers = t
        .publish(
            "pk",
            vec![
                msg(Some("a"), "a1"),
                msg(Some("b"), "b1"),
                msg(Some("a"), "a2"),
            ],
        )
        .await
        .expect("publish");
    let peek = |session: Option<&'static str>, from: i64, max: usize| {
        let path = path.clone();
        async move {
            t.peek(&path, SubQueue::Main, session, from, max)
                .await
                .expect("peek")
                .iter()
                .map(body)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(peek(None, 0, 10).await, ["a1", "b1", "a2"]);
    assert_eq!(peek(None, numbers[1], 10).await, ["b1", "a2"]);
    assert_eq!(peek(None, 0, 2).await, ["a1", "b1"]);
    assert_eq!(peek(Some("a"), 0, 10).await, ["a1", "a2"]);
    let lock = t
        .accept_session(&path, SessionSelector::Named("a".to_owned()), ARRIVES)
        .await
        .expect("accept");
    let held = lock.receive(ARRIVES).await.expect("receive").expect("a1");
    // A locked message is still shown.
    assert_eq!(peek(Some("a"), 0, 10).await, ["a1", "a2"]);
    lock.complete(held).await.expect("complete");
    let next = lock.receive(ARRIVES).await.expect("receive").expect("a2");
    assert_eq!((body(&next).as_str(), next.delivery_count), ("a2", 1));
    assert!(
        t.peek(&path, SubQueue::DeadLetter, None, 0, 10)
            .await
            .expect("peek dead letters")
            .is_empty()
    );
}

/// A scheduled message is invisible until its time; a cancelled one never
/// arrives; cancelling twice is not found.
pub async fn scheduled_message_arrives_at_its_time_and_cancel_stops_it<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "sc", "s", SubscriptionSettings::default()).await;
    let at = h.now() + Duration::from_secs(60);
    let mut later = msg(None, "later");
    later.scheduled_enqueue_time = Some(at);
    let mut cancelled = msg(None, "cancelled");
    cancelled.scheduled_enqueue_time = Some(at);
    let seqs = t
        .publish("sc", vec![later, cancelled])
        .await
        .expect("schedule");
    t.cancel_scheduled("sc", seqs[1]).await.expect("cancel");
    assert_eq!(
        t.cancel_scheduled("sc", seqs[1])
            .await
            .expect_err("cancelled already")
            .kind(),
        ErrorKind::NotFound
    );
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    assert!(
        r.receive(ABSENT).await.expect("receive").is_none(),
        "not yet"
    );
    if !h.advance(Duration::from_secs(59)) {
        return;
    }
    assert!(
        r.receive(ABSENT).await.expect("receive").is_none(),
        "not yet"
    );
    h.advance(Duration::from_secs(1));
    let m = r.receive(ARRIVES).await.expect("receive").expect("arrived");
    assert_eq!(body(&m), "later");
    r.complete(m).await.expect("complete");
    assert!(
        r.receive(ABSENT).await.expect("receive").is_none(),
        "cancelled one never comes"
    );
}

/// With dead-lettering on expiry, an expired message moves to the DLQ with
/// reason `TTLExpiredException`.
pub async fn ttl_expiry_dead_letters_when_the_subscription_asks<H: Harness>(h: H) {
    let t = h.transport();
    let settings = SubscriptionSettings::sessions()
        .with_default_message_ttl(Duration::from_secs(3600))
        .with_dead_letter_on_expiry(true);
    let path = topic_with_sub(t, "tt", "s", settings).await;
    let mut short = msg(Some("k"), "short");
    short.time_to_live = Some(Duration::from_secs(10));
    t.publish("tt", vec![short, msg(Some("k"), "long")])
        .await
        .expect("publish");
    if !h.advance(Duration::from_secs(11)) {
        return;
    }
    let dlq = t.receiver(&path, SubQueue::DeadLetter).await.expect("dlq");
    let dead = dlq
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("expired");
    assert_eq!(body(&dead), "short");
    assert_eq!(
        dead.dead_letter_reason.as_deref(),
        Some("TTLExpiredException")
    );
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("long");
    assert_eq!(
        body(&m),
        "long",
        "the subscription TTL (1 h) has not passed"
    );
}

/// Without dead-lettering on expiry, an expired message is dropped.
pub async fn ttl_expiry_drops_silently_otherwise<H: Harness>(h: H) {
    let t = h.transport();
    t.create_topic(
        "tx",
        TopicSettings::default().with_default_message_ttl(Duration::from_secs(5)),
    )
    .await
    .expect("topic");
    let path = SubscriptionPath::new("tx", "s");
    t.create_subscription(&path, SubscriptionSettings::default())
        .await
        .expect("sub");
    t.publish("tx", vec![msg(None, "gone")])
        .await
        .expect("publish");
    if !h.advance(Duration::from_secs(6)) {
        return;
    }
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    assert!(
        r.receive(ABSENT).await.expect("receive").is_none(),
        "expired"
    );
    let dlq = t.receiver(&path, SubQueue::DeadLetter).await.expect("dlq");
    assert!(
        dlq.receive(ABSENT).await.expect("receive").is_none(),
        "dropped, not dead-lettered"
    );
}

/// Auto-forward carries a copy through a chain of topics; a loop stops at
/// the hop limit in the forwarding subscription's dead-letter queue.
pub async fn auto_forward_chains_and_stops_at_the_hop_limit<H: Harness>(h: H) {
    let t = h.transport();
    for topic in ["a", "b", "c"] {
        t.create_topic(topic, TopicSettings::default())
            .await
            .expect("topic");
    }
    let end = topic_with_sub(t, "c", "end", SubscriptionSettings::default()).await;
    t.create_subscription(
        &SubscriptionPath::new("b", "to-c"),
        SubscriptionSettings::forwarding_to("c"),
    )
    .await
    .expect("b->c");
    t.create_subscription(
        &SubscriptionPath::new("a", "to-b"),
        SubscriptionSettings::forwarding_to("b"),
    )
    .await
    .expect("a->b");
    t.publish("a", vec![msg(None, "hop")])
        .await
        .expect("publish");
    let r = t.receiver(&end, SubQueue::Main).await.expect("receiver");
    assert_eq!(drain_bodies(&r).await, vec!["hop"]);
    let forwarding = t
        .receiver(&SubscriptionPath::new("a", "to-b"), SubQueue::Main)
        .await
        .expect_err("a forwarding subscription cannot be received from");
    assert_eq!(forwarding.kind(), ErrorKind::Invalid);

    // A loop: x -> y -> x -> ...
    t.create_topic("x", TopicSettings::default())
        .await
        .expect("x");
    t.create_topic("y", TopicSettings::default())
        .await
        .expect("y");
    t.create_subscription(
        &SubscriptionPath::new("y", "to-x"),
        SubscriptionSettings::forwarding_to("x"),
    )
    .await
    .expect("y->x");
    t.create_subscription(
        &SubscriptionPath::new("x", "to-y"),
        SubscriptionSettings::forwarding_to("y"),
    )
    .await
    .expect("x->y");
    t.publish("x", vec![msg(None, "loop")])
        .await
        .expect("publish into a loop");
    let mut dead = Vec::new();
    for path in [
        SubscriptionPath::new("x", "to-y"),
        SubscriptionPath::new("y", "to-x"),
    ] {
        let dlq = t.receiver(&path, SubQueue::DeadLetter).await.expect("dlq");
        while let Some(m) = dlq.receive(ABSENT).await.expect("receive") {
            dead.push(m.dead_letter_reason.clone().unwrap_or_default());
            dlq.complete(m).await.expect("complete");
        }
    }
    assert_eq!(dead, vec!["MaxTransferHopCountExceeded".to_owned()]);
}

/// With duplicate detection, a repeated message id within the window is
/// accepted but not delivered again; after the window it is new again.
pub async fn duplicate_detection_drops_repeats_within_the_window<H: Harness>(h: H) {
    let t = h.transport();
    t.create_topic(
        "dd",
        TopicSettings::default().with_duplicate_detection(Duration::from_secs(600)),
    )
    .await
    .expect("topic");
    let path = SubscriptionPath::new("dd", "s");
    t.create_subscription(&path, SubscriptionSettings::default())
        .await
        .expect("sub");
    let with_id = |id: &str, b: &str| {
        let mut m = msg(None, b);
        m.message_id = Some(id.into());
        m
    };
    let first = t
        .publish("dd", vec![with_id("m1", "first")])
        .await
        .expect("publish");
    let again = t
        .publish("dd", vec![with_id("m1", "dup"), with_id("m2", "other")])
        .await
        .expect("publish duplicate");
    assert_eq!(
        again[0], first[0],
        "a duplicate reports the original's number"
    );
    let r = t.receiver(&path, SubQueue::Main).await.expect("receiver");
    assert_eq!(drain_bodies(&r).await, vec!["first", "other"]);
    if !h.advance(Duration::from_secs(601)) {
        return;
    }
    t.publish("dd", vec![with_id("m1", "new again")])
        .await
        .expect("publish");
    assert_eq!(drain_bodies(&r).await, vec!["new again"]);
}

/// A settlement (publish + session state + complete) commits as one unit:
/// when any part is refused nothing happens; when all are valid all happen.
pub async fn atomic_settlement_applies_all_or_nothing<H: Harness>(h: H) {
    let t = h.transport();
    let path = topic_with_sub(t, "at", "s", SubscriptionSettings::sessions()).await;
    let out = topic_with_sub(t, "out", "all", SubscriptionSettings::default()).await;
    t.publish("at", vec![msg(Some("k"), "in")])
        .await
        .expect("publish");
    let lock = t
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("in");

    let refused = Settlement::complete(m.clone())
        .publish("out", msg(None, "follow-up"))
        .publish("missing-topic", msg(None, "lost?"))
        .set_session_state(Some(b"blocked".to_vec()));
    let error = lock.settle(refused).await.expect_err("a topic is missing");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert_eq!(
        lock.get_state().await.expect("state"),
        None,
        "state unchanged"
    );
    let r = t.receiver(&out, SubQueue::Main).await.expect("receiver");
    if h.atomic_settlement() {
        assert!(
            r.receive(ABSENT).await.expect("receive").is_none(),
            "nothing published"
        );
    } else {
        // Published before the step that failed: there, and only once.
        assert_eq!(drain_bodies(&r).await, vec!["follow-up"]);
    }

    let mut retry = msg(Some("k"), "retry");
    retry.scheduled_enqueue_time = Some(h.now() + Duration::from_secs(300));
    let receipt = lock
        .settle(
            Settlement::complete(m)
                .publish("out", msg(None, "follow-up"))
                .publish("at", retry)
                .set_session_state(Some(b"state".to_vec())),
        )
        .await
        .expect("settles");
    assert_eq!(receipt.sequence_numbers.len(), 2);
    assert_eq!(
        lock.get_state().await.expect("state"),
        Some(b"state".to_vec())
    );
    assert_eq!(drain_bodies(&r).await, vec!["follow-up"]);
    assert!(
        lock.receive(ABSENT).await.expect("receive").is_none(),
        "completed; retry scheduled"
    );
    let topic = t.get_topic("at").await.expect("get").expect("exists");
    assert_eq!(topic.scheduled_message_count, 1);
}

/// Topology admin: create, refuse duplicates, list, delete.
pub async fn admin_creates_lists_and_deletes_topology<H: Harness>(h: H) {
    let t = h.transport();
    t.create_topic("t1", TopicSettings::default())
        .await
        .expect("create");
    assert_eq!(
        t.create_topic("t1", TopicSettings::default())
            .await
            .expect_err("exists")
            .kind(),
        ErrorKind::AlreadyExists
    );
    let path = SubscriptionPath::new("t1", "s1");
    t.create_subscription(
        &path,
        SubscriptionSettings::sessions().with_max_delivery_count(5),
    )
    .await
    .expect("sub");
    assert_eq!(
        t.create_subscription(&path, SubscriptionSettings::default())
            .await
            .expect_err("exists")
            .kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        t.create_subscription(
            &SubscriptionPath::new("t1", "fwd"),
            SubscriptionSettings::forwarding_to("no-such-topic")
        )
        .await
        .expect_err("forward target must exist")
        .kind(),
        ErrorKind::NotFound
    );
    let subs = t.list_subscriptions("t1").await.expect("list");
    assert_eq!(subs.len(), 1);
    assert!(subs[0].settings.requires_session);
    assert_eq!(subs[0].settings.max_delivery_count, 5);
    let topics = t.list_topics().await.expect("list");
    assert_eq!(
        topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        vec!["t1"]
    );
    t.delete_subscription(&path).await.expect("delete sub");
    assert!(t.get_subscription(&path).await.expect("get").is_none());
    t.delete_topic("t1").await.expect("delete topic");
    assert!(t.get_topic("t1").await.expect("get").is_none());
    assert_eq!(
        t.delete_topic("t1").await.expect_err("gone").kind(),
        ErrorKind::NotFound
    );
}

/// A subscription created with its rules has exactly those (no `$Default`),
/// routes by them at once and keeps them across a restart; an invalid
/// filter or a repeated rule name creates nothing.
pub async fn a_subscription_created_with_its_rules_has_exactly_them<H: Harness>(h: H) {
    let t = h.transport();
    t.create_topic("orders", TopicSettings::default())
        .await
        .expect("topic");
    let billing = SubscriptionPath::new("orders", "billing");
    let rules = vec![
        RuleDescription::new("placed", "user.Type = 'OrderPlaced'"),
        RuleDescription::new("cancelled", "user.Type = 'OrderCancelled'")
            .with_action("SET user.Cancelled = 'yes'"),
    ];
    t.create_subscription_with_rules(&billing, SubscriptionSettings::default(), rules.clone())
        .await
        .expect("create with rules");
    assert_eq!(t.list_rules(&billing).await.expect("rules"), rules);

    let broken = SubscriptionPath::new("orders", "broken");
    let error = t
        .create_subscription_with_rules(
            &broken,
            SubscriptionSettings::default(),
            vec![
                RuleDescription::new("fine", "1=1"),
                RuleDescription::new("bad", "user.To = = 'x'"),
            ],
        )
        .await
        .expect_err("malformed filter");
    assert_eq!(error.kind(), ErrorKind::Invalid);
    let twice = SubscriptionPath::new("orders", "twice");
    let error = t
        .create_subscription_with_rules(
            &twice,
            SubscriptionSettings::default(),
            vec![
                RuleDescription::new("r", "1=1"),
                RuleDescription::new("r", "1=0"),
            ],
        )
        .await
        .expect_err("repeated rule name");
    assert_eq!(error.kind(), ErrorKind::Invalid);
    for refused in [&broken, &twice] {
        assert!(
            t.get_subscription(refused).await.expect("get").is_none(),
            "{refused} was created"
        );
    }

    let typed = |event_type: &str| {
        let mut m = msg(None, event_type);
        m.properties.insert("Type".into(), event_type.into());
        m
    };
    t.publish(
        "orders",
        vec![
            typed("OrderPlaced"),
            typed("OrderShipped"),
            typed("OrderCancelled"),
        ],
    )
    .await
    .expect("publish");
    let r = t
        .receiver(&billing, SubQueue::Main)
        .await
        .expect("receiver");
    let mut seen = Vec::new();
    while let Some(m) = r.receive(ABSENT).await.expect("receive") {
        seen.push((
            body(&m),
            m.message.property_str("Cancelled").map(str::to_owned),
        ));
        r.complete(m).await.expect("complete");
    }
    assert_eq!(
        seen,
        [
            ("OrderPlaced".to_owned(), None),
            ("OrderCancelled".to_owned(), Some("yes".to_owned())),
        ]
    );
    drop(r);
    if let Some(h) = h.restart().await {
        assert_eq!(
            h.transport().list_rules(&billing).await.expect("rules"),
            rules
        );
    }
}

/// An inbox record is written in the settlement's commit — not at all when
/// the settlement fails — is seen until it expires, and survives a restart.
pub async fn inbox_records_commit_with_the_settlement_expire_and_survive_restart<H: Harness>(h: H) {
    let path = topic_with_sub(h.transport(), "ib", "s", SubscriptionSettings::sessions()).await;
    let expires = h.now() + Duration::from_secs(3600);
    {
        let t = h.transport();
        t.publish("ib", vec![msg(Some("k"), "1"), msg(Some("k"), "2")])
            .await
            .expect("publish");
        let lock = t
            .accept_session(&path, SessionSelector::Named("k".into()), ARRIVES)
            .await
            .expect("accept");
        let one = lock.receive(ARRIVES).await.expect("receive").expect("1");
        assert!(!t.inbox_contains("billing", "key-1").await.expect("check"));
        lock.settle(Settlement::complete(one).record_inbox("billing", "key-1", expires))
            .await
            .expect("settle");
        assert!(t.inbox_contains("billing", "key-1").await.expect("check"));
        assert!(
            !t.inbox_contains("shipping", "key-1").await.expect("check"),
            "scopes are separate"
        );
        // A settlement that fails records nothing.
        let two = lock.receive(ARRIVES).await.expect("receive").expect("2");
        let bad = Settlement::complete(two)
            .record_inbox("billing", "key-2", expires)
            .publish("no-such-topic", msg(None, "x"));
        assert!(lock.settle(bad).await.is_err());
        assert!(!t.inbox_contains("billing", "key-2").await.expect("check"));
    }
    let Some(h) = h.restart().await else {
        return;
    };
    assert!(
        h.transport()
            .inbox_contains("billing", "key-1")
            .await
            .expect("check after restart")
    );
    if h.advance(Duration::from_secs(3601)) {
        assert!(
            !h.transport()
                .inbox_contains("billing", "key-1")
                .await
                .expect("check after expiry"),
            "an expired record is forgotten"
        );
    }
}
