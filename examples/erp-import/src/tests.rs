//! The handoff, run natively through the SDK's test host.

use std::time::Duration;

use nimbus_guest::testing::{TestEvent, TestHost};
use nimbus_guest::{Outcome, pending_handoff};

use super::ErpImport;

const IMPORT: &str = r#"{"ImportId":"imp-42","Entity":"Customers","Rows":1200}"#;

#[test]
fn an_import_is_handed_off_with_a_job_id_derived_from_the_event() {
    let event = TestEvent::new("ErpImportRequested", IMPORT).event_id("ev-9");
    let run = TestHost::new().handle(&ErpImport, event.clone());
    let expected: Outcome = pending_handoff("DMF import of 1200 Customers rows in flight")
        .external_job_id("dmf-ev-9")
        .expected_within(Duration::from_secs(30 * 60))
        .into();
    assert_eq!(run.result, Ok(expected.clone()));
    // A retry of the same event reports the same job.
    let retry = TestHost::new().handle(&ErpImport, event.retry_count(1));
    assert_eq!(retry.result, Ok(expected));
}

#[test]
fn the_expected_duration_comes_from_config() {
    let run = TestHost::new()
        .config("expected_minutes", "5")
        .handle(&ErpImport, TestEvent::new("ErpImportRequested", IMPORT));
    match run.result {
        Ok(Outcome::PendingHandoff(handoff)) => {
            assert_eq!(handoff.expected_duration(), Some(Duration::from_secs(300)));
        }
        other => panic!("expected a pending handoff, got {other:?}"),
    }
}
