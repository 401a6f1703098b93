//! The endpoint's bounds on what a connection may do and hold (issue 40):
//! a client that never finishes its handshake is dropped; one that puts no
//! token in time, or that is the oldest without one when room is needed,
//! is closed; one with a token keeps its slot; a silent one is closed at
//! the idle timeout it was told; a value nested past the limit closes the
//! connection with `amqp:decode-error` while others go on; a refused SASL
//! mechanism is answered with its outcome.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};
use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::frames::sasl;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::performatives::{ChannelMax, Close, MaxFrameSize, Open};
use fe2o3_amqp::types::primitives::{Symbol, Timestamp};
use fe2o3_amqp::types::sasl::{SaslCode, SaslInit};
use fe2o3_amqp::{Connection, Session};
use fe2o3_amqp_cbs::client::CbsClient;
use fe2o3_amqp_cbs::token::CbsToken;
use nimbus_amqp::Endpoint;
use nimbus_broker::{Broker, BrokerOptions};
use nimbus_dialect::SharedAccessKey;
use nimbus_dialect::frame_io::{Unit, UnitReader, encode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Encoder as _;

/// The SASL protocol header a client opens with.
const SASL_HEADER: &[u8] = b"AMQP\x03\x01\x00\x00";
const AMQP_HEADER: &[u8] = b"AMQP\x00\x01\x00\x00";
const KEY_NAME: &str = "k";
const KEY: &str = "a key for the limits tests";

async fn serve(
    configure: impl FnOnce(Endpoint<Broker>) -> Endpoint<Broker>,
) -> (u16, tokio::sync::oneshot::Sender<()>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(
        Broker::open(BrokerOptions::new(dir.path().join("b")))
            .await
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let endpoint = configure(Endpoint::new(
        broker,
        vec![SharedAccessKey::new(KEY_NAME, KEY)],
        1 << 20,
    ));
    tokio::spawn(endpoint.serve(listener, async {
        let _ = stopped.await;
    }));
    (port, stop, dir)
}

/// The endpoint's answer to a SASL header: its own header, within `wait`.
async fn answered(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut header = [0; 8];
    matches!(
        tokio::time::timeout(wait, stream.read_exact(&mut header)).await,
        Ok(Ok(_)) if header == SASL_HEADER
    )
}

/// Whether the endpoint ends `stream` (closes or resets it) within `wait`.
async fn ended(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut rest = Vec::new();
    tokio::time::timeout(wait, stream.read_to_end(&mut rest))
        .await
        .is_ok()
}

/// A client written by hand, frame by frame, to send what no library
/// would.
struct Raw {
    write: tokio::net::tcp::OwnedWriteHalf,
    read: UnitReader<tokio::net::tcp::OwnedReadHalf>,
}

impl Raw {
    async fn connect(port: u16) -> Raw {
        let (read, write) = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap()
            .into_split();
        Raw {
            write,
            read: UnitReader::new(read, 1 << 20),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.write.write_all(bytes).await.unwrap();
    }

    async fn next(&mut self) -> Option<Unit> {
        tokio::time::timeout(Duration::from_secs(10), self.read.next())
            .await
            .expect("the endpoint answers within 10 s")
            .ok()
            .flatten()
    }

    async fn sasl(&mut self, mechanism: &str) -> SaslCode {
        self.send(SASL_HEADER).await;
        assert!(matches!(self.next().await, Some(Unit::Header(_))));
        assert!(
            matches!(self.next().await, Some(Unit::Frame(_))),
            "mechanisms"
        );
        let mut body = BytesMut::new();
        sasl::FrameCodec {}
            .encode(
                sasl::Frame::Init(SaslInit {
                    mechanism: Symbol::from(mechanism),
                    initial_response: None,
                    hostname: None,
                }),
                &mut body,
            )
            .unwrap();
        let mut frame = BytesMut::new();
        frame.put_u32(u32::try_from(body.len() + 4).unwrap());
        frame.put_slice(&body);
        self.send(&frame).await;
        let Some(Unit::Frame(outcome)) = self.next().await else {
            panic!("a SASL outcome");
        };
        // sasl-outcome: described 0x44, a list whose first field is the code.
        let code = outcome
            .windows(3)
            .position(|w| w == [0x00, 0x53, 0x44])
            .map(|at| outcome[at + 3..].to_vec())
            .expect("a sasl-outcome");
        // list8 or list0 ... the code is the first item, a ubyte (0x50 n).
        let position = code.iter().position(|b| *b == 0x50).expect("a code");
        match code[position + 1] {
            0 => SaslCode::Ok,
            1 => SaslCode::Auth,
            2 => SaslCode::Sys,
            3 => SaslCode::SysPerm,
            _ => SaslCode::SysTemp,
        }
    }

    /// SASL, the AMQP header and an `open`; answers the endpoint's `open`.
    async fn open(&mut self) -> Open {
        assert_eq!(self.sasl("ANONYMOUS").await, SaslCode::Ok);
        self.send(AMQP_HEADER).await;
        assert!(matches!(self.next().await, Some(Unit::Header(_))));
        self.frame(FrameBody::Open(client_open())).await;
        match self.frame_in().await {
            Some(FrameBody::Open(open)) => open,
            other => panic!("the endpoint's open, not {other:?}"),
        }
    }

    async fn frame(&mut self, body: FrameBody) {
        let mut bytes = BytesMut::new();
        encode(Frame::new(0u16, body), &mut bytes).unwrap();
        self.send(&bytes).await;
    }

    /// The next frame's body, skipping empty ones; `None` at the end.
    async fn frame_in(&mut self) -> Option<FrameBody> {
        loop {
            match self.next().await? {
                Unit::Header(_) => panic!("a header after the handshake"),
                Unit::Frame(frame) => match nimbus_dialect::frame_io::decode(&frame)?.body {
                    FrameBody::Empty => {}
                    body => return Some(body),
                },
            }
        }
    }
}

fn client_open() -> Open {
    Open {
        container_id: "raw".to_owned(),
        hostname: Some("localhost".to_owned()),
        max_frame_size: MaxFrameSize(65_536),
        channel_max: ChannelMax(15),
        idle_time_out: None,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// A client that opens a connection with fe2o3 and puts a token for the
/// namespace, as the SDKs do.
async fn with_token(port: u16) -> fe2o3_amqp::connection::ConnectionHandle<()> {
    let mut connection = Connection::builder()
        .container_id("with-token")
        .hostname("localhost")
        .sasl_profile(SaslProfile::Anonymous)
        .open(format!("amqp://127.0.0.1:{port}").as_str())
        .await
        .unwrap();
    let mut session = Session::begin(&mut connection).await.unwrap();
    let mut cbs = CbsClient::attach(&mut session).await.unwrap();
    let expires = SystemTime::now() + Duration::from_secs(3600);
    let audience = format!("sb://localhost:{port}/");
    let token = SharedAccessKey::new(KEY_NAME, KEY).sign(&audience, expires);
    let ms = i64::try_from(expires.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap();
    cbs.put_token(
        audience,
        CbsToken::new(
            token,
            "servicebus.windows.net:sastoken",
            Timestamp::from_milliseconds(ms),
        ),
    )
    .await
    .unwrap();
    connection
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_handshake_is_dropped() {
    let (port, _stop, _dir) =
        serve(|endpoint| endpoint.with_handshake_timeout(Duration::from_millis(200))).await;
    let mut silent = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // Whatever the endpoint says first, the stream then ends.
    let mut said = Vec::new();
    // (A reset is an end too: what is checked is that it comes, and soon.)
    let _ended = tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut said))
        .await
        .expect("the endpoint closes a silent connection well before its default 30 s");
    assert!(
        said.len() <= 8,
        "it said more than its protocol header: {said:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_with_a_token_keeps_its_slot_and_the_next_waits_until_it_ends() {
    let (port, _stop, _dir) = serve(|endpoint| endpoint.with_max_connections(1)).await;
    let first = with_token(port).await;

    let mut second = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    second.write_all(SASL_HEADER).await.unwrap();
    assert!(
        !answered(&mut second, Duration::from_millis(500)).await,
        "a second connection is served while the first, with a token, holds the only slot"
    );
    drop(first);
    assert!(
        answered(&mut second, Duration::from_secs(10)).await,
        "the second is served once the first ends"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_connection_without_a_token_makes_room_for_a_new_one() {
    let (port, _stop, _dir) = serve(|endpoint| endpoint.with_max_connections(2)).await;
    let mut silent = Raw::connect(port).await;
    // Open, and never a token: it holds a slot until room is needed.
    silent.open().await;
    let _with_token = with_token(port).await;
    let mut newcomer = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    newcomer.write_all(SASL_HEADER).await.unwrap();
    assert!(answered(&mut newcomer, Duration::from_secs(10)).await);
    match silent.frame_in().await {
        Some(FrameBody::Close(close)) => {
            let error = close.error.expect("the close says why");
            assert_eq!(
                error.condition,
                ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess)
            );
            assert!(
                error
                    .description
                    .as_deref()
                    .unwrap_or("")
                    .contains("make room"),
                "{error:?}"
            );
        }
        other => panic!("the silent connection is closed, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_puts_no_token_in_time_is_told_and_closed() {
    let (port, _stop, _dir) =
        serve(|endpoint| endpoint.with_token_timeout(Duration::from_millis(300))).await;
    let mut client = Raw::connect(port).await;
    client.open().await;
    match client.frame_in().await {
        Some(FrameBody::Close(close)) => {
            let error = close.error.expect("the close says why");
            assert!(
                error
                    .description
                    .as_deref()
                    .unwrap_or("")
                    .contains("put no valid token on $cbs within 0.3 s"),
                "{error:?}"
            );
        }
        other => panic!("a close, not {other:?}"),
    }
    assert!(
        client.frame_in().await.is_none(),
        "and then the socket ends"
    );
    // One that puts its token stays past the timeout.
    let mut kept = with_token(port).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let session = Session::begin(&mut kept).await;
    assert!(
        session.is_ok(),
        "a connection with a token is kept: {session:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_at_the_idle_timeout_it_was_told() {
    let (port, _stop, _dir) =
        serve(|endpoint| endpoint.with_idle_timeout(Duration::from_millis(300))).await;
    let mut client = Raw::connect(port).await;
    let open = client.open().await;
    assert_eq!(open.idle_time_out, Some(300), "the timeout is advertised");
    // The stream ends (`frame_in` waits at most 10 s for each frame, far
    // less than the 60 s a connection has to put its token).
    while client.frame_in().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_nested_past_the_limit_closes_the_connection_and_others_go_on() {
    let (port, _stop, _dir) = serve(|endpoint| endpoint).await;
    let mut attacker = Raw::connect(port).await;
    assert_eq!(attacker.sasl("ANONYMOUS").await, SaslCode::Ok);
    attacker.send(AMQP_HEADER).await;
    assert!(matches!(attacker.next().await, Some(Unit::Header(_))));
    // An open whose properties map holds a described value nested 5,000
    // deep: before, this overflowed a worker's stack and aborted the host.
    let mut properties = Vec::new();
    for _ in 0..5_000 {
        properties.extend_from_slice(&[0x00, 0x53, 0x01]);
    }
    properties.push(0x40);
    let mut map = vec![0xd1];
    map.extend_from_slice(
        &u32::try_from(properties.len() + 4 + 3)
            .unwrap()
            .to_be_bytes(),
    );
    map.extend_from_slice(&2u32.to_be_bytes());
    map.extend_from_slice(&[0xa3, 0x01, b'p']);
    map.extend_from_slice(&properties);
    let fields = [&[0xa1, 0x01, b'c'][..], &[0x40; 9][..], &map[..]].concat();
    let mut body = vec![0x00, 0x53, 0x10, 0xd0];
    body.extend_from_slice(&u32::try_from(fields.len() + 4).unwrap().to_be_bytes());
    body.extend_from_slice(&11u32.to_be_bytes());
    body.extend_from_slice(&fields);
    let mut frame = u32::try_from(body.len() + 8)
        .unwrap()
        .to_be_bytes()
        .to_vec();
    frame.extend_from_slice(&[2, 0, 0, 0]);
    frame.extend_from_slice(&body);
    attacker.send(&frame).await;
    // The endpoint's open (it had not sent one), then its close.
    assert!(matches!(
        attacker.frame_in().await,
        Some(FrameBody::Open(_))
    ));
    match attacker.frame_in().await {
        Some(FrameBody::Close(close)) => {
            let error = close.error.expect("the close says why");
            assert_eq!(
                error.condition,
                ErrorCondition::AmqpError(AmqpError::DecodeError)
            );
            assert!(
                error
                    .description
                    .unwrap_or_default()
                    .contains("nested more than 64"),
                "says why"
            );
        }
        other => panic!("a close, not {other:?}"),
    }
    // The endpoint goes on serving.
    let mut other = with_token(port).await;
    assert!(Session::begin(&mut other).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_sasl_mechanism_is_answered_with_its_outcome() {
    let (port, _stop, _dir) = serve(|endpoint| endpoint).await;
    let mut client = Raw::connect(port).await;
    assert_eq!(client.sasl("PLAIN").await, SaslCode::Auth);
    let mut stream_end = client.read;
    assert!(
        tokio::time::timeout(Duration::from_secs(10), stream_end.next())
            .await
            .is_ok(),
        "then the endpoint ends the connection"
    );
    let mut refused = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    refused.write_all(b"HTTP/1.1 GET /\r\n\r\n").await.unwrap();
    assert!(ended(&mut refused, Duration::from_secs(10)).await);
}

/// A client that sends `close` and ends its half of the stream at once
/// gets the endpoint's `close` before the stream ends. The endpoint used to
/// drop the connection as soon as the client's half ended, often before
/// the answer was written, and a client waiting for it (the JavaScript
/// SDK's `ServiceBusClient.close()`) waited for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_sent_as_the_client_ends_its_stream_is_answered() {
    let (port, _stop, _dir) = serve(|endpoint| endpoint).await;
    for round in 0..20 {
        let mut client = Raw::connect(port).await;
        client.open().await;
        client.frame(FrameBody::Close(Close { error: None })).await;
        client.write.shutdown().await.unwrap();
        let mut answered = false;
        while let Some(body) = client.frame_in().await {
            answered |= matches!(body, FrameBody::Close(_));
        }
        assert!(answered, "round {round}: the stream ended with no close");
    }
}
