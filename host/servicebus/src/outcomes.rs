//! The broker's answers to this client's settlements, read off the wire.
//!
//! fe2o3-amqp's receiver sends a peek-lock disposition and does not wait
//! for the broker's: the broker's answer (the outcome it applied, or
//! `rejected` with `message-lock-lost`) is what says whether a settlement
//! took effect. The connection's frames from the broker pass through here
//! unchanged; each transfer's lock token is noted by its delivery id, and
//! each disposition from the broker settles the waiters of the tokens it
//! covers (decisions 0136, 0137).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::{DeliveryNumber, Role};
use fe2o3_amqp::types::messaging::DeliveryState;
use nimbus_amqp::frame_check::FrameCheck;
use nimbus_amqp::frame_io::{Unit, UnitReader, decode, descriptor};
use nimbus_transport::LockToken;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

/// The largest frame taken from a broker: Service Bus's largest message
/// (100 MB on Premium) fits in frames far smaller; a size beyond this is a
/// broken stream, not a frame.
const MAX_FRAME_FROM_BROKER: usize = 128 * 1024 * 1024;

/// Waiters for the broker's answer, by lock token.
#[derive(Clone, Default)]
pub(crate) struct Outcomes {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The link and lock token of each delivery, by (broker's channel,
    /// delivery id).
    tokens: HashMap<(u16, DeliveryNumber), (u32, LockToken)>,
    waiting: HashMap<LockToken, oneshot::Sender<DeliveryState>>,
    /// Deliveries of links the broker detached, by the channel they were
    /// on: a settlement of one gets no answer, so it is not waited for.
    gone: HashMap<LockToken, u16>,
    /// The connection is gone: no answer comes any more.
    closed: bool,
}

impl Outcomes {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The broker's answer to the settlement of `token`, once it comes;
    /// an error if the connection or link goes first.
    pub(crate) fn expect(&self, token: LockToken) -> oneshot::Receiver<DeliveryState> {
        let (answer, answered) = oneshot::channel();
        let mut state = self.state();
        // Its link or connection is gone: the answer is "lost" at once (the sender is
        // dropped).
        if !state.closed && !state.gone.contains_key(&token) {
            state.waiting.insert(token, answer);
        }
        answered
    }

    /// Stops waiting for `token` (the settlement was not sent).
    pub(crate) fn forget(&self, token: LockToken) {
        self.state().waiting.remove(&token);
    }

    fn observe(&self, channel: u16, body: FrameBody) {
        match body {
            // A pre-settled transfer (a `$management` answer) gets no answer.
            FrameBody::Transfer { performative, .. } if performative.settled != Some(true) => {
                if let (Some(id), Some(tag)) = (performative.delivery_id, performative.delivery_tag)
                    && let Ok(bytes) = <[u8; 16]>::try_from(tag.as_slice())
                {
                    self.state().tokens.insert(
                        (channel, id),
                        (
                            performative.handle.0,
                            LockToken::from_uuid(uuid::Uuid::from_bytes_le(bytes)),
                        ),
                    );
                }
            }
            FrameBody::Disposition(disposition) if disposition.role == Role::Sender => {
                let span = disposition
                    .last
                    .unwrap_or(disposition.first)
                    .wrapping_sub(disposition.first);
                let mut state = self.state();
                let ids: Vec<(u16, DeliveryNumber)> = state
                    .tokens
                    .keys()
                    .filter(|(c, id)| *c == channel && id.wrapping_sub(disposition.first) <= span)
                    .copied()
                    .collect();
                for key in ids {
                    let Some((_, token)) = state.tokens.remove(&key) else {
                        continue;
                    };
                    if let (Some(waiter), Some(answer)) =
                        (state.waiting.remove(&token), disposition.state.clone())
                    {
                        let _ = waiter.send(answer);
                    }
                }
            }
            FrameBody::Detach(detach) => {
                // The broker ended a link (its session lock lapsed, most
                // often): its deliveries cannot be settled any more.
                let mut state = self.state();
                let gone: Vec<(u16, DeliveryNumber)> = state
                    .tokens
                    .iter()
                    .filter(|((c, _), (handle, _))| *c == channel && *handle == detach.handle.0)
                    .map(|(key, _)| *key)
                    .collect();
                for key in gone {
                    if let Some((_, token)) = state.tokens.remove(&key) {
                        state.waiting.remove(&token);
                        state.gone.insert(token, channel);
                    }
                }
            }
            FrameBody::End(_) => {
                // The session's links are gone, and with them any answer
                // still awaited there: its waiter is told (lock lost).
                let mut state = self.state();
                let gone: Vec<LockToken> = state
                    .tokens
                    .iter()
                    .filter(|((c, _), _)| *c == channel)
                    .map(|(_, (_, token))| *token)
                    .collect();
                state.tokens.retain(|(c, _), _| *c != channel);
                state.gone.retain(|_, c| *c != channel);
                for token in gone {
                    state.waiting.remove(&token);
                }
            }
            _ => {}
        }
    }
}

/// Passes bytes between `broker` and `library` until either closes,
/// reading the broker's transfers and dispositions on the way.
pub(crate) async fn pump<B, L>(broker: B, library: L, outcomes: Outcomes)
where
    B: AsyncRead + AsyncWrite + Unpin,
    L: AsyncRead + AsyncWrite + Unpin,
{
    const TRANSFER: u64 = 0x14;
    const DISPOSITION: u64 = 0x15;
    const DETACH: u64 = 0x16;
    const END: u64 = 0x17;
    let (broker_read, mut broker_write) = tokio::io::split(broker);
    let (mut library_read, mut library_write) = tokio::io::split(library);
    let from_broker = async {
        let mut reader = UnitReader::new(broker_read, MAX_FRAME_FROM_BROKER);
        // fe2o3 decodes by recursion with no depth limit: what the broker
        // sends is bounded first, as the endpoint bounds its clients.
        let mut values = FrameCheck::default();
        while let Some(unit) = reader.next().await? {
            match unit {
                Unit::Header(header) => library_write.write_all(&header).await?,
                Unit::Frame(frame) => {
                    if let Err(refused) = values.check(&frame) {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("the broker sent a frame past the client's bounds: {refused}"),
                        ));
                    }
                    if descriptor(&frame)
                        .is_some_and(|code| [TRANSFER, DISPOSITION, DETACH, END].contains(&code))
                        && let Some(decoded) = decode(&frame)
                    {
                        outcomes.observe(decoded.channel, decoded.body);
                    }
                    library_write.write_all(&frame).await?;
                }
            }
            if reader.is_drained() {
                library_write.flush().await?;
            }
        }
        library_write.shutdown().await
    };
    let to_broker = async {
        tokio::io::copy(&mut library_read, &mut broker_write).await?;
        broker_write.shutdown().await
    };
    let result: std::io::Result<()> = tokio::select! {
        result = from_broker => result,
        result = to_broker => result,
    };
    // No answer can come any more: every waiter is told, and any later one
    // at once.
    let mut state = outcomes.state();
    state.closed = true;
    state.waiting.clear();
    drop(state);
    match result {
        Err(error) if error.kind() == std::io::ErrorKind::InvalidData => {
            tracing::warn!(%error, "the connection to the broker was dropped");
        }
        Err(error) => tracing::debug!(%error, "the connection's frames stopped"),
        Ok(()) => {}
    }
}
