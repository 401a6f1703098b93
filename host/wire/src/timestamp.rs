//! Timestamps as .NET writes them: the round-trip `o` format for
//! `ExpectedBy`, Newtonsoft's trimmed form inside heartbeat JSON.
//!
//! .NET `DateTime` counts 100 ns ticks, so both forms carry at most 7
//! fractional digits; finer precision is truncated on write.

use std::time::SystemTime;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

fn utc(at: SystemTime) -> OffsetDateTime {
    OffsetDateTime::from(at)
}

fn date_time_prefix(t: &OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// `2026-11-30T10:15:00.0000000Z`: .NET's round-trip `o` format for a UTC
/// `DateTime`, always 7 fractional digits.
pub fn format_round_trip(at: SystemTime) -> String {
    let t = utc(at);
    format!("{}.{:07}Z", date_time_prefix(&t), t.nanosecond() / 100)
}

/// `2026-11-30T10:15:00Z` or `2026-11-30T10:15:00.25Z`: Newtonsoft's default
/// `DateTime` format (`yyyy-MM-ddTHH:mm:ss.FFFFFFFK`), trailing zero digits
/// of the fraction dropped.
pub fn format_newtonsoft(at: SystemTime) -> String {
    let t = utc(at);
    let ticks = t.nanosecond() / 100;
    if ticks == 0 {
        return format!("{}Z", date_time_prefix(&t));
    }
    let digits = format!("{ticks:07}");
    format!("{}.{}Z", date_time_prefix(&t), digits.trim_end_matches('0'))
}

/// Milliseconds since the Unix epoch, as the session state and the
/// Resolver store keep times: 0 before the epoch, saturating far after it.
pub fn unix_millis(at: SystemTime) -> i64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Parses an RFC 3339 / ISO-8601 timestamp with an offset (`Z` or `+hh:mm`),
/// any number of fractional digits.
pub fn parse_timestamp(text: &str) -> Option<SystemTime> {
    OffsetDateTime::parse(text.trim(), &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn round_trip_format_has_seven_digits_and_parses_back() {
        let at = parse_timestamp("2026-11-30T10:15:00Z").expect("parses");
        assert_eq!(format_round_trip(at), "2026-11-30T10:15:00.0000000Z");
        let at = at + Duration::from_nanos(123_456_789);
        assert_eq!(format_round_trip(at), "2026-11-30T10:15:00.1234567Z");
        assert_eq!(format_newtonsoft(at), "2026-11-30T10:15:00.1234567Z");
        assert_eq!(
            parse_timestamp(&format_round_trip(at)),
            Some(at - Duration::from_nanos(89))
        );
        assert_eq!(
            format_newtonsoft(at - Duration::from_nanos(23_456_789)),
            "2026-11-30T10:15:00.1Z"
        );
        assert_eq!(
            parse_timestamp("2026-11-30T11:15:00+01:00").map(format_round_trip),
            Some("2026-11-30T10:15:00.0000000Z".to_owned())
        );
        assert_eq!(parse_timestamp("yesterday"), None);
    }
}
