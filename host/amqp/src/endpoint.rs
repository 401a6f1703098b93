//! The listener: connections, their sessions, and each link a client
//! attaches, routed by its address to `$cbs` or to a topic, or refused with
//! the condition an SDK maps to its exception (spec §A.2–A.5).

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::acceptor::{
    ConnectionAcceptor, LinkAcceptor, LinkEndpoint, ListenerSessionHandle, SessionAcceptor,
    SupportedReceiverSettleModes, SupportedSenderSettleModes,
};
use fe2o3_amqp::types::definitions::{
    AmqpError, Error as AmqpErrorBody, ErrorCondition, Fields, ReceiverSettleMode, Role,
    SenderSettleMode,
};
use fe2o3_amqp::types::messaging::{DeliveryState, Released, TargetArchetype};
use fe2o3_amqp::types::performatives::Attach;
use nimbus_dialect::address::{self, CBS_NODE};
use nimbus_dialect::condition;
use nimbus_dialect::{EntityAddress, Node, Right, SharedAccessKey, SubQueue, attach};
use nimbus_transport::{Admin, ErrorKind, SessionLock, SessionSelector, Transport};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tracing::{debug, info};

use crate::admission::{Admission, Admitted};
use crate::cbs;
use crate::grants::{Grants, management_right};
use crate::guard::{Guard, Limits, Refusal};
use crate::held::{HeldDeliveries, HeldSessions};
use crate::log_limit::{Cause, LogLimit};
use crate::management::{self, Managed};
use crate::publish::{self, PublishCheck};
use crate::receive::{self, QueueHeld, ReceiveMode, SessionHeld};
use crate::reply::ReplyLink;
use crate::sasl::ServiceBusSasl;
use crate::tap::{self, Tap};
use crate::tls::ServerTls;

/// The credit a sending client gets: Python assumes this much as soon as
/// its link is attached (spec §A.6).
const SEND_CREDIT: u32 = 10_000;

/// How long a new connection may take to send its protocol headers and
/// finish SASL: one that never does would hold a task and a socket.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may go from being accepted to putting its first
/// valid token on `$cbs`. The SDKs put one right after `open` (Python
/// gives its own put 60 s); a connection that has put none by then is
/// closed, as Service Bus closes one that is not authorised.
pub const TOKEN_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a connection may send nothing at all (an empty frame counts)
/// before it is closed: advertised in `open` so a client sends heartbeats
/// within it. Generous, as the spec's notes ask for Python, which sends
/// them only while the application calls into the SDK.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(240);

/// Connections served at once; one more waits until one ends, or takes
/// the place of one that has put no token yet (Python opens one per
/// sender, so this is far above a host's publishers).
pub const MAX_CONNECTIONS: usize = 1024;

/// Connections without a valid token at once (decision 0139).
pub const MAX_PENDING_CONNECTIONS: usize = 128;

/// The largest request on a link that is not a publish (`$cbs` tokens, and
/// links refused right after attach): a token is a few hundred bytes, and
/// no client should make the endpoint buffer more before it has one.
const CONTROL_MESSAGE_MAX: u64 = 64 * 1024;

/// The largest frame a client may send (and fe2o3 is told it may).
const MAX_FRAME_SIZE: u32 = 256 * 1024;

/// The pipe between the tap and fe2o3: a few frames.
const PIPE_BUFFER: usize = 1024 * 1024;

/// How long a closing connection's last frames (a `close`, a SASL
/// outcome) may take to go out.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Stops a connection's pump when the connection's task ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An AMQP endpoint over a broker.
pub struct Endpoint<T> {
    shared: Shared<T>,
    max_connections: usize,
    max_pending: usize,
}

struct Shared<T> {
    transport: Arc<T>,
    keys: Arc<[SharedAccessKey]>,
    max_message_size: u64,
    handshake_timeout: Duration,
    token_timeout: Duration,
    idle_timeout: Duration,
    limits: Limits,
    publish_check: Option<PublishCheck>,
    /// Served over TLS when set, else plain AMQP.
    tls: Option<ServerTls>,
}

impl<T: Transport + Admin> Endpoint<T> {
    /// An endpoint publishing into `transport`, taking tokens signed with
    /// one of `keys`, and messages of up to `max_message_size` bytes.
    pub fn new(transport: Arc<T>, keys: Vec<SharedAccessKey>, max_message_size: u64) -> Self {
        Endpoint {
            shared: Shared {
                transport,
                keys: keys.into(),
                max_message_size,
                handshake_timeout: HANDSHAKE_TIMEOUT,
                token_timeout: TOKEN_TIMEOUT,
                idle_timeout: IDLE_TIMEOUT,
                limits: Limits::for_messages(max_message_size),
                publish_check: None,
                tls: None,
            },
            max_connections: MAX_CONNECTIONS,
            max_pending: MAX_PENDING_CONNECTIONS,
        }
    }

    /// How long a new connection may take to finish its handshake (30 s
    /// unless set).
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.shared.handshake_timeout = timeout;
        self
    }

    /// How long a connection may take to put its first valid token (60 s
    /// unless set).
    pub fn with_token_timeout(mut self, timeout: Duration) -> Self {
        self.shared.token_timeout = timeout;
        self
    }

    /// How long a connection may be silent (240 s unless set).
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.shared.idle_timeout = timeout;
        self
    }

    /// Serves AMQP over TLS with `tls` (as Service Bus does, for clients
    /// whose connection string has no `UseDevelopmentEmulator=true`)
    /// instead of plain AMQP.
    pub fn with_tls(mut self, tls: ServerTls) -> Self {
        self.shared.tls = Some(tls);
        self
    }

    /// How many connections are served at once (1,024 unless set); one
    /// more waits, unanswered, until one ends, or takes the place of the
    /// oldest that has put no valid token.
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// How many connections may be without a valid token at once (128
    /// unless set); one more closes the oldest of them.
    pub fn with_max_pending_connections(mut self, max: usize) -> Self {
        self.max_pending = max;
        self
    }

    /// Checks each message published, after its token: a refusal is the
    /// delivery's `rejected` outcome, `amqp:unauthorized-access` with the
    /// reason.
    pub fn with_publish_check(mut self, check: PublishCheck) -> Self {
        self.shared.publish_check = Some(check);
        self
    }

    /// Serves connections on `listener` until `shutdown` resolves; then
    /// drops every connection (a client reconnects, as after a network
    /// fault).
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let mut shutdown = pin!(shutdown);
        let mut connections = JoinSet::new();
        let admission = Admission::new(self.max_connections, self.max_pending);
        let shared = Arc::new(self.shared);
        loop {
            // Finished connections are let go of before each new one. (Not
            // in the select below: a connection ending there would cancel
            // an accept that holds a new stream, waiting for the slot that
            // very connection gives back.)
            while connections.try_join_next().is_some() {}
            let (stream, peer, admitted) = tokio::select! {
                () = &mut shutdown => break,
                accepted = admission.accept(&listener) => accepted,
            };
            debug!(%peer, "AMQP connection");
            let shared = Arc::clone(&shared);
            connections.spawn(admitted_connection(stream, peer, shared, admitted));
        }
        connections.abort_all();
    }
}

/// Serves one connection the endpoint took, over TLS if it serves TLS,
/// until it ends, or until it is closed for putting no valid token in time
/// or to make room for a newer one.
async fn admitted_connection<T: Transport + Admin>(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    shared: Arc<Shared<T>>,
    mut admitted: Admitted,
) {
    let deadline = tokio::time::Instant::now() + shared.token_timeout;
    let Some(tls) = shared.tls.clone() else {
        connection(stream, peer, &shared, (&mut admitted, deadline)).await;
        return;
    };
    let handshake = tokio::time::timeout(shared.handshake_timeout, tls.acceptor.accept(stream));
    let grants = Grants::default();
    let handshake = tokio::select! {
        handshake = handshake => handshake,
        // Nothing to tell a client that has not finished TLS: it is dropped.
        refusal = without_token(&mut admitted, &grants, (deadline, shared.token_timeout)) => {
            LogLimit::global().info(Cause::NoToken, || {
                format!("the AMQP connection from {peer} {}", refusal.description)
            });
            return;
        }
    };
    match handshake {
        Ok(Ok(stream)) => connection(stream, peer, &shared, (&mut admitted, deadline)).await,
        // Most often a client speaking plain AMQP (an emulator connection
        // string) to a TLS endpoint.
        Ok(Err(error)) => LogLimit::global().info(Cause::HandshakeFailed, || {
            format!(
                "a TLS handshake from {peer} failed (does the client's connection string say \
                 UseDevelopmentEmulator=true? this endpoint serves TLS): {error}"
            )
        }),
        Err(_) => LogLimit::global().info(Cause::HandshakeFailed, || {
            format!(
                "a connection from {peer} did not finish its TLS handshake within {:?}; closed",
                shared.handshake_timeout
            )
        }),
    }
}

/// Resolves, with why, if the connection is to close for having no valid
/// token: the deadline passes, or it is closed to make room. Once a token
/// is put, it no longer resolves.
async fn without_token(
    admitted: &mut Admitted,
    grants: &Grants,
    (deadline, timeout): (tokio::time::Instant, Duration),
) -> Refusal {
    let mut authenticated = grants.watch_authenticated();
    let Some(pending) = admitted.pending() else {
        return std::future::pending().await;
    };
    let why = tokio::select! {
        Ok(_) = authenticated.wait_for(|yes| *yes) => None,
        evicted = &mut pending.evicted => Some(match evicted {
            Ok(why) => why.to_string(),
            Err(_) => "was closed".to_owned(),
        }),
        () = tokio::time::sleep_until(deadline) => Some(format!(
            "put no valid token on $cbs within {} s of connecting; closed",
            timeout.as_secs_f64()
        )),
    };
    match why {
        None => {
            admitted.authenticated();
            std::future::pending().await
        }
        Some(description) => Refusal {
            condition: ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess),
            description,
        },
    }
}

/// Runs one connection's AMQP: the tap between the client and fe2o3, the
/// handshake, and each session the client begins, until the client ends
/// it, the pump stops (the guard refused a frame), or the connection has
/// no valid token in time.
async fn connection<T, S>(
    stream: S,
    peer: std::net::SocketAddr,
    shared: &Arc<Shared<T>>,
    (admitted, deadline): (&mut Admitted, tokio::time::Instant),
) where
    T: Transport + Admin,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let grants = Arc::new(Grants::default());
    let (tap, to_client) = Tap::new();
    let acceptor = ConnectionAcceptor::builder()
        .container_id("nimbus")
        .max_frame_size(MAX_FRAME_SIZE)
        .channel_max(u16::try_from(shared.limits.sessions.saturating_sub(1)).unwrap_or(u16::MAX))
        .idle_time_out(u32::try_from(shared.idle_timeout.as_millis()).unwrap_or(u32::MAX))
        .sasl_acceptor(ServiceBusSasl)
        .build();
    // fe2o3 speaks to the tap, the tap to the client (decision 0136).
    let (library_side, tap_side) = tokio::io::duplex(PIPE_BUFFER);
    let guard = Guard::new(shared.limits, Arc::clone(&grants));
    let pump = tokio::spawn(tap::pump(
        stream,
        tap_side,
        tap.clone(),
        to_client,
        MAX_FRAME_SIZE as usize,
        guard,
        Some(peer),
    ));
    let mut pump = AbortOnDrop(pump);
    let token = (deadline, shared.token_timeout);
    let handshake = tokio::time::timeout(shared.handshake_timeout, acceptor.accept(library_side));
    let opened = tokio::select! {
        opened = handshake => opened,
        // The pump ended first: the guard refused a frame, or the client
        // went away.
        _ = &mut pump.0 => return,
        refusal = without_token(admitted, &grants, token) => {
            refuse(peer, admitted, &tap, refusal);
            let _ = tokio::time::timeout(CLOSE_GRACE, &mut pump.0).await;
            return;
        }
    };
    let connection = match opened {
        Ok(Ok(connection)) => Some(connection),
        // Most often an SDK speaking TLS: without `UseDevelopmentEmulator=true`
        // in its connection string it does, and this endpoint serves plain
        // AMQP unless given a certificate.
        Ok(Err(error)) => {
            LogLimit::global().info(Cause::HandshakeFailed, || format!("an AMQP connection from {peer} did not open (a client speaking TLS to a plain endpoint: without [amqp] tls_certificate, its connection string needs UseDevelopmentEmulator=true): {error}"));
            None
        }
        Err(_) => {
            LogLimit::global().info(Cause::HandshakeFailed, || {
                format!(
                    "an AMQP connection from {peer} sent no protocol header and SASL within {:?}; closed",
                    shared.handshake_timeout
                )
            });
            None
        }
    };
    if let Some(mut connection) = connection {
        tokio::select! {
            () = sessions(&mut connection, shared, &grants, &tap) => {
                let _ = connection.close().await;
            }
            _ = &mut pump.0 => return,
            refusal = without_token(admitted, &grants, token) => refuse(peer, admitted, &tap, refusal),
        }
    }
    // What was said last (a `close`, a SASL outcome refusing a mechanism)
    // goes out before the socket does.
    let _ = tokio::time::timeout(CLOSE_GRACE, &mut pump.0).await;
}

/// Closes a connection that has no valid token, giving its slot back at
/// once (a newer connection may be waiting for it).
fn refuse(peer: std::net::SocketAddr, admitted: &mut Admitted, tap: &Tap, refusal: Refusal) {
    LogLimit::global().info(Cause::NoToken, || {
        format!("the AMQP connection from {peer} {}", refusal.description)
    });
    admitted.release();
    tap.close(refusal);
}

/// Takes the sessions a client begins until it closes the connection.
async fn sessions<T: Transport + Admin>(
    connection: &mut fe2o3_amqp::acceptor::ListenerConnectionHandle,
    shared: &Arc<Shared<T>>,
    grants: &Arc<Grants>,
    tap: &Tap,
) {
    let held = Arc::new(HeldSessions::default());
    let deliveries = Arc::new(HeldDeliveries::default());
    let sessions = SessionAcceptor::builder()
        .handle_max(
            u32::try_from(shared.limits.links_per_session.saturating_sub(1)).unwrap_or(u32::MAX),
        )
        .build();
    let mut tasks = JoinSet::new();
    while let Some(incoming) = connection.next_incoming_session().await {
        while tasks.try_join_next().is_some() {}
        match sessions.accept_incoming_session(incoming, connection).await {
            Ok(session) => {
                tasks.spawn(session_links(
                    session,
                    Arc::clone(shared),
                    Link {
                        grants: Arc::clone(grants),
                        held: Arc::clone(&held),
                        deliveries: Arc::clone(&deliveries),
                        tap: tap.clone(),
                    },
                ));
            }
            Err(error) => debug!(%error, "an AMQP session did not begin"),
        }
    }
    tasks.abort_all();
}

/// What a connection's links share.
struct Link<S> {
    grants: Arc<Grants>,
    held: Arc<HeldSessions<S>>,
    deliveries: Arc<HeldDeliveries>,
    tap: Tap,
}

/// Takes the links a client attaches on one session until it ends it.
async fn session_links<T: Transport + Admin>(
    mut session: ListenerSessionHandle,
    shared: Arc<Shared<T>>,
    link: Link<T::Session>,
) {
    let Link {
        grants,
        held,
        deliveries,
        tap,
    } = link;
    // Per node (`$cbs`, each topic's `$management`): the client's link
    // answers go on, shared by the request links of the same node.
    let mut replies: HashMap<String, Arc<ReplyLink>> = HashMap::new();
    let mut links = JoinSet::new();
    // A receive attach may wait a minute for a session (next available):
    // it waits in a task of its own, and comes back here to be answered,
    // so the session's other attaches are not held up behind it.
    let mut opening = JoinSet::new();
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::unbounded_channel();
    loop {
        let attach = tokio::select! {
            // Cancel-safe: a channel receive.
            attach = session.next_incoming_attach() => match attach {
                Some(attach) => attach,
                None => break,
            },
            Some((attach, opened)) = opened_rx.recv() => {
                let holders = (&held, &deliveries);
                if let Some(task) = attach_receive(opened, attach, &mut session, &tap, holders).await {
                    links.spawn(task);
                }
                continue;
            }
        };
        while links.try_join_next().is_some() {}
        while opening.try_join_next().is_some() {}
        let (address, client_sends) = match attach.role {
            Role::Sender => (target_address(&attach), true),
            Role::Receiver => (source_address(&attach), false),
        };
        let route = match Node::parse(&address) {
            Ok(node) => route(node, client_sends),
            Err(error) => Err(refusal(AmqpError::NotFound, error.to_string())),
        };
        let route = match route {
            Ok(found) => entity_exists(shared.transport.as_ref(), &grants, &found)
                .await
                .map(|()| found),
            refused => refused,
        };
        if let Ok(Route::Receive { entity }) = &route {
            let (shared, grants, entity) =
                (Arc::clone(&shared), Arc::clone(&grants), entity.clone());
            let opened_tx = opened_tx.clone();
            opening.spawn(async move {
                let opened =
                    open_receive(shared.transport.as_ref(), &grants, &entity, &attach).await;
                let _ = opened_tx.send((attach, opened));
            });
            continue;
        }
        let acceptor = match &route {
            Ok(Route::Publish { .. } | Route::ManagementRequests { .. }) => LinkAcceptor::builder()
                .supported_receiver_settle_modes(SupportedReceiverSettleModes::First)
                .fallback_receiver_settle_mode(ReceiverSettleMode::First)
                .max_message_size(shared.max_message_size)
                .build(),
            // Answers go pre-settled: Python never settles them, and each
            // would stay in the link's unsettled map for the connection's life.
            Ok(Route::CbsReplies | Route::ManagementReplies { .. }) => LinkAcceptor::builder()
                .supported_sender_settle_modes(SupportedSenderSettleModes::Settled)
                .fallback_sender_settle_mode(SenderSettleMode::Settled)
                .max_message_size(CONTROL_MESSAGE_MAX)
                .build(),
            _ => LinkAcceptor::builder()
                .max_message_size(CONTROL_MESSAGE_MAX)
                .build(),
        };
        let endpoint = match acceptor.accept_incoming_attach(attach, &mut session).await {
            Ok(endpoint) => endpoint,
            Err(error) => {
                debug!(%error, %address, "an AMQP link did not attach");
                continue;
            }
        };
        match (route, endpoint) {
            (Ok(Route::CbsRequests), LinkEndpoint::Receiver(receiver)) => {
                links.spawn(cbs::serve(
                    receiver,
                    reply_link(&mut replies, CBS_NODE),
                    Arc::clone(&shared.keys),
                    Arc::clone(&grants),
                ));
            }
            (Ok(Route::CbsReplies), LinkEndpoint::Sender(sender)) => {
                reply_link(&mut replies, CBS_NODE).attached(sender).await;
            }
            (Ok(Route::ManagementRequests { entity }), LinkEndpoint::Receiver(receiver)) => {
                let node = if entity.subscription.is_some() {
                    Managed::Subscription {
                        entity: entity.clone(),
                        sessions: Arc::clone(&held),
                        deliveries: Arc::clone(&deliveries),
                    }
                } else {
                    Managed::Topic(entity.topic.clone())
                };
                links.spawn(management::serve(
                    receiver,
                    reply_link(&mut replies, &management_node(&entity)),
                    Arc::clone(&shared.transport),
                    node,
                    Arc::clone(&grants),
                    shared.publish_check.clone(),
                ));
            }
            (Ok(Route::ManagementReplies { entity }), LinkEndpoint::Sender(sender)) => {
                reply_link(&mut replies, &management_node(&entity))
                    .attached(sender)
                    .await;
            }
            (Ok(Route::Publish { topic }), LinkEndpoint::Receiver(mut receiver)) => {
                if let Err(error) = receiver.set_credit(SEND_CREDIT).await {
                    debug!(%error, "granting credit failed");
                }
                debug!(%topic, "a client attached a link to publish");
                links.spawn(publish::serve(
                    receiver,
                    Arc::clone(&shared.transport),
                    topic,
                    Arc::clone(&grants),
                    shared.publish_check.clone(),
                ));
            }
            (Err(error), endpoint) => {
                debug!(%address, reason = ?error.description, "an AMQP link is refused");
                links.spawn(close_with(endpoint, error));
            }
            (Ok(_), endpoint) => {
                let error = refusal(
                    AmqpError::NotAllowed,
                    format!("'{address}' cannot be attached that way"),
                );
                links.spawn(close_with(endpoint, error));
            }
        }
    }
    opening.abort_all();
    links.abort_all();
    let _ = session.end().await;
}

/// The key of an entity's `$management` node among a session's reply
/// links (names ignore case); `$cbs`'s is [`CBS_NODE`].
fn management_node(entity: &EntityAddress) -> String {
    address::management_node(&entity.queue_path()).to_ascii_lowercase()
}

fn reply_link(replies: &mut HashMap<String, Arc<ReplyLink>>, node: &str) -> Arc<ReplyLink> {
    Arc::clone(replies.entry(node.to_owned()).or_default())
}

/// What an attached link does.
enum Route {
    /// Put-token requests (the client sends on `$cbs`).
    CbsRequests,
    /// Where their answers go (the client receives from `$cbs`).
    CbsReplies,
    /// Publishing to a topic.
    Publish { topic: String },
    /// Receiving from a subscription or its dead-letter queue.
    Receive { entity: EntityAddress },
    /// Requests to a topic's or subscription's `$management` node.
    ManagementRequests { entity: EntityAddress },
    /// Where their answers go.
    ManagementReplies { entity: EntityAddress },
}

fn route(node: Node, client_sends: bool) -> Result<Route, AmqpErrorBody> {
    match (node, client_sends) {
        (Node::Cbs, true) => Ok(Route::CbsRequests),
        (Node::Cbs, false) => Ok(Route::CbsReplies),
        (
            Node::Entity(EntityAddress {
                topic,
                subscription: None,
                sub_queue: SubQueue::Main,
            }),
            true,
        ) => Ok(Route::Publish { topic }),
        (Node::Entity(entity), true) => Err(refusal(
            AmqpError::NotAllowed,
            format!(
                "'{}' is a subscription: send to its topic '{}'",
                entity.entity_path(),
                entity.topic
            ),
        )),
        (Node::Entity(entity), false) => match (&entity.subscription, entity.sub_queue) {
            (None, _) => Err(refusal(
                AmqpError::NotAllowed,
                format!(
                    "'{}' is a topic: receive from one of its subscriptions",
                    entity.topic
                ),
            )),
            (Some(_), SubQueue::TransferDeadLetter) => Err(refusal(
                AmqpError::NotImplemented,
                "nimbus has no transfer dead-letter queue: nothing is transferred through \
                 another entity"
                    .to_owned(),
            )),
            (Some(_), _) => Ok(Route::Receive { entity }),
        },
        (Node::Management(entity), client_sends)
            if entity.sub_queue == SubQueue::Main
                || (entity.sub_queue == SubQueue::DeadLetter && entity.subscription.is_some()) =>
        {
            Ok(if client_sends {
                Route::ManagementRequests { entity }
            } else {
                Route::ManagementReplies { entity }
            })
        }
        (Node::Management(entity), _) => Err(refusal(
            AmqpError::NotImplemented,
            format!(
                "the $management node of '{}' is not served: nimbus serves a topic's, a \
                 subscription's and its dead-letter queue's",
                entity.queue_path()
            ),
        )),
    }
}

/// Refuses a `$management` link to a topic or subscription the broker
/// does not have, at attach, as Service Bus does, so a transport can ask
/// whether an entity exists. Receive links are checked where they open. A
/// publish link is taken and each message to a missing topic rejected as
/// not found: the SDKs' senders read that as
/// `MessagingEntityNotFoundError`, where a link refused after its attach
/// was answered reads as an unknown error.
///
/// Only for a connection whose tokens grant the entity: to any other the
/// link is taken and its requests refused as unauthorised, so no one
/// without a key learns which entities exist.
async fn entity_exists<T: Admin>(
    broker: &T,
    grants: &Grants,
    route: &Route,
) -> Result<(), AmqpErrorBody> {
    if let Route::ManagementRequests { entity } = route
        && !grants.allow(management_right(entity), &entity.queue_path())
    {
        return Ok(());
    }
    match route {
        Route::ManagementRequests { entity } if entity.subscription.is_some() => {
            publish::resolve_subscription(broker, entity)
                .await
                .map(drop)
        }
        Route::ManagementRequests { entity } => publish::resolve_topic(broker, &entity.topic)
            .await
            .map(drop),
        _ => Ok(()),
    }
}

fn refusal(refused: AmqpError, description: String) -> AmqpErrorBody {
    condition::error(refused, description)
}

/// Detaches a link just attached, with `error`: the SDKs read the reason
/// from the detach, and need the attach answered first (spec §A.5.2).
async fn close_with(endpoint: LinkEndpoint, error: AmqpErrorBody) {
    let closed = match endpoint {
        LinkEndpoint::Sender(sender) => sender.close_with_error(error).await,
        LinkEndpoint::Receiver(receiver) => receiver.close_with_error(error).await,
    };
    if let Err(error) = closed {
        debug!(%error, "detaching a refused link");
    }
}

fn target_address(attach: &Attach) -> String {
    match attach.target.as_deref() {
        Some(TargetArchetype::Target(target)) => target.address.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

fn source_address(attach: &Attach) -> String {
    attach
        .source
        .as_ref()
        .and_then(|source| source.address.clone())
        .unwrap_or_default()
}

/// What a receive attach opened on the broker.
enum Opened<T: Transport> {
    Session { lock: Arc<T::Session>, path: String },
    Queue(T::Receiver),
}

/// Why a receiver could not be opened, as the SDKs map it (a forwarding
/// subscription, with nothing in it to receive, is not allowed).
fn receiver_refusal(error: &nimbus_transport::OpenReceiverError) -> AmqpErrorBody {
    condition::error(condition::for_kind(error.kind()), error.to_string())
}

/// Opens what a receive attach asks for: the session it names (or the next
/// available), or a peek-lock receiver on a dead-letter queue or a
/// subscription without sessions.
async fn open_receive<T: Transport + Admin>(
    transport: &T,
    grants: &Grants,
    entity: &EntityAddress,
    attach: &Attach,
) -> Result<Opened<T>, AmqpErrorBody> {
    let written = entity.queue_path();
    if let Err(why) = grants.check(Right::Listen, &written) {
        return Err(refusal(AmqpError::UnauthorizedAccess, why));
    }
    let (path, subscription) = publish::resolve_subscription(transport, entity).await?;
    let filter = attach::session_in(attach.source.as_ref().and_then(|s| s.filter.as_ref()));
    if entity.sub_queue == SubQueue::DeadLetter {
        return match transport
            .receiver(&path, nimbus_transport::SubQueue::DeadLetter)
            .await
        {
            Ok(receiver) => Ok(Opened::Queue(receiver)),
            Err(error) => Err(receiver_refusal(&error)),
        };
    }
    match (subscription.settings.requires_session, filter) {
        (false, None) => match transport
            .receiver(&path, nimbus_transport::SubQueue::Main)
            .await
        {
            Ok(receiver) => Ok(Opened::Queue(receiver)),
            Err(error) => Err(receiver_refusal(&error)),
        },
        (false, Some(_)) => Err(refusal(
            AmqpError::NotAllowed,
            format!("'{written}' does not require sessions: receive without a session id"),
        )),
        (true, None) => Err(refusal(
            AmqpError::NotAllowed,
            format!(
                "'{written}' requires sessions: receive from a session (a session id, or the \
                 next available)"
            ),
        )),
        (true, Some(named)) => {
            let (selector, wait) = match named {
                // A named session held elsewhere is refused at once, as
                // Service Bus does.
                Some(id) => (SessionSelector::Named(id), std::time::Duration::ZERO),
                None => (
                    SessionSelector::NextAvailable,
                    attach::wait_in(attach.properties.as_ref()),
                ),
            };
            match transport.accept_session(&path, selector, wait).await {
                Ok(lock) => Ok(Opened::Session {
                    lock: Arc::new(lock),
                    path: entity.entity_path(),
                }),
                Err(error) => {
                    let description = match error.kind() {
                        ErrorKind::NoSessionAvailable => {
                            format!("no session of '{written}' became available within {wait:?}")
                        }
                        _ => error.to_string(),
                    };
                    Err(condition::error(
                        condition::for_kind(error.kind()),
                        description,
                    ))
                }
            }
        }
    }
}

/// Answers a receive attach and starts its link, or answers it and detaches
/// with the refusal.
async fn attach_receive<T: Transport + Admin>(
    opened: Result<Opened<T>, AmqpErrorBody>,
    mut attach: Attach,
    session: &mut ListenerSessionHandle,
    tap: &Tap,
    (held, deliveries): (&Arc<HeldSessions<T::Session>>, &Arc<HeldDeliveries>),
) -> Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> {
    let name = attach.name.clone();
    let opened = match opened {
        Ok(opened) => opened,
        Err(error) => {
            debug!(link = %name, reason = ?error.description, "an AMQP receive link is refused");
            let endpoint = LinkAcceptor::builder()
                .max_message_size(CONTROL_MESSAGE_MAX)
                .build()
                .accept_incoming_attach(attach, session)
                .await
                .ok()?;
            return Some(Box::pin(close_with(endpoint, error)));
        }
    };
    let Some(events) = tap.register(&name) else {
        let endpoint = LinkAcceptor::builder()
            .build()
            .accept_incoming_attach(attach, session)
            .await
            .ok()?;
        let error = refusal(
            AmqpError::NotAllowed,
            format!("a link named '{name}' is attached already on this connection"),
        );
        return Some(Box::pin(close_with(endpoint, error)));
    };
    let mut properties = Fields::default();
    if let Opened::Session { lock, .. } = &opened {
        // The id is echoed as a plain string, which both SDKs read back as
        // the session they were given.
        if let Some(source) = attach.source.as_mut() {
            let (key, id) = attach::session_filter(Some(lock.session_id()));
            source
                .filter
                .get_or_insert_with(Default::default)
                .insert(key, id);
        }
        let (key, until) = attach::locked_until_property(lock.locked_until());
        properties.insert(key, until);
    }
    let mode = if attach.snd_settle_mode == SenderSettleMode::Settled {
        ReceiveMode::ReceiveAndDelete
    } else {
        ReceiveMode::PeekLock
    };
    // Held before the attach is answered: a client asks for the session's
    // state as soon as it has the answer, and `$management` serves only
    // sessions held on this connection. Released from the connection's
    // sessions when the link's task ends (an abort included), or here if
    // the attach fails.
    let release = match &opened {
        Opened::Session { lock, path } => {
            let id = lock.session_id().to_owned();
            held.insert(path, &id, Arc::clone(lock));
            Some(ReleaseSession {
                held: Arc::clone(held),
                path: path.clone(),
                id,
            })
        }
        Opened::Queue(_) => None,
    };
    let accepted = LinkAcceptor::builder()
        .properties(properties)
        .build()
        .accept_incoming_attach(attach, session)
        .await;
    let sender = match accepted {
        Ok(LinkEndpoint::Sender(sender)) => sender,
        Ok(LinkEndpoint::Receiver(_)) | Err(_) => {
            tap.unregister(&name, DeliveryState::Released(Released {}));
            return None;
        }
    };
    let tap = tap.clone();
    let deliveries = Arc::clone(deliveries);
    Some(match opened {
        Opened::Session { lock, path } => {
            info!(entity = %path, session = %lock.session_id(), "a client accepted a session over AMQP");
            Box::pin(async move {
                let _release = release;
                let held = Arc::new(SessionHeld(lock));
                receive::serve(sender, held, events, tap, deliveries, mode).await;
            })
        }
        Opened::Queue(receiver) => Box::pin(receive::serve(
            sender,
            Arc::new(QueueHeld(receiver)),
            events,
            tap,
            deliveries,
            mode,
        )),
    })
}

/// Takes a session out of the connection's held sessions when dropped.
struct ReleaseSession<S> {
    held: Arc<HeldSessions<S>>,
    path: String,
    id: String,
}

impl<S> Drop for ReleaseSession<S> {
    fn drop(&mut self) {
        self.held.remove(&self.path, &self.id);
    }
}
