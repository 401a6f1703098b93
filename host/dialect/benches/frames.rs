//! What checking a client's frames costs on the publish path (issue 40):
//! `FrameCheck::check` (the bounds scan of the performative and message,
//! and the transfer's decode) against the library's own decode of the same
//! frame, which fe2o3 does for every frame anyway. The frame is one
//! transfer carrying a NimBus event as the SDKs send it: properties, ten
//! application properties, a 400-byte JSON body.
//!
//! `cargo bench -p nimbus-dialect --bench frames`

#![allow(missing_docs, reason = "criterion generates the entry point")]

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{Criterion, criterion_group, criterion_main};
use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::types::definitions::Handle;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Data, Message, Properties};
use fe2o3_amqp::types::performatives::Transfer;
use nimbus_dialect::frame_check::FrameCheck;
use nimbus_dialect::frame_io::{decode, encode};
use serde_amqp::primitives::Binary;

fn publish_frame() -> BytesMut {
    let mut application = ApplicationProperties::builder();
    for (name, value) in [
        ("To", "OrderPlaced"),
        ("MessageType", "EventRequest"),
        ("EventId", "0190f5c2-7d1e-7c4a-9b1e-3f4a5b6c7d8e"),
        ("EventTypeId", "OrderPlaced"),
        ("OriginatingMessageId", "self"),
        ("ParentMessageId", "self"),
        ("OriginatingFrom", "publisher"),
        ("From", "publisher"),
        ("CorrelationId", "corr-42"),
        ("SessionId", "customer-42"),
    ] {
        application = application.insert(name, value);
    }
    let mut properties = Properties::builder().build();
    properties.message_id = Some("f3b1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d".to_owned().into());
    properties.group_id = Some("customer-42".to_owned());
    let body = format!(
        "{{\"EventContent\":{{\"EventTypeId\":\"OrderPlaced\",\"EventJson\":\"{}\"}}}}",
        "x".repeat(360)
    );
    let message = Message::builder()
        .properties(properties)
        .application_properties(application.build())
        .data(Data(Binary::from(body.into_bytes())))
        .build();
    // As convert.rs encodes a message: the library's wrapper for it.
    use fe2o3_amqp::types::messaging::message::__private::Serializable;
    let payload = serde_amqp::to_vec(&Serializable(message)).expect("the message encodes");
    let frame = Frame::new(
        1u16,
        FrameBody::Transfer {
            performative: Transfer {
                handle: Handle(2),
                delivery_id: Some(7),
                delivery_tag: Some(vec![0, 0, 0, 7].into()),
                message_format: Some(0),
                settled: Some(false),
                more: false,
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: false,
                batchable: true,
            },
            payload: payload.into(),
        },
    );
    let mut bytes = BytesMut::new();
    encode(frame, &mut bytes).expect("the frame encodes");
    bytes
}

fn frames(c: &mut Criterion) {
    let frame = publish_frame();
    let mut group = c.benchmark_group("publish-transfer");
    group.bench_function("frame_check", |b| {
        let mut check = FrameCheck::default();
        b.iter(|| check.check(black_box(&frame)).expect("a good frame"));
    });
    group.bench_function("library_decode", |b| {
        b.iter(|| decode(black_box(&frame)).expect("a good frame"));
    });
    group.finish();
}

criterion_group!(benches, frames);
criterion_main!(benches);
