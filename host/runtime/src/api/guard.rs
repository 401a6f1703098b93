//! Who may call the API, checked before any route runs: the defence
//! against web pages (CSRF, DNS rebinding) and, when a token is set,
//! against anyone without it.
//!
//! In order, each refusal a JSON error naming the header at fault:
//! 1. `Host` must name this API: a loopback name or the listen address
//!    with its port, or an `[api] allowed_hosts` entry; else 421. A page on
//!    `evil.example` whose name an attacker re-pointed at 127.0.0.1 sends
//!    `Host: evil.example`.
//! 2. An `Origin`, when sent, must name one of the same hosts; else 403.
//!    Browsers send it on cross-origin requests; the CLI and curl send none.
//! 3. With a token set, `Authorization: Bearer <token>`; else 401.
//! 4. A request with a body must say `Content-Type: application/json`;
//!    else 415. A page can POST `text/plain` without asking the server
//!    first (no CORS preflight); it cannot so send `application/json`.
//!
//! `GET /health` skips 1 and 3 (a liveness probe reaches the host by its
//! pod address and holds no secret; it learns only the host's health and
//! version) but not 2 and 4.
//!
//! A request without `Host` is checked by its URI's authority (an
//! absolute-form request line, or HTTP/2); with neither it is refused.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::HttpBody as _;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;
use crate::config::{API_TOKEN_ENV, AllowedHost, ApiToken};

/// What the guard checks requests against.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    hosts: Vec<AllowedHost>,
    /// Shown in refusals: what `Host` may be.
    described: String,
    token: Option<ApiToken>,
}

impl Guard {
    /// The guard of an API listening on `listen` (the bound address: port
    /// 0 is never asked for), answering also to `allowed_hosts` (already
    /// validated; an entry that is not a host is skipped), with `token`.
    pub(crate) fn new(
        listen: SocketAddr,
        allowed_hosts: &[String],
        token: Option<ApiToken>,
    ) -> Guard {
        let port = listen.port();
        let mut hosts: Vec<AllowedHost> = ["localhost", "127.0.0.1", "[::1]"]
            .into_iter()
            .map(|name| AllowedHost {
                name: name.to_owned(),
                port: Some(port),
            })
            .collect();
        // The listen address as written, even 0.0.0.0: the CLI reaching
        // `[api] listen` of nimbus.toml names it so; no page can be served
        // from it but this API's own.
        let listened = AllowedHost {
            name: match listen {
                SocketAddr::V4(v4) => v4.ip().to_string(),
                SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
            },
            port: Some(port),
        };
        let configured = allowed_hosts
            .iter()
            .filter_map(|h| AllowedHost::parse(h).ok());
        for host in std::iter::once(listened).chain(configured) {
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        let described = hosts
            .iter()
            .map(|h| match h.port {
                Some(port) => format!("{}:{port}", h.name),
                None => h.name.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        Guard {
            hosts,
            described,
            token,
        }
    }

    fn admits(&self, name: &str, port: u16) -> bool {
        self.hosts.iter().any(|h| h.admits(name, port))
    }

    /// `Host` (or, in HTTP/2, the URI's authority) names this API.
    fn check_host(&self, request: &Request) -> Result<(), ApiError> {
        let given = match request.headers().get(header::HOST) {
            Some(value) => value.to_str().ok(),
            None => request.uri().authority().map(|a| a.as_str()),
        };
        let Some(given) = given else {
            return Err(misdirected(format!(
                "the request has no Host header (or one that is not ASCII); this API answers \
                 to {} ([api] allowed_hosts adds names)",
                self.described
            )));
        };
        let admitted = AllowedHost::from_authority(given)
            .is_some_and(|a| self.admits(&a.name, a.port.unwrap_or(80)));
        if admitted {
            Ok(())
        } else {
            Err(misdirected(format!(
                "Host header '{}' does not name this API, which answers to {}: add the name \
                 to [api] allowed_hosts if it is meant to reach it",
                printable(given),
                self.described
            )))
        }
    }

    /// An `Origin`, if sent, names one of the admitted hosts.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let text = origin.to_str().unwrap_or("");
        let admitted = text
            .parse::<axum::http::Uri>()
            .ok()
            .and_then(|uri| {
                let default_port = match uri.scheme_str()? {
                    "http" => 80,
                    "https" => 443,
                    _ => return None,
                };
                let site = AllowedHost::from_authority(uri.authority()?.as_str())?;
                Some(self.admits(&site.name, site.port.unwrap_or(default_port)))
            })
            .unwrap_or(false);
        if admitted {
            Ok(())
        } else {
            Err(ApiError::Client {
                status: StatusCode::FORBIDDEN,
                message: format!(
                    "Origin header '{}' is not this API's ({}): requests from other web pages \
                     are refused",
                    printable(text),
                    self.described
                ),
            })
        }
    }

    /// `Authorization: Bearer <token>` when a token is set.
    fn check_token(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let presented = headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes)
            .and_then(|value| {
                let (scheme, rest) = value.split_at_checked(7)?;
                scheme
                    .eq_ignore_ascii_case(b"bearer ")
                    .then(|| rest.trim_ascii())
            });
        let why = match presented {
            Some(presented) if token.matches(presented) => return Ok(()),
            Some(_) => "the Authorization header's bearer token is not this API's",
            None => "this API needs an Authorization: Bearer <token> header",
        };
        Err(ApiError::Client {
            status: StatusCode::UNAUTHORIZED,
            message: format!(
                "{why} (the host's [api] token or {}; the nimbus CLI sends {} or ./nimbus.toml's \
                 [api] token)",
                API_TOKEN_ENV, API_TOKEN_ENV
            ),
        })
    }
}

/// A request with a body says it is JSON.
fn check_content_type(request: &Request) -> Result<(), ApiError> {
    if request.body().size_hint().exact() == Some(0) {
        return Ok(());
    }
    let given = request.headers().get(header::CONTENT_TYPE);
    let is_json = given
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    if is_json {
        return Ok(());
    }
    let said = match given {
        Some(value) => format!(
            "Content-Type '{}'",
            printable(value.to_str().unwrap_or("(not ASCII)"))
        ),
        None => "no Content-Type header".to_owned(),
    };
    Err(ApiError::Client {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        message: format!(
            "the request has a body with {said}; this API takes JSON only: send \
             Content-Type: application/json"
        ),
    })
}

fn misdirected(message: String) -> ApiError {
    ApiError::Client {
        status: StatusCode::MISDIRECTED_REQUEST,
        message,
    }
}

/// A header's text cut short, control characters replaced: it is the
/// caller's and goes back to it (and into a debug log).
fn printable(text: &str) -> String {
    const MOST: usize = 100;
    let mut shown: String = text
        .chars()
        .take(MOST)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().count() > MOST {
        shown.push('…');
    }
    shown
}

/// The middleware: every check, in order, before the route.
pub(crate) async fn check(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    let health = request.uri().path() == "/health" && request.method() == Method::GET;
    let checked = (if health {
        Ok(())
    } else {
        guard.check_host(&request)
    })
    .and_then(|()| guard.check_origin(request.headers()))
    .and_then(|()| {
        if health {
            Ok(())
        } else {
            guard.check_token(request.headers())
        }
    })
    .and_then(|()| check_content_type(&request));
    match checked {
        Ok(()) => next.run(request).await,
        Err(refused) => {
            let unauthorized = matches!(
                &refused,
                ApiError::Client { status, .. } if *status == StatusCode::UNAUTHORIZED
            );
            let mut response = refused.into_response();
            if unauthorized {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::Guard;

    #[test]
    fn loopback_names_need_the_listen_port() {
        let guard = Guard::new("127.0.0.1:7300".parse().unwrap(), &[], None);
        assert!(guard.admits("localhost", 7300));
        assert!(guard.admits("[::1]", 7300));
        assert!(!guard.admits("localhost", 8080));
        assert!(!guard.admits("evil.example", 7300));
        let wide = Guard::new(
            "0.0.0.0:7300".parse().unwrap(),
            &["nimbus.internal".to_owned()],
            None,
        );
        assert!(wide.admits("0.0.0.0", 7300));
        assert!(wide.admits("nimbus.internal", 80));
    }
}
