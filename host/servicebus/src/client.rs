//! One connection to a namespace: the namespace token on `$cbs` (renewed
//! before it lapses), a session for requests with a `$management` client
//! per entity, and the broker's answers to settlements read off the wire
//! ([`Outcomes`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::primitives::Timestamp;
use fe2o3_amqp::{Connection, Session};
use fe2o3_amqp_cbs::client::CbsClient;
use fe2o3_amqp_cbs::token::CbsToken;
use fe2o3_amqp_management::client::MgmtClient;
use fe2o3_amqp_management::error::Error as ManagementError;
use nimbus_transport::{CancelError, Message, PublishError, TransientError};
use tokio::sync::Mutex;
use tracing::{debug, warn};

use crate::connection_string::ConnectionString;
use crate::management::{CancelScheduled, ScheduleMessages, ScheduledMessage};
use crate::outcomes::{self, Outcomes};
use crate::session_state::Stored;
use crate::tls::{RootsError, TrustedRoots};

/// How long a token this client signs is valid.
const TOKEN_LIFETIME: Duration = Duration::from_secs(60 * 60);

/// How long before a token lapses it is replaced.
const TOKEN_RENEWAL_MARGIN: Duration = Duration::from_secs(10 * 60);

/// The token type Service Bus takes a shared access signature as.
const SAS_TOKEN_TYPE: &str = "servicebus.windows.net:sastoken";

/// The pipe between the wire reader and fe2o3.
const PIPE_BUFFER: usize = 1024 * 1024;

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
        "the TLS handshake with {host}:{port} failed: {why} (for an emulator, which speaks \
         plain AMQP, add UseDevelopmentEmulator=true to the connection string)"
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
    #[error("connecting to amqp://{host}:{port} failed: {why}")]
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

/// An entity's `$management` client, while no request has it out.
type ManagementSlot = Arc<Mutex<Option<MgmtClient>>>;

/// How long a `$management` request waits for its answer.
const CALL_WAIT: Duration = Duration::from_secs(30);

/// A held session's stored state, shared by its lock and the client.
pub(crate) type SharedState = Arc<StdMutex<Stored>>;

/// A connection to a namespace; cheap to clone.
#[derive(Clone)]
pub struct ServiceBus {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) connection_string: ConnectionString,
    connection: Mutex<ConnectionHandle<()>>,
    session: Mutex<SessionHandle<()>>,
    management: StdMutex<HashMap<String, ManagementSlot>>,
    pub(crate) outcomes: Outcomes,
    /// The stored state (and inbox) of each session a lock of this client
    /// holds, by (entity, session id).
    pub(crate) held: StdMutex<HashMap<(String, String), SharedState>>,
    renewal: tokio::task::JoinHandle<()>,
    pump: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.renewal.abort();
        self.pump.abort();
    }
}

impl std::fmt::Debug for ServiceBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBus")
            .field("connection_string", &self.inner.connection_string)
            .finish_non_exhaustive()
    }
}

impl ServiceBus {
    /// Connects, begins a session and puts a token for the whole namespace:
    /// over TLS, the namespace's certificate checked against what the
    /// system trusts, unless the connection string is an emulator's
    /// (`UseDevelopmentEmulator=true`: plain AMQP).
    ///
    /// # Errors
    ///
    /// [`ConnectError`] naming the step that failed.
    pub async fn connect(connection_string: &ConnectionString) -> Result<ServiceBus, ConnectError> {
        let roots = if connection_string.development_emulator {
            None
        } else {
            Some(
                TrustedRoots::system().map_err(|source| ConnectError::Roots {
                    host: connection_string.host.clone(),
                    source,
                })?,
            )
        };
        ServiceBus::open(connection_string, roots.as_ref()).await
    }

    /// [`ServiceBus::connect`] over TLS whatever the connection string
    /// says, trusting `roots` alone (a private certificate authority).
    ///
    /// # Errors
    ///
    /// [`ConnectError`] naming the step that failed.
    pub async fn connect_trusting(
        connection_string: &ConnectionString,
        roots: &TrustedRoots,
    ) -> Result<ServiceBus, ConnectError> {
        ServiceBus::open(connection_string, Some(roots)).await
    }

    /// Connects over TLS when given `roots`, else over plain AMQP.
    async fn open(
        connection_string: &ConnectionString,
        roots: Option<&TrustedRoots>,
    ) -> Result<ServiceBus, ConnectError> {
        let cs = connection_string;
        let open_error = |why: String| ConnectError::Open {
            host: cs.host.clone(),
            port: cs.port,
            why,
        };
        let socket = tokio::net::TcpStream::connect((cs.host.as_str(), cs.port))
            .await
            .map_err(|error| open_error(error.to_string()))?;
        let _ = socket.set_nodelay(true);
        // fe2o3 speaks to the wire reader, the wire reader to the broker.
        let (library_side, wire_side) = tokio::io::duplex(PIPE_BUFFER);
        let outcomes = Outcomes::default();
        let pump = match roots {
            None => tokio::spawn(outcomes::pump(socket, wire_side, outcomes.clone())),
            Some(roots) => {
                let tls = crate::tls::handshake(socket, &cs.host, roots)
                    .await
                    .map_err(|why| ConnectError::Tls {
                        host: cs.host.clone(),
                        port: cs.port,
                        why,
                    })?;
                tokio::spawn(outcomes::pump(tls, wire_side, outcomes.clone()))
            }
        };
        let mut connection = Connection::builder()
            .container_id(format!("nimbus-{}", uuid::Uuid::new_v4().simple()))
            .hostname(cs.host.as_str())
            .sasl_profile(SaslProfile::Anonymous)
            .open_with_stream(library_side)
            .await
            .map_err(|error| {
                pump.abort();
                open_error(error.to_string())
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
        Ok(ServiceBus {
            inner: Arc::new(Inner {
                connection_string: cs.clone(),
                connection: Mutex::new(connection),
                session: Mutex::new(session),
                management: StdMutex::default(),
                outcomes,
                held: StdMutex::default(),
                renewal,
                pump,
            }),
        })
    }

    /// The namespace's host name, as the connection string gives it.
    pub fn host(&self) -> &str {
        &self.inner.connection_string.host
    }

    /// Publishes `messages` to `topic` as one unit through the topic's
    /// `$management` node, each at its scheduled time or now; returns their
    /// sequence numbers, in order.
    ///
    /// # Errors
    ///
    /// [`PublishError::TopicNotFound`] for a topic the namespace does not
    /// have, [`PublishError::InvalidMessage`] for a message it refused, and
    /// a transient error otherwise.
    pub async fn publish(
        &self,
        topic: &str,
        messages: Vec<Message>,
    ) -> Result<Vec<i64>, PublishError> {
        let now = SystemTime::now();
        let mut scheduled = Vec::with_capacity(messages.len());
        for mut message in messages {
            let message_id = message
                .message_id
                .get_or_insert_with(|| uuid::Uuid::new_v4().to_string())
                .clone();
            // Service Bus schedules only what has a time; now is enqueued
            // at once.
            message.scheduled_enqueue_time.get_or_insert(now);
            let encoded = nimbus_amqp::convert::encode(nimbus_amqp::convert::outgoing(&message))
                .map_err(|error| PublishError::InvalidMessage {
                    reason: format!("message '{message_id}' does not encode: {error}"),
                })?;
            scheduled.push(ScheduledMessage {
                message_id,
                session_id: message.session_id.clone(),
                encoded,
            });
        }
        let request = ScheduleMessages {
            messages: scheduled,
        };
        match self.inner.call(topic, request).await {
            Ok(numbers) => Ok(numbers.0),
            Err(CallError::Status(404, _)) => Err(PublishError::TopicNotFound {
                topic: topic.to_owned(),
            }),
            Err(CallError::Status(400, why)) => Err(PublishError::InvalidMessage { reason: why }),
            Err(error) => Err(PublishError::Transient(TransientError::new(format!(
                "publishing to '{topic}' on {}: {error}",
                self.inner.connection_string.host
            )))),
        }
    }

    /// Cancels a scheduled message not enqueued yet.
    ///
    /// # Errors
    ///
    /// [`CancelError::NotFound`] when no such message is scheduled.
    pub async fn cancel_scheduled(
        &self,
        topic: &str,
        sequence_number: i64,
    ) -> Result<(), CancelError> {
        let request = CancelScheduled {
            sequence_numbers: vec![sequence_number],
        };
        match self.inner.call(topic, request).await {
            Ok(_) => Ok(()),
            Err(CallError::Status(404 | 410, _)) => Err(CancelError::NotFound {
                topic: topic.to_owned(),
                sequence_number,
            }),
            Err(error) => Err(CancelError::Transient(TransientError::new(format!(
                "cancelling {sequence_number} on '{topic}': {error}"
            )))),
        }
    }
}

impl Inner {
    /// A session of its own, for a receive link that may wait long for its
    /// attach to be answered (next available) without holding up others.
    pub(crate) async fn begin(&self) -> Result<SessionHandle<()>, TransientError> {
        Session::begin(&mut *self.connection.lock().await)
            .await
            .map_err(|error| {
                TransientError::new(format!(
                    "beginning an AMQP session on {}: {error}",
                    self.connection_string.host
                ))
            })
    }

    /// Makes a request of `entity`'s `$management` node (a topic, a
    /// subscription, a dead-letter queue), attaching its client on first use.
    pub(crate) async fn call<Req>(
        &self,
        entity: &str,
        request: Req,
    ) -> Result<Req::Response, CallError>
    where
        Req: fe2o3_amqp_management::Request,
        Req::Response: fe2o3_amqp_management::Response<Error = ManagementError>,
        for<'de> <Req::Response as fe2o3_amqp_management::Response>::Body:
            fe2o3_amqp::types::messaging::FromBody<'de> + std::fmt::Debug + Send,
    {
        // One client per entity, each used by one request at a time: an
        // answer is the next delivery on its link.
        let slot = self.slot(entity);
        let mut slot = slot.lock().await;
        let mut client = match slot.take() {
            Some(client) => client,
            None => self.attach_management(entity).await?,
        };
        // The client is out of its slot while the request is out: should
        // this call be dropped midway, or its answer not come, the client
        // goes with it, and its late answer cannot be read as the next
        // request's.
        match tokio::time::timeout(CALL_WAIT, client.call(request)).await {
            Ok(Ok(response)) => {
                *slot = Some(client);
                Ok(response)
            }
            Ok(Err(ManagementError::Status(status))) => {
                *slot = Some(client);
                Err(CallError::Status(
                    status.code.0.get(),
                    status.description.unwrap_or_default(),
                ))
            }
            // A link refused after its attach was answered (as nimbus's
            // endpoint refuses one to a missing entity) fails the request.
            Ok(Err(error)) => Err(match request_refused_as_missing(&error) {
                Some(why) => CallError::Status(404, why),
                None => CallError::Link(error.to_string()),
            }),
            Err(_) => Err(CallError::Link(format!(
                "{entity}/$management did not answer within {CALL_WAIT:?}"
            ))),
        }
    }

    fn slot(&self, entity: &str) -> ManagementSlot {
        Arc::clone(
            self.management
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(entity.to_ascii_lowercase())
                .or_default(),
        )
    }

    /// A `$management` client for `entity`; a refusal naming the entity
    /// missing reads as a 404, as a request to it would.
    async fn attach_management(&self, entity: &str) -> Result<MgmtClient, CallError> {
        MgmtClient::builder()
            .management_node_address(format!("{entity}/$management"))
            .client_node_addr(format!("nimbus-{}", uuid::Uuid::new_v4().simple()))
            .attach(&mut *self.session.lock().await)
            .await
            .map_err(|error| match refused_as_missing(&error) {
                Some(why) => CallError::Status(404, why),
                None => CallError::Link(error.to_string()),
            })
    }

    /// Whether a session this client holds has an unexpired inbox record.
    pub(crate) fn inbox_contains(&self, scope: &str, key: &str) -> bool {
        let now = SystemTime::now();
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|stored| {
                stored
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .contains(scope, key, now)
            })
    }
}

/// Why a `$management` request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("answered {0}: {1}")]
    Status(u16, String),
    #[error("the $management link failed: {0}")]
    Link(String),
}

impl CallError {
    /// The answer's status, if there was one.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            CallError::Status(code, _) => Some(*code),
            CallError::Link(_) => None,
        }
    }
}

/// The broker's words when it refused a link at attach because its entity
/// does not exist (Service Bus's way).
fn refused_as_missing(error: &fe2o3_amqp_management::error::AttachError) -> Option<String> {
    use fe2o3_amqp::link::{ReceiverAttachError, SenderAttachError};
    use fe2o3_amqp_management::error::AttachError;
    match error {
        AttachError::Sender(SenderAttachError::RemoteClosedWithError(refusal))
        | AttachError::Receiver(ReceiverAttachError::RemoteClosedWithError(refusal)) => {
            not_found(refusal)
        }
        _ => None,
    }
}

/// The same, when the refusal came as a detach right after the attach was
/// answered (nimbus's endpoint's way): the request on the link fails.
fn request_refused_as_missing(error: &ManagementError) -> Option<String> {
    use fe2o3_amqp::link::{DetachError, LinkStateError, SendError};
    match error {
        ManagementError::Send(
            SendError::LinkStateError(
                LinkStateError::RemoteClosedWithError(refusal)
                | LinkStateError::RemoteDetachedWithError(refusal),
            )
            | SendError::Detached(
                DetachError::RemoteClosedWithError(refusal)
                | DetachError::RemoteDetachedWithError(refusal),
            ),
        ) => not_found(refusal),
        _ => None,
    }
}

fn not_found(refusal: &fe2o3_amqp::types::definitions::Error) -> Option<String> {
    use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
    (refusal.condition == ErrorCondition::AmqpError(AmqpError::NotFound))
        .then(|| refusal.description.clone().unwrap_or_default())
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
