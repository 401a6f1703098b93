//! AMQP over TLS, as Service Bus serves it on 5671: the endpoint's
//! certificate and key, for SDKs and transports whose connection string
//! does not say `UseDevelopmentEmulator=true`.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The certificate chain and key the endpoint serves TLS with.
#[derive(Clone)]
pub struct ServerTls {
    pub(crate) acceptor: TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

/// Why a certificate and key cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerTlsError {
    /// The certificate PEM holds no certificate that reads.
    #[error("the certificate does not read: {0}")]
    Certificate(String),
    /// The key PEM holds no private key that reads.
    #[error("the private key does not read: {0}")]
    Key(String),
    /// The key is not the certificate's, or is of a kind not served.
    #[error("the certificate and key cannot be served together: {0}")]
    Pair(String),
}

impl ServerTls {
    /// The chain in `certificate_pem` (the endpoint's certificate first,
    /// then any intermediates) with the private key in `key_pem` (PKCS#8,
    /// PKCS#1 or SEC1).
    ///
    /// # Errors
    ///
    /// [`ServerTlsError`] naming which of the two does not read, or that
    /// they do not go together.
    pub fn from_pem(certificate_pem: &[u8], key_pem: &[u8]) -> Result<ServerTls, ServerTlsError> {
        let chain = CertificateDer::pem_slice_iter(certificate_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ServerTlsError::Certificate(e.to_string()))?;
        if chain.is_empty() {
            return Err(ServerTlsError::Certificate(
                "no certificate in it".to_owned(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| ServerTlsError::Key(e.to_string()))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| ServerTlsError::Pair(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| ServerTlsError::Pair(e.to_string()))?;
        Ok(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}
