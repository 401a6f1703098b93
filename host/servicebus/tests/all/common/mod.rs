//! An embedded broker on a temp dir with nimbus's AMQP endpoint serving it
//! on a loopback port: what the transport's tests connect to.

#![allow(clippy::unwrap_used, reason = "test support")]

use std::sync::Arc;

use nimbus_amqp::Endpoint;
use nimbus_broker::{Broker, BrokerOptions};
use nimbus_dialect::SharedAccessKey;
use nimbus_servicebus::ConnectionString;
use nimbus_transport::{Admin, SubscriptionPath, SubscriptionSettings, TopicSettings};

pub(crate) const KEY_NAME: &str = "RootManageSharedAccessKey";
pub(crate) const KEY: &str = "the endpoint's key";

/// A broker served over AMQP until dropped.
pub(crate) struct Served {
    pub(crate) broker: Arc<Broker>,
    pub(crate) port: u16,
    tls: Option<nimbus_amqp::ServerTls>,
    /// Stops the endpoint's task, which ends once it has.
    serving: (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ),
    _dir: tempfile::TempDir,
}

/// Serves `broker` on `listener` until told to stop.
fn serve(
    broker: &Arc<Broker>,
    listener: tokio::net::TcpListener,
    tls: Option<nimbus_amqp::ServerTls>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut endpoint = Endpoint::new(
        Arc::clone(broker),
        vec![SharedAccessKey::new(KEY_NAME, KEY)],
        1 << 20,
    );
    if let Some(tls) = tls {
        endpoint = endpoint.with_tls(tls);
    }
    let task = tokio::spawn(endpoint.serve(listener, async {
        let _ = stopped.await;
    }));
    (stop, task)
}

/// A file of `tests/tls`: a test certificate authority (`ca.pem`) and a
/// certificate for `localhost` it issued (`localhost.pem`, `localhost.key`),
/// made with openssl for a hundred years.
pub(crate) fn tls_fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/tls")
            .join(name),
    )
    .unwrap()
}

impl Served {
    /// An empty broker, served.
    pub(crate) async fn start() -> Served {
        Served::start_with(None).await
    }

    /// An empty broker, served over TLS with the certificate for
    /// `localhost` in `tests/tls`.
    pub(crate) async fn start_tls() -> Served {
        let tls = nimbus_amqp::ServerTls::from_pem(
            &tls_fixture("localhost.pem"),
            &tls_fixture("localhost.key"),
        )
        .unwrap();
        Served::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<nimbus_amqp::ServerTls>) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let broker = Arc::new(
            Broker::open(BrokerOptions::new(dir.path().join("broker")))
                .await
                .unwrap(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let serving = serve(&broker, listener, tls.clone());
        Served {
            broker,
            port,
            tls,
            serving,
            _dir: dir,
        }
    }

    /// Makes topic `orders` with its session subscription `billing`;
    /// returns the subscription's path.
    pub(crate) async fn orders_with_billing(&self) -> SubscriptionPath {
        let path = SubscriptionPath::new("orders", "billing");
        self.broker
            .create_topic("orders", TopicSettings::default())
            .await
            .unwrap();
        self.broker
            .create_subscription(&path, SubscriptionSettings::sessions())
            .await
            .unwrap();
        path
    }

    /// Stops the endpoint, dropping every connection (as a namespace does
    /// in an upgrade, or a network fault), and serves again on the same
    /// port.
    pub(crate) async fn restart_endpoint(&mut self) {
        let (stop, task) = std::mem::replace(
            &mut self.serving,
            (tokio::sync::oneshot::channel().0, tokio::spawn(async {})),
        );
        let _ = stop.send(());
        task.await.unwrap();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        self.serving = serve(&self.broker, listener, self.tls.clone());
    }

    /// The connection string of this endpoint, signed with `key`.
    pub(crate) fn connection_string_with(&self, key: &str) -> ConnectionString {
        format!(
            "Endpoint=sb://localhost:{};SharedAccessKeyName={KEY_NAME};SharedAccessKey={key};\
             UseDevelopmentEmulator=true;",
            self.port
        )
        .parse()
        .unwrap()
    }

    /// The connection string of this endpoint.
    pub(crate) fn connection_string(&self) -> ConnectionString {
        self.connection_string_with(KEY)
    }
}
