//! What the black-box tests publish and read back: `orders` events through
//! the CLI, and the event id of a record.

use serde_json::{Value, json};

use crate::Run;
use crate::running::RunningHost;

/// An `OrderPlaced` payload for the `orders` example: one line, failing
/// when `fail` (the session then blocks).
pub fn order(id: &str, fail: bool) -> String {
    json!({"OrderId": id, "Customer": "acme", "Total": 10.0, "Fail": fail,
           "Lines": [{"Sku": "A-1", "Quantity": 1, "UnitPrice": 10.0}]})
    .to_string()
}

/// Publishes through the CLI; returns the message id it printed.
#[track_caller]
pub fn publish(host: &RunningHost, event_type: &str, session: &str, data: &str) -> String {
    let run = publish_run(host, event_type, session, data);
    run.expect_code(0);
    let id = run.stdout().trim().to_owned();
    assert!(
        !id.is_empty() && !id.contains('\n'),
        "publish prints one id: {id:?}"
    );
    id
}

/// Runs `nimbus publish` and returns the run, for a test that reads what it
/// said besides the id.
pub fn publish_run(host: &RunningHost, event_type: &str, session: &str, data: &str) -> Run {
    host.cli(&[
        "publish",
        "--event-type",
        event_type,
        "--session",
        session,
        "--data",
        data,
    ])
}

/// The event id of a record from `nimbus events --json`.
pub fn id(record: &Value) -> String {
    record["event_id"].as_str().expect("event id").to_owned()
}
