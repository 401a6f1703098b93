//! Serving the router over TCP with bounded time per connection, which
//! `axum::serve` does not offer: hyper's HTTP/1 connection with a timer, so
//! a connection that sends no complete request head within the idle
//! timeout (a new one that says nothing, one idle between keep-alive
//! requests, or one trickling its headers) is closed. The time a request
//! may take once its head is in is the router's business
//! ([`crate::api::timeout`]).

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

/// How long to wait after a failed `accept` (out of file descriptors, say)
/// before trying again, as `axum::serve` does.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` resolves, closing
/// connections idle for `idle_timeout`; then stops taking connections,
/// closes the idle ones and lets requests in flight finish, for at most
/// `idle_timeout` more.
///
/// # Errors
///
/// None so far: a failed `accept` is logged and tried again (the error
/// type stays for the callers' sake).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    idle_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let connections = TaskTracker::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an API connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(router.clone());
        let mut stop = stop_rx.clone();
        connections.spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(idle_timeout)
                .keep_alive(true);
            let mut connection = pin!(builder.serve_connection(TokioIo::new(stream), service));
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = stopping(&mut stop) => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = served {
                // A client that went away or timed out: its own business.
                tracing::debug!(%peer, error = %e, "API connection ended");
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    connections.close();
    // Bounded: a client that does not read its response would otherwise
    // hold the host's shutdown until a second signal.
    if tokio::time::timeout(idle_timeout, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = connections.len(),
            "API connections still open after {}; the host stops without them",
            humantime::format_duration(idle_timeout)
        );
    }
    Ok(())
}

/// Resolves once the server stops. The guard `wait_for` returns is dropped
/// here: it is not `Send`, and the connection task awaits after this.
async fn stopping(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::time::Duration;

    use axum::Router;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Far beyond any idle timeout here: reached only when the server
    /// never closes (the test then fails rather than hangs).
    const NEVER: Duration = Duration::from_secs(60);

    async fn served(idle: Duration) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(super::serve(listener, router, idle, async move {
            let _ = stopped.await;
        }));
        (address, stop)
    }

    /// Reads to the end: the server closed the connection.
    async fn read_to_close(stream: &mut tokio::net::TcpStream) -> String {
        let mut text = Vec::new();
        tokio::time::timeout(NEVER, stream.read_to_end(&mut text))
            .await
            .expect("the server never closed the idle connection")
            .unwrap();
        String::from_utf8_lossy(&text).into_owned()
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_is_closed_by_the_server() {
        let (address, _stop) = served(Duration::from_millis(200)).await;
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        // The answer, then nothing more asked: the connection idles.
        let answered = read_to_close(&mut stream).await;
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
        assert!(answered.ends_with("ok"), "{answered}");
    }

    #[tokio::test]
    async fn a_connection_that_never_sends_a_request_is_closed() {
        let (address, _stop) = served(Duration::from_millis(200)).await;
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        // Half a request head, never finished (slowloris).
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: loc")
            .await
            .unwrap();
        let answered = read_to_close(&mut stream).await;
        assert!(!answered.contains("200 OK"), "{answered}");
    }

    #[tokio::test]
    async fn shutdown_stops_serving() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let router = Router::new().route("/", get(|| async { "ok" }));
        let serving = tokio::spawn(super::serve(listener, router, NEVER, async {}));
        tokio::time::timeout(NEVER, serving)
            .await
            .expect("serve did not return after its shutdown signal")
            .unwrap()
            .unwrap();
    }
}
