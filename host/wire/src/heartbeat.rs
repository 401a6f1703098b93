//! The heartbeat event the host answers itself (nimbus-semantics.md §12).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::timestamp::format_newtonsoft;

/// Upstream's `Heartbeat` event, fields in declaration order. Times are kept
/// as the JSON the prober wrote; members nimbus does not know are kept too.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Heartbeat {
    #[serde(rename = "ForwardSendTime", default)]
    forward_send_time: Option<Value>,
    #[serde(rename = "ForwardReceivedTime", default)]
    forward_received_time: Option<Value>,
    #[serde(rename = "BackwardSendTime", default)]
    backward_send_time: Option<Value>,
    #[serde(rename = "BackwardReceivedTime", default)]
    backward_received_time: Option<Value>,
    #[serde(rename = "Endpoint", default)]
    endpoint: Option<String>,
    #[serde(rename = "SdkVersion", default)]
    sdk_version: Option<String>,
    #[serde(flatten)]
    other: Map<String, Value>,
}

/// The probe's heartbeat JSON (a fresh heartbeat when blank or malformed)
/// with `ForwardReceivedTime = BackwardSendTime = now`, `Endpoint` and
/// `SdkVersion` stamped.
pub(crate) fn stamp_heartbeat(
    probe_json: Option<&str>,
    now: SystemTime,
    endpoint: Option<&str>,
    sdk_version: &str,
) -> String {
    let mut heartbeat = probe_json
        .and_then(|json| serde_json::from_str::<Heartbeat>(json).ok())
        .unwrap_or_default();
    let stamp = Value::String(format_newtonsoft(now));
    heartbeat.forward_received_time = Some(stamp.clone());
    heartbeat.backward_send_time = Some(stamp);
    heartbeat.endpoint = endpoint.map(str::to_owned);
    heartbeat.sdk_version = Some(sdk_version.to_owned());
    // Serializing JSON values and strings cannot fail.
    serde_json::to_string(&heartbeat).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timestamp::parse_timestamp;

    #[test]
    fn stamps_the_probe_and_keeps_what_it_does_not_know() {
        let now = parse_timestamp("2026-11-30T10:00:01.5Z").expect("time");
        let probe = r#"{"ForwardSendTime":"2026-11-30T10:00:00Z","ForwardReceivedTime":null,"BackwardSendTime":null,"BackwardReceivedTime":null,"Endpoint":null,"SdkVersion":null,"Probe":7}"#;
        let stamped = stamp_heartbeat(Some(probe), now, Some("billing"), "0.1.0");
        assert_eq!(
            stamped,
            r#"{"ForwardSendTime":"2026-11-30T10:00:00Z","ForwardReceivedTime":"2026-11-30T10:00:01.5Z","BackwardSendTime":"2026-11-30T10:00:01.5Z","BackwardReceivedTime":null,"Endpoint":"billing","SdkVersion":"0.1.0","Probe":7}"#
        );
    }

    #[test]
    fn a_blank_or_malformed_probe_gets_a_fresh_heartbeat() {
        let now = parse_timestamp("2026-11-30T10:00:01Z").expect("time");
        let expected = r#"{"ForwardSendTime":null,"ForwardReceivedTime":"2026-11-30T10:00:01Z","BackwardSendTime":"2026-11-30T10:00:01Z","BackwardReceivedTime":null,"Endpoint":"billing","SdkVersion":"0.1.0"}"#;
        assert_eq!(
            stamp_heartbeat(None, now, Some("billing"), "0.1.0"),
            expected
        );
        assert_eq!(
            stamp_heartbeat(Some("[1"), now, Some("billing"), "0.1.0"),
            expected
        );
    }
}
