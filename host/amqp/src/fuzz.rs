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
use fe2o3_amqp::types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp::types::messaging::{Accepted, DeliveryState, Source, Target, TargetArchetype};
use fe2o3_amqp::types::performatives::{
    Attach, Begin, ChannelMax, Detach, Disposition, End, Flow, MaxFrameSize, Open, Transfer,
};
use proptest::prelude::*;

use crate::cbs::Grants;
use crate::frame_io::{self, encode};
use crate::guard::{Guard, Limits};
use crate::tap::Tap;

/// A real frame of each kind, on `channel`, naming `handle`.
fn template(kind: u8, channel: u16, handle: u32, payload: Vec<u8>) -> Frame {
    let body = match kind % 8 {
        0 => FrameBody::Open(Open {
            container_id: "fuzz".to_owned(),
            hostname: Some("localhost".to_owned()),
            max_frame_size: MaxFrameSize(65_536),
            channel_max: ChannelMax(64),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }),
        1 => FrameBody::Begin(Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: 100,
            outgoing_window: 100,
            handle_max: Handle(255),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }),
        2 => FrameBody::Attach(Attach {
            name: format!("l{handle}"),
            handle: Handle(handle),
            role: if handle.is_multiple_of(2) {
                Role::Sender
            } else {
                Role::Receiver
            },
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(Source::default())),
            target: Some(Box::new(TargetArchetype::Target(Target {
                address: Some(
                    ["orders", "$cbs", "orders/$management"][handle as usize % 3].to_owned(),
                ),
                ..Target::default()
            }))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }),
        3 => FrameBody::Flow(Flow {
            next_incoming_id: Some(0),
            incoming_window: 100,
            next_outgoing_id: 0,
            outgoing_window: 100,
            handle: Some(Handle(handle)),
            delivery_count: Some(0),
            link_credit: Some(10),
            available: None,
            drain: handle.is_multiple_of(3),
            echo: false,
            properties: None,
        }),
        4 => FrameBody::Transfer {
            performative: Transfer {
                handle: Handle(handle),
                delivery_id: Some(handle),
                delivery_tag: Some(vec![1, 2, 3, 4].into()),
                message_format: Some(0),
                settled: Some(handle.is_multiple_of(2)),
                more: handle.is_multiple_of(3),
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: handle.is_multiple_of(7),
                batchable: false,
            },
            payload: payload.into(),
        },
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
