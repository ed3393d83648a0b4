//! TLS for listeners: loading certificates and keys, client-certificate verification, reading
//! the verified peer's identity, and reloading on SIGHUP.
//!
//! rustls with the aws-lc-rs provider, TLS 1.2 and 1.3. A listener keeps its acceptor in an
//! [`ArcSwap`]: a reload swaps in a new one for the next handshake, established connections
//! keep the configuration they were made with, and a reload that fails (a file missing or not
//! parsing) keeps the old acceptor and says why.
//!
//! Client certificates are verified by `client_verifier`: webpki for X.509 v3 certificates,
//! and `v1_cert` for version 1 leaves on listeners with `allow_v1_client_certs`.

mod client_verifier;
mod v1_cert;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use mesgd_core::auth::TlsInfo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use client_verifier::ListenerClientVerifier;
use v1_cert::{V1Issuers, V1Refusal};

/// `tls = { ... }` of a listener.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// The server private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: PathBuf,
    /// CA certificates (PEM) that client certificates must chain to. Without it, clients are
    /// not asked for a certificate.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Refuse clients without a valid certificate (needs `client_ca`). Default false: a client
    /// may connect without one, but a certificate it does present must be valid.
    #[serde(default)]
    pub require_client_cert: bool,
    /// Accept X.509 version 1 client certificates issued directly by a `client_ca` certificate
    /// (needs `client_ca`). Default false: a v1 certificate has no extensions, so nothing in it
    /// limits it to client authentication (see docs/tls.md).
    #[serde(default)]
    pub allow_v1_client_certs: bool,
}

/// Why TLS material could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read or parsed.
    #[error("{key} = {}: {message}", path.display())]
    File {
        /// The config key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The files parse but do not make a usable configuration (key does not match the
    /// certificate, no CA certificate, ...).
    #[error("{0}")]
    Config(String),
}

fn file_error(key: &'static str, path: &Path, message: impl std::fmt::Display) -> TlsError {
    TlsError::File { key, path: path.to_owned(), message: message.to_string() }
}

fn load_certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| file_error(key, path, e))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(key, path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(key, path, "contains no PEM certificate"));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| file_error("key", path, e))?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| file_error("key", path, format!("no PKCS#8, RSA or SEC1 private key found: {e}")))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Builds a rustls server configuration for the listener named `listener` from the files
/// `config` names, relative to `base`.
pub fn server_config(config: &TlsConfig, base: &Path, listener: &str) -> Result<ServerConfig, TlsError> {
    let cert_path = base.join(&config.cert);
    let key_path = base.join(&config.key);
    let chain = load_certs("cert", &cert_path)?;
    let key = load_key(&key_path)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &config.client_ca {
        None if config.require_client_cert => {
            return Err(TlsError::Config("require_client_cert = true needs client_ca".into()));
        }
        None if config.allow_v1_client_certs => {
            return Err(TlsError::Config("allow_v1_client_certs = true needs client_ca".into()));
        }
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let ca_path = base.join(ca);
            let ca_certs = load_certs("client_ca", &ca_path)?;
            let mut roots = RootCertStore::empty();
            for cert in &ca_certs {
                roots.add(cert.clone()).map_err(|e| file_error("client_ca", &ca_path, e))?;
            }
            let webpki = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let webpki = if config.require_client_cert { webpki } else { webpki.allow_unauthenticated() };
            let webpki = webpki.build().map_err(|e| TlsError::Config(e.to_string()))?;
            let algorithms = provider().signature_verification_algorithms;
            let v1 = match config.allow_v1_client_certs {
                true => Some(
                    V1Issuers::new(&ca_certs, algorithms)
                        .map_err(|e| file_error("client_ca", &ca_path, e))?,
                ),
                false => None,
            };
            let verifier = ListenerClientVerifier::new(webpki, v1, listener, algorithms);
            builder.with_client_cert_verifier(Arc::new(verifier))
        }
    };
    let mut server = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(format!("{} and {}: {e}", cert_path.display(), key_path.display())))?;
    server.alpn_protocols = vec![b"mqtt".to_vec(), b"http/1.1".to_vec()];
    Ok(server)
}

/// A listener's TLS acceptor, swappable on reload.
pub struct ReloadableAcceptor {
    config: TlsConfig,
    base: PathBuf,
    listener: String,
    current: ArcSwap<TlsAcceptor>,
}

impl std::fmt::Debug for ReloadableAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadableAcceptor")
            .field("listener", &self.listener)
            .field("config", &self.config)
            .finish()
    }
}

impl ReloadableAcceptor {
    /// Loads the files once; fails if they do not make a usable configuration.
    pub fn new(config: TlsConfig, base: PathBuf, listener: String) -> Result<Self, TlsError> {
        let server = server_config(&config, &base, &listener)?;
        Ok(ReloadableAcceptor {
            config,
            base,
            listener,
            current: ArcSwap::from_pointee(TlsAcceptor::from(Arc::new(server))),
        })
    }

    /// Re-reads the files. On failure the old configuration stays and the error is returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        let server = server_config(&self.config, &self.base, &self.listener)?;
        self.current.store(Arc::new(TlsAcceptor::from(Arc::new(server))));
        tracing::info!(listener = %self.listener, "TLS certificates reloaded");
        Ok(())
    }

    /// Runs a handshake, bounded by `timeout`, and returns the stream with what the client's
    /// certificate says.
    pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
        timeout: Duration,
    ) -> io::Result<(TlsStream<S>, TlsInfo)> {
        let acceptor = self.current.load_full();
        let tls = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            Ok(r) => r.map_err(explain_refusal)?,
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")),
        };
        let info = peer_info(tls.get_ref().1.peer_certificates());
        Ok((tls, info))
    }
}

/// Replaces rustls's description of a certificate refusal of ours (which would be the debug
/// form of a wrapped error) with the refusal's own words.
fn explain_refusal(error: io::Error) -> io::Error {
    let refusal =
        error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()).and_then(|tls| match tls {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
                other.0.downcast_ref::<V1Refusal>()
            }
            _ => None,
        });
    match refusal {
        Some(refusal) => io::Error::new(error.kind(), refusal.to_string()),
        None => error,
    }
}

/// What the verified client certificate says: the chain, the subject CN and the SANs.
fn peer_info(chain: Option<&[CertificateDer<'static>]>) -> TlsInfo {
    let Some(chain) = chain.filter(|c| !c.is_empty()) else { return TlsInfo::default() };
    let der: Vec<Vec<u8>> = chain.iter().map(|c| c.as_ref().to_vec()).collect();
    let (common_name, sans) = match x509_parser::parse_x509_certificate(chain[0].as_ref()) {
        Ok((_, cert)) => {
            let cn =
                cert.subject().iter_common_name().next().and_then(|a| a.as_str().ok()).map(str::to_owned);
            let sans = cert
                .subject_alternative_name()
                .ok()
                .flatten()
                .map(|ext| ext.value.general_names.iter().map(|n| n.to_string()).collect())
                .unwrap_or_default();
            (cn, sans)
        }
        Err(e) => {
            // The verifier accepted it, so this should not happen; without a CN the x509
            // provider answers Next, which fails closed for certificate-only clients.
            tracing::warn!(error = %e, "verified client certificate could not be parsed");
            (None, Vec::new())
        }
    };
    TlsInfo::new(der, common_name, sans)
}
