//! The API's optional bearer token: what a valid one looks like, where it
//! comes from (`NIMBUS_API_TOKEN`, else `[api] token`), and how a presented
//! one is compared (in constant time, so the answer's timing tells an
//! attacker nothing of how much of a guess was right).
//!
//! The token is a shared secret, not an identity: whoever holds it may do
//! everything the API offers. It never appears in `Debug` output or in an
//! error message. It lives with the configuration, which reads and checks
//! it; the API's guard only compares.

use std::fmt;

use serde::Deserialize;
use subtle::ConstantTimeEq as _;

/// The environment variable that gives the token; it wins over
/// `[api] token`, so a deployment can keep the secret out of the file.
pub const API_TOKEN_ENV: &str = "NIMBUS_API_TOKEN";

/// The fewest characters a token may have: shorter ones can be guessed.
pub const MIN_TOKEN_LEN: usize = 16;

/// The most characters a token may have (it travels in every request's
/// `Authorization` header).
pub(crate) const MAX_TOKEN_LEN: usize = 256;

/// A bearer token: 16 to 256 visible ASCII characters (no space or control
/// character, so it fits an `Authorization` header as written).
///
/// Read from the file as any text and checked by the configuration's
/// validation (with [`ApiToken::new`]): a TOML error would quote the line,
/// and with it the secret.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct ApiToken(String);

impl ApiToken {
    /// The token `text` is, or why it is not one. The reason never quotes
    /// the text: it is a secret.
    ///
    /// # Errors
    ///
    /// When `text` is too short, too long, or holds a character other than
    /// visible ASCII.
    pub fn new(text: &str) -> Result<ApiToken, String> {
        let length = text.chars().count();
        if length < MIN_TOKEN_LEN {
            return Err(format!(
                "must be at least {MIN_TOKEN_LEN} characters (it has {length}); e.g. the output \
                 of `openssl rand -hex 32`"
            ));
        }
        if length > MAX_TOKEN_LEN {
            return Err(format!(
                "must be at most {MAX_TOKEN_LEN} characters (it has {length})"
            ));
        }
        if let Some(at) = text.chars().position(|c| !c.is_ascii_graphic()) {
            return Err(format!(
                "character {} is not visible ASCII (a token travels in an HTTP header: letters, \
                 digits and punctuation only, no space)",
                at + 1
            ));
        }
        Ok(ApiToken(text.to_owned()))
    }

    /// The token as sent in `Authorization: Bearer ...`.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token, compared in constant time (a
    /// length that differs is told at once: the length is no secret worth
    /// the cost).
    pub fn matches(&self, presented: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(presented).into()
    }

    /// The token `NIMBUS_API_TOKEN` gives, if it is set.
    ///
    /// # Errors
    ///
    /// When it is set but not a valid token (or not Unicode), naming the
    /// variable.
    pub fn from_env() -> Result<Option<ApiToken>, String> {
        match std::env::var(API_TOKEN_ENV) {
            Ok(text) => ApiToken::new(&text)
                .map(Some)
                .map_err(|why| format!("{API_TOKEN_ENV}: {why}")),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!(
                "{API_TOKEN_ENV}: is not valid Unicode (a token is visible ASCII)"
            )),
        }
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::ApiToken;

    #[test]
    fn a_token_is_long_visible_ascii_and_never_shown() {
        let token = ApiToken::new("0123456789abcdef").unwrap();
        assert!(token.matches(b"0123456789abcdef"));
        assert!(!token.matches(b"0123456789abcdeF"));
        assert!(!token.matches(b"0123456789abcde"));
        assert!(!format!("{token:?}").contains("0123"));
        let short = ApiToken::new("secret").unwrap_err();
        assert!(short.contains("at least 16 characters"), "{short}");
        assert!(!short.contains("secret"), "{short}");
        let space = ApiToken::new("0123456789 abcdef").unwrap_err();
        assert!(
            space.contains("character 11 is not visible ASCII"),
            "{space}"
        );
        let long = ApiToken::new(&"x".repeat(257)).unwrap_err();
        assert!(long.contains("at most 256"), "{long}");
    }
}
