//! A peer's frames, their values checked by [`crate::bounds`] as they
//! arrive: each frame's performative, and the message each link's
//! transfers carry, across its frames. The endpoint's guard reads every
//! client frame through it (and adds its caps); the Service Bus client
//! reads every frame from the namespace or endpoint it connects to.

use std::collections::HashMap;

use fe2o3_amqp::types::performatives::{Attach, Detach, Open, Transfer};
use serde::de::DeserializeOwned;

use crate::bounds::{self, MAX_DEPTH, Refused, Scanner};
use crate::frame_io;

/// One frame, checked.
#[derive(Debug)]
pub struct Seen {
    /// The frame's channel.
    pub channel: u16,
    /// What it carries.
    pub performative: Performative,
}

/// The performatives a reader of [`Seen`] acts on, decoded; the rest
/// only checked.
#[derive(Debug)]
pub enum Performative {
    /// An empty frame (a heartbeat) or a SASL frame.
    Nothing,
    /// `open`.
    Open(Box<Open>),
    /// `begin`.
    Begin,
    /// `attach`.
    Attach(Box<Attach>),
    /// `transfer`, and how many payload bytes it carries.
    Transfer(Box<Transfer>, usize),
    /// `detach`.
    Detach(Detach),
    /// `end`.
    End,
    /// Any other performative.
    Other,
}

const OPEN: u64 = 0x10;
const BEGIN: u64 = 0x11;
const ATTACH: u64 = 0x12;
const TRANSFER: u64 = 0x14;
const DETACH: u64 = 0x16;
const END: u64 = 0x17;

/// The checks on one connection's frames from its peer.
#[derive(Debug, Default)]
pub struct FrameCheck {
    /// The message each link is receiving in pieces, by (channel, handle).
    messages: HashMap<(u16, u32), Scanner>,
}

impl FrameCheck {
    /// Checks one frame (its size field included) and says what it is.
    ///
    /// # Errors
    ///
    /// A value nested too deep or malformed, a message that ends inside a
    /// value, or a frame or performative that does not read.
    pub fn check(&mut self, frame: &[u8]) -> Result<Seen, Refused> {
        let (Some(&doff), Some(&kind), Some(channel)) = (
            frame.get(4),
            frame.get(5),
            frame.get(6..8).map(|c| u16::from_be_bytes([c[0], c[1]])),
        ) else {
            return Err(Refused::Malformed(
                "a frame shorter than its header".to_owned(),
            ));
        };
        let offset = usize::from(doff) * 4;
        let Some(body) = frame.get(offset..).filter(|_| offset >= 8) else {
            return Err(Refused::Malformed(format!(
                "a frame whose data offset ({doff}) is outside it"
            )));
        };
        let seen = |performative| {
            Ok(Seen {
                channel,
                performative,
            })
        };
        if body.is_empty() {
            return seen(Performative::Nothing);
        }
        let end = bounds::first_value_end(body, MAX_DEPTH)?;
        const AMQP_FRAME: u8 = 0;
        if kind != AMQP_FRAME {
            // A SASL frame holds its one value and no more.
            return seen(Performative::Nothing);
        }
        let (performative, payload) = body.split_at(end);
        let Some(code) = frame_io::descriptor(frame) else {
            return seen(Performative::Other);
        };
        match code {
            OPEN => seen(Performative::Open(parse(performative)?)),
            BEGIN => seen(Performative::Begin),
            ATTACH => seen(Performative::Attach(parse(performative)?)),
            TRANSFER => {
                let transfer: Box<Transfer> = parse(performative)?;
                self.transfer(channel, &transfer, payload)?;
                seen(Performative::Transfer(transfer, payload.len()))
            }
            DETACH => {
                let detach: Detach = parse(performative)?;
                self.messages.remove(&(channel, detach.handle.0));
                seen(Performative::Detach(detach))
            }
            END => {
                self.messages.retain(|(c, _), _| *c != channel);
                seen(Performative::End)
            }
            _ => seen(Performative::Other),
        }
    }

    fn transfer(
        &mut self,
        channel: u16,
        transfer: &Transfer,
        payload: &[u8],
    ) -> Result<(), Refused> {
        let key = (channel, transfer.handle.0);
        if transfer.aborted {
            self.messages.remove(&key);
            return Ok(());
        }
        let scanner = self
            .messages
            .entry(key)
            .or_insert_with(|| Scanner::new(MAX_DEPTH));
        scanner.feed(payload)?;
        if transfer.more {
            return Ok(());
        }
        let whole = scanner.at_boundary();
        self.messages.remove(&key);
        if whole {
            Ok(())
        } else {
            Err(Refused::Malformed(
                "a message that ends inside one of its values".to_owned(),
            ))
        }
    }
}

fn parse<T: DeserializeOwned>(performative: &[u8]) -> Result<T, Refused> {
    serde_amqp::from_slice(performative).map_err(|error| {
        Refused::Malformed(format!("a performative that does not decode: {error}"))
    })
}
