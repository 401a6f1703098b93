//! The failure classifier: rules, the upstream preset, scopes, patterns.

use super::*;

fn rule(pattern: &str, disposition: Disposition) -> ClassifierRule {
    ClassifierRule {
        error_type: ErrorTypePattern::new(pattern).unwrap(),
        event_types: None,
        disposition,
    }
}

#[test]
fn without_rules_every_failure_is_retried() {
    let classifier = Classifier::default();
    for error_type in ["ValidationError", "Trap", "Timeout", "MemoryLimit", ""] {
        let c = classifier.classify(error_type, Some("OrderPlaced"));
        assert_eq!(c.disposition, Disposition::Retry, "{error_type}");
        assert_eq!(c.rule, None);
        assert_eq!(c.decided_by(), "nimbus classifier default");
    }
}

#[test]
fn the_upstream_preset_dead_letters_upstreams_permanent_types() {
    let classifier = Classifier {
        rules: upstream_permanent_rules(),
        default: Disposition::Retry,
    };
    for permanent in [
        "OrderValidationFailed",
        "JsonSerializationException",
        "deserializationerror",
        "ValidationException",
        "FormatException",
        "InvalidCastException",
        "ArgumentException",
        "argumentnullexception",
        "ArgumentOutOfRangeException",
        "NotSupportedException",
        "InvalidPayload",
    ] {
        assert_eq!(
            classifier.classify(permanent, None).disposition,
            Disposition::DeadLetter,
            "{permanent}"
        );
    }
    for retried in [
        "HttpRequestException",
        "PartnerUnavailable",
        "Trap",
        "Timeout",
        "Argument",
    ] {
        assert_eq!(
            classifier.classify(retried, None).disposition,
            Disposition::Retry,
            "{retried}"
        );
    }
}

#[test]
fn first_matching_rule_wins_and_names_itself() {
    let classifier = Classifier {
        rules: vec![
            rule("OutOfStock", Disposition::Discard),
            rule("Out*", Disposition::DeadLetter),
        ],
        default: Disposition::Retry,
    };
    let c = classifier.classify("outofstock", None);
    assert_eq!(c.disposition, Disposition::Discard);
    assert_eq!(c.decided_by(), "nimbus classifier rule 'OutOfStock'");
    assert_eq!(
        classifier.classify("OutOfCredit", None).disposition,
        Disposition::DeadLetter
    );
}

#[test]
fn scoped_rules_apply_only_to_their_event_types() {
    let classifier = Classifier {
        rules: vec![ClassifierRule {
            event_types: Some(vec!["InvoiceRequested".into()]),
            ..rule("Legacy*", Disposition::DeadLetter)
        }],
        default: Disposition::Discard,
    };
    assert_eq!(
        classifier
            .classify("LegacyError", Some("invoicerequested"))
            .disposition,
        Disposition::DeadLetter
    );
    assert_eq!(
        classifier
            .classify("LegacyError", Some("OrderPlaced"))
            .disposition,
        Disposition::Discard
    );
    assert_eq!(
        classifier.classify("LegacyError", None).disposition,
        Disposition::Discard
    );
}

#[test]
fn patterns_are_exact_or_glob_ignoring_case() {
    let exact = ErrorTypePattern::new("PartnerUnavailable").unwrap();
    assert!(exact.matches("partnerunavailable"));
    assert!(!exact.matches("PartnerUnavailableX"));
    let glob = ErrorTypePattern::new("Partner?navailable").unwrap();
    assert!(glob.matches("PARTNERUNAVAILABLE"));
    let class = ErrorTypePattern::new("Err[0-9]").unwrap();
    assert!(class.matches("Err7"));
    assert!(!class.matches("ErrX"));
    let err = ErrorTypePattern::new("Bad[").unwrap_err();
    assert!(
        err.to_string().starts_with("invalid pattern 'Bad[': "),
        "{err}"
    );
    assert!(ErrorTypePattern::new("  ").is_err());
}
