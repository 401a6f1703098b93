//! What one connection may send and hold, checked on each frame from the
//! client before fe2o3 or the tap decodes it (issue 40).
//!
//! - Every value is read by [`crate::bounds`] first: a frame's
//!   performative, and the message a transfer's frames carry, across
//!   frames. Anything nested too deep or malformed closes the connection
//!   with `amqp:decode-error` before a recursive decoder sees it.
//! - Sessions per connection and links per session are capped; before a
//!   valid token, the connection may hold only a few links (`$cbs` needs
//!   two).
//! - A delivery of more than one frame is buffered (by fe2o3) only on a
//!   link whose entity a token on this connection gives the right to send
//!   to, and the bytes of all unfinished deliveries on a connection are
//!   capped: a client without a token gets nothing held for it, one with a
//!   token no more than the cap.
//!
//! A refusal closes the connection: the pump answers with a `close`
//! carrying the condition and why.

use std::collections::HashMap;
use std::sync::Arc;

use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition, Role, SessionError};
use fe2o3_amqp::types::messaging::TargetArchetype;
use fe2o3_amqp::types::performatives::{Attach, Transfer};

use crate::address::Node;
use crate::cbs::Grants;
use crate::frame_check::{FrameCheck, Performative, Seen};
use crate::sas::Right;

/// The bounds on one connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Sessions at once (.NET opens one per link, Python one per client).
    pub sessions: usize,
    /// Links at once on one session.
    pub links_per_session: usize,
    /// Links at once on the whole connection before a valid token is put
    /// (the `$cbs` pair, and room for a `$management` pair).
    pub links_without_token: usize,
    /// Bytes of unfinished multi-frame deliveries held at once, over the
    /// connection's links.
    pub unfinished_bytes: u64,
}

impl Limits {
    /// The endpoint's defaults, for messages of up to `max_message_size`.
    pub(crate) fn for_messages(max_message_size: u64) -> Limits {
        Limits {
            sessions: 256,
            links_per_session: 64,
            links_without_token: 4,
            // A few messages at the largest size in flight at once; a
            // client sending more in parallel waits for its settlements.
            unfinished_bytes: (4 * max_message_size).max(16 << 20),
        }
    }
}

/// Why a connection is closed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    /// The condition the `close` carries.
    pub condition: ErrorCondition,
    /// Why, in words.
    pub description: String,
}

impl Refusal {
    fn decode(why: impl std::fmt::Display) -> Refusal {
        Refusal {
            condition: ErrorCondition::AmqpError(AmqpError::DecodeError),
            description: why.to_string(),
        }
    }

    fn limit(description: String) -> Refusal {
        Refusal {
            condition: ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded),
            description,
        }
    }

    fn unauthorized(description: String) -> Refusal {
        Refusal {
            condition: ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess),
            description,
        }
    }
}

/// A link the client attached.
struct Link {
    /// For a link the client sends on: the right and entity a delivery of
    /// more than one frame needs (`None` for `$cbs`, which a client uses
    /// before it has a token; fe2o3 caps its messages small).
    sends_to: Option<Option<(Right, String)>>,
    /// Bytes of the delivery being received in pieces.
    unfinished: u64,
}

/// The checks on one connection's frames from its client.
pub(crate) struct Guard {
    limits: Limits,
    grants: Arc<Grants>,
    frames: FrameCheck,
    /// Links attached, per client channel (a session).
    sessions: HashMap<u16, usize>,
    links: HashMap<(u16, u32), Link>,
    unfinished_bytes: u64,
}

impl Guard {
    pub(crate) fn new(limits: Limits, grants: Arc<Grants>) -> Guard {
        Guard {
            limits,
            grants,
            frames: FrameCheck::default(),
            sessions: HashMap::new(),
            links: HashMap::new(),
            unfinished_bytes: 0,
        }
    }

    /// Checks one frame from the client (its size field included).
    ///
    /// # Errors
    ///
    /// Why the connection is to be closed.
    pub(crate) fn check(&mut self, frame: &[u8]) -> Result<(), Refusal> {
        let Seen {
            channel,
            performative,
        } = self.frames.check(frame).map_err(Refusal::decode)?;
        match performative {
            Performative::Open(open) => {
                if let Some(host) = open.hostname.as_deref() {
                    self.grants.set_host(host);
                }
                Ok(())
            }
            Performative::Begin => self.begin(channel),
            Performative::Attach(attach) => self.attach(channel, &attach),
            Performative::Transfer(transfer, bytes) => self.transfer(channel, &transfer, bytes),
            Performative::Detach(detach) => {
                self.forget(channel, detach.handle.0);
                Ok(())
            }
            Performative::End => {
                let handles: Vec<u32> = self
                    .links
                    .keys()
                    .filter(|(c, _)| *c == channel)
                    .map(|(_, handle)| *handle)
                    .collect();
                for handle in handles {
                    self.forget(channel, handle);
                }
                self.sessions.remove(&channel);
                Ok(())
            }
            Performative::Nothing | Performative::Other => Ok(()),
        }
    }

    fn begin(&mut self, channel: u16) -> Result<(), Refusal> {
        if !self.sessions.contains_key(&channel) && self.sessions.len() >= self.limits.sessions {
            return Err(Refusal::limit(format!(
                "more than {} sessions on one connection",
                self.limits.sessions
            )));
        }
        self.sessions.entry(channel).or_insert(0);
        Ok(())
    }

    fn attach(&mut self, channel: u16, attach: &Attach) -> Result<(), Refusal> {
        let key = (channel, attach.handle.0);
        if self.links.contains_key(&key) {
            // fe2o3 answers a handle in use.
            return Ok(());
        }
        let on_session = self.sessions.get(&channel).copied().unwrap_or(0);
        if on_session >= self.limits.links_per_session {
            return Err(Refusal::limit(format!(
                "more than {} links on one session",
                self.limits.links_per_session
            )));
        }
        if !self.grants.authenticated() && self.links.len() >= self.limits.links_without_token {
            return Err(Refusal::unauthorized(format!(
                "more than {} links before a valid token was put on $cbs",
                self.limits.links_without_token
            )));
        }
        let sends_to = (attach.role == Role::Sender).then(|| {
            let address = match attach.target.as_deref() {
                Some(TargetArchetype::Target(target)) => target.address.as_deref(),
                _ => None,
            };
            needed_to_send(address.unwrap_or_default())
        });
        *self.sessions.entry(channel).or_insert(0) += 1;
        self.links.insert(
            key,
            Link {
                sends_to,
                unfinished: 0,
            },
        );
        Ok(())
    }

    fn transfer(&mut self, channel: u16, transfer: &Transfer, bytes: usize) -> Result<(), Refusal> {
        let handle = transfer.handle.0;
        let Some(link) = self.links.get_mut(&(channel, handle)) else {
            return Err(Refusal {
                condition: ErrorCondition::SessionError(SessionError::UnattachedHandle),
                description: format!("a transfer on handle {handle}, which no link holds"),
            });
        };
        let Some(needs) = &link.sends_to else {
            return Err(Refusal {
                condition: ErrorCondition::AmqpError(AmqpError::NotAllowed),
                description: format!("a transfer on handle {handle}, a link the endpoint sends on"),
            });
        };
        if transfer.aborted || !transfer.more {
            // The delivery is over: what fe2o3 held of it goes.
            self.unfinished_bytes -= std::mem::take(&mut link.unfinished);
            return Ok(());
        }
        if let Some((right, path)) = needs
            && !self.grants.allow(*right, path)
        {
            return Err(Refusal::unauthorized(format!(
                "a delivery of more than one frame to '{path}', on which no token put on this \
                 connection gives {right}"
            )));
        }
        link.unfinished += bytes as u64;
        self.unfinished_bytes += bytes as u64;
        if self.unfinished_bytes > self.limits.unfinished_bytes {
            return Err(Refusal::limit(format!(
                "more than {} bytes of unfinished deliveries on one connection",
                self.limits.unfinished_bytes
            )));
        }
        Ok(())
    }

    fn forget(&mut self, channel: u16, handle: u32) {
        if let Some(link) = self.links.remove(&(channel, handle)) {
            self.unfinished_bytes -= link.unfinished;
            if let Some(count) = self.sessions.get_mut(&channel) {
                *count = count.saturating_sub(1);
            }
        }
    }
}

/// The right a client needs to send on a link to `address`, and on what:
/// `None` for `$cbs`. An address the endpoint does not serve needs what
/// no token gives, so nothing is held for it.
fn needed_to_send(address: &str) -> Option<(Right, String)> {
    match Node::parse(address) {
        Ok(Node::Cbs) => None,
        Ok(Node::Entity(entity)) => Some((Right::Send, entity.queue_path())),
        Ok(Node::Management(entity)) => {
            Some((crate::management::right_for(&entity), entity.queue_path()))
        }
        Err(_) => Some((Right::Manage, address.to_owned())),
    }
}

#[cfg(test)]
mod tests;
