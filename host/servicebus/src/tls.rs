//! AMQP over TLS, as a namespace is reached (port 5671): the namespace's
//! certificate checked against the certificate authorities the system
//! trusts, or against a given set (a private CA in front of an emulator,
//! the tests' own).

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The certificate authorities a namespace's certificate must chain to.
#[derive(Clone)]
pub struct TrustedRoots {
    store: Arc<RootCertStore>,
}

impl std::fmt::Debug for TrustedRoots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedRoots")
            .field("certificates", &self.store.len())
            .finish()
    }
}

/// Why no certificate authority could be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootsError {
    /// The system's store gave none.
    #[error(
        "no trusted certificate authority was found on this system ({0}); install the CA \
         certificates (e.g. the `ca-certificates` package) or give the authorities to trust"
    )]
    NoSystemRoots(String),
    /// The PEM given holds no certificate that reads.
    #[error("the certificate authorities given do not read: {0}")]
    BadPem(String),
}

impl TrustedRoots {
    /// What the system trusts (its CA bundle, as `openssl` and the SDKs
    /// use).
    ///
    /// # Errors
    ///
    /// [`RootsError::NoSystemRoots`] when the system has none.
    pub fn system() -> Result<TrustedRoots, RootsError> {
        let found = rustls_native_certs::load_native_certs();
        let mut store = RootCertStore::empty();
        let (_added, _unusable) = store.add_parsable_certificates(found.certs);
        if store.is_empty() {
            let why = found
                .errors
                .first()
                .map_or_else(|| "none found".to_owned(), ToString::to_string);
            return Err(RootsError::NoSystemRoots(why));
        }
        Ok(TrustedRoots {
            store: Arc::new(store),
        })
    }

    /// The certificates in `pem` (one or more `BEGIN CERTIFICATE` blocks).
    ///
    /// # Errors
    ///
    /// [`RootsError::BadPem`] when none reads.
    pub fn from_pem(pem: &[u8]) -> Result<TrustedRoots, RootsError> {
        let mut store = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate = certificate.map_err(|e| RootsError::BadPem(e.to_string()))?;
            store
                .add(certificate)
                .map_err(|e| RootsError::BadPem(e.to_string()))?;
        }
        if store.is_empty() {
            return Err(RootsError::BadPem("no certificate in it".to_owned()));
        }
        Ok(TrustedRoots {
            store: Arc::new(store),
        })
    }
}

/// The TLS handshake on `socket` with `host`, its certificate checked
/// against `roots` and for `host`'s name.
pub(crate) async fn handshake(
    socket: TcpStream,
    host: &str,
    roots: &TrustedRoots,
) -> Result<TlsStream<TcpStream>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(Arc::clone(&roots.store))
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| format!("'{host}' is not a name a certificate can be checked for: {e}"))?;
    TlsConnector::from(Arc::new(config))
        .connect(name, socket)
        .await
        .map_err(|e| e.to_string())
}
