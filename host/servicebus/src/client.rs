//! One connection to a namespace: the namespace token on `$cbs` (renewed
//! before it lapses), a session for requests with a `$management` client
//! per entity, and the broker's answers to settlements read off the wire
//! ([`Outcomes`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, SystemTime};

use fe2o3_amqp_management::client::MgmtClient;
use fe2o3_amqp_management::error::Error as ManagementError;
use nimbus_dialect::address::management_node;
use nimbus_dialect::convert;
use nimbus_transport::{CancelError, Message, PublishError, TransientError};
use tokio::sync::Mutex;
use tracing::warn;

use crate::connection::{ConnectError, Live};
use crate::connection_string::ConnectionString;
use crate::management::{CancelScheduled, ScheduleMessages, ScheduledMessage};
use crate::session_state::Stored;
use crate::tls::TrustedRoots;

/// An entity's `$management` client, while no request has it out, with
/// the generation of the connection it is attached on.
type ManagementSlot = Arc<Mutex<Option<(u64, MgmtClient)>>>;

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
    /// What the namespace's certificate is checked against; `None` for
    /// plain AMQP.
    roots: Option<TrustedRoots>,
    /// The connection now; replaced by a new one once it drops.
    live: Mutex<Arc<Live>>,
    /// Why the last attempt to connect again failed, until one succeeds.
    unreachable: StdMutex<Option<String>>,
    management: StdMutex<HashMap<String, ManagementSlot>>,
    /// The stored state (and inbox) of each session a lock of this client
    /// holds, by (entity, session id).
    pub(crate) held: StdMutex<HashMap<(String, String), SharedState>>,
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
        let live = Live::open(connection_string, roots, 0).await?;
        Ok(ServiceBus {
            inner: Arc::new(Inner {
                connection_string: connection_string.clone(),
                roots: roots.cloned(),
                live: Mutex::new(Arc::new(live)),
                unreachable: StdMutex::default(),
                management: StdMutex::default(),
                held: StdMutex::default(),
            }),
        })
    }

    /// The namespace's host name, as the connection string gives it.
    pub fn host(&self) -> &str {
        &self.inner.connection_string.host
    }

    /// Why the namespace cannot be reached, while the connection is down
    /// and the last attempt to open it again failed (the next call tries
    /// again).
    pub fn unreachable(&self) -> Option<String> {
        self.inner.unreachable().clone()
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
            let encoded = convert::encode(convert::outgoing(&message)).map_err(|error| {
                PublishError::InvalidMessage {
                    reason: format!("message '{message_id}' does not encode: {error}"),
                }
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
            Err(CallError::Missing(_) | CallError::Status(404, _)) => {
                Err(PublishError::TopicNotFound {
                    topic: topic.to_owned(),
                })
            }
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
            Err(CallError::Missing(_) | CallError::Status(404 | 410, _)) => {
                Err(CancelError::NotFound {
                    topic: topic.to_owned(),
                    sequence_number,
                })
            }
            Err(error) => Err(CancelError::Transient(TransientError::new(format!(
                "cancelling {sequence_number} on '{topic}': {error}"
            )))),
        }
    }
}

impl Inner {
    /// The connection, opened again first if it dropped (the namespace
    /// closed it, the network failed): whatever was on the old one (session
    /// locks, receivers) is lost, and what comes next goes on the new one.
    /// One caller reconnects; the others wait for it.
    pub(crate) async fn live(&self) -> Result<Arc<Live>, TransientError> {
        let mut live = self.live.lock().await;
        if live.is_closed() {
            let host = &self.connection_string.host;
            let generation = live.generation + 1;
            match Live::open(&self.connection_string, self.roots.as_ref(), generation).await {
                Ok(opened) => {
                    warn!(%host, "the connection to the namespace dropped; connected again");
                    *live = Arc::new(opened);
                    *self.unreachable() = None;
                }
                Err(error) => {
                    let why = format!(
                        "the connection to {host} dropped, and connecting again failed: {error}"
                    );
                    *self.unreachable() = Some(why.clone());
                    return Err(TransientError::new(why));
                }
            }
        }
        Ok(Arc::clone(&live))
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
        let live = self
            .live()
            .await
            .map_err(|error| CallError::Link(error.to_string()))?;
        self.call_on(&live, entity, request).await
    }

    /// [`Inner::call`] on the connection `live`: a lock's requests go on
    /// the connection it was taken on, and fail as [`CallError::Closed`]
    /// once that dropped (on a new one, the broker could take them for a
    /// holder of the same session there).
    pub(crate) async fn call_on<Req>(
        &self,
        live: &Arc<Live>,
        entity: &str,
        request: Req,
    ) -> Result<Req::Response, CallError>
    where
        Req: fe2o3_amqp_management::Request,
        Req::Response: fe2o3_amqp_management::Response<Error = ManagementError>,
        for<'de> <Req::Response as fe2o3_amqp_management::Response>::Body:
            fe2o3_amqp::types::messaging::FromBody<'de> + std::fmt::Debug + Send,
    {
        if live.is_closed() {
            return Err(CallError::Closed);
        }
        // One client per entity, each used by one request at a time: an
        // answer is the next delivery on its link.
        let slot = self.slot(entity);
        let mut slot = slot.lock().await;
        let mut client = match slot.take() {
            Some((generation, client)) if generation == live.generation => client,
            // None yet, or attached on a connection since dropped.
            _ => attach_management(live, entity).await?,
        };
        // The client is out of its slot while the request is out: should
        // this call be dropped midway, or its answer not come, the client
        // goes with it, and its late answer cannot be read as the next
        // request's.
        let answered = live
            .unless_closed(tokio::time::timeout(CALL_WAIT, client.call(request)))
            .await
            .map_err(|closed| CallError::Link(closed.to_string()))?;
        match answered {
            Ok(Ok(response)) => {
                *slot = Some((live.generation, client));
                Ok(response)
            }
            Ok(Err(ManagementError::Status(status))) => {
                *slot = Some((live.generation, client));
                Err(CallError::Status(
                    status.code.0.get(),
                    status.description.unwrap_or_default(),
                ))
            }
            // A link refused after its attach was answered (as nimbus's
            // endpoint refuses one to a missing entity) fails the request.
            Ok(Err(error)) => Err(match request_refused_as_missing(&error) {
                Some(why) => CallError::Missing(why),
                None => CallError::Link(error.to_string()),
            }),
            Err(_) => Err(CallError::Link(format!(
                "{entity}/$management did not answer within {CALL_WAIT:?}"
            ))),
        }
    }

    fn unreachable(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.unreachable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
    /// The broker refused the `$management` link: its entity does not
    /// exist (told apart from a request's 404, which on Service Bus may
    /// also be a message not found).
    #[error("the entity does not exist: {0}")]
    Missing(String),
    /// Made for a lock on a connection since dropped: the lock went with
    /// it.
    #[error("the connection the lock was taken on dropped")]
    Closed,
}

impl CallError {
    /// The answer's status, if there was one.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            CallError::Status(code, _) => Some(*code),
            CallError::Missing(_) => Some(404),
            CallError::Link(_) | CallError::Closed => None,
        }
    }

    /// Whether the lock the request was about is gone: the broker said so
    /// (410), or the connection it was taken on dropped.
    pub(crate) fn lock_lost(&self) -> bool {
        matches!(self, CallError::Status(410, _) | CallError::Closed)
    }
}

/// A `$management` client for `entity` on `live`; a refusal naming the
/// entity missing reads as a 404, as a request to it would.
async fn attach_management(live: &Live, entity: &str) -> Result<MgmtClient, CallError> {
    let attach = async {
        MgmtClient::builder()
            .management_node_address(management_node(entity))
            .client_node_addr(format!("nimbus-{}", uuid::Uuid::new_v4().simple()))
            .attach(&mut *live.session().await)
            .await
    };
    live.unless_closed(tokio::time::timeout(CALL_WAIT, attach))
        .await
        .map_err(|closed| CallError::Link(closed.to_string()))?
        .map_err(|_| {
            CallError::Link(format!(
                "{entity}/$management did not answer its attach within {CALL_WAIT:?}"
            ))
        })?
        .map_err(|error| match refused_as_missing(&error) {
            Some(why) => CallError::Missing(why),
            None => CallError::Link(error.to_string()),
        })
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
