//! The listener: connections, their sessions, and each link a client
//! attaches, routed by its address to `$cbs` or to a topic, or refused with
//! the condition an SDK maps to its exception (spec §A.2–A.5).

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;

use fe2o3_amqp::acceptor::{
    ConnectionAcceptor, LinkAcceptor, LinkEndpoint, ListenerSessionHandle, SessionAcceptor,
    SupportedReceiverSettleModes, SupportedSenderSettleModes,
};
use fe2o3_amqp::types::definitions::{
    AmqpError, Error as AmqpErrorBody, ReceiverSettleMode, Role, SenderSettleMode,
};
use fe2o3_amqp::types::messaging::TargetArchetype;
use fe2o3_amqp::types::performatives::Attach;
use nimbus_transport::{Admin, Transport};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::address::{EntityAddress, Node, SubQueue};
use crate::cbs::{self, Grants};
use crate::management;
use crate::publish;
use crate::reply::ReplyLink;
use crate::sas::SharedAccessKey;
use crate::sasl::ServiceBusSasl;

/// The credit a sending client gets: Python assumes this much as soon as
/// its link is attached (spec §A.6).
const SEND_CREDIT: u32 = 10_000;

/// How long a new connection may take to send its protocol headers and
/// finish SASL: one that never does would hold a task and a socket.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Connections served at once; one more waits until one ends (Python opens
/// one per sender, so this is far above a host's publishers).
const MAX_CONNECTIONS: usize = 1024;

/// The largest request on a link that is not a publish (`$cbs` tokens, and
/// links refused right after attach): a token is a few hundred bytes, and
/// no client should make the endpoint buffer more before it has one.
const CONTROL_MESSAGE_MAX: u64 = 64 * 1024;

/// An AMQP endpoint over a broker.
pub struct Endpoint<T> {
    shared: Arc<Shared<T>>,
}

struct Shared<T> {
    transport: Arc<T>,
    keys: Arc<[SharedAccessKey]>,
    max_message_size: u64,
}

impl<T: Transport + Admin> Endpoint<T> {
    /// An endpoint publishing into `transport`, taking tokens signed with
    /// one of `keys`, and messages of up to `max_message_size` bytes.
    pub fn new(transport: Arc<T>, keys: Vec<SharedAccessKey>, max_message_size: u64) -> Self {
        Endpoint {
            shared: Arc::new(Shared {
                transport,
                keys: keys.into(),
                max_message_size,
            }),
        }
    }

    /// Serves connections on `listener` until `shutdown` resolves; then
    /// drops every connection (a client reconnects, as after a network
    /// fault).
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let mut shutdown = pin!(shutdown);
        let mut connections = JoinSet::new();
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let (stream, peer, slot) = tokio::select! {
                () = &mut shutdown => break,
                accepted = accept(&listener, &slots) => accepted,
                // A long-lived endpoint sees many connections come and go:
                // their finished tasks are let go of as they end.
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            debug!(%peer, "AMQP connection");
            let shared = Arc::clone(&self.shared);
            connections.spawn(async move {
                connection(stream, shared).await;
                drop(slot);
            });
        }
        connections.abort_all();
    }
}

/// The next connection, once a slot is free.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<tokio::sync::Semaphore>,
) -> (
    TcpStream,
    std::net::SocketAddr,
    tokio::sync::OwnedSemaphorePermit,
) {
    loop {
        // The semaphore is never closed, so this always gives a slot.
        let Ok(slot) = Arc::clone(slots).acquire_owned().await else {
            return std::future::pending().await;
        };
        match listener.accept().await {
            Ok((stream, peer)) => return (stream, peer, slot),
            Err(error) => {
                warn!(%error, "accepting an AMQP connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection<T: Transport + Admin>(stream: TcpStream, shared: Arc<Shared<T>>) {
    let acceptor = ConnectionAcceptor::builder()
        .container_id("nimbus")
        .sasl_acceptor(ServiceBusSasl)
        .build();
    let peer = stream.peer_addr().ok();
    let mut connection = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
    {
        Ok(Ok(connection)) => connection,
        // Most often an SDK speaking TLS: without `UseDevelopmentEmulator=true`
        // in its connection string it does, and this endpoint serves plain
        // AMQP only.
        Ok(Err(error)) => {
            info!(?peer, %error, "an AMQP connection did not open (TLS is not served: does the connection string say UseDevelopmentEmulator=true?)");
            return;
        }
        Err(_) => {
            info!(
                ?peer,
                "an AMQP connection sent no protocol header and SASL within {HANDSHAKE_TIMEOUT:?}; closed"
            );
            return;
        }
    };
    let grants = Arc::new(Grants::default());
    let sessions = SessionAcceptor::new();
    let mut tasks = JoinSet::new();
    while let Some(incoming) = connection.next_incoming_session().await {
        while tasks.try_join_next().is_some() {}
        match sessions
            .accept_incoming_session(incoming, &mut connection)
            .await
        {
            Ok(session) => {
                tasks.spawn(session_links(
                    session,
                    Arc::clone(&shared),
                    Arc::clone(&grants),
                ));
            }
            Err(error) => debug!(%error, "an AMQP session did not begin"),
        }
    }
    tasks.abort_all();
    let _ = connection.close().await;
}

/// Takes the links a client attaches on one session until it ends it.
async fn session_links<T: Transport + Admin>(
    mut session: ListenerSessionHandle,
    shared: Arc<Shared<T>>,
    grants: Arc<Grants>,
) {
    // Per node (`$cbs`, each topic's `$management`): the client's link
    // answers go on, shared by the request links of the same node.
    let mut replies: HashMap<String, Arc<ReplyLink>> = HashMap::new();
    let mut links = JoinSet::new();
    while let Some(attach) = session.next_incoming_attach().await {
        while links.try_join_next().is_some() {}
        let (address, client_sends) = match attach.role {
            Role::Sender => (target_address(&attach), true),
            Role::Receiver => (source_address(&attach), false),
        };
        let route = match Node::parse(&address) {
            Ok(node) => route(node, client_sends),
            Err(error) => Err(refusal(AmqpError::NotFound, error.to_string())),
        };
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
            (Ok(Route::ManagementRequests { topic }), LinkEndpoint::Receiver(receiver)) => {
                links.spawn(management::serve(
                    receiver,
                    reply_link(&mut replies, &management_node(&topic)),
                    Arc::clone(&shared.transport),
                    topic,
                    Arc::clone(&grants),
                ));
            }
            (Ok(Route::ManagementReplies { topic }), LinkEndpoint::Sender(sender)) => {
                reply_link(&mut replies, &management_node(&topic))
                    .attached(sender)
                    .await;
            }
            (Ok(Route::Publish { topic }), LinkEndpoint::Receiver(mut receiver)) => {
                if let Err(error) = receiver.set_credit(SEND_CREDIT).await {
                    debug!(%error, "granting credit failed");
                }
                info!(%topic, "a client attached a link to publish");
                links.spawn(publish::serve(
                    receiver,
                    Arc::clone(&shared.transport),
                    topic,
                    Arc::clone(&grants),
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
    links.abort_all();
    let _ = session.end().await;
}

/// The key of the `$cbs` node among a session's reply links.
const CBS_NODE: &str = "$cbs";

/// The key of a topic's `$management` node (names ignore case).
fn management_node(topic: &str) -> String {
    format!("{}/$management", topic.to_ascii_lowercase())
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
    /// Requests to a topic's `$management` node.
    ManagementRequests { topic: String },
    /// Where their answers go.
    ManagementReplies { topic: String },
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
        (Node::Entity(entity), false) => Err(refusal(
            AmqpError::NotImplemented,
            format!(
                "receiving from '{}' over AMQP is not built yet: this endpoint takes publishes \
                 (issue 29)",
                entity.entity_path()
            ),
        )),
        (
            Node::Management(EntityAddress {
                topic,
                subscription: None,
                sub_queue: SubQueue::Main,
            }),
            client_sends,
        ) => Ok(if client_sends {
            Route::ManagementRequests { topic }
        } else {
            Route::ManagementReplies { topic }
        }),
        (Node::Management(entity), _) => Err(refusal(
            AmqpError::NotImplemented,
            format!(
                "the $management node of '{}' is not built yet: this endpoint serves a topic's \
                 (scheduling), not a subscription's (issue 29)",
                entity.entity_path()
            ),
        )),
    }
}

fn refusal(condition: AmqpError, description: String) -> AmqpErrorBody {
    publish::error_body(condition, description)
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
