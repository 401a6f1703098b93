//! The frame path against hostile bytes (issue 40): whatever a client
//! sends, the guard neither panics nor lets through a frame the library's
//! decoder would recurse too deep on, and the tap, given what passes,
//! neither panics nor loses track. Frames are made from real performatives
//! (open, begin, attach, flow, transfer, disposition, detach, end), then
//! cut, flipped, nested and reassigned to other channels and handles.
//! Runs `PROPTEST_CASES` cases (256 by default), a few seconds in all, in
//! every test run, as the broker log's reader is fuzzed (decision 0130).

use std::sync::Arc;

use bytes::BytesMut;
use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::types::definitions::{Handle, Role};
use fe2o3_amqp::types::messaging::{Accepted, DeliveryState};
use fe2o3_amqp::types::performatives::{Detach, Disposition, End};
use proptest::prelude::*;

use nimbus_dialect::frame_io::{self, encode};

use crate::grants::Grants;
use crate::guard::{Guard, Limits};
use crate::tap::Tap;
use crate::test_frames;

/// A real frame of each kind, on `channel`, naming `handle`.
fn template(kind: u8, channel: u16, handle: u32, payload: Vec<u8>) -> Frame {
    let body = match kind % 8 {
        0 => FrameBody::Open(test_frames::open(Some("localhost"))),
        1 => FrameBody::Begin(test_frames::begin(None)),
        2 => {
            let role = if handle.is_multiple_of(2) {
                Role::Sender
            } else {
                Role::Receiver
            };
            let address = ["orders", "$cbs", "orders/$management"][handle as usize % 3];
            let name = format!("l{handle}");
            FrameBody::Attach(test_frames::attach(&name, handle, role, Some(address)))
        }
        3 => {
            let mut flow = test_frames::flow(handle, Some(0), 10);
            flow.drain = handle.is_multiple_of(3);
            FrameBody::Flow(flow)
        }
        4 => {
            let mut transfer =
                test_frames::transfer(handle, handle, vec![1, 2, 3, 4], handle.is_multiple_of(3));
            transfer.settled = Some(handle.is_multiple_of(2));
            transfer.aborted = handle.is_multiple_of(7);
            FrameBody::Transfer {
                performative: transfer,
                payload: payload.into(),
            }
        }
        5 => FrameBody::Disposition(Disposition {
            role: Role::Receiver,
            first: handle,
            last: Some(handle.wrapping_add(3)),
            settled: handle.is_multiple_of(2),
            state: Some(DeliveryState::Accepted(Accepted {})),
            batchable: false,
        }),
        6 => FrameBody::Detach(Detach {
            handle: Handle(handle),
            closed: true,
            error: None,
        }),
        _ => FrameBody::End(End { error: None }),
    };
    Frame::new(channel, body)
}

/// What is done to a template's bytes.
#[derive(Debug, Clone)]
enum Damage {
    None,
    /// Bytes flipped at these offsets.
    Flip(Vec<(prop::sample::Index, u8)>),
    /// Cut short, the size field mended so the frame reads whole.
    Cut(prop::sample::Index),
    /// A nesting of this many described values put in at an offset.
    Nest(prop::sample::Index, u16),
}

fn damaged(frame: Frame, damage: &Damage) -> BytesMut {
    let mut bytes = BytesMut::new();
    encode(frame, &mut bytes).expect("a template encodes");
    match damage {
        Damage::None => {}
        Damage::Flip(flips) => {
            for (at, value) in flips {
                // The frame header is left: a broken size is the reader's
                // to refuse, before the guard.
                let at = 8 + at.index(bytes.len().saturating_sub(8).max(1));
                if let Some(byte) = bytes.get_mut(at) {
                    *byte ^= value;
                }
            }
        }
        Damage::Cut(at) => {
            let keep = 8 + at.index(bytes.len() - 7);
            bytes.truncate(keep);
        }
        Damage::Nest(at, levels) => {
            let at = 8 + at.index(bytes.len() - 7);
            let mut nesting = Vec::new();
            for _ in 0..*levels {
                nesting.extend_from_slice(&[0x00, 0x53, 0x01]);
            }
            let tail = bytes.split_off(at);
            bytes.extend_from_slice(&nesting);
            bytes.extend_from_slice(&tail);
        }
    }
    let size = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    bytes[..4].copy_from_slice(&size.to_be_bytes());
    bytes
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => Just(Damage::None),
        2 => proptest::collection::vec((any::<prop::sample::Index>(), 1u8..), 1..4).prop_map(Damage::Flip),
        1 => any::<prop::sample::Index>().prop_map(Damage::Cut),
        1 => (any::<prop::sample::Index>(), 1u16..400).prop_map(|(at, n)| Damage::Nest(at, n)),
    ]
}

fn frames() -> impl Strategy<Value = Vec<(u8, u16, u32, Vec<u8>, Damage)>> {
    proptest::collection::vec(
        (
            any::<u8>(),
            0u16..3,
            0u32..6,
            proptest::collection::vec(any::<u8>(), 0..64),
            damage(),
        ),
        1..40,
    )
}

proptest! {
    #[test]
    fn no_frame_panics_the_guard_or_the_tap_or_reaches_the_decoder_too_deep(frames in frames()) {
        let limits = Limits {
            sessions: 2,
            links_per_session: 4,
            links_without_token: 3,
            unfinished_bytes: 4096,
        };
        let mut guard = Guard::new(limits, Arc::new(Grants::default()));
        let (tap, _to_client) = Tap::new();
        let _ = tap.register("l1");
        for (kind, channel, handle, payload, damage) in frames {
            let bytes = damaged(template(kind, channel, handle, payload), &damage);
            if guard.check(&bytes).is_err() {
                // The connection closes here: nothing more of it is read.
                break;
            }
            // What passed decodes (or fails to) on a small stack: the
            // library's recursion is bounded by what the guard let by.
            let decoded = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || (frame_io::decode(&bytes), bytes))
                .expect("a thread")
                .join();
            prop_assert!(decoded.is_ok(), "the decoder overflowed or panicked");
            if let Ok((Some(frame), bytes)) = decoded {
                let _ = tap.inbound(frame);
                if let Some(frame) = frame_io::decode(&bytes) {
                    let _ = tap.outbound(frame);
                }
            }
        }
    }
}
