//! A client whose AMQP library writes the keys of an error's `info` as
//! strings, as rhea does under the JavaScript SDK, dead-letters with its
//! reason and description and keeps its connection. Before the endpoint
//! read such frames, `receiver.deadLetterMessage(msg, { deadLetterReason })`
//! lost the connection and the message was not dead-lettered (issue 39).
//!
//! The client here is nimbus's own, which writes symbols; a proxy between
//! it and the endpoint rewrites its dispositions' error keys as rhea
//! writes them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fe2o3_amqp::types::primitives::Value;
use nimbus_dialect::frame_io::{Unit, UnitReader, code, descriptor};
use nimbus_servicebus::ServiceBus;
use nimbus_transport::{
    Admin, Message, Receiver, SubQueue, SubscriptionPath, SubscriptionSettings, TopicSettings,
    Transport,
};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use serde_amqp::primitives::OrderedMap;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::common::{self, Served};

const WAIT: Duration = Duration::from_secs(10);

/// The performative of `frame` with the symbol keys of its errors' `info`
/// written as strings, re-framed; `None` when there are none.
fn string_keyed(frame: &[u8]) -> Option<Vec<u8>> {
    let doff = usize::from(frame[4]) * 4;
    let mut performative: Value = serde_amqp::from_slice(&frame[doff..]).ok()?;
    if !stringify(&mut performative) {
        return None;
    }
    let body = serde_amqp::to_vec(&performative).ok()?;
    let mut out = u32::try_from(doff + body.len())
        .ok()?
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(&frame[4..doff]);
    out.extend_from_slice(&body);
    Some(out)
}

fn stringify(value: &mut Value) -> bool {
    match value {
        Value::Described(described) => {
            let Described { descriptor, value } = &mut **described;
            let mut changed = false;
            if *descriptor == Descriptor::Code(0x1d)
                && let Value::List(fields) = value
                && let Some(Value::Map(info)) = fields.get_mut(2)
            {
                let entries = std::mem::replace(info, OrderedMap::new()).into_inner();
                *info = entries
                    .into_iter()
                    .map(|(key, value)| match key {
                        Value::Symbol(key) => (Value::String(key.0), value),
                        key => (key, value),
                    })
                    .collect();
                changed = true;
            }
            stringify(value) || changed
        }
        Value::List(items) => {
            // Every item is visited: more than one may hold an error.
            let mut changed = false;
            for item in items {
                changed |= stringify(item);
            }
            changed
        }
        _ => false,
    }
}

/// Serves a proxy to `port` that passes everything through, but writes
/// the client's dispositions as rhea would; returns its port and how many
/// dispositions it rewrote.
async fn rhea_proxy(port: u16) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_port = listener.local_addr().unwrap().port();
    let rewritten = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&rewritten);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let (client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
            let rewritten = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut units = UnitReader::new(client_read, 1 << 20);
                while let Ok(Some(unit)) = units.next().await {
                    let bytes = match unit {
                        Unit::Header(header) => header.to_vec(),
                        Unit::Frame(frame) if descriptor(&frame) == Some(code::DISPOSITION) => {
                            match string_keyed(&frame) {
                                Some(changed) => {
                                    rewritten.fetch_add(1, Ordering::Relaxed);
                                    changed
                                }
                                None => frame.to_vec(),
                            }
                        }
                        Unit::Frame(frame) => frame.to_vec(),
                    };
                    if server_write.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (proxy_port, rewritten)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_whose_reason_is_keyed_by_a_string_is_taken() {
    let served = Served::start().await;
    let broker = &served.broker;
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .unwrap();
    let path = SubscriptionPath::new("t", "s");
    broker
        .create_subscription(&path, SubscriptionSettings::default())
        .await
        .unwrap();
    for body in [b"first".to_vec(), b"second".to_vec()] {
        broker.publish("t", vec![Message::new(body)]).await.unwrap();
    }
    let (proxy, rewritten) = rhea_proxy(served.port).await;
    let connection = format!(
        "Endpoint=sb://localhost:{proxy};SharedAccessKeyName={};SharedAccessKey={};\
         UseDevelopmentEmulator=true;",
        common::KEY_NAME,
        common::KEY
    );
    let bus = ServiceBus::connect(&connection.parse().unwrap())
        .await
        .unwrap();
    let receiver = bus.receiver(&path, SubQueue::Main).await.unwrap();
    let first = receiver.receive(WAIT).await.unwrap().expect("first");
    receiver
        .dead_letter(first, "Bad order".into(), "no such customer".into())
        .await
        .unwrap();
    assert_eq!(
        rewritten.load(Ordering::Relaxed),
        1,
        "the dead-letter went through the proxy keyed by strings"
    );

    // The connection goes on: the next message comes on the same receiver.
    let second = receiver.receive(WAIT).await.unwrap().expect("second");
    assert_eq!(second.message.body, b"second");
    receiver.complete(second).await.unwrap();

    let dead = broker.receiver(&path, SubQueue::DeadLetter).await.unwrap();
    let dead_lettered = dead.receive(WAIT).await.unwrap().expect("dead-lettered");
    assert_eq!(dead_lettered.message.body, b"first");
    assert_eq!(
        dead_lettered.dead_letter_reason.as_deref(),
        Some("Bad order")
    );
    assert_eq!(
        dead_lettered.dead_letter_description.as_deref(),
        Some("no such customer")
    );
}
