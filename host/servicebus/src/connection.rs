//! One AMQP connection to a namespace and what lives on it: the wire
//! reader under fe2o3 (decision 0137), over TLS or plain; the session
//! requests go on; the namespace token on `$cbs`, on a session of its own,
//! renewed before it lapses. When it drops, the client opens another
//! ([`Inner::live`](crate::client::Inner::live)); a generation number tells
//! them apart.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::primitives::Timestamp;
use fe2o3_amqp::{Connection, Session};
use fe2o3_amqp_cbs::client::CbsClient;
use fe2o3_amqp_cbs::token::CbsToken;
use nimbus_dialect::sas::SAS_TOKEN_TYPE;
use nimbus_transport::TransientError;
use tokio::sync::{Mutex, MutexGuard};
use tracing::{debug, warn};

use crate::connection_string::ConnectionString;
use crate::outcomes::{self, Outcomes};
use crate::tls::{RootsError, TrustedRoots};

/// How long a token this client signs is valid.
const TOKEN_LIFETIME: Duration = Duration::from_secs(60 * 60);

/// How long before a token lapses it is replaced.
const TOKEN_RENEWAL_MARGIN: Duration = Duration::from_secs(10 * 60);

/// The pipe between the wire reader and fe2o3.
const PIPE_BUFFER: usize = 1024 * 1024;

/// How long connecting may take, TLS, AMQP open and token included: a
/// namespace that takes the socket and then says nothing must not hold
/// every caller waiting on the reconnection.
const CONNECT_WAIT: Duration = Duration::from_secs(30);

/// TCP keepalive: a socket idle this long is probed, every interval, and
/// found dead after the retries go unanswered (about a minute in all), so
/// a peer that vanished without closing (a half-open socket) is noticed and
/// the connection opened again.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;

/// Why a connection could not be made, naming the step.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No certificate authority to check the namespace's certificate
    /// against.
    #[error("connecting to {host} over TLS: {source}")]
    Roots {
        /// The namespace.
        host: String,
        /// Why.
        #[source]
        source: RootsError,
    },
    /// The TLS handshake failed (most often: a certificate not trusted,
    /// or not for this name).
    #[error(
        "the TLS handshake with {host}:{port} failed: {why} (an emulator speaking plain AMQP \
         needs UseDevelopmentEmulator=true in the connection string, and no CA file)"
    )]
    Tls {
        /// The namespace.
        host: String,
        /// Which port.
        port: u16,
        /// What rustls said.
        why: String,
    },
    /// The connection did not open.
    #[error("connecting to {host}:{port} failed: {why}")]
    Open {
        /// Where.
        host: String,
        /// Which port.
        port: u16,
        /// The library's words.
        why: String,
    },
    /// The session did not begin.
    #[error("beginning an AMQP session on {host} failed: {why}")]
    Begin {
        /// Where.
        host: String,
        /// The library's words.
        why: String,
    },
    /// The token was refused (a wrong key or key name, most often).
    #[error(
        "{host} refused the token signed with key '{key_name}': {why} (is the key right for this \
         namespace?)"
    )]
    Token {
        /// Where.
        host: String,
        /// The key's name.
        key_name: String,
        /// What the namespace said.
        why: String,
    },
}

/// The connection dropped while something waited on it.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the connection to the namespace dropped")]
pub(crate) struct Closed;

/// Runs the wire reader, then says the connection is gone.
async fn pump_until_closed(
    pump: impl std::future::Future<Output = ()>,
    closing: tokio::sync::watch::Sender<bool>,
) {
    pump.await;
    closing.send_replace(true);
}

/// An open connection.
pub(crate) struct Live {
    /// Counts the connections the client opened, from 0.
    pub(crate) generation: u64,
    connection: Mutex<ConnectionHandle<()>>,
    session: Mutex<SessionHandle<()>>,
    /// The broker's answers to settlements on this connection.
    pub(crate) outcomes: Outcomes,
    /// Turns true once the connection's bytes stop flowing.
    closed: tokio::sync::watch::Receiver<bool>,
    renewal: tokio::task::JoinHandle<()>,
    pump: tokio::task::JoinHandle<()>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.renewal.abort();
        self.pump.abort();
    }
}

impl Live {
    /// Connects (over TLS when given `roots`), begins a session and puts a
    /// token for the whole namespace, within [`CONNECT_WAIT`].
    pub(crate) async fn open(
        cs: &ConnectionString,
        roots: Option<&TrustedRoots>,
        generation: u64,
    ) -> Result<Live, ConnectError> {
        tokio::time::timeout(CONNECT_WAIT, Live::connect(cs, roots, generation))
            .await
            .unwrap_or_else(|_| {
                Err(ConnectError::Open {
                    host: cs.host.clone(),
                    port: cs.port,
                    why: format!("no answer within {CONNECT_WAIT:?}"),
                })
            })
    }

    async fn connect(
        cs: &ConnectionString,
        roots: Option<&TrustedRoots>,
        generation: u64,
    ) -> Result<Live, ConnectError> {
        let open_error = |why: String| ConnectError::Open {
            host: cs.host.clone(),
            port: cs.port,
            why,
        };
        let socket = tokio::net::TcpStream::connect((cs.host.as_str(), cs.port))
            .await
            .map_err(|error| open_error(error.to_string()))?;
        let _ = socket.set_nodelay(true);
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_RETRIES);
        if let Err(error) = socket2::SockRef::from(&socket).set_tcp_keepalive(&keepalive) {
            debug!(%error, "TCP keepalive could not be set; a vanished peer is noticed later");
        }
        // fe2o3 speaks to the wire reader, the wire reader to the broker.
        let (library_side, wire_side) = tokio::io::duplex(PIPE_BUFFER);
        let outcomes = Outcomes::default();
        let (closing, closed) = tokio::sync::watch::channel(false);
        let pump = match roots {
            None => tokio::spawn(pump_until_closed(
                outcomes::pump(socket, wire_side, outcomes.clone()),
                closing,
            )),
            Some(roots) => {
                let tls = crate::tls::handshake(socket, &cs.host, roots)
                    .await
                    .map_err(|why| ConnectError::Tls {
                        host: cs.host.clone(),
                        port: cs.port,
                        why,
                    })?;
                tokio::spawn(pump_until_closed(
                    outcomes::pump(tls, wire_side, outcomes.clone()),
                    closing,
                ))
            }
        };
        match Live::start(cs, library_side).await {
            Ok((connection, session, renewal)) => Ok(Live {
                generation,
                connection: Mutex::new(connection),
                session: Mutex::new(session),
                outcomes,
                closed,
                renewal,
                pump,
            }),
            Err(error) => {
                pump.abort();
                Err(error)
            }
        }
    }

    /// Opens the AMQP connection on `stream`, begins the session requests
    /// go on, and puts the namespace token (renewed by the task returned).
    async fn start(
        cs: &ConnectionString,
        stream: tokio::io::DuplexStream,
    ) -> Result<
        (
            ConnectionHandle<()>,
            SessionHandle<()>,
            tokio::task::JoinHandle<()>,
        ),
        ConnectError,
    > {
        let mut connection = Connection::builder()
            .container_id(format!("nimbus-{}", uuid::Uuid::new_v4().simple()))
            .hostname(cs.host.as_str())
            .sasl_profile(SaslProfile::Anonymous)
            .open_with_stream(stream)
            .await
            .map_err(|error| ConnectError::Open {
                host: cs.host.clone(),
                port: cs.port,
                why: error.to_string(),
            })?;
        let begin = |error: fe2o3_amqp::session::error::BeginError| ConnectError::Begin {
            host: cs.host.clone(),
            why: error.to_string(),
        };
        let session = Session::begin(&mut connection).await.map_err(begin)?;
        // Tokens go on a session of their own, so a renewal never waits
        // behind the data the main session carries.
        let mut token_session = Session::begin(&mut connection).await.map_err(begin)?;
        let token_error = |why: String| ConnectError::Token {
            host: cs.host.clone(),
            key_name: cs.key.name().to_owned(),
            why,
        };
        let mut cbs = CbsClient::attach(&mut token_session)
            .await
            .map_err(|error| token_error(error.to_string()))?;
        put_token(&mut cbs, cs)
            .await
            .map_err(|error| token_error(error.to_string()))?;
        let renewal = tokio::spawn(renew_tokens(cbs, token_session, cs.clone()));
        Ok((connection, session, renewal))
    }

    /// Whether the connection is gone: its bytes stopped flowing (the
    /// namespace closed it, or the network failed).
    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// `work`, unless the connection drops first: fe2o3 leaves a request
    /// on a connection gone waiting (for credit that never comes) rather
    /// than failing it.
    pub(crate) async fn unless_closed<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, Closed> {
        let mut closed = self.closed.clone();
        tokio::select! {
            done = work => Ok(done),
            _ = closed.wait_for(|closed| *closed) => Err(Closed),
        }
    }

    /// The session requests go on.
    pub(crate) async fn session(&self) -> MutexGuard<'_, SessionHandle<()>> {
        self.session.lock().await
    }

    /// A session of its own, for a receive link that may wait long for its
    /// attach to be answered (next available) without holding up others.
    pub(crate) async fn begin(&self, host: &str) -> Result<SessionHandle<()>, TransientError> {
        let fail = |why: String| {
            TransientError::new(format!("beginning an AMQP session on {host}: {why}"))
        };
        self.unless_closed(async { Session::begin(&mut *self.connection.lock().await).await })
            .await
            .map_err(|closed| fail(closed.to_string()))?
            .map_err(|error| fail(error.to_string()))
    }
}

async fn put_token(
    cbs: &mut CbsClient,
    cs: &ConnectionString,
) -> Result<(), fe2o3_amqp_management::error::Error> {
    let audience = cs.namespace_audience();
    let expires = SystemTime::now() + TOKEN_LIFETIME;
    let token = cs.key.sign(&audience, expires);
    let expires_ms = expires
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    cbs.put_token(
        audience,
        CbsToken::new(
            token,
            SAS_TOKEN_TYPE,
            Timestamp::from_milliseconds(expires_ms),
        ),
    )
    .await
}

/// Puts a new token before the last lapses, for as long as the client
/// lives; a failure is retried a minute later, and logged.
async fn renew_tokens(mut cbs: CbsClient, _session: SessionHandle<()>, cs: ConnectionString) {
    let mut wait = TOKEN_LIFETIME - TOKEN_RENEWAL_MARGIN;
    loop {
        tokio::time::sleep(wait).await;
        match put_token(&mut cbs, &cs).await {
            Ok(()) => {
                debug!(host = %cs.host, "renewed the namespace token");
                wait = TOKEN_LIFETIME - TOKEN_RENEWAL_MARGIN;
            }
            Err(error) => {
                warn!(host = %cs.host, %error, "renewing the namespace token failed; trying again in a minute");
                wait = Duration::from_secs(60);
            }
        }
    }
}
