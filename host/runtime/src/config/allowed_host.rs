//! `[api] allowed_hosts`: the host names (with a port, or any port) the API
//! answers to besides its own, read and checked with the configuration so
//! a bad entry stops the start naming the key. The API's guard admits
//! requests by them.

/// One host name the API answers to, with its port or any port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    /// Lower case; an IPv6 address in brackets (`[::1]`).
    pub(crate) name: String,
    /// `None`: any port.
    pub(crate) port: Option<u16>,
}

impl AllowedHost {
    /// `name` or `name:port` as `[api] allowed_hosts` writes it.
    ///
    /// # Errors
    ///
    /// When `text` is not a bare host name with an optional port (a URL,
    /// a path, a user or an empty name).
    pub fn parse(text: &str) -> Result<AllowedHost, String> {
        let text = text.trim();
        if text.contains("://") || text.contains(['/', '@', '?', '#']) {
            return Err(format!(
                "'{text}' is not a host name: give the name alone, or name:port (e.g. \
                 \"nimbus.example.com\" or \"nimbus.internal:7300\")"
            ));
        }
        AllowedHost::from_authority(text).ok_or_else(|| {
            format!(
                "'{text}' is not a host name or name:port (e.g. \"nimbus.example.com\" or \
                 \"10.0.0.5:7300\")"
            )
        })
    }

    /// `name[:port]` split, the name lower-cased; `None` when it is not one.
    pub(crate) fn from_authority(text: &str) -> Option<AllowedHost> {
        let parsed: axum::http::uri::Authority = text.parse().ok()?;
        if parsed.as_str().contains('@') || parsed.host().is_empty() {
            return None;
        }
        // What follows the host is nothing or `:port`, and the port a number
        // below 65536: `host:` and `host:abc` parse, and would admit any port.
        let port = match parsed.as_str().get(parsed.host().len()..)? {
            "" => None,
            rest => Some(rest.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        Some(AllowedHost {
            name: parsed.host().to_ascii_lowercase(),
            port,
        })
    }

    /// Whether a request naming `name:port` is for this host.
    pub(crate) fn admits(&self, name: &str, port: u16) -> bool {
        self.name.eq_ignore_ascii_case(name) && self.port.is_none_or(|p| p == port)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::AllowedHost;

    #[test]
    fn allowed_hosts_are_names_with_an_optional_port() {
        let any_port = AllowedHost::parse("Nimbus.Example").unwrap();
        assert!(any_port.admits("nimbus.example", 8443));
        let one_port = AllowedHost::parse("10.0.0.5:7300").unwrap();
        assert!(one_port.admits("10.0.0.5", 7300));
        assert!(!one_port.admits("10.0.0.5", 7301));
        assert!(AllowedHost::parse("[::1]:7300").is_ok());
        for bad in [
            "http://nimbus.example",
            "nimbus.example/api",
            "",
            "user@host",
            "host:",
            "host:99999",
            "host:abc",
        ] {
            let why = AllowedHost::parse(bad).unwrap_err();
            assert!(why.contains("host name"), "{bad}: {why}");
        }
    }
}
