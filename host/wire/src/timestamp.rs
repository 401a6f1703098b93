//! Timestamps as .NET writes them: the round-trip `o` format for
//! `ExpectedBy`, Newtonsoft's trimmed form inside heartbeat JSON.
//!
//! .NET `DateTime` counts 100 ns ticks, so both forms carry at most 7
//! fractional digits; finer precision is truncated on write.
//!
//! Key decision: formatting is total. A time outside .NET's `DateTime`
//! range, [`MIN_TIMESTAMP_TEXT`] to [`MAX_TIMESTAMP_TEXT`], is written as
//! the nearest end of it (a guest's far-future deadline, a corrupt stored
//! value): no value reaching a formatter can panic the host, and what is
//! written is always one a .NET reader parses. Time arithmetic on values
//! from outside ([`saturating_add`]) clamps the same way.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The latest time nimbus writes: .NET's `DateTime.MaxValue`, in the
/// round-trip format. Any later time is written as this.
pub const MAX_TIMESTAMP_TEXT: &str = "9999-12-31T23:59:59.9999999Z";

/// The earliest time nimbus writes: .NET's `DateTime.MinValue`. Any
/// earlier time is written as this.
pub const MIN_TIMESTAMP_TEXT: &str = "0001-01-01T00:00:00.0000000Z";

/// Seconds from the Unix epoch to 9999-12-31T23:59:59Z.
const MAX_SECS: u64 = 253_402_300_799;
/// The last 100 ns tick of that second, in nanoseconds.
const MAX_SUBSEC_NANOS: u32 = 999_999_900;
/// Seconds from 0001-01-01T00:00:00Z to the Unix epoch.
const MIN_SECS_BEFORE_EPOCH: u64 = 62_135_596_800;

/// The time [`MAX_TIMESTAMP_TEXT`] writes.
pub fn max_timestamp() -> SystemTime {
    // Within every platform's `SystemTime` range (Linux, macOS and Windows
    // all reach far past year 9999).
    UNIX_EPOCH + Duration::new(MAX_SECS, MAX_SUBSEC_NANOS)
}

/// `at`, moved into [`MIN_TIMESTAMP_TEXT`]..=[`MAX_TIMESTAMP_TEXT`].
pub fn clamp_timestamp(at: SystemTime) -> SystemTime {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) if after > Duration::new(MAX_SECS, MAX_SUBSEC_NANOS) => max_timestamp(),
        Ok(_) => at,
        Err(before) if before.duration() > Duration::from_secs(MIN_SECS_BEFORE_EPOCH) => {
            // A platform that cannot go back that far cannot hold an `at`
            // earlier than it either.
            UNIX_EPOCH
                .checked_sub(Duration::from_secs(MIN_SECS_BEFORE_EPOCH))
                .unwrap_or(at)
        }
        Err(_) => at,
    }
}

/// `at + by`, at most [`MAX_TIMESTAMP_TEXT`]'s time: for deadlines built
/// from a duration a guest or the configuration chose, where `+` could
/// overflow `SystemTime` (a panic) or leave the writable range.
pub fn saturating_add(at: SystemTime, by: Duration) -> SystemTime {
    at.checked_add(by)
        .map_or_else(max_timestamp, clamp_timestamp)
}

fn utc(at: SystemTime) -> OffsetDateTime {
    // In range after the clamp: `time` holds years -9999..=9999.
    OffsetDateTime::from(clamp_timestamp(at))
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
/// Never panics: a parsed time the platform's `SystemTime` cannot hold is
/// `None`, as text that is no timestamp is.
pub fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let parsed = OffsetDateTime::parse(text.trim(), &Rfc3339).ok()?;
    // Both ends lie within years -9999..=9999: the difference fits.
    let since_epoch = parsed - OffsetDateTime::UNIX_EPOCH;
    let magnitude = Duration::try_from(since_epoch.abs()).ok()?;
    if since_epoch.is_negative() {
        UNIX_EPOCH.checked_sub(magnitude)
    } else {
        UNIX_EPOCH.checked_add(magnitude)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Issue 28: a handler's far-future `expected-within` reached the
    /// formatter and panicked the host, again at every redelivery.
    #[test]
    fn a_time_past_year_9999_is_written_as_the_last_tick_of_9999() {
        let max = max_timestamp();
        assert_eq!(format_round_trip(max), MAX_TIMESTAMP_TEXT);
        assert_eq!(format_newtonsoft(max), MAX_TIMESTAMP_TEXT);
        assert_eq!(parse_timestamp(MAX_TIMESTAMP_TEXT), Some(max));
        let one_tick_later = max + Duration::from_nanos(100);
        assert_eq!(format_round_trip(one_tick_later), MAX_TIMESTAMP_TEXT);
        assert_eq!(format_newtonsoft(one_tick_later), MAX_TIMESTAMP_TEXT);
        let year_10000 =
            parse_timestamp("9999-12-31T23:59:59Z").expect("parses") + Duration::from_secs(1);
        assert_eq!(format_round_trip(year_10000), MAX_TIMESTAMP_TEXT);
        let far = UNIX_EPOCH + Duration::from_millis(u64::MAX);
        assert_eq!(format_round_trip(far), MAX_TIMESTAMP_TEXT);
        assert_eq!(format_newtonsoft(far), MAX_TIMESTAMP_TEXT);
        // The last writable tick itself is kept, not clamped.
        let before = max - Duration::from_nanos(100);
        assert_eq!(format_round_trip(before), "9999-12-31T23:59:59.9999998Z");
    }

    #[test]
    fn a_time_before_year_1_is_written_as_the_first_tick_of_year_1() {
        let first = parse_timestamp(MIN_TIMESTAMP_TEXT).expect("parses");
        assert_eq!(format_round_trip(first), MIN_TIMESTAMP_TEXT);
        let earlier = first - Duration::from_secs(1);
        assert_eq!(format_round_trip(earlier), MIN_TIMESTAMP_TEXT);
        assert_eq!(format_newtonsoft(earlier), "0001-01-01T00:00:00Z");
        let far = UNIX_EPOCH - Duration::from_secs(1 << 40);
        assert_eq!(format_round_trip(far), MIN_TIMESTAMP_TEXT);
    }

    #[test]
    fn adding_a_huge_duration_saturates_at_the_last_writable_tick() {
        let now = SystemTime::now();
        assert_eq!(saturating_add(now, Duration::MAX), max_timestamp());
        assert_eq!(
            saturating_add(now, Duration::from_millis(u64::MAX)),
            max_timestamp()
        );
        let hour = Duration::from_secs(3600);
        assert_eq!(saturating_add(now, hour), now + hour);
    }

    #[test]
    fn a_timestamp_whose_offset_carries_it_past_year_9999_parses_and_writes_clamped() {
        let at = parse_timestamp("9999-12-31T23:59:59.9999999-23:59").expect("parses");
        assert!(at > max_timestamp());
        assert_eq!(format_round_trip(at), MAX_TIMESTAMP_TEXT);
        assert_eq!(parse_timestamp("10000-01-01T00:00:00Z"), None);
    }
}
