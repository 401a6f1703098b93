//! `nimbus run` with `[broker] kind = "servicebus"` (issue 29): the real
//! binary running its engine, Resolver and operator commands on a namespace
//! reached over AMQP. The namespace is an embedded broker served by
//! nimbus's AMQP endpoint inside this test, as an Azure namespace is to a
//! production host: nimbus does not create its entities there, so the test
//! makes them first, as an operator would, or leaves them out to see the
//! host refuse to start naming each one.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use nimbus_amqp::{Endpoint, ServerTls};
use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{id, order, publish, publish_run};
use nimbus_blackbox_tests::running::{RunningHost, config_text};
use nimbus_broker::{Broker, BrokerOptions};
use nimbus_dialect::SharedAccessKey;
use nimbus_transport::{Admin, SubscriptionPath};
use nimbus_wire::topology::{self, Topology};

const KEY_NAME: &str = "RootManageSharedAccessKey";
const KEY: &str = "the namespace's key";

/// An embedded broker on a temp dir, served over AMQP on a loopback port
/// for as long as this lives.
struct Namespace {
    runtime: tokio::runtime::Runtime,
    broker: Arc<Broker>,
    port: u16,
    /// Stops the endpoint, whose task ends once it has.
    serving: (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ),
    _dir: tempfile::TempDir,
}

/// Serves `broker` on `listener` (on `runtime`) until told to stop.
fn serve(
    runtime: &tokio::runtime::Runtime,
    broker: &Arc<Broker>,
    listener: tokio::net::TcpListener,
    tls: Option<ServerTls>,
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
    let task = runtime.spawn(endpoint.serve(listener, async {
        let _ = stopped.await;
    }));
    (stop, task)
}

/// The test certificate authority and the certificate for `localhost` it
/// issued (`ca.pem`, `localhost.pem`, `localhost.key`).
fn tls_fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../host/servicebus/tests/tls")
        .join(name)
}

impl Namespace {
    fn start() -> Namespace {
        Namespace::start_with(None)
    }

    /// Served over TLS with the certificate for `localhost`, as Service Bus
    /// serves AMQP on 5671.
    fn start_tls() -> Namespace {
        let read = |name: &str| std::fs::read(tls_fixture(name)).unwrap();
        let tls = ServerTls::from_pem(&read("localhost.pem"), &read("localhost.key")).unwrap();
        Namespace::start_with(Some(tls))
    }

    fn start_with(tls: Option<ServerTls>) -> Namespace {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (broker, listener) = runtime.block_on(async {
            let broker = Broker::open(BrokerOptions::new(dir.path().join("broker")))
                .await
                .unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            (Arc::new(broker), listener)
        });
        let port = listener.local_addr().unwrap().port();
        let serving = serve(&runtime, &broker, listener, tls);
        Namespace {
            runtime,
            broker,
            port,
            serving,
            _dir: dir,
        }
    }

    /// Stops serving, dropping every connection (as a namespace's upgrade
    /// or a network fault does): nothing answers on the port until
    /// [`Namespace::serve_again`].
    fn stop(&mut self) {
        let (stop, task) = std::mem::replace(
            &mut self.serving,
            (
                tokio::sync::oneshot::channel().0,
                self.runtime.spawn(async {}),
            ),
        );
        let _ = stop.send(());
        self.runtime.block_on(task).unwrap();
    }

    /// Serves again on the same port, over plain AMQP.
    fn serve_again(&mut self) {
        let listener = self.runtime.block_on(async {
            tokio::net::TcpListener::bind(("127.0.0.1", self.port))
                .await
                .unwrap()
        });
        self.serving = serve(&self.runtime, &self.broker, listener, None);
    }

    /// What an operator makes on Azure for the `orders` example serving
    /// endpoint `billing` (its event types, the default producer topic,
    /// the lock the host's configuration names).
    fn provision_for_billing(&self) {
        let topology = Topology::new()
            .lock_duration(Duration::from_secs(5))
            .producer_topic("publisher")
            .endpoint(topology::Endpoint::new("billing").consumes(["OrderPlaced"]));
        self.runtime
            .block_on(topology::provision(&*self.broker, &topology))
            .unwrap();
    }

    /// The configuration of a host on this namespace over plain AMQP.
    fn host_config(&self) -> String {
        self.config_with(&format!(
            "connection_string = \"Endpoint=sb://localhost:{};SharedAccessKeyName={KEY_NAME};\
             SharedAccessKey={KEY};UseDevelopmentEmulator=true;\"\n",
            self.port
        ))
    }

    /// The configuration of a host on this namespace over TLS, trusting the
    /// test authority.
    fn host_config_tls(&self) -> String {
        self.config_with(&format!(
            "connection_string = \"Endpoint=sb://localhost:{};SharedAccessKeyName={KEY_NAME};\
             SharedAccessKey={KEY};\"\nca_file = \"{}\"\n",
            self.port,
            tls_fixture("ca.pem").display()
        ))
    }

    /// Hosts on a namespace share a control key (their Manager signs
    /// control messages, their endpoints check them across the namespace).
    fn config_with(&self, broker_keys: &str) -> String {
        config_text("").replace(
            "[broker]\n",
            &format!("[broker]\nkind = \"servicebus\"\n{broker_keys}"),
        ) + "\n[manager]\ncontrol_key = \"hosts-shared-control-key-0123456789abcdef\"\n"
    }

    /// The session state the namespace holds for `session` of `billing`.
    fn session_state(&self, session: &str) -> Option<Vec<u8>> {
        let path = SubscriptionPath::new("billing", "billing");
        self.runtime
            .block_on(self.broker.list_sessions(&path))
            .unwrap()
            .into_iter()
            .find(|s| s.session_id == session)
            .and_then(|s| s.state)
    }
}

#[test]
fn a_host_on_a_namespace_runs_handlers_blocks_sessions_and_takes_operator_commands() {
    let namespace = Namespace::start();
    namespace.provision_for_billing();
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start_with_config(&scratch, &namespace.host_config());
    assert_eq!(host.banner_value("bus:"), "Service Bus namespace localhost");

    // Published through the host's API onto the namespace, run by the wasm
    // handler, recorded by the host's Resolver from the namespace's
    // Resolver topic.
    let ok = publish(&host, "OrderPlaced", "s-ok", &order("o-1", false));
    let done = host.wait_status("s-ok", &ok, "Completed");
    assert!(done["handler_version"].is_string(), "{done:#?}");

    // A failure blocks the session; the state that says so is kept in the
    // namespace's session state, as NimBus writes it (no inbox is kept
    // here, so a .NET NimBus subscriber reads the same state).
    let failing = publish(&host, "OrderPlaced", "s-block", &order("o-2", true));
    let failed = host.wait_status("s-block", &failing, "Failed");
    assert_eq!(failed["error_type"], "OrderRejected");
    let parked = publish(&host, "OrderPlaced", "s-block", &order("o-3", false));
    host.wait_status("s-block", &parked, "Deferred");
    let state: serde_json::Value =
        serde_json::from_slice(&namespace.session_state("s-block").unwrap()).unwrap();
    assert_eq!(state["BlockedByEventId"], id(&failed).as_str(), "{state}");
    assert_eq!(state["DeferredCount"], 1, "{state}");

    // The operator's skip travels over the namespace too: the failed event
    // is Skipped and the parked one runs.
    host.cli(&["skip", &id(&failed)]).expect_code(0);
    host.wait_status("s-block", &failing, "Skipped");
    host.wait_status("s-block", &parked, "Completed");
    host.eventually("the namespace's state of s-block unblocked", || {
        // Cleared, or kept with no block.
        let Some(state) = namespace.session_state("s-block") else {
            return Some(());
        };
        let state: serde_json::Value = serde_json::from_slice(&state).unwrap();
        (state["BlockedByEventId"].as_str().unwrap_or_default() == "").then_some(())
    });

    // A dead-lettered event is listed from the namespace's dead-letter
    // queue of the endpoint's subscription.
    let empty = r#"{"OrderId": "o-9", "Customer": "acme", "Total": 0.0, "Lines": []}"#;
    let published = publish(&host, "OrderPlaced", "s-dl", empty);
    host.wait_status("s-dl", &published, "DeadLettered");
    let listed = host.cli_json(&["dlq", "list", "--endpoint", "billing", "--json"]);
    let own: Vec<&serde_json::Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["subscription"] == "billing")
        .collect();
    assert_eq!(own.len(), 1, "{listed:#}");
    assert!(own[0]["message_id"].is_string(), "{listed:#}");
    let typo = host.cli(&["dlq", "list", "--endpoint", "biling"]);
    typo.expect_code(1);
    assert!(typo.stderr().contains("biling"), "{}", typo.stderr());

    // What only the namespace's management API lists is refused by name,
    // not answered wrong.
    let sessions = host.cli(&["sessions", "--endpoint", "billing"]);
    sessions.expect_code(1);
    assert!(
        sessions
            .stderr()
            .contains("listing sessions is not available")
            && sessions.stderr().contains("management API"),
        "{}",
        sessions.stderr()
    );
    let metrics = host.metrics();
    assert!(
        metrics.contains("nimbus_endpoint_paused{endpoint=\"billing\"} 0")
            && !metrics.contains("nimbus_active_messages{"),
        "{metrics}"
    );

    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
}

/// The namespace drops the host's connection and is gone a while: the
/// host's health probe says so, and once the namespace is back the host
/// connects again by itself and goes on processing, without a restart.
#[test]
fn a_host_whose_connection_drops_connects_again_and_goes_on() {
    let mut namespace = Namespace::start();
    namespace.provision_for_billing();
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start_with_config(&scratch, &namespace.host_config());
    let before = publish(&host, "OrderPlaced", "s-1", &order("o-1", false));
    host.wait_status("s-1", &before, "Completed");

    // While the namespace cannot be reached, a probe of the host says so.
    namespace.stop();
    let said = host.eventually("/health to say the namespace is unreachable", || {
        let (status, body) = host.get("/health");
        (status == 503).then_some(body)
    });
    assert!(
        said.contains("connecting again failed") && said.contains("localhost"),
        "{said}"
    );

    namespace.serve_again();
    host.eventually("/health to be ok again", || {
        (host.get("/health").0 == 200).then_some(())
    });
    // A publish may meet the dropped connection first; the next goes on the
    // new one (the CLI does not retry).
    let after = host.eventually("a publish after the drop", || {
        let run = publish_run(&host, "OrderPlaced", "s-2", &order("o-2", false));
        (run.code() == Some(0)).then(|| run.stdout().trim().to_owned())
    });
    host.wait_status("s-2", &after, "Completed");
    assert!(
        host.stderr()
            .contains("the connection to the namespace dropped; connected again"),
        "{}",
        host.stderr()
    );
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
}

/// What a request to publish carries on the wire: the operation of a
/// `$management` request that schedules messages.
const SCHEDULE_OPERATION: &[u8] = b"com.microsoft:schedule-message";

/// Forwards connections from `listener` to the namespace on `port`; while
/// `cut` is set, the first connection that sends a publish request is
/// closed (both ends) instead of passing it on, as a namespace that drops
/// the connection while the request is out: the host meets a dropped
/// connection in the middle of a publish, every time.
async fn proxy(
    listener: tokio::net::TcpListener,
    port: u16,
    cut: Arc<std::sync::atomic::AtomicBool>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
            continue;
        };
        let _ = (client.set_nodelay(true), server.set_nodelay(true));
        tokio::spawn(pipe(client, server, Arc::clone(&cut)));
    }
}

async fn pipe(
    mut client: tokio::net::TcpStream,
    mut server: tokio::net::TcpStream,
    cut: Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (mut from_client, mut to_client) = client.split();
    let (mut from_server, mut to_server) = server.split();
    let (mut up, mut down) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    // The end of what the client sent before, so the operation is found
    // across two reads.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        tokio::select! {
            read = from_client.read(&mut up) => {
                let Ok(n @ 1..) = read else { return };
                let mut seen = std::mem::take(&mut tail);
                seen.extend_from_slice(&up[..n]);
                if seen.windows(SCHEDULE_OPERATION.len()).any(|w| w == SCHEDULE_OPERATION)
                    && cut.swap(false, Ordering::SeqCst)
                {
                    // Dropping both streams closes the connection.
                    return;
                }
                tail = seen.split_off(seen.len().saturating_sub(SCHEDULE_OPERATION.len()));
                if to_server.write_all(&up[..n]).await.is_err() {
                    return;
                }
            }
            read = from_server.read(&mut down) => {
                let Ok(n @ 1..) = read else { return };
                if to_client.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Issue 40: a publish caught by a dropped connection to the namespace
/// was answered 500 "internal error", though nothing failed in the host
/// and the next publish goes through: it is 503, try again.
#[test]
fn a_publish_caught_by_a_dropped_connection_is_answered_503_and_the_next_goes_through() {
    let namespace = Namespace::start();
    namespace.provision_for_billing();
    let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listener = namespace
        .runtime
        .block_on(async { tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap() });
    let proxied = listener.local_addr().unwrap().port();
    namespace
        .runtime
        .spawn(proxy(listener, namespace.port, Arc::clone(&cut)));
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let config = namespace.host_config().replace(
        &format!("sb://localhost:{};", namespace.port),
        &format!("sb://localhost:{proxied};"),
    );
    let host = RunningHost::start_with_config(&scratch, &config);
    let before = publish(&host, "OrderPlaced", "s-1", &order("o-1", false));
    host.wait_status("s-1", &before, "Completed");

    cut.store(true, std::sync::atomic::Ordering::SeqCst);
    let caught = publish_run(&host, "OrderPlaced", "s-2", &order("o-2", false));
    assert!(
        !cut.load(std::sync::atomic::Ordering::SeqCst),
        "the publish never reached the namespace"
    );
    assert_ne!(caught.code(), Some(0), "{}", caught.stdout());
    assert!(
        caught.stderr().contains("(503 Service Unavailable)")
            && !caught.stderr().contains("internal error"),
        "{}",
        caught.stderr()
    );

    // The connection is opened again at the next call: the next publish
    // goes through, and is handled.
    let after = host.eventually("a publish after the drop", || {
        let run = publish_run(&host, "OrderPlaced", "s-3", &order("o-3", false));
        (run.code() == Some(0)).then(|| run.stdout().trim().to_owned())
    });
    host.wait_status("s-3", &after, "Completed");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn a_namespace_without_the_topology_stops_the_host_naming_each_missing_entity() {
    let namespace = Namespace::start();
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    scratch.write("nimbus.toml", namespace.host_config().as_bytes());
    let run = scratch.run_host_to_exit();
    run.expect_code(1);
    let said = run.stderr();
    for missing in [
        "lacks 10 of the topics and subscriptions",
        "  - topic Resolver\n",
        "  - topic billing\n",
        "  - topic publisher\n",
        "  - subscription billing/billing, requires sessions, lock duration 5s",
        "  - subscription publisher/billing, forwards to billing",
        "[OrderPlaced: ",
        "Turn on duplicate detection on every topic",
        "delete it where it is not listed",
    ] {
        assert!(said.contains(missing), "{missing:?} in:\n{said}");
    }

    // Made by the operator, the host starts.
    namespace.provision_for_billing();
    let host = RunningHost::start_with_config(&scratch, &namespace.host_config());
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn a_host_reaches_a_namespace_over_tls_trusting_the_authority_it_is_given() {
    let namespace = Namespace::start_tls();
    namespace.provision_for_billing();
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");

    // Without the authority, the system's do not vouch for the test
    // certificate: the host stops naming the handshake.
    scratch.write(
        "nimbus.toml",
        namespace
            .host_config_tls()
            .lines()
            .filter(|line| !line.starts_with("ca_file"))
            .collect::<Vec<_>>()
            .join("\n")
            .as_bytes(),
    );
    let refused = scratch.run_host_to_exit();
    refused.expect_code(1);
    let said = refused.stderr();
    assert!(
        said.contains("connecting to the Service Bus namespace (broker.connection_string)")
            && (said.contains("the TLS handshake with localhost")
                || said.contains("no trusted certificate authority was found")),
        "{said}"
    );

    let host = RunningHost::start_with_config(&scratch, &namespace.host_config_tls());
    let ok = publish(&host, "OrderPlaced", "s-tls", &order("o-1", false));
    host.wait_status("s-tls", &ok, "Completed");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
}
