//! Dead-letter reasons (exact strings, nimbus-semantics.md §4.10) and the
//! description truncation upstream applies before dead-lettering.

use std::borrow::Cow;

use crate::failure::Failure;

/// The reason for an unexpected failure: unauthorized sender, unsupported
/// message type, a send that failed.
pub const FAILED_TO_HANDLE: &str = "Failed to handle message.";
/// The reason the broker sets when a message reaches its max delivery count
/// (the transport's, since Service Bus defines it).
pub use nimbus_transport::MAX_DELIVERY_COUNT_EXCEEDED;
/// The reason for a DeferredProcessor trigger without a session.
pub const NO_SESSION_ID: &str = "No SessionId";
/// nimbus's own reason for a control request that did not come from a
/// nimbus host's Manager (not `From = Manager`, or not signed with the
/// hosts' control key; decision 0141). The description says which.
pub const UNAUTHORIZED_CONTROL: &str = "UnauthorizedControlMessage";

/// The reason for a permanent failure: `Permanent failure: {type}: {message}`.
pub fn permanent_failure_reason(failure: &Failure) -> String {
    format!("Permanent failure: {failure}")
}

/// The longest description upstream writes, in UTF-16 code units.
pub const MAX_DESCRIPTION_UTF16: usize = 4096;
/// What marks a cut description.
pub const TRUNCATION_SUFFIX: &str = "\n...[TRUNCATED]...";

/// Cuts a dead-letter description the way upstream does: over 4096 UTF-16
/// units it keeps the first `4096 - 18` units, shortened back to the last
/// newline when that newline comes after the first one, and appends
/// `"\n...[TRUNCATED]..."`. Never splits a character.
pub fn truncate_description(description: &str) -> Cow<'_, str> {
    if utf16_len(description) <= MAX_DESCRIPTION_UTF16 {
        return Cow::Borrowed(description);
    }
    let budget = MAX_DESCRIPTION_UTF16 - utf16_len(TRUNCATION_SUFFIX);
    let mut units = 0usize;
    let mut end = 0usize;
    for (index, c) in description.char_indices() {
        if units + c.len_utf16() > budget {
            break;
        }
        units += c.len_utf16();
        end = index + c.len_utf8();
    }
    let mut kept = &description[..end];
    if let (Some(first), Some(last)) = (kept.find('\n'), kept.rfind('\n'))
        && last > first
    {
        kept = &kept[..last];
    }
    Cow::Owned(format!("{kept}{TRUNCATION_SUFFIX}"))
}

/// The length of `text` in UTF-16 code units, as .NET counts string length.
pub fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_descriptions_are_kept_whole() {
        let text = "x".repeat(4096);
        assert!(matches!(truncate_description(&text), Cow::Borrowed(_)));
    }

    #[test]
    fn long_descriptions_are_cut_at_the_last_newline_and_marked() {
        let text = format!("head\n{}\ntail{}", "a".repeat(3000), "b".repeat(3000));
        let cut = truncate_description(&text);
        assert_eq!(
            cut,
            format!("head\n{}{}", "a".repeat(3000), TRUNCATION_SUFFIX)
        );
        assert!(utf16_len(&cut) <= MAX_DESCRIPTION_UTF16);
    }

    #[test]
    fn a_single_newline_is_not_a_cut_point() {
        // Only one newline: upstream keeps the full budget rather than cutting back to it.
        let text = format!("head\n{}", "a".repeat(5000));
        let cut = truncate_description(&text);
        assert_eq!(utf16_len(&cut), MAX_DESCRIPTION_UTF16);
        assert!(cut.ends_with(TRUNCATION_SUFFIX));
    }

    #[test]
    fn surrogate_pairs_are_never_split() {
        let text = "😀".repeat(3000); // 6000 UTF-16 units
        let cut = truncate_description(&text);
        assert!(utf16_len(&cut) <= MAX_DESCRIPTION_UTF16);
        assert_eq!(utf16_len(&cut), 4078 + 18);
    }

    #[test]
    fn permanent_reason_names_type_and_message() {
        let reason =
            permanent_failure_reason(&Failure::new("Validation", "Total must be positive"));
        assert_eq!(
            reason,
            "Permanent failure: Validation: Total must be positive"
        );
    }
}
