//! Configuration: the documented example loads, bad values are named by key path.

use std::time::Duration;

use super::*;
use crate::classifier::Disposition;

fn retry(toml_text: &str) -> Result<RetryConfig, toml::de::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Root {
        #[serde(default)]
        retry: RetryConfig,
    }
    toml::from_str::<Root>(toml_text).map(|r| r.retry)
}

fn errors(toml_text: &str) -> Vec<String> {
    match retry(toml_text).expect("parses").validate() {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Both {
    retry: RetryConfig,
    classifier: ClassifierConfig,
}

#[test]
fn the_documented_example_loads_and_validates() {
    let example: Both =
        toml::from_str(include_str!("../policy_config.example.toml")).expect("example parses");
    let policies = example.retry.validate().expect("example is valid");
    let default = policies.default.as_ref().unwrap();
    assert_eq!(default.max_retries, 3);
    assert_eq!(default.backoff, Backoff::Exponential);
    assert_eq!(default.base_delay, Duration::from_secs(5));
    assert_eq!(default.max_delay, Some(Duration::from_secs(300)));
    assert_eq!(default.jitter, Jitter::Bounded(0.25));
    assert_eq!(policies.event_types.len(), 1);
    assert_eq!(policies.rules.len(), 2);
    let classifier = example.classifier.validate().expect("valid");
    assert_eq!(
        classifier.classify("OutOfStock", None).disposition,
        Disposition::Discard
    );
    assert_eq!(
        classifier
            .classify("OrderValidationFailed", None)
            .disposition,
        Disposition::DeadLetter,
        "the upstream preset is on"
    );
    assert_eq!(
        classifier.classify("Http", None).disposition,
        Disposition::Retry
    );
}

#[test]
fn rp07_a_policy_without_jitter_keys_gets_the_legacy_defaults_and_jitter_round_trips() {
    let config = retry(
        r#"
        [retry.default]
        max_retries = 3
        backoff = "exponential"
        base_delay = "5s"
        max_delay = "1m"
        "#,
    )
    .unwrap();
    let policy = config.validate().unwrap().default.unwrap();
    assert_eq!(policy.backoff, Backoff::Exponential);
    assert_eq!(policy.base_delay, Duration::from_secs(5));
    assert_eq!(policy.max_delay, Some(Duration::from_secs(60)));
    assert_eq!(policy.jitter, Jitter::None);
    assert_eq!(config.default.as_ref().unwrap().jitter_factor, 0.25);

    let with_jitter = RetryConfig {
        default: Some(PolicyConfig {
            jitter: JitterConfig::Bounded,
            jitter_factor: 0.5,
            ..config.default.clone().unwrap()
        }),
        ..config
    };
    let text = toml::to_string(&with_jitter).expect("serializes");
    let back: RetryConfig = toml::from_str(&text).expect("reads back");
    assert_eq!(back, with_jitter, "{text}");
}

#[test]
fn an_empty_section_means_no_retry() {
    let policies = retry("").unwrap().validate().unwrap();
    assert_eq!(policies, RetryPolicies::default());
}

#[test]
fn rp13_a_rule_without_a_policy_or_without_a_match_is_rejected() {
    let err = retry(
        r#"
        [[retry.rules]]
        contains = "timeout"
        "#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("missing field `policy`"), "{err}");

    assert_eq!(
        errors(
            r#"
            [[retry.rules]]
            policy = { max_retries = 1 }
            "#
        ),
        ["retry.rules[0]: set exactly one of `error_type` or `contains`"]
    );
    assert_eq!(
        errors(
            r#"
            [[retry.rules]]
            error_type = "A"
            contains = "b"
            policy = { max_retries = 1 }
            "#
        ),
        ["retry.rules[0]: set exactly one of `error_type` or `contains`"]
    );
}

#[test]
fn an_invalid_jitter_factor_is_named_by_its_key_path() {
    assert_eq!(
        errors(
            r#"
            [retry.event_types.OrderPlaced]
            jitter = "bounded"
            jitter_factor = -0.5
            "#
        ),
        ["retry.event_types.OrderPlaced.jitter_factor: must be a finite number ≥ 0"]
    );
    assert_eq!(
        errors(
            r#"
            [retry.default]
            jitter_factor = nan
            [[retry.rules]]
            contains = "x"
            policy = { jitter_factor = inf }
            "#
        ),
        [
            "retry.default.jitter_factor: must be a finite number ≥ 0",
            "retry.rules[0].policy.jitter_factor: must be a finite number ≥ 0",
        ],
        "every bad value is reported, not just the first"
    );
}

#[test]
fn event_types_differing_only_in_case_are_rejected() {
    let found = errors(
        r#"
        [retry.event_types.OrderPlaced]
        max_retries = 1
        [retry.event_types.orderplaced]
        max_retries = 2
        "#,
    );
    assert_eq!(
        found,
        [
            "retry.event_types.orderplaced: same event type as 'OrderPlaced' (names are compared ignoring case)"
        ]
    );
    let quoted = errors(
        r#"
        [retry.event_types."Order Placed"]
        max_retries = 1
        jitter_factor = -1.0
        "#,
    );
    assert_eq!(
        quoted,
        [r#"retry.event_types."Order Placed".jitter_factor: must be a finite number ≥ 0"#]
    );
}

#[test]
fn bad_patterns_and_scopes_are_named() {
    assert_eq!(
        errors(
            r#"
            [[retry.rules]]
            error_type = "Partner["
            event_types = []
            policy = { max_retries = 1 }
            "#
        ),
        [
            "retry.rules[0].error_type: invalid pattern 'Partner[': invalid range pattern",
            "retry.rules[0].event_types: must name at least one event type (omit it to apply to all)",
        ]
    );
}

#[test]
fn unknown_keys_and_bad_durations_are_refused_by_name() {
    let err = retry(
        r#"
        [retry.default]
        max_retry = 3
        "#,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown field `max_retry`"),
        "{err}"
    );
    let err = retry(
        r#"
        [retry.default]
        base_delay = "5 parsecs"
        "#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("base_delay"), "{err}");
    let err = retry(
        r#"
        [retry.default]
        backoff = "quadratic"
        "#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("quadratic"), "{err}");
}

#[test]
fn classifier_configuration_is_validated_by_key_path() {
    let config: ClassifierConfig = toml::from_str(
        r#"
        default = "discard"
        [[rules]]
        error_type = "Fine"
        disposition = "dead-letter"
        [[rules]]
        error_type = "[oops"
        disposition = "retry"
        [[rules]]
        error_type = "Scoped"
        event_types = [""]
        disposition = "discard"
        "#,
    )
    .unwrap();
    let err = config.validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "classifier.rules[1].error_type: invalid pattern '[oops': invalid range pattern\n\
         classifier.rules[2].event_types[0]: must not be empty"
    );
    let err = toml::from_str::<ClassifierConfig>("default = \"explode\"").unwrap_err();
    assert!(err.to_string().contains("explode"), "{err}");
    let ok: ClassifierConfig = toml::from_str(
        r#"
        default = "discard"
        [[rules]]
        error_type = "Fine"
        disposition = "dead_letter"
        "#,
    )
    .unwrap();
    let classifier = ok.validate().unwrap();
    assert_eq!(classifier.default, Disposition::Discard);
    assert_eq!(
        classifier.classify("fine", None).disposition,
        Disposition::DeadLetter
    );
    assert_eq!(
        classifier.classify("ValidationError", None).disposition,
        Disposition::Discard,
        "the upstream preset is opt-in"
    );
}

#[test]
fn a_cap_below_the_first_delay_is_refused_naming_both() {
    let config: RetryConfig = toml::from_str(
        r#"
        [default]
        max_retries = 3
        base_delay = "10m"
        max_delay = "1s"
        "#,
    )
    .unwrap();
    let errors = config.validate().unwrap_err().to_string();
    assert!(
        errors.contains("retry.default.max_delay") && errors.contains("below base_delay (10m)"),
        "{errors}"
    );
}

/// Issue 28: `base_delay = "3000000d"` passed `nimbus check`, and the
/// retry it scheduled panicked the engine and the operator API.
#[test]
fn a_delay_over_the_maximum_is_refused_naming_its_key() {
    let errors = errors(
        r#"
        [retry.default]
        max_retries = 3
        base_delay = "3000000d"

        [retry.event_types.OrderPlaced]
        max_retries = 1
        base_delay = "1m"
        max_delay = "366days"

        [[retry.rules]]
        error_type = "Partner*"
        policy = { max_retries = 1, base_delay = "365days" }
        "#,
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(
        errors[0]
            .starts_with("retry.default.base_delay: 3000000days is over the maximum of 365days"),
        "{errors:#?}"
    );
    assert!(
        errors[1].starts_with("retry.event_types.OrderPlaced.max_delay: 366days is over"),
        "{errors:#?}"
    );
}
