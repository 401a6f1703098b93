#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::types::definitions::Handle;
use fe2o3_amqp::types::performatives::{Detach, End};

use super::*;
use crate::test_frames;
use nimbus_dialect::frame_io::encode;
use nimbus_dialect::{Grant, SasError, SharedAccessKey};

const LIMITS: Limits = Limits {
    sessions: 2,
    links_per_session: 3,
    links_without_token: 2,
    unfinished_bytes: 1000,
};

fn bytes(frame: Frame) -> BytesMut {
    let mut out = BytesMut::new();
    encode(frame, &mut out).unwrap();
    out
}

fn open(hostname: Option<&str>) -> BytesMut {
    bytes(Frame::new(
        0u16,
        FrameBody::Open(test_frames::open(hostname)),
    ))
}

fn begin(channel: u16) -> BytesMut {
    bytes(Frame::new(
        channel,
        FrameBody::Begin(test_frames::begin(None)),
    ))
}

/// The client attaches `handle` on `channel`, sending to `address`.
fn attach(channel: u16, handle: u32, address: &str) -> BytesMut {
    let name = format!("link-{channel}-{handle}");
    let attach = test_frames::attach(&name, handle, Role::Sender, Some(address));
    bytes(Frame::new(channel, FrameBody::Attach(attach)))
}

fn transfer(channel: u16, handle: u32, more: bool, payload: &'static [u8]) -> BytesMut {
    bytes(Frame::new(
        channel,
        FrameBody::Transfer {
            performative: test_frames::transfer(handle, 0, vec![1], more),
            payload: bytes::Bytes::from_static(payload),
        },
    ))
}

fn end(channel: u16) -> BytesMut {
    bytes(Frame::new(channel, FrameBody::End(End { error: None })))
}

/// A data section of 1 MiB, opened (its header and first bytes).
const DATA_OPENED: &[u8] = b"\x00\x53\x75\xb0\x00\x10\x00\x00aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn guard_with(grant: Option<&str>) -> Guard {
    let grants = Arc::new(Grants::default());
    if let Some(audience) = grant {
        let key = SharedAccessKey::new("k", "a key for tests");
        let now = SystemTime::now();
        let token = key.sign(audience, now + Duration::from_secs(3600));
        grants.add(Grant::from_token(&token, &[key], now, None).unwrap());
    }
    Guard::new(LIMITS, grants)
}

fn condition(refusal: Refusal) -> ErrorCondition {
    refusal.condition
}

#[test]
fn a_deeply_nested_open_is_refused_before_it_is_decoded() {
    let mut guard = guard_with(None);
    // The probe of issue 40: an open whose properties hold one described
    // value nested 5,000 deep.
    let mut body = vec![0x00, 0x53, 0x10, 0xd0];
    let mut properties = Vec::new();
    for _ in 0..5_000 {
        properties.extend_from_slice(&[0x00, 0x53, 0x01]);
    }
    properties.push(0x40);
    let mut map = vec![0xd1];
    let inner_len = u32::try_from(properties.len() + 4 + 3).unwrap();
    map.extend_from_slice(&inner_len.to_be_bytes());
    map.extend_from_slice(&2u32.to_be_bytes());
    map.extend_from_slice(&[0xa3, 0x01, b'p']);
    map.extend_from_slice(&properties);
    let fields = [&[0xa1, 0x01, b'c'][..], &[0x40; 9][..], &map[..]].concat();
    body.extend_from_slice(&u32::try_from(fields.len() + 4).unwrap().to_be_bytes());
    body.extend_from_slice(&11u32.to_be_bytes());
    body.extend_from_slice(&fields);
    let mut frame = u32::try_from(body.len() + 8)
        .unwrap()
        .to_be_bytes()
        .to_vec();
    frame.extend_from_slice(&[2, 0, 0, 0]);
    frame.extend_from_slice(&body);
    let refusal = guard.check(&frame).unwrap_err();
    assert_eq!(
        refusal.condition,
        ErrorCondition::AmqpError(AmqpError::DecodeError)
    );
    assert!(
        refusal.description.contains("nested more than 64"),
        "{refusal:?}"
    );
}

#[test]
fn the_open_names_the_host_tokens_must_be_for() {
    let grants = Arc::new(Grants::default());
    let mut guard = Guard::new(LIMITS, Arc::clone(&grants));
    guard.check(&open(Some("nimbus.example.com"))).unwrap();
    let key = SharedAccessKey::new("k", "a key for tests");
    let now = SystemTime::now();
    let token = key.sign("sb://other.example.com/", now + Duration::from_secs(3600));
    assert!(matches!(
        Grant::from_token(&token, &[key], now, grants.host()),
        Err(SasError::OtherHost { .. })
    ));
}

#[test]
fn without_a_token_a_connection_holds_few_links_and_buffers_nothing() {
    let mut guard = guard_with(None);
    guard.check(&open(None)).unwrap();
    guard.check(&begin(0)).unwrap();
    guard.check(&attach(0, 0, "$cbs")).unwrap();
    guard.check(&attach(0, 1, "sb://h/orders")).unwrap();
    // A whole message in one frame goes to the link, which refuses it.
    guard
        .check(&transfer(0, 1, false, b"\x00\x53\x75\xa0\x01x"))
        .unwrap();
    // The first frame of a longer one closes the connection.
    let refusal = guard.check(&transfer(0, 1, true, DATA_OPENED)).unwrap_err();
    assert!(refusal.description.contains("'orders'"), "{refusal:?}");
    assert_eq!(
        condition(refusal),
        ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess)
    );
    let mut guard = guard_with(None);
    guard.check(&begin(0)).unwrap();
    guard.check(&attach(0, 0, "$cbs")).unwrap();
    guard.check(&attach(0, 1, "$cbs")).unwrap();
    let refusal = guard.check(&attach(0, 2, "orders")).unwrap_err();
    assert!(
        refusal.description.contains("before a valid token"),
        "{refusal:?}"
    );
}

#[test]
fn with_a_token_unfinished_deliveries_are_held_to_the_connections_cap() {
    let mut guard = guard_with(Some("sb://h/orders"));
    guard.check(&begin(0)).unwrap();
    guard.check(&attach(0, 0, "orders")).unwrap();
    guard.check(&attach(0, 1, "orders")).unwrap();
    guard.check(&transfer(0, 0, true, DATA_OPENED)).unwrap();
    guard.check(&transfer(0, 1, true, DATA_OPENED)).unwrap();
    assert_eq!(guard.unfinished_bytes, 2 * DATA_OPENED.len() as u64);
    // A link that detaches gives its bytes back.
    guard
        .check(&bytes(Frame::new(
            0u16,
            FrameBody::Detach(Detach {
                handle: Handle(1),
                closed: true,
                error: None,
            }),
        )))
        .unwrap();
    assert_eq!(guard.unfinished_bytes, DATA_OPENED.len() as u64);
    // More of the same delivery, until the connection's cap.
    let mut refused = None;
    let mut held = guard.unfinished_bytes;
    for _ in 0..100 {
        match guard.check(&transfer(0, 0, true, &DATA_OPENED[8..])) {
            Ok(()) => held = guard.unfinished_bytes,
            Err(refusal) => {
                refused = Some(refusal);
                break;
            }
        }
    }
    assert!(
        held <= 1000 && held + (DATA_OPENED.len() as u64 - 8) > 1000,
        "{held}"
    );
    let refusal = refused.expect("the cap is reached");
    assert_eq!(
        condition(refusal),
        ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded)
    );
}

#[test]
fn a_message_cut_inside_a_value_or_deep_across_frames_is_refused() {
    let mut guard = guard_with(Some("sb://h/"));
    guard.check(&begin(0)).unwrap();
    guard.check(&attach(0, 0, "orders")).unwrap();
    // A value section holding a string of 5 bytes, ended after 2.
    let refusal = guard
        .check(&transfer(0, 0, false, b"\x00\x53\x77\xa1\x05ab"))
        .unwrap_err();
    assert_eq!(
        condition(refusal),
        ErrorCondition::AmqpError(AmqpError::DecodeError)
    );
    // Nesting spread over frames is counted across them.
    let mut guard = guard_with(Some("sb://h/"));
    guard.check(&begin(0)).unwrap();
    guard.check(&attach(0, 0, "orders")).unwrap();
    let deep: &'static [u8] = b"\x00\x53\x01\x00\x53\x01\x00\x53\x01\x00\x53\x01\x00\x53\x01\x00\x53\x01\x00\x53\x01\x00\x53\x01";
    let mut refused = None;
    for _ in 0..20 {
        if let Err(refusal) = guard.check(&transfer(0, 0, true, deep)) {
            refused = Some(refusal);
            break;
        }
    }
    assert_eq!(
        refused.map(condition),
        Some(ErrorCondition::AmqpError(AmqpError::DecodeError))
    );
}

#[test]
fn sessions_and_links_are_capped_and_an_end_gives_them_back() {
    let mut guard = guard_with(Some("sb://h/"));
    guard.check(&begin(0)).unwrap();
    guard.check(&begin(1)).unwrap();
    let refusal = guard.check(&begin(2)).unwrap_err();
    assert!(
        refusal.description.contains("more than 2 sessions"),
        "{refusal:?}"
    );
    for handle in 0..3 {
        guard.check(&attach(1, handle, "orders")).unwrap();
    }
    let refusal = guard.check(&attach(1, 3, "orders")).unwrap_err();
    assert!(
        refusal.description.contains("more than 3 links"),
        "{refusal:?}"
    );
    guard.check(&end(1)).unwrap();
    guard.check(&begin(2)).unwrap();
    guard.check(&attach(2, 0, "orders")).unwrap();
    let refusal = guard.check(&transfer(2, 7, false, b"\x40")).unwrap_err();
    assert!(refusal.description.contains("handle 7"), "{refusal:?}");
}
