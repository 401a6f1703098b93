//! The retry-policy scenarios of scenarios.md §6 (RP-*), with SEMANTICS.md
//! winning where they differ, plus retry-after hints and overflow.

use std::time::{Duration, SystemTime};

use nimbus_wire::{Failure, NimbusMessage, build};

use super::*;
use crate::session_state::{self, Entry, Verdict};

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

fn never() -> impl FnMut() -> f64 {
    || panic!("the random source must not be consulted")
}

fn fixed(value: f64) -> impl FnMut() -> f64 {
    move || value
}

fn policy(backoff: Backoff, base: Duration) -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        backoff,
        base_delay: base,
        ..RetryPolicy::default()
    }
}

#[test]
fn rp01_backoff_without_jitter_keeps_upstream_values() {
    let mut rng = never();
    assert_eq!(
        policy(Backoff::Fixed, 5 * SECOND).delay(3, &mut rng),
        5 * SECOND
    );
    assert_eq!(
        policy(Backoff::Linear, 5 * SECOND).delay(2, &mut rng),
        15 * SECOND
    );
    assert_eq!(
        policy(Backoff::Exponential, 5 * SECOND).delay(3, &mut rng),
        40 * SECOND
    );
    let capped = RetryPolicy {
        max_delay: Some(MINUTE),
        ..policy(Backoff::Exponential, 5 * SECOND)
    };
    assert_eq!(capped.delay(6, &mut rng), MINUTE);
    let ninety = policy(Backoff::Fixed, 90 * SECOND);
    assert_eq!(whole_minutes(ninety.delay(0, &mut rng)), 2);
    assert_eq!(RetryPolicy::default().jitter, Jitter::None);
    assert_eq!(DEFAULT_BOUNDED_JITTER_FACTOR, 0.25);
}

#[test]
fn rp02_full_jitter_stays_within_d_to_2d() {
    let full = RetryPolicy {
        jitter: Jitter::Full,
        ..policy(Backoff::Fixed, 10 * SECOND)
    };
    assert_eq!(full.delay(0, &mut fixed(0.5)), 15 * SECOND);
    let just_below_one = 1.0 - f64::EPSILON;
    let high = full.delay(0, &mut fixed(just_below_one));
    assert!(high < 20 * SECOND && high > 19 * SECOND, "{high:?}");
    let mut random = StdRandom::new();
    for _ in 0..100 {
        let delay = full.delay(0, &mut random);
        assert!(
            (10 * SECOND..20 * SECOND).contains(&delay),
            "{delay:?} outside [10s, 20s)"
        );
    }
}

#[test]
fn rp02_a_random_source_out_of_range_is_clamped_not_trusted() {
    let full = RetryPolicy {
        jitter: Jitter::Full,
        ..policy(Backoff::Fixed, 10 * SECOND)
    };
    assert!(full.delay(0, &mut fixed(1.0)) < 20 * SECOND);
    assert!(full.delay(0, &mut fixed(7.0)) < 20 * SECOND);
    assert_eq!(full.delay(0, &mut fixed(-1.0)), 10 * SECOND);
    assert_eq!(full.delay(0, &mut fixed(f64::NAN)), 10 * SECOND);
}

#[test]
fn rp04_max_delay_caps_after_jitter() {
    let base = policy(Backoff::Fixed, 10 * SECOND);
    let full = RetryPolicy {
        jitter: Jitter::Full,
        ..base.clone()
    };
    assert_eq!(full.delay(0, &mut fixed(0.5)), 15 * SECOND);
    let full_capped = RetryPolicy {
        max_delay: Some(12 * SECOND),
        ..full
    };
    assert_eq!(full_capped.delay(0, &mut fixed(0.5)), 12 * SECOND);
    let bounded_capped = RetryPolicy {
        jitter: Jitter::Bounded(0.5),
        max_delay: Some(12 * SECOND),
        ..base.clone()
    };
    assert_eq!(bounded_capped.delay(0, &mut fixed(0.5)), 12 * SECOND);
    let bounded = RetryPolicy {
        jitter: Jitter::Bounded(0.5),
        ..base
    };
    assert_eq!(
        bounded.delay(0, &mut fixed(0.5)),
        12_500 * Duration::from_millis(1)
    );
}

#[test]
fn rp05_max_delay_caps_jitter_that_would_overflow() {
    let five_minutes = 5 * MINUTE;
    let huge_full = RetryPolicy {
        base_delay: Duration::MAX - SECOND,
        jitter: Jitter::Full,
        max_delay: Some(five_minutes),
        ..RetryPolicy::default()
    };
    assert_eq!(huge_full.delay(0, &mut fixed(0.9)), five_minutes);
    let max_factor = RetryPolicy {
        base_delay: 10 * SECOND,
        jitter: Jitter::Bounded(f64::MAX),
        max_delay: Some(five_minutes),
        ..RetryPolicy::default()
    };
    assert_eq!(max_factor.delay(0, &mut fixed(0.5)), five_minutes);
    assert_eq!(max_factor.delay(0, &mut fixed(0.0)), 10 * SECOND);
}

#[test]
fn overflowing_backoff_saturates_instead_of_panicking() {
    let exponential = policy(Backoff::Exponential, MINUTE);
    let mut rng = never();
    assert_eq!(exponential.delay(u32::MAX, &mut rng), Duration::MAX);
    assert_eq!(exponential.delay(200, &mut rng), Duration::MAX);
    let linear = policy(Backoff::Linear, Duration::MAX);
    assert_eq!(linear.delay(u32::MAX, &mut rng), Duration::MAX);
    let capped = RetryPolicy {
        max_delay: Some(MINUTE * 30),
        ..exponential
    };
    assert_eq!(capped.delay(u32::MAX, &mut rng), MINUTE * 30);
    let zero = policy(Backoff::Exponential, Duration::ZERO);
    assert_eq!(zero.delay(u32::MAX, &mut rng), Duration::ZERO);
    let jittered = RetryPolicy {
        jitter: Jitter::Full,
        ..policy(Backoff::Exponential, MINUTE)
    };
    assert_eq!(jittered.delay(500, &mut fixed(0.5)), Duration::MAX);
    assert_eq!(
        whole_minutes(Duration::MAX),
        Duration::MAX.as_secs().div_ceil(60)
    );
}

#[test]
fn an_invalid_bounded_factor_adds_no_jitter_instead_of_failing_after_settlement() {
    // Configuration rejects these at start (F17); the math stays total anyway.
    for factor in [f64::NAN, -1.0, f64::INFINITY] {
        let p = RetryPolicy {
            jitter: Jitter::Bounded(factor),
            ..policy(Backoff::Fixed, 10 * SECOND)
        };
        assert_eq!(p.delay(0, &mut fixed(0.5)), 10 * SECOND, "{factor}");
    }
}

#[test]
fn retry_after_hint_delays_to_the_longer_capped_at_max_delay() {
    let p = RetryPolicy {
        max_delay: Some(Duration::from_secs(3600)),
        ..policy(Backoff::Fixed, 5 * SECOND)
    };
    let mut rng = never();
    assert_eq!(p.delay_with_hint(0, None, &mut rng), 5 * SECOND);
    assert_eq!(
        p.delay_with_hint(0, Some(30 * SECOND), &mut rng),
        30 * SECOND
    );
    assert_eq!(p.delay_with_hint(0, Some(SECOND), &mut rng), 5 * SECOND);
    assert_eq!(
        p.delay_with_hint(0, Some(Duration::from_secs(7200)), &mut rng),
        Duration::from_secs(3600)
    );
    let uncapped = policy(Backoff::Fixed, 5 * SECOND);
    assert_eq!(
        uncapped.delay_with_hint(0, Some(Duration::from_secs(7200)), &mut rng),
        Duration::from_secs(7200)
    );
}

#[test]
fn the_budget_decides_with_retry_count_below_max_retries() {
    let p = policy(Backoff::Fixed, 5 * SECOND);
    let mut rng = never();
    assert_eq!(p.next_retry(0, None, &mut rng), Some(5 * SECOND));
    assert_eq!(p.next_retry(2, None, &mut rng), Some(5 * SECOND));
    assert_eq!(
        p.next_retry(3, Some(MINUTE), &mut rng),
        None,
        "spent, hint or not"
    );
    assert!(
        !RetryPolicy::default().allows_retry(0),
        "a default policy never retries"
    );
}

fn with_default(default: Option<RetryPolicy>) -> RetryPolicies {
    RetryPolicies {
        default,
        ..RetryPolicies::default()
    }
}

#[test]
fn rp08_no_configuration_means_no_retry_and_a_lone_default_always_applies() {
    let failure = Failure::new("Anything", "at all");
    assert_eq!(
        RetryPolicies::default().policy_for(Some("OrderPlaced"), &failure),
        None
    );
    let default = policy(Backoff::Fixed, MINUTE);
    let policies = with_default(Some(default.clone()));
    for event_type in [Some("OrderPlaced"), Some("Other"), None] {
        let found = policies.policy_for(event_type, &failure).unwrap();
        assert_eq!(found.policy, &default);
        assert_eq!(found.source, PolicySource::Default);
    }
}

fn text_rule(text: &str, scope: Option<&[&str]>, base: Duration) -> ErrorRule {
    ErrorRule {
        matches: ErrorMatch::Text(text.to_owned()),
        event_types: scope.map(|s| s.iter().map(|t| (*t).to_owned()).collect()),
        policy: policy(Backoff::Fixed, base),
    }
}

fn type_rule(pattern: &str, base: Duration) -> ErrorRule {
    ErrorRule {
        matches: ErrorMatch::ErrorType(ErrorTypePattern::new(pattern).unwrap()),
        event_types: None,
        policy: policy(Backoff::Fixed, base),
    }
}

#[test]
fn rp10_text_rules_match_ignoring_case_and_beat_the_event_type_policy() {
    let policies = RetryPolicies {
        rules: vec![text_rule("timeout", None, 10 * MINUTE)],
        event_types: vec![("OrderPlaced".into(), policy(Backoff::Fixed, 2 * MINUTE))],
        default: None,
    };
    for message in ["Connection timeout after 30s", "TIMEOUT occurred"] {
        let found = policies
            .policy_for(Some("OrderPlaced"), &Failure::new("HttpError", message))
            .unwrap();
        assert_eq!(found.source, PolicySource::ErrorTextRule(0), "{message}");
        assert_eq!(found.policy.base_delay, 10 * MINUTE);
    }
    let found = policies
        .policy_for(Some("OrderPlaced"), &Failure::new("HttpError", "refused"))
        .unwrap();
    assert_eq!(found.source, PolicySource::EventType("OrderPlaced"));
}

#[test]
fn rp11_a_scoped_rule_applies_only_to_its_event_types() {
    let policies = RetryPolicies {
        rules: vec![text_rule("timeout", Some(&["OrderPlaced"]), 10 * MINUTE)],
        event_types: vec![],
        default: Some(policy(Backoff::Fixed, MINUTE)),
    };
    let failure = Failure::new("Error", "timeout error");
    assert_eq!(
        policies
            .policy_for(Some("orderplaced"), &failure)
            .unwrap()
            .source,
        PolicySource::ErrorTextRule(0),
        "scope compared ignoring case"
    );
    assert_eq!(
        policies
            .policy_for(Some("PaymentCaptured"), &failure)
            .unwrap()
            .source,
        PolicySource::Default
    );
    assert_eq!(
        policies.policy_for(None, &failure).unwrap().source,
        PolicySource::Default
    );
}

#[test]
fn typed_rules_are_tried_before_text_rules_whatever_their_order() {
    let policies = RetryPolicies {
        rules: vec![
            text_rule("partner", None, MINUTE),
            type_rule("Partner*", 5 * MINUTE),
        ],
        ..RetryPolicies::default()
    };
    let found = policies
        .policy_for(
            None,
            &Failure::new("PartnerUnavailable", "credit check said 503"),
        )
        .unwrap();
    assert_eq!(found.source, PolicySource::ErrorTypeRule(1));
    let found = policies
        .policy_for(None, &Failure::new("Http", "partner refused"))
        .unwrap();
    assert_eq!(found.source, PolicySource::ErrorTextRule(0));
}

#[test]
fn event_type_policies_are_found_ignoring_case() {
    let policies = RetryPolicies {
        event_types: vec![("OrderPlaced".into(), policy(Backoff::Linear, MINUTE))],
        ..RetryPolicies::default()
    };
    let failure = Failure::new("E", "m");
    assert!(policies.policy_for(Some("ORDERPLACED"), &failure).is_some());
    assert_eq!(policies.policy_for(Some(""), &failure), None);
    assert_eq!(policies.policy_for(None, &failure), None);
}

fn forwarded() -> NimbusMessage {
    NimbusMessage {
        message_id: Some("msg-1".into()),
        session_id: Some("s1".into()),
        correlation_id: Some("corr-7".into()),
        from: Some("storefront".into()),
        to: Some("billing".into()),
        message_type: nimbus_wire::MessageType::EventRequest,
        event_id: Some("e1".into()),
        event_type_id: Some("OrderPlaced".into()),
        content: Some(nimbus_wire::MessageContent::event(
            nimbus_wire::EventContent::new("OrderPlaced", "{}"),
        )),
        ..NimbusMessage::default()
    }
}

#[test]
fn rp14_a_first_failure_schedules_one_retry_request_with_retry_count_one() {
    let policies = RetryPolicies {
        event_types: vec![(
            "OrderPlaced".into(),
            RetryPolicy {
                max_retries: 3,
                base_delay: MINUTE,
                ..RetryPolicy::default()
            },
        )],
        ..RetryPolicies::default()
    };
    let inbound = forwarded();
    let plan = session_state::after_handler(
        Entry::EventRequest,
        &nimbus_wire::SessionState::default(),
        "e1",
        Verdict::Failed(crate::Disposition::Retry),
    );
    assert_eq!(plan.response, Some(session_state::Response::Error));
    assert!(plan.retry_if_policy_allows);
    let found = policies
        .policy_for(inbound.event_type(), &Failure::new("Boom", "failed"))
        .unwrap();
    let delay = found
        .policy
        .next_retry(inbound.retry_count, None, &mut never())
        .unwrap();
    assert_eq!(delay, MINUTE);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let retry = build::retry_request(&inbound, now + delay);
    assert_eq!(retry.retry_count, 1);
    assert_eq!(retry.scheduled_enqueue_time, Some(now + MINUTE));
}

#[test]
fn rp16_first_retry_delays_per_backoff() {
    let mut rng = never();
    assert_eq!(
        policy(Backoff::Linear, 2 * MINUTE).delay(0, &mut rng),
        2 * MINUTE
    );
    assert_eq!(
        policy(Backoff::Exponential, 3 * MINUTE).delay(0, &mut rng),
        3 * MINUTE
    );
    let capped = RetryPolicy {
        max_delay: Some(5 * MINUTE),
        ..policy(Backoff::Exponential, 10 * MINUTE)
    };
    assert_eq!(capped.delay(0, &mut rng), 5 * MINUTE);
}

#[test]
fn rp17_retry_is_scheduled_with_sub_minute_precision() {
    let p = RetryPolicy {
        max_retries: 1,
        base_delay: 90 * SECOND,
        ..RetryPolicy::default()
    };
    let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
    let delay = p.next_retry(0, None, &mut never()).unwrap();
    let retry = build::retry_request(&forwarded(), now + delay);
    assert_eq!(retry.scheduled_enqueue_time, Some(now + 90 * SECOND));
    assert_eq!(retry.to.as_deref(), Some("Retry"));
    assert_eq!(whole_minutes(delay), 2, "a minute-only sender rounds up");
    assert_eq!(
        p.next_retry(1, None, &mut never()),
        None,
        "budget of one spent"
    );
}

#[test]
fn rp19_a_matching_rule_picks_its_policy_else_the_event_type_policy() {
    let policies = RetryPolicies {
        rules: vec![text_rule("timeout", None, 10 * MINUTE)],
        event_types: vec![("OrderPlaced".into(), policy(Backoff::Fixed, 2 * MINUTE))],
        default: None,
    };
    let mut rng = never();
    let delay = |message: &str, rng: &mut dyn RandomSource| {
        policies
            .policy_for(Some("OrderPlaced"), &Failure::new("Exception", message))
            .unwrap()
            .policy
            .delay(0, rng)
    };
    assert_eq!(delay("Connection timeout occurred", &mut rng), 10 * MINUTE);
    assert_eq!(delay("Null reference in handler", &mut rng), 2 * MINUTE);
}

#[test]
fn rp20_retry_lookup_is_keyed_on_the_property_event_type_and_a_mismatch_never_runs() {
    let mut message = forwarded();
    message.event_type_id = Some("UserPropEventType".into());
    message.content = Some(nimbus_wire::MessageContent::event(
        nimbus_wire::EventContent::new("BodyEventType", "{}"),
    ));
    assert_eq!(message.event_type(), Some("UserPropEventType"));
    let policies = RetryPolicies {
        event_types: vec![
            ("UserPropEventType".into(), policy(Backoff::Fixed, MINUTE)),
            ("BodyEventType".into(), policy(Backoff::Fixed, 2 * MINUTE)),
        ],
        ..RetryPolicies::default()
    };
    let found = policies
        .policy_for(message.event_type(), &Failure::new("E", "m"))
        .unwrap();
    assert_eq!(found.source, PolicySource::EventType("UserPropEventType"));
    // SEMANTICS.md §2.1 wins: such a message is dead-lettered before any handler runs.
    assert!(matches!(
        message.validate(),
        Err(nimbus_wire::Defect::EventTypeMismatch { .. })
    ));
}

#[test]
fn rp26_text_rules_match_the_pinned_error_text_type_then_message() {
    let policies = RetryPolicies {
        rules: vec![text_rule("Timeout", None, MINUTE)],
        ..RetryPolicies::default()
    };
    let failure = Failure::new("TimeoutException", "the partner did not answer");
    assert_eq!(
        failure.text(),
        "TimeoutException: the partner did not answer"
    );
    assert_eq!(
        policies.policy_for(None, &failure).unwrap().source,
        PolicySource::ErrorTextRule(0),
        "the type name is part of the error text"
    );
    // Only "{type}: {message}": nothing else (no stack, no host detail) can match.
    let unrelated = Failure::new("PartnerUnavailable", "503 from at Handler.Timeout()");
    assert!(policies.policy_for(None, &unrelated).is_some());
    let none = Failure::new("PartnerUnavailable", "503");
    assert_eq!(policies.policy_for(None, &none), None);
}

#[test]
fn an_empty_text_rule_matches_every_failure_as_upstream() {
    let policies = RetryPolicies {
        rules: vec![text_rule("", None, MINUTE)],
        ..RetryPolicies::default()
    };
    assert!(policies.policy_for(None, &Failure::new("A", "b")).is_some());
}
