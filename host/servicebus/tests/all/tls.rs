//! The client over TLS, as a namespace is reached (AMQP on 5671): nimbus's
//! endpoint serving TLS with a certificate for `localhost` issued by a test
//! authority (`tests/tls/`). Trusted, everything works as over plain AMQP;
//! not trusted, or not for the name connected to, the handshake is refused
//! saying so; a client speaking plain AMQP to it does not get in.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use nimbus_servicebus::{ConnectError, ConnectionString, ServiceBus, TrustedRoots};
use nimbus_transport::{Message, SessionLock, SessionSelector, Transport};

use crate::common;

use common::{KEY, KEY_NAME, Served, tls_fixture};

/// The connection string of a namespace at `host:port` over TLS (no
/// `UseDevelopmentEmulator`).
fn over_tls(host: &str, port: u16) -> ConnectionString {
    format!("Endpoint=sb://{host}:{port}/;SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};")
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_over_tls_is_used_as_over_plain_amqp_when_its_certificate_is_trusted() {
    let served = Served::start_tls().await;
    let path = served.orders_with_billing().await;
    let roots = TrustedRoots::from_pem(&tls_fixture("ca.pem")).unwrap();
    let client = ServiceBus::connect_trusting(&over_tls("localhost", served.port), &roots)
        .await
        .unwrap();

    let mut message = Message::new(b"over tls".to_vec());
    message.session_id = Some("s".to_owned());
    client.publish("orders", vec![message]).await.unwrap();
    let session = client
        .accept_session(
            &path,
            SessionSelector::Named("s".into()),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let received = session
        .receive(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(received.message.body, b"over tls");
    session.complete(received).await.unwrap();
    assert!(session.receive(Duration::ZERO).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_not_trusted_or_not_for_the_name_is_refused() {
    let served = Served::start_tls().await;
    let port = served.port;

    // Issued for `localhost`, reached as 127.0.0.1.
    let roots = TrustedRoots::from_pem(&tls_fixture("ca.pem")).unwrap();
    let wrong_name = ServiceBus::connect_trusting(&over_tls("127.0.0.1", port), &roots).await;
    let Err(error @ ConnectError::Tls { .. }) = wrong_name else {
        panic!("a certificate for another name is refused: {wrong_name:?}");
    };
    assert!(
        error
            .to_string()
            .contains("certificate not valid for name \"127.0.0.1\""),
        "{error}"
    );

    // The system does not trust the test authority. (Without any system
    // authority at all, the refusal says that instead.)
    let untrusted = ServiceBus::connect(&over_tls("localhost", port)).await;
    match TrustedRoots::system() {
        Ok(_) => {
            let Err(error @ ConnectError::Tls { .. }) = untrusted else {
                panic!("an untrusted certificate is refused: {untrusted:?}");
            };
            assert!(error.to_string().contains("UnknownIssuer"), "{error}");
        }
        Err(_) => assert!(
            matches!(untrusted, Err(ConnectError::Roots { .. })),
            "{untrusted:?}"
        ),
    }

    // A client speaking plain AMQP (an emulator's connection string) does
    // not get in.
    let plain = ServiceBus::connect(&served.connection_string()).await;
    assert!(matches!(plain, Err(ConnectError::Open { .. })), "{plain:?}");

    // A certificate that is not one reads as such.
    assert!(TrustedRoots::from_pem(b"not a certificate").is_err());
    assert!(
        nimbus_amqp::ServerTls::from_pem(&tls_fixture("localhost.pem"), &tls_fixture("ca.pem"))
            .is_err()
    );
}
