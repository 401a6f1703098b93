//! A small blocking client of the running host's HTTP API: JSON in and out,
//! every failure turned into a message an operator can act on (which URL
//! could not be reached, what the API refused and why).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
// The header with which a listing says it was cut at its limit while more
// matched: the API's own constant, so the two cannot drift apart.
use nimbus_runtime::api::TRUNCATED_HEADER;
use nimbus_runtime::config::ApiToken;
use serde_json::Value;

use crate::cli_ops::ApiArgs;

/// Where the API listens when nothing says otherwise (the default
/// `[api] listen`).
fn default_api() -> String {
    format!("http://{}", nimbus_runtime::config::DEFAULT_API_LISTEN)
}

/// How long one request may take; operator calls are quick, but a dead-
/// letter listing reads whole queues.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Query parameters: absent values are left out.
pub(crate) type Query<'a> = [(&'a str, Option<String>)];

/// A listing's answer.
pub(crate) struct Listing {
    /// The JSON body.
    pub(crate) value: Value,
    /// The `X-Nimbus-Truncated` header: what has more than it lists.
    pub(crate) truncated: Option<String>,
}

/// The API of one running host.
pub(crate) struct ApiClient {
    base: String,
    agent: ureq::Agent,
    /// `Authorization: Bearer ...`, when a token is known.
    authorization: Option<String>,
}

impl ApiClient {
    /// The client for `--api` / `NIMBUS_API`, else `./nimbus.toml`'s
    /// `[api] listen`, else the default address. It sends the token of
    /// `NIMBUS_API_TOKEN`, else, when the address is `./nimbus.toml`'s,
    /// that file's `[api] token`: a token from the file never goes to an
    /// address given elsewhere.
    pub(crate) fn new(args: &ApiArgs) -> anyhow::Result<ApiClient> {
        let (base, file_token) = match &args.api {
            Some(url) => (api_base(url)?, None),
            None => match from_local_config()? {
                Some((base, token)) => (base, token),
                None => (default_api(), None),
            },
        };
        let token = ApiToken::from_env()
            .map_err(|why| anyhow!("{why}"))?
            .or(file_token);
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .into();
        Ok(ApiClient {
            base,
            agent,
            authorization: token.map(|t| format!("Bearer {}", t.expose())),
        })
    }

    /// `GET path?query`.
    pub(crate) fn get(&self, path: &str, query: &Query<'_>) -> anyhow::Result<Value> {
        self.listing(path, query).map(|listed| listed.value)
    }

    /// `GET path?query` of a listing: the answer and whether the host cut
    /// it at its limit (the `X-Nimbus-Truncated` header, if any).
    pub(crate) fn listing(&self, path: &str, query: &Query<'_>) -> anyhow::Result<Listing> {
        let url = format!("{}{path}", self.base);
        let mut request = self.agent.get(&url);
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        for (key, value) in query {
            if let Some(value) = value {
                request = request.query(*key, value);
            }
        }
        let response = request.call();
        let truncated = response.as_ref().ok().and_then(|r| {
            r.headers()
                .get(TRUNCATED_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
        let value = self.finish(&url, response)?;
        Ok(Listing { value, truncated })
    }

    /// `POST path` with a JSON body.
    pub(crate) fn post<B: serde::Serialize>(&self, path: &str, body: &B) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let body = serde_json::to_string(body).context("encoding the request")?;
        // Said here: the host refuses it, and for a body much larger it
        // closes the connection before the answer could be read.
        let limit = nimbus_runtime::api::MAX_REQUEST_BODY;
        if body.len() > limit {
            anyhow::bail!(
                "the request is {:.1} MiB; the host's API takes at most {} MiB (an event's data \
                 travels whole in one message: send a reference to large content instead)",
                body.len() as f64 / (1024.0 * 1024.0),
                limit / (1024 * 1024)
            );
        }
        let mut request = self
            .agent
            .post(&url)
            .header("content-type", "application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let response = request.send(body);
        self.finish(&url, response)
    }

    fn finish(
        &self,
        url: &str,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<Value> {
        let mut response = response.map_err(|e| match e {
            ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
                anyhow!(
                    "cannot reach the nimbus host at {}: {e}. Is `nimbus run` running there? \
                     Point --api (or NIMBUS_API) at its API.",
                    self.base
                )
            }
            other => anyhow!("request to {url} failed: {other}"),
        })?;
        let status = response.status();
        let text = response
            .body_mut()
            .read_to_string()
            .with_context(|| format!("reading the answer of {url}"))?;
        let value: Option<Value> = serde_json::from_str(&text).ok();
        if status.is_success() {
            return value.ok_or_else(|| {
                anyhow!(
                    "{url} answered {status} with a body that is not JSON ({}); is --api a \
                     nimbus host?",
                    excerpt(&text)
                )
            });
        }
        let Some(message) = value
            .as_ref()
            .and_then(|v| v.get("error"))
            .and_then(Value::as_str)
        else {
            // Not a nimbus answer (a proxy's or another server's page).
            bail!(
                "{url} answered {status}, not as a nimbus host does ({}); is --api (or \
                 NIMBUS_API) the host's API address?",
                excerpt(&text)
            );
        };
        bail!("the host refused the request ({status}): {message}")
    }
}

/// The start of a body, on one line, for an error message.
fn excerpt(body: &str) -> String {
    const MOST: usize = 120;
    let line = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return "an empty body".to_owned();
    }
    match line.char_indices().nth(MOST) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// `[api] listen` of `./nimbus.toml`, if there is one, and its
/// `[api] token`.
fn from_local_config() -> anyhow::Result<Option<(String, Option<ApiToken>)>> {
    let path = Path::new("nimbus.toml");
    if !path.is_file() {
        return Ok(None);
    }
    let config = nimbus_runtime::Config::load(path)
        .map_err(|e| anyhow!("{e}"))
        .context("reading ./nimbus.toml to find the API (or pass --api)")?;
    let api = config.config.api;
    Ok(Some((format!("http://{}", api.listen), api.token)))
}

/// The API's base URL from `--api`: an `http://` URL, or a bare
/// `host:port` as `[api] listen` writes it. The host serves plain HTTP on
/// loopback, so `https://` is refused here rather than by a TLS error.
fn api_base(given: &str) -> anyhow::Result<String> {
    let given = given.trim().trim_end_matches('/');
    if given.starts_with("https://") {
        bail!(
            "--api '{given}': the host's API serves plain http, not https (e.g. {})",
            default_api()
        );
    }
    if given.starts_with("http://") {
        return Ok(given.to_owned());
    }
    if given.contains("://") || given.is_empty() {
        bail!(
            "--api '{given}' is not an http:// URL or a host:port (e.g. {})",
            default_api()
        );
    }
    Ok(format!("http://{given}"))
}

/// `segment` made safe for a URL path (ids may hold anything).
pub(crate) fn path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::api_base;

    #[test]
    fn api_takes_a_url_or_a_listen_address() {
        assert_eq!(
            api_base("http://127.0.0.1:7300/").unwrap(),
            "http://127.0.0.1:7300"
        );
        // As `[api] listen` writes it.
        assert_eq!(
            api_base(" 127.0.0.1:7391 ").unwrap(),
            "http://127.0.0.1:7391"
        );
        let https = api_base("https://127.0.0.1:7300").unwrap_err().to_string();
        assert!(https.contains("plain http, not https"), "{https}");
        for bad in ["", "ftp://host:21"] {
            let error = api_base(bad).unwrap_err().to_string();
            assert!(
                error.contains("is not an http:// URL or a host:port"),
                "{error}"
            );
        }
    }
}
