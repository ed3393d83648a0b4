//! A listener's client-certificate verifier: rustls's webpki verifier for X.509 v3
//! certificates, unchanged, and the v1 check of [`super::v1_cert`] for a v1 leaf when the
//! listener sets `tls.allow_v1_client_certs`.
//!
//! The v1 path is taken only for a leaf whose version field says 1, so a v3 certificate can
//! never reach it. Without the option a v1 leaf is refused with a message that says what it is
//! and which option accepts it, instead of webpki's `UnsupportedCertVersion`.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use x509_parser::x509::X509Version;

use super::v1_cert::{self, V1Issuers, V1Refusal};

/// The verifier of one listener's client certificates.
#[derive(Debug)]
pub(crate) struct ListenerClientVerifier {
    webpki: Arc<dyn ClientCertVerifier>,
    /// Set when the listener accepts v1 leaves.
    v1: Option<V1Issuers>,
    listener: String,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ListenerClientVerifier {
    /// Wraps `webpki`; `v1` holds the CAs that may issue v1 leaves, if the listener accepts them.
    pub(crate) fn new(
        webpki: Arc<dyn ClientCertVerifier>,
        v1: Option<V1Issuers>,
        listener: &str,
        algorithms: WebPkiSupportedAlgorithms,
    ) -> Self {
        ListenerClientVerifier { webpki, v1, listener: listener.to_owned(), algorithms }
    }

    /// The leaf's SubjectPublicKeyInfo, if it is a v1 certificate this listener accepted.
    fn accepted_v1_key(&self, cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
        if self.v1.is_none() || v1_cert::version(cert) != Some(X509Version::V1) {
            return None;
        }
        v1_cert::subject_public_key_info(cert)
    }
}

impl ClientCertVerifier for ListenerClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.webpki.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.webpki.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if v1_cert::version(end_entity) == Some(X509Version::V1) {
            return match &self.v1 {
                Some(issuers) => issuers.verify(end_entity, now).map(|()| ClientCertVerified::assertion()),
                None => Err(V1Refusal::NotAllowed { listener: self.listener.clone() }.into()),
            };
        }
        self.webpki.verify_client_cert(end_entity, intermediates, now).map_err(|error| {
            // webpki refuses a v1 intermediate as an unsupported version, which says nothing
            // about which certificate is at fault.
            match (&error, v1_intermediate(intermediates)) {
                (rustls::Error::InvalidCertificate(CertificateError::Other(_)), Some(subject)) => {
                    V1Refusal::Intermediate { subject }.into()
                }
                _ => error,
            }
        })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self.accepted_v1_key(cert) {
            Some(spki) => v1_cert::verify_tls12_signature(message, &spki, dss, &self.algorithms),
            None => self.webpki.verify_tls12_signature(message, cert, dss),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self.accepted_v1_key(cert) {
            Some(spki) => v1_cert::verify_tls13_signature(message, &spki, dss, &self.algorithms),
            None => self.webpki.verify_tls13_signature(message, cert, dss),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The subject of the first v1 certificate among `intermediates`, if there is one.
fn v1_intermediate(intermediates: &[CertificateDer<'_>]) -> Option<String> {
    intermediates.iter().find_map(|der| {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        (cert.version() == X509Version::V1).then(|| cert.subject().to_string())
    })
}
