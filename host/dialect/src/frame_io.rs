//! AMQP frames as units on a byte stream: read whole (protocol headers and
//! frames), their performative told by its descriptor code, decoded by the
//! library's own decoder, encoded as the library encodes them. What the
//! endpoint's tap (decision 0136) and a client's tap read frames with.
//!
//! One leniency is added ([`symbol_keyed`]): rhea, the JavaScript SDK's
//! AMQP library, writes the keys of an error's `info` as strings where AMQP
//! says symbols, and Service Bus takes them; the library's decoder refuses
//! the whole frame, which ended the client's connection.

use bytes::{Buf, BufMut, BytesMut};
use fe2o3_amqp::frames::amqp::{Frame, FrameBody, FrameDecoder};
use serde::Serialize;
use serde_amqp::primitives::{OrderedMap, Symbol};
use serde_amqp::{Value, described::Described, descriptor::Descriptor};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::codec::Decoder as _;

/// One unit read from a peer: a protocol header or a whole frame (with its
/// size field).
pub enum Unit {
    /// A protocol header (`AMQP` and its protocol id and version).
    Header([u8; 8]),
    /// A frame, its size field included.
    Frame(BytesMut),
}

/// Reads headers and frames, refusing a frame over `max_frame_size`.
pub struct UnitReader<R> {
    io: R,
    buffer: BytesMut,
    max_frame_size: usize,
}

impl<R: AsyncRead + Unpin> UnitReader<R> {
    /// Reads from `io`.
    pub fn new(io: R, max_frame_size: usize) -> Self {
        UnitReader {
            io,
            buffer: BytesMut::with_capacity(16 * 1024),
            max_frame_size,
        }
    }

    async fn fill(&mut self, want: usize) -> std::io::Result<bool> {
        while self.buffer.len() < want {
            self.buffer.reserve(want - self.buffer.len());
            if self.io.read_buf(&mut self.buffer).await? == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether nothing read is left over (a flush is due).
    pub fn is_drained(&self) -> bool {
        self.buffer.is_empty()
    }

    /// The next unit; `None` at the end of the stream.
    ///
    /// # Errors
    ///
    /// A read error, or a frame size outside 8 to the maximum.
    ///
    /// Cancel-safe: what was read stays buffered.
    pub async fn next(&mut self) -> std::io::Result<Option<Unit>> {
        if !self.fill(8).await? {
            return Ok(None);
        }
        if &self.buffer[..4] == b"AMQP" {
            let mut header = [0; 8];
            self.buffer.copy_to_slice(&mut header);
            return Ok(Some(Unit::Header(header)));
        }
        let size = u32::from_be_bytes([
            self.buffer[0],
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
        ]) as usize;
        if !(8..=self.max_frame_size).contains(&size) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "a frame of {size} bytes, outside 8..={}",
                    self.max_frame_size
                ),
            ));
        }
        if !self.fill(size).await? {
            return Ok(None);
        }
        Ok(Some(Unit::Frame(self.buffer.split_to(size))))
    }
}

/// The frame type of an AMQP frame (a SASL frame's is 1).
pub const AMQP_FRAME_TYPE: u8 = 0;

/// The performatives' descriptor codes (AMQP 1.0 §2.7), as
/// [`descriptor`] tells them.
pub mod code {
    /// `open`.
    pub const OPEN: u64 = 0x10;
    /// `begin`.
    pub const BEGIN: u64 = 0x11;
    /// `attach`.
    pub const ATTACH: u64 = 0x12;
    /// `flow`.
    pub const FLOW: u64 = 0x13;
    /// `transfer`.
    pub const TRANSFER: u64 = 0x14;
    /// `disposition`.
    pub const DISPOSITION: u64 = 0x15;
    /// `detach`.
    pub const DETACH: u64 = 0x16;
    /// `end`.
    pub const END: u64 = 0x17;
    /// `close`.
    pub const CLOSE: u64 = 0x18;
}

/// The frame's performative code, when it is an AMQP frame with a body.
pub fn descriptor(frame: &[u8]) -> Option<u64> {
    let doff = usize::from(*frame.get(4)?) * 4;
    if frame.get(5) != Some(&AMQP_FRAME_TYPE) {
        return None;
    }
    match frame.get(doff..)? {
        // A described type: 0x00, then a small ulong or a ulong code.
        [0x00, 0x53, code, ..] => Some(u64::from(*code)),
        [0x00, 0x80, rest @ ..] => Some(u64::from_be_bytes(rest.get(..8)?.try_into().ok()?)),
        _ => None,
    }
}

/// The frame decoded by the library's decoder; `None` when it does not
/// decode.
pub fn decode(frame: &BytesMut) -> Option<Frame> {
    let mut body = BytesMut::from(&frame[4..]);
    FrameDecoder {}.decode(&mut body).ok().flatten()
}

/// Encodes `frame` as the library would (size, doff 2, type 0, channel,
/// performative, payload).
///
/// # Errors
///
/// When a performative does not encode.
pub fn encode(frame: Frame, out: &mut BytesMut) -> Result<(), serde_amqp::Error> {
    fn performative(value: &impl Serialize) -> Result<Vec<u8>, serde_amqp::Error> {
        serde_amqp::to_vec(value)
    }
    let (body, payload) = match frame.body {
        FrameBody::Open(p) => (performative(&p)?, None),
        FrameBody::Begin(p) => (performative(&p)?, None),
        FrameBody::Attach(p) => (performative(&p)?, None),
        FrameBody::Flow(p) => (performative(&p)?, None),
        FrameBody::Transfer {
            performative: p,
            payload,
        } => (performative(&p)?, Some(payload)),
        FrameBody::Disposition(p) => (performative(&p)?, None),
        FrameBody::Detach(p) => (performative(&p)?, None),
        FrameBody::End(p) => (performative(&p)?, None),
        FrameBody::Close(p) => (performative(&p)?, None),
        FrameBody::Empty => (Vec::new(), None),
    };
    let size = 8 + body.len() + payload.as_ref().map_or(0, |p| p.len());
    out.put_u32(u32::try_from(size).unwrap_or(u32::MAX));
    out.put_u8(2);
    out.put_u8(0);
    out.put_u16(frame.channel);
    out.put_slice(&body);
    if let Some(payload) = payload {
        out.put_slice(&payload);
    }
    Ok(())
}

/// The descriptor code of AMQP's `error` (`amqp:error:list`).
const ERROR: u64 = 0x1d;

/// `frame` again, with the string keys of every error's `info` map written
/// as symbols, when it has such keys; `None` when it has none or is not an
/// AMQP frame that reads as AMQP values at all. Only small control frames
/// are meant (`disposition`, `detach`, `end`, `close`): a transfer's
/// payload is not looked at.
///
/// The frame is read as generic values, so this works whatever the
/// performative; the guard has bounded its depth before.
pub fn symbol_keyed(frame: &[u8]) -> Option<BytesMut> {
    let doff = usize::from(*frame.get(4)?) * 4;
    if frame.get(5) != Some(&AMQP_FRAME_TYPE) {
        return None;
    }
    let header = frame.get(4..doff)?;
    let mut performative: Value = serde_amqp::from_slice(frame.get(doff..)?).ok()?;
    if !rekey_errors(&mut performative) {
        return None;
    }
    let body = serde_amqp::to_vec(&performative).ok()?;
    let mut out = BytesMut::with_capacity(4 + header.len() + body.len());
    out.put_u32(u32::try_from(4 + header.len() + body.len()).ok()?);
    out.put_slice(header);
    out.put_slice(&body);
    Some(out)
}

/// Rewrites the string keys of the `info` of every `error` in `value` as
/// symbols; whether it changed any.
fn rekey_errors(value: &mut Value) -> bool {
    match value {
        Value::Described(described) => {
            let Described { descriptor, value } = &mut **described;
            let is_error = match descriptor {
                Descriptor::Code(code) => *code == ERROR,
                Descriptor::Name(name) => name.as_str() == "amqp:error:list",
            };
            let mut changed = false;
            // The error's fields: condition, description, info.
            if is_error
                && let Value::List(fields) = value
                && let Some(Value::Map(info)) = fields.get_mut(2)
                && info.keys().any(|key| matches!(key, Value::String(_)))
            {
                let entries = std::mem::replace(info, OrderedMap::new()).into_inner();
                *info = entries
                    .into_iter()
                    .map(|(key, value)| match key {
                        Value::String(key) => (Value::Symbol(Symbol::from(key)), value),
                        key => (key, value),
                    })
                    .collect::<OrderedMap<_, _>>();
                changed = true;
            }
            rekey_errors(value) || changed
        }
        Value::List(items) => {
            // Every item is visited: more than one may hold an error.
            let mut changed = false;
            for item in items {
                changed |= rekey_errors(item);
            }
            changed
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use fe2o3_amqp::types::messaging::DeliveryState;

    use super::*;

    fn described(code: u64, fields: Vec<Value>) -> Value {
        Value::Described(Box::new(Described {
            descriptor: Descriptor::Code(code),
            value: Value::List(fields),
        }))
    }

    /// A receiver's `disposition` dead-lettering delivery 3, as rhea writes
    /// it for `receiver.deadLetterMessage(msg, { deadLetterReason, … })`:
    /// `rejected`, its error's `info` keyed by strings.
    fn rhea_dead_letter() -> BytesMut {
        let info: OrderedMap<Value, Value> = [
            ("DeadLetterReason", "Bad order"),
            ("DeadLetterErrorDescription", "no such customer"),
        ]
        .into_iter()
        .map(|(k, v)| (Value::String(k.into()), Value::String(v.into())))
        .collect();
        let error = described(
            ERROR,
            vec![
                Value::Symbol(Symbol::from("com.microsoft:dead-letter")),
                Value::Null,
                Value::Map(info),
            ],
        );
        let rejected = described(0x25, vec![error]);
        let disposition = described(
            code::DISPOSITION,
            vec![
                Value::Bool(true),
                Value::Uint(3),
                Value::Null,
                Value::Bool(true),
                rejected,
            ],
        );
        let body = serde_amqp::to_vec(&disposition).unwrap();
        let mut frame = BytesMut::new();
        frame.put_u32(u32::try_from(8 + body.len()).unwrap());
        frame.put_slice(&[2, 0, 0, 1]);
        frame.put_slice(&body);
        frame
    }

    #[test]
    fn an_error_info_keyed_by_strings_reads_once_keyed_by_symbols() {
        let frame = rhea_dead_letter();
        assert!(decode(&frame).is_none(), "the library refuses string keys");
        let rekeyed = symbol_keyed(&frame).expect("rewritten");
        let Some(Frame {
            channel: 1,
            body: FrameBody::Disposition(disposition),
        }) = decode(&rekeyed)
        else {
            panic!("a disposition on channel 1");
        };
        assert_eq!((disposition.first, disposition.settled), (3, true));
        let Some(DeliveryState::Rejected(rejected)) = disposition.state else {
            panic!("rejected");
        };
        let info = rejected.error.unwrap().info.unwrap();
        assert_eq!(
            info.get(&Symbol::from("DeadLetterReason")),
            Some(&Value::String("Bad order".into()))
        );
        assert_eq!(
            info.get(&Symbol::from("DeadLetterErrorDescription")),
            Some(&Value::String("no such customer".into()))
        );
    }

    #[test]
    fn a_frame_without_string_keys_is_left_alone() {
        let rekeyed = symbol_keyed(&rhea_dead_letter()).unwrap();
        assert!(symbol_keyed(&rekeyed).is_none(), "nothing left to rewrite");
        assert!(symbol_keyed(b"\x00\x00\x00\x08\x02\x00\x00\x00").is_none());
        assert!(symbol_keyed(b"AMQP").is_none());
    }
}
