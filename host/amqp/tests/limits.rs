//! The endpoint's bounds on what a connection may hold: a client that
//! never finishes its handshake is dropped, and connections beyond the
//! limit wait, unanswered, until one ends.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use nimbus_amqp::{Endpoint, SharedAccessKey};
use nimbus_broker::{Broker, BrokerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The SASL protocol header a client opens with.
const SASL_HEADER: &[u8] = b"AMQP\x03\x01\x00\x00";

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
        vec![SharedAccessKey::new("k", "s")],
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
async fn a_connection_beyond_the_limit_waits_until_one_ends() {
    let (port, _stop, _dir) = serve(|endpoint| endpoint.with_max_connections(1)).await;
    let mut first = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    first.write_all(SASL_HEADER).await.unwrap();
    assert!(answered(&mut first, Duration::from_secs(10)).await);

    let mut second = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    second.write_all(SASL_HEADER).await.unwrap();
    assert!(
        !answered(&mut second, Duration::from_millis(500)).await,
        "a second connection is served while the first holds the only slot"
    );
    drop(first);
    assert!(
        answered(&mut second, Duration::from_secs(10)).await,
        "the second is served once the first ends"
    );
}
