//! Between the socket and fe2o3-amqp's connection: the three things the
//! library does not let a broker that sends do (decision 0136).
//!
//! - Service Bus's delivery tag is the 16-byte lock token; fe2o3 picks a
//!   4-byte counter. The tap puts the lock token in its place as the
//!   transfer goes out.
//! - A peek-lock client settles unsettled and waits for the broker's own
//!   answer (lock lost, or `rejected` without its error for a dead-letter);
//!   fe2o3 would echo the client's outcome itself. The tap hands the
//!   client's disposition to the link and tells fe2o3 it came settled, and
//!   the link's answer goes out as a frame of its own.
//! - A broker locks a message only when the client has credit for it; fe2o3
//!   does not show a sender's credit. The tap reads it from the flows.
//!
//! Every other frame, and the protocol headers and SASL, pass unchanged:
//! only the performatives it reads are decoded (by the library's own
//! decoder), and only those it changes are encoded again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{BufMut, BytesMut};
use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::types::definitions::{DeliveryNumber, DeliveryTag, Role};
use fe2o3_amqp::types::messaging::DeliveryState;
use fe2o3_amqp::types::performatives::Disposition;
use nimbus_transport::LockToken;

use fe2o3_amqp::types::definitions::Error as AmqpErrorBody;
use fe2o3_amqp::types::performatives::{ChannelMax, Close, MaxFrameSize, Open};

use nimbus_dialect::condition;
use nimbus_dialect::convert::{HeaderPatch, delivery_tag};
use nimbus_dialect::frame_io::{Unit, UnitReader, code, decode, descriptor, encode, symbol_keyed};

use crate::guard::{Guard, Refusal};
use crate::log_limit::{Cause, LogLimit};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

/// How much smaller than the client's own limit fe2o3 is told the client's
/// frames must be: room, in a transfer fe2o3 filled to the limit, for the
/// tag to grow from 4 to 16 bytes and the header to be written whole (a
/// few bytes more).
const TAG_HEADROOM: u32 = 32;

/// How long the library's last frames may take to go out once the client
/// has ended its half of the connection.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The smallest frame size AMQP allows (2.7.1), below which the headroom is
/// not taken.
const MIN_MAX_FRAME_SIZE: u32 = 512;

/// A delivery a client settled, for the link that sent it.
#[derive(Debug)]
pub(crate) struct ClientDisposition {
    /// The client's channel, to answer on.
    pub channel: u16,
    pub delivery_id: DeliveryNumber,
    pub lock_token: LockToken,
    /// What the client did (`None`: settled with no outcome).
    pub state: Option<DeliveryState>,
    /// Whether the client settled it itself (then it wants no answer).
    pub settled_by_client: bool,
}

/// What the client did on a link this endpoint sends on.
#[derive(Debug)]
pub(crate) enum ClientEvent {
    /// It settled one of the link's deliveries.
    Settled(ClientDisposition),
    /// It detached the link (or ended its session).
    Detached,
}

/// What a link that sends learns from the tap.
pub(crate) struct LinkEvents {
    /// How many more deliveries the client has credit for, less those
    /// the link has named a tag for and not sent yet.
    pub credit: watch::Receiver<u32>,
    /// What the client did.
    pub events: mpsc::UnboundedReceiver<ClientEvent>,
}

/// The connection's tap, shared by its links.
#[derive(Clone)]
pub(crate) struct Tap {
    state: Arc<Mutex<TapState>>,
    answers: mpsc::UnboundedSender<Frame>,
    /// Refusals that close the connection, for the pump to say.
    refusals: mpsc::UnboundedSender<Refusal>,
}

/// What the pump writes to the client besides fe2o3's frames.
pub(crate) struct ToClient {
    /// The links' answers (dispositions), on the client's channels.
    pub answers: mpsc::UnboundedReceiver<Frame>,
    /// Refusals that close the connection.
    refusals: mpsc::UnboundedReceiver<Refusal>,
}

#[derive(Default)]
struct TapState {
    /// The client's channel for each of ours (and back): a session's two
    /// halves have a channel each.
    client_channel: HashMap<u16, u16>,
    our_channel: HashMap<u16, u16>,
    /// Links the client receives on, by (client channel, client handle).
    client_handles: HashMap<(u16, u32), String>,
    /// The same links, by (client channel, our handle).
    our_handles: HashMap<(u16, u32), String>,
    /// What the tap knows of each link the client receives on, by name.
    links: HashMap<String, LinkFlow>,
    /// Deliveries sent with a lock token and not settled yet, by
    /// (client channel, delivery id).
    deliveries: HashMap<(u16, DeliveryNumber), (String, LockToken)>,
}

#[derive(Default)]
struct LinkFlow {
    /// The client's delivery-count plus credit, from its last flow.
    limit: u32,
    /// Deliveries sent (and credit drained), as our delivery-count.
    sent: u32,
    /// Set while a link of this endpoint sends on it.
    registered: Option<Registered>,
    /// Set once that link has ended while the client may still settle its
    /// deliveries: the answer each then gets (lock lost), given by the tap
    /// itself, since no link is left to give it and fe2o3 would answer
    /// with the client's own outcome.
    ended: Option<DeliveryState>,
}

struct Registered {
    /// Lock tokens for the next deliveries, in the order they are sent,
    /// with the header each needs written whole.
    tokens: VecDeque<(LockToken, Option<HeaderPatch>)>,
    credit: watch::Sender<u32>,
    events: mpsc::UnboundedSender<ClientEvent>,
}

impl TapState {
    /// The client detached `name`: its link is told, and a link this
    /// endpoint no longer sends on is forgotten with its deliveries.
    fn client_detached(&mut self, name: &str) {
        let Some(flow) = self.links.get(name) else {
            return;
        };
        if flow.registered.is_some() {
            flow.tell(ClientEvent::Detached);
        } else {
            self.links.remove(name);
            self.deliveries.retain(|_, (link, _)| link != name);
        }
    }
}

impl LinkFlow {
    fn credit(&self) -> u32 {
        // Serial-number arithmetic (RFC 1982): a limit behind what was sent
        // (credit taken back) is no credit, not four billion.
        let credit = self.limit.wrapping_sub(self.sent);
        let credit = if credit > u32::MAX / 2 { 0 } else { credit };
        let promised = self
            .registered
            .as_ref()
            .map_or(0, |registered| registered.tokens.len());
        credit.saturating_sub(u32::try_from(promised).unwrap_or(u32::MAX))
    }

    fn tell(&self, event: ClientEvent) {
        if let Some(registered) = &self.registered {
            let _ = registered.events.send(event);
        }
    }

    fn publish_credit(&self) {
        if let Some(registered) = &self.registered {
            registered.credit.send_replace(self.credit());
        }
    }
}

impl Tap {
    /// A tap and what its links and refusals say to the client (for
    /// [`pump`]).
    pub(crate) fn new() -> (Self, ToClient) {
        let (answers, answers_receiver) = mpsc::unbounded_channel();
        let (refusals, refusals_receiver) = mpsc::unbounded_channel();
        (
            Tap {
                state: Arc::default(),
                answers,
                refusals,
            },
            ToClient {
                answers: answers_receiver,
                refusals: refusals_receiver,
            },
        )
    }

    /// Closes the connection with `refusal`, said in a `close` if the
    /// handshake has got that far.
    pub(crate) fn close(&self, refusal: Refusal) {
        let _ = self.refusals.send(refusal);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TapState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts watching the link named `name` for a sender of this endpoint,
    /// before its attach is answered. `None` if a link of that name is
    /// already watched (names are unique on a connection).
    pub(crate) fn register(&self, name: &str) -> Option<LinkEvents> {
        let mut state = self.state();
        let flow = state.links.entry(name.to_owned()).or_default();
        if flow.registered.is_some() {
            return None;
        }
        let (credit, credit_events) = watch::channel(flow.credit());
        let (events, client_events) = mpsc::unbounded_channel();
        flow.registered = Some(Registered {
            tokens: VecDeque::new(),
            credit,
            events,
        });
        Some(LinkEvents {
            credit: credit_events,
            events: client_events,
        })
    }

    /// Stops watching `name`. Its deliveries not settled are answered
    /// `lost` should the client settle them before it detaches the link.
    pub(crate) fn unregister(&self, name: &str, lost: DeliveryState) {
        let mut state = self.state();
        let attached = state.client_handles.values().any(|n| n == name);
        if attached && let Some(flow) = state.links.get_mut(name) {
            flow.registered = None;
            flow.ended = Some(lost);
        } else {
            state.links.remove(name);
            state.deliveries.retain(|_, (link, _)| link != name);
        }
    }

    /// Takes `token` back from `name`'s queue if its transfer has not gone
    /// out; `false` when it has (the delivery is on its way, whole or not).
    pub(crate) fn forget_tag(&self, name: &str, token: LockToken) -> bool {
        let mut state = self.state();
        let Some(flow) = state.links.get_mut(name) else {
            return false;
        };
        let Some(registered) = flow.registered.as_mut() else {
            return false;
        };
        let before = registered.tokens.len();
        registered.tokens.retain(|(queued, _)| *queued != token);
        let forgotten = registered.tokens.len() < before;
        flow.publish_credit();
        forgotten
    }

    /// The lock token the next delivery sent on `name` carries as its tag.
    /// (and the header it needs written whole, if any).
    pub(crate) fn next_tag(&self, name: &str, token: LockToken, header: Option<HeaderPatch>) {
        let mut state = self.state();
        if let Some(flow) = state.links.get_mut(name)
            && let Some(registered) = flow.registered.as_mut()
        {
            registered.tokens.push_back((token, header));
            flow.publish_credit();
        }
    }

    /// Answers a client's disposition: settled, with `state` (the outcome
    /// the broker applied, or the error it met).
    pub(crate) fn answer(&self, channel: u16, delivery_id: DeliveryNumber, state: DeliveryState) {
        let disposition = Disposition {
            role: Role::Sender,
            first: delivery_id,
            last: None,
            settled: true,
            state: Some(state),
            batchable: false,
        };
        // The pump is gone only when the connection is: nobody to answer.
        let _ = self
            .answers
            .send(Frame::new(channel, FrameBody::Disposition(disposition)));
    }

    /// A frame from the client, before fe2o3 reads it: `Some` to pass on
    /// changed, `None` to pass on as it came.
    pub(crate) fn inbound(&self, frame: Frame) -> Option<Frame> {
        let channel = frame.channel;
        match frame.body {
            FrameBody::Open(mut open) => {
                if open.max_frame_size.0 >= MIN_MAX_FRAME_SIZE + TAG_HEADROOM {
                    open.max_frame_size.0 -= TAG_HEADROOM;
                }
                Some(Frame::new(channel, FrameBody::Open(open)))
            }
            FrameBody::Attach(attach) if attach.role == Role::Receiver => {
                let mut state = self.state();
                state
                    .client_handles
                    .insert((channel, attach.handle.0), attach.name.clone());
                state.links.entry(attach.name).or_default();
                None
            }
            FrameBody::Flow(flow) => {
                let handle = flow.handle?;
                let mut state = self.state();
                let name = state.client_handles.get(&(channel, handle.0))?.clone();
                let link = state.links.get_mut(&name)?;
                link.limit = if flow.drain {
                    // fe2o3 answers a drain at once, using up what credit
                    // is left: no new delivery is started for it.
                    link.sent
                } else {
                    flow.delivery_count
                        .unwrap_or(0)
                        .wrapping_add(flow.link_credit.unwrap_or(0))
                };
                link.publish_credit();
                None
            }
            FrameBody::Disposition(disposition) if disposition.role == Role::Receiver => {
                self.client_settled(channel, disposition)
            }
            FrameBody::Detach(detach) => {
                let mut state = self.state();
                if let Some(name) = state.client_handles.remove(&(channel, detach.handle.0)) {
                    state.client_detached(&name);
                }
                None
            }
            FrameBody::End(_) => {
                let mut state = self.state();
                let names: Vec<String> = state
                    .client_handles
                    .iter()
                    .filter(|((c, _), _)| *c == channel)
                    .map(|(_, name)| name.clone())
                    .collect();
                state.client_handles.retain(|(c, _), _| *c != channel);
                for name in names {
                    state.client_detached(&name);
                }
                state.deliveries.retain(|(c, _), _| *c != channel);
                None
            }
            _ => None,
        }
    }

    fn client_settled(&self, channel: u16, mut disposition: Disposition) -> Option<Frame> {
        let last = disposition.last.unwrap_or(disposition.first);
        let mut state = self.state();
        let mut ours = false;
        // Only deliveries sent with a lock token are tracked, a credit's
        // worth at most: walk those, not every number a range names.
        let span = last.wrapping_sub(disposition.first);
        let ids: Vec<DeliveryNumber> = state
            .deliveries
            .keys()
            .filter(|(c, id)| *c == channel && id.wrapping_sub(disposition.first) <= span)
            .map(|(_, id)| *id)
            .collect();
        let settled: Vec<(DeliveryNumber, String, LockToken)> = ids
            .into_iter()
            .filter_map(|id| {
                state
                    .deliveries
                    .remove(&(channel, id))
                    .map(|(name, token)| (id, name, token))
            })
            .collect();
        for (delivery_id, name, lock_token) in settled {
            let Some(flow) = state.links.get(&name) else {
                continue;
            };
            if flow.registered.is_some() {
                ours = true;
                flow.tell(ClientEvent::Settled(ClientDisposition {
                    channel,
                    delivery_id,
                    lock_token,
                    state: disposition.state.clone(),
                    settled_by_client: disposition.settled,
                }));
            } else if let Some(lost) = &flow.ended {
                ours = true;
                if !disposition.settled {
                    self.answer(channel, delivery_id, lost.clone());
                }
            }
        }
        if !ours || disposition.settled {
            return None;
        }
        // fe2o3 is told the client settled, so it forgets the delivery and
        // does not answer; the link answers once the broker has acted.
        disposition.settled = true;
        Some(Frame::new(channel, FrameBody::Disposition(disposition)))
    }

    /// A frame from fe2o3, before it goes to the client: `Some` to send
    /// changed, `None` to send as it came.
    pub(crate) fn outbound(&self, frame: Frame) -> Option<Frame> {
        let channel = frame.channel;
        match frame.body {
            FrameBody::Begin(begin) => {
                if let Some(client) = begin.remote_channel {
                    let mut state = self.state();
                    state.client_channel.insert(channel, client);
                    state.our_channel.insert(client, channel);
                }
                None
            }
            FrameBody::Attach(attach) if attach.role == Role::Sender => {
                let mut state = self.state();
                let client = *state.client_channel.get(&channel)?;
                state
                    .our_handles
                    .insert((client, attach.handle.0), attach.name);
                None
            }
            FrameBody::Transfer {
                mut performative,
                mut payload,
            } => {
                let delivery_id = performative.delivery_id?;
                let mut state = self.state();
                let client = *state.client_channel.get(&channel)?;
                let name = state
                    .our_handles
                    .get(&(client, performative.handle.0))?
                    .clone();
                let link = state.links.get_mut(&name)?;
                link.sent = link.sent.wrapping_add(1);
                let registered = link.registered.is_some();
                let token = link
                    .registered
                    .as_mut()
                    .and_then(|registered| registered.tokens.pop_front());
                link.publish_credit();
                let Some((token, header)) = token else {
                    if registered {
                        tracing::warn!(link = %name, "a delivery went out with no lock token for its tag");
                    }
                    return None;
                };
                performative.delivery_tag = Some(DeliveryTag::from(delivery_tag(token).to_vec()));
                // The header opens the message, so it is in the first frame.
                if let Some(header) = header
                    && payload.starts_with(&header.written)
                {
                    let mut whole = BytesMut::with_capacity(payload.len() + header.whole.len());
                    whole.put_slice(&header.whole);
                    whole.put_slice(&payload[header.written.len()..]);
                    payload = whole.freeze();
                }
                if performative.settled != Some(true) {
                    state
                        .deliveries
                        .insert((client, delivery_id), (name, token));
                }
                Some(Frame::new(
                    channel,
                    FrameBody::Transfer {
                        performative,
                        payload,
                    },
                ))
            }
            FrameBody::Flow(flow) => {
                let handle = flow.handle?;
                let mut state = self.state();
                let client = *state.client_channel.get(&channel)?;
                let name = state.our_handles.get(&(client, handle.0))?.clone();
                let link = state.links.get_mut(&name)?;
                if let Some(count) = flow.delivery_count {
                    link.sent = count;
                    link.publish_credit();
                }
                None
            }
            FrameBody::Detach(detach) => {
                let mut state = self.state();
                if let Some(client) = state.client_channel.get(&channel).copied() {
                    state.our_handles.remove(&(client, detach.handle.0));
                }
                None
            }
            FrameBody::End(_) => {
                let mut state = self.state();
                if let Some(client) = state.client_channel.remove(&channel) {
                    state.our_channel.remove(&client);
                    state.our_handles.retain(|(c, _), _| *c != client);
                }
                None
            }
            _ => None,
        }
    }
}

/// The performatives the tap reads, by descriptor code (AMQP 1.0 2.7).
fn wanted(performative: u64, inbound: bool) -> bool {
    use code::{ATTACH, BEGIN, DETACH, DISPOSITION, END, FLOW, OPEN, TRANSFER};
    match performative {
        ATTACH | FLOW | DETACH | END => true,
        OPEN | DISPOSITION => inbound,
        BEGIN | TRANSFER => !inbound,
        _ => false,
    }
}

/// The client's frames, checked by `guard` and then passed to `writer`
/// (fe2o3), through `change` for the performatives the tap reads.
/// `Ok(Some(_))` when the guard refuses one: the connection is to close
/// with it, and nothing more of the client's is passed on.
async fn forward_inbound<R, W>(
    mut reader: UnitReader<R>,
    mut writer: W,
    guard: &mut Guard,
    change: impl Fn(Frame) -> Option<Frame>,
) -> std::io::Result<Option<Refusal>>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut out = BytesMut::new();
    while let Some(unit) = reader.next().await? {
        match unit {
            Unit::Header(header) => writer.write_all(&header).await?,
            Unit::Frame(frame) => {
                if let Err(refusal) = guard.check(&frame) {
                    return Ok(Some(refusal));
                }
                let changed = match descriptor(&frame) {
                    Some(code) if wanted(code, true) => match decode(&frame) {
                        Some(read) => change(read),
                        None => symbol_keyed(&frame).and_then(|rekeyed| {
                            // Passed on rewritten, changed by the tap or not.
                            decode(&rekeyed)
                                .and_then(&change)
                                .or_else(|| decode(&rekeyed))
                        }),
                    },
                    // Read only when the library would refuse it.
                    Some(code::CLOSE) if decode(&frame).is_none() => symbol_keyed_frame(&frame),
                    _ => None,
                };
                match changed {
                    Some(changed) => {
                        out.clear();
                        encode(changed, &mut out).map_err(std::io::Error::other)?;
                        writer.write_all(&out).await?;
                    }
                    None => writer.write_all(&frame).await?,
                }
            }
        }
        if reader.is_drained() {
            writer.flush().await?;
        }
    }
    writer.shutdown().await?;
    Ok(None)
}

/// `frame` as the library reads it once the keys of its errors' `info`
/// are symbols, when that is why the library refused it (rhea writes them
/// as strings: `frame_io::symbol_keyed`). Passed on as it came, the frame
/// would end the connection in fe2o3's decoder.
fn symbol_keyed_frame(frame: &[u8]) -> Option<Frame> {
    decode(&symbol_keyed(frame)?)
}

/// What the client has been sent of the AMQP handshake, so a refusal can
/// be said in a way it reads.
#[derive(Debug, Default, Clone, Copy)]
struct Said {
    /// The AMQP (not SASL) protocol header.
    amqp_header: bool,
    /// Our `open`.
    open: bool,
}

impl Said {
    fn saw(&mut self, unit: &Unit) {
        match unit {
            Unit::Header(header) => self.amqp_header |= header[4] == 0,
            Unit::Frame(frame) => self.open |= descriptor(frame) == Some(code::OPEN),
        }
    }
}

/// Encodes the answer to a refusal: a `close` carrying it (after an
/// `open`, if ours has not gone out), or nothing while still in SASL or
/// before the protocol headers, where the connection is simply dropped.
fn refusal_frames(said: Said, refusal: Refusal, out: &mut BytesMut) -> std::io::Result<()> {
    if !said.amqp_header {
        return Ok(());
    }
    if !said.open {
        let open = Open {
            container_id: "nimbus".to_owned(),
            hostname: None,
            max_frame_size: MaxFrameSize(MIN_MAX_FRAME_SIZE),
            channel_max: ChannelMax(0),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        encode(Frame::new(0u16, FrameBody::Open(open)), out).map_err(std::io::Error::other)?;
    }
    let close = Close {
        error: Some(AmqpErrorBody::new(
            refusal.condition,
            refusal.description,
            None,
        )),
    };
    encode(Frame::new(0u16, FrameBody::Close(close)), out).map_err(std::io::Error::other)
}

/// Runs the tap between `client` and `library` until either side closes,
/// or the connection is refused: frames from the client are checked by
/// `guard` and go to the library through [`Tap::inbound`]; frames from the
/// library and the links' answers go to the client. A refusal, the
/// guard's or one sent with [`Tap::close`], is answered with a `close`
/// (logged, a line per interval at most) and ends the connection.
pub(crate) async fn pump<C, L>(
    client: C,
    library: L,
    tap: Tap,
    to_client: ToClient,
    max_frame_size: usize,
    mut guard: Guard,
    peer: Option<std::net::SocketAddr>,
) where
    C: AsyncRead + AsyncWrite + Unpin,
    L: AsyncRead + AsyncWrite + Unpin,
{
    let (client_read, mut client_write) = tokio::io::split(client);
    let (library_read, library_write) = tokio::io::split(library);
    let inbound_tap = tap.clone();
    let refusals = tap.refusals.clone();
    let ToClient {
        mut answers,
        refusals: mut closing,
    } = to_client;
    let inbound = async move {
        let refused = forward_inbound(
            UnitReader::new(client_read, max_frame_size),
            library_write,
            &mut guard,
            move |frame| inbound_tap.inbound(frame),
        )
        .await?;
        match refused {
            // The outbound half says it, between two frames of its own.
            Some(refusal) => {
                let _ = refusals.send(refusal);
                std::future::pending().await
            }
            None => Ok(()),
        }
    };
    let outbound = async {
        let mut reader = UnitReader::new(library_read, usize::MAX);
        let mut out = BytesMut::new();
        let mut said = Said::default();
        loop {
            out.clear();
            tokio::select! {
                biased;
                Some(refusal) = closing.recv() => {
                    LogLimit::global().info(Cause::ConnectionRefused, || {
                        format!(
                            "an AMQP connection from {} was closed: {}: {}",
                            peer.map_or_else(|| "a client".to_owned(), |p| p.to_string()),
                            condition::name(&refusal.condition),
                            refusal.description
                        )
                    });
                    refusal_frames(said, refusal, &mut out)?;
                    client_write.write_all(&out).await?;
                    break;
                }
                unit = reader.next() => match unit? {
                    None => break,
                    Some(unit) => {
                        said.saw(&unit);
                        match unit {
                            Unit::Header(header) => out.put_slice(&header),
                            Unit::Frame(frame) => {
                                let changed = descriptor(&frame)
                                    .filter(|code| wanted(*code, false))
                                    .and_then(|_| decode(&frame))
                                    .and_then(|frame| tap.outbound(frame));
                                match changed {
                                    Some(changed) => encode(changed, &mut out).map_err(std::io::Error::other)?,
                                    None => out.put_slice(&frame),
                                }
                            }
                        }
                    }
                },
                Some(answer) = answers.recv() => {
                    // Answers are written with the client's channel; the
                    // frame goes on ours.
                    let Some(channel) = tap.state().our_channel.get(&answer.channel).copied() else {
                        continue;
                    };
                    encode(Frame::new(channel, answer.body), &mut out).map_err(std::io::Error::other)?;
                }
            }
            client_write.write_all(&out).await?;
            if reader.is_drained() {
                client_write.flush().await?;
            }
        }
        client_write.shutdown().await
    };
    tokio::pin!(inbound, outbound);
    let result: std::io::Result<()> = tokio::select! {
        // The client ended its half: the library has been told (its input
        // is shut), and what it still writes (the answer to a `close` sent
        // just before) goes out before the connection ends. A client that
        // waits for that answer would otherwise wait for ever.
        result = &mut inbound => match result {
            Ok(()) => tokio::time::timeout(CLOSE_GRACE, &mut outbound)
                .await
                .unwrap_or(Ok(())),
            Err(error) => Err(error),
        },
        result = &mut outbound => result,
    };
    if let Err(error) = result {
        tracing::debug!(%error, "an AMQP connection's frames stopped");
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::definitions::Handle;
    use fe2o3_amqp::types::messaging::{Accepted, Rejected};
    use fe2o3_amqp::types::performatives::{Attach, Detach};

    use super::*;
    use crate::test_frames::{self, flow};

    /// Our channel 0 is the client's channel 5; the client's receiver
    /// `r` is its handle 1 and our handle 7.
    const OURS: u16 = 0;
    const CLIENTS: u16 = 5;

    fn attach(role: Role, handle: u32) -> Attach {
        let mut attach = test_frames::attach("r", handle, role, None);
        attach.initial_delivery_count = None;
        attach
    }

    fn transfer(delivery_id: u32, tag: u32) -> Frame {
        Frame::new(
            OURS,
            FrameBody::Transfer {
                performative: test_frames::transfer(
                    7,
                    delivery_id,
                    tag.to_be_bytes().to_vec(),
                    false,
                ),
                payload: bytes::Bytes::from_static(b"\x00\x53\x70\x45the rest"),
            },
        )
    }

    fn disposition(first: u32, last: Option<u32>, settled: bool, state: DeliveryState) -> Frame {
        Frame::new(
            CLIENTS,
            FrameBody::Disposition(Disposition {
                role: Role::Receiver,
                first,
                last,
                settled,
                state: Some(state),
                batchable: false,
            }),
        )
    }

    /// A tap that has seen the session begin and link `r` attach both ways,
    /// registered, and the client's flow of `credit`.
    fn attached(credit: u32) -> (Tap, LinkEvents, ToClient) {
        let (tap, answers) = Tap::new();
        let begin = test_frames::begin(Some(CLIENTS));
        assert!(
            tap.outbound(Frame::new(OURS, FrameBody::Begin(begin)))
                .is_none()
        );
        let client_attach = Frame::new(CLIENTS, FrameBody::Attach(attach(Role::Receiver, 1)));
        assert!(tap.inbound(client_attach).is_none());
        let events = tap.register("r").expect("first registration");
        assert!(tap.register("r").is_none(), "a name is registered once");
        let our_attach = Frame::new(OURS, FrameBody::Attach(attach(Role::Sender, 7)));
        assert!(tap.outbound(our_attach).is_none());
        let client_flow = Frame::new(CLIENTS, FrameBody::Flow(flow(1, None, credit)));
        assert!(tap.inbound(client_flow).is_none());
        (tap, events, answers)
    }

    fn token(n: u8) -> LockToken {
        LockToken::from_uuid(uuid::Uuid::from_bytes([n; 16]))
    }

    #[test]
    fn a_delivery_carries_its_lock_token_in_dotnet_order_and_its_header_whole() {
        let (tap, events, _) = attached(2);
        assert_eq!(*events.credit.borrow(), 2);
        let token = LockToken::from_uuid(uuid::Uuid::from_bytes([
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
        ]));
        let header = HeaderPatch {
            written: b"\x00\x53\x70\x45".to_vec(),
            whole: b"\x00\x53\x70\xc0\x01\x00".to_vec(),
        };
        tap.next_tag("r", token, Some(header));
        // A tag named and not sent holds a credit.
        assert_eq!(*events.credit.borrow(), 1);
        let Some(Frame {
            body:
                FrameBody::Transfer {
                    performative,
                    payload,
                },
            ..
        }) = tap.outbound(transfer(9, 0))
        else {
            panic!("the transfer is changed");
        };
        assert_eq!(
            performative.delivery_tag.as_ref().map(|tag| tag.as_slice()),
            Some(&[4, 3, 2, 1, 6, 5, 8, 7, 9, 10, 11, 12, 13, 14, 15, 16][..])
        );
        assert_eq!(&payload[..], b"\x00\x53\x70\xc0\x01\x00the rest");
        assert_eq!(*events.credit.borrow(), 1);
    }

    #[test]
    fn a_peek_lock_settlement_goes_to_the_link_and_fe2o3_sees_it_settled() {
        let (tap, mut events, mut answers) = attached(5);
        tap.next_tag("r", token(1), None);
        tap.next_tag("r", token(2), None);
        tap.outbound(transfer(9, 0)).expect("tagged");
        tap.outbound(transfer(10, 1)).expect("tagged");
        let shown = tap
            .inbound(disposition(
                9,
                Some(10),
                false,
                DeliveryState::Accepted(Accepted {}),
            ))
            .expect("changed for fe2o3");
        let FrameBody::Disposition(shown) = shown.body else {
            panic!("a disposition");
        };
        assert!(shown.settled, "fe2o3 must not answer it itself");
        let mut settled = Vec::new();
        while let Ok(ClientEvent::Settled(d)) = events.events.try_recv() {
            assert_eq!(d.channel, CLIENTS);
            assert!(!d.settled_by_client);
            settled.push((d.delivery_id, d.lock_token));
        }
        settled.sort_by_key(|(id, _)| *id);
        assert_eq!(settled, vec![(9, token(1)), (10, token(2))]);
        // Settled once: a second disposition of the same ids is not ours.
        assert!(
            tap.inbound(disposition(
                9,
                None,
                false,
                DeliveryState::Accepted(Accepted {})
            ))
            .is_none()
        );
        tap.answer(
            CLIENTS,
            9,
            DeliveryState::Rejected(Rejected { error: None }),
        );
        let answer = answers.answers.try_recv().expect("an answer frame");
        assert_eq!(answer.channel, CLIENTS, "answers name the client's channel");
    }

    #[test]
    fn credit_follows_the_client_and_a_drain_takes_it_back() {
        let (tap, mut events, _) = attached(3);
        tap.next_tag("r", token(1), None);
        tap.outbound(transfer(0, 0)).expect("tagged");
        assert_eq!(*events.credit.borrow(), 2);
        // fe2o3 answers a drain with its delivery count advanced to the limit.
        let mut drained = flow(7, Some(3), 0);
        drained.drain = true;
        assert!(
            tap.outbound(Frame::new(OURS, FrameBody::Flow(drained)))
                .is_none()
        );
        assert_eq!(*events.credit.borrow(), 0);
        // More credit from the client, counting from what it has seen.
        let more = Frame::new(CLIENTS, FrameBody::Flow(flow(1, Some(3), 4)));
        tap.inbound(more);
        assert_eq!(*events.credit.borrow(), 4);
        // The client detaching is told to the link.
        let detach = Detach {
            handle: Handle(1),
            closed: true,
            error: None,
        };
        tap.inbound(Frame::new(CLIENTS, FrameBody::Detach(detach)));
        assert!(matches!(
            events.events.try_recv(),
            Ok(ClientEvent::Detached)
        ));
    }

    #[test]
    fn frames_read_back_as_the_library_reads_them() {
        let mut bytes = BytesMut::new();
        encode(transfer(3, 1), &mut bytes).expect("encodes");
        assert_eq!(descriptor(&bytes), Some(0x14));
        let Some(Frame {
            channel,
            body:
                FrameBody::Transfer {
                    performative,
                    payload,
                },
        }) = decode(&bytes)
        else {
            panic!("decodes as a transfer");
        };
        assert_eq!((channel, performative.delivery_id), (OURS, Some(3)));
        assert_eq!(&payload[..], b"\x00\x53\x70\x45the rest");
        let size = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        assert_eq!(size, bytes.len());
    }

    #[test]
    fn after_its_link_ends_the_tap_answers_a_late_settlement_as_lost() {
        let (tap, _events, mut answers) = attached(2);
        tap.next_tag("r", token(1), None);
        tap.outbound(transfer(4, 0)).expect("tagged");
        let lost = DeliveryState::Rejected(Rejected { error: None });
        tap.unregister("r", lost.clone());
        let shown = tap
            .inbound(disposition(
                4,
                None,
                false,
                DeliveryState::Accepted(Accepted {}),
            ))
            .expect("shown settled to fe2o3, so it does not answer accepted");
        assert!(matches!(shown.body, FrameBody::Disposition(d) if d.settled));
        let answer = answers.answers.try_recv().expect("the tap answers");
        assert!(
            matches!(answer.body, FrameBody::Disposition(d) if d.first == 4 && d.state == Some(lost))
        );
        // Once the client detaches, nothing of the link is kept.
        let detach = Detach {
            handle: Handle(1),
            closed: true,
            error: None,
        };
        tap.inbound(Frame::new(CLIENTS, FrameBody::Detach(detach)));
        let state = tap.state();
        assert!(state.links.is_empty() && state.deliveries.is_empty());
    }

    #[test]
    fn a_tag_not_sent_is_taken_back_and_its_credit_returned() {
        let (tap, events, _) = attached(1);
        tap.next_tag("r", token(1), None);
        assert_eq!(*events.credit.borrow(), 0);
        assert!(tap.forget_tag("r", token(1)), "not sent yet");
        assert_eq!(*events.credit.borrow(), 1);
        tap.next_tag("r", token(2), None);
        tap.outbound(transfer(0, 0)).expect("tagged");
        assert!(!tap.forget_tag("r", token(2)), "it went out");
        // A drain takes what credit is left before fe2o3 answers it.
        let (tap, events, _) = attached(3);
        let mut drain = flow(1, Some(0), 3);
        drain.drain = true;
        tap.inbound(Frame::new(CLIENTS, FrameBody::Flow(drain)));
        assert_eq!(*events.credit.borrow(), 0);
    }
}
