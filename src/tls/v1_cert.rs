//! X.509 version 1 client certificates, for listeners with `tls.allow_v1_client_certs`.
//!
//! rustls verifies client certificates with webpki, which refuses version 1 certificates
//! outright. They are still common: `openssl x509 -req` without an extension file makes one, and
//! that is the recipe in Mosquitto's documentation and most tutorials. This module is the check
//! that stands in for webpki's when the leaf is a v1 certificate and the listener allows them.
//!
//! A v1 leaf is accepted only when one of the listener's `client_ca` certificates issued it
//! directly:
//!
//! - the leaf's issuer name equals the CA's subject name, byte for byte (as webpki compares);
//! - its signature verifies under the CA's public key, with the algorithms rustls's provider
//!   uses for v3 chains, chosen by matching the algorithm identifiers exactly as webpki does —
//!   so a v1 certificate is accepted with precisely the algorithms a v3 one would be (RSA
//!   PKCS#1 and PSS with SHA-256/384/512 and keys of 2048 to 8192 bits, ECDSA on P-256, P-384
//!   and P-521, Ed25519), and never with SHA-1 or MD5;
//! - its validity period includes the current time;
//! - it is well formed for a v1 certificate: no extensions, and the inner and outer signature
//!   algorithms agree.
//!
//! A v1 certificate is never an issuer. Whatever chain the client sends beyond its leaf is
//! ignored, and a `client_ca` certificate issues v1 leaves only if it is itself a v3 CA
//! certificate (basic constraints `cA`, and `keyCertSign` if it has a key usage extension).
//!
//! The TLS handshake signature (CertificateVerify) is checked against the leaf's public key
//! taken as a raw SubjectPublicKeyInfo: rustls's usual helpers parse the certificate with webpki
//! and would refuse it again.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, PeerMisbehaved};
use x509_parser::asn1_rs::{Any, Class, FromDer as _, Tag};
use x509_parser::certificate::X509Certificate;
use x509_parser::x509::X509Version;

/// Why a client certificate was refused, in words a person can act on. It travels inside
/// rustls's `CertificateError::Other`, and the listener logs its text in place of rustls's
/// generic description.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum V1Refusal {
    /// A v1 certificate on a listener that does not accept them.
    #[error(
        "client certificate is X.509 version 1 (made without extensions, as `openssl x509 -req` \
         does by default); re-issue it as v3 or set tls.allow_v1_client_certs = true on listener \
         {listener}"
    )]
    NotAllowed {
        /// The listener's name.
        listener: String,
    },
    /// A v1 certificate whose issuer is not one of the listener's `client_ca` certificates.
    #[error(
        "client certificate (X.509 version 1) was issued by \"{issuer}\", which is not a client_ca \
         certificate of this listener; a version 1 certificate is accepted only when a client_ca \
         certificate issued it directly"
    )]
    UnknownIssuer {
        /// The issuer name the certificate gives.
        issuer: String,
    },
    /// The issuing `client_ca` certificate may not issue v1 certificates.
    #[error(
        "client certificate (X.509 version 1) was issued by client_ca \"{issuer}\", which cannot \
         issue certificates: {reason}"
    )]
    IssuerUnusable {
        /// The CA's subject name.
        issuer: String,
        /// What the CA certificate lacks.
        reason: &'static str,
    },
    /// The signature does not verify under the issuer's key.
    #[error(
        "the signature of the client certificate (X.509 version 1) does not verify with the key \
         of client_ca \"{issuer}\": the certificate was altered, or another key with the same \
         name signed it"
    )]
    BadSignature {
        /// The CA's subject name.
        issuer: String,
    },
    /// The signature algorithm is not one rustls's provider verifies, or does not fit the CA's
    /// key.
    #[error(
        "the client certificate (X.509 version 1) is signed with {algorithm}, which mesgd does \
         not accept with the key of client_ca \"{issuer}\" (accepted: RSA PKCS#1 or PSS with \
         SHA-256/384/512, ECDSA P-256/P-384/P-521, Ed25519)"
    )]
    UnsupportedAlgorithm {
        /// The algorithm, by name where known, else its OID.
        algorithm: String,
        /// The CA's subject name.
        issuer: String,
    },
    /// The certificate does not have the shape of a v1 certificate.
    #[error("the client certificate (X.509 version 1) is malformed: {0}")]
    Malformed(&'static str),
    /// A v3 leaf presented through a v1 intermediate.
    #[error(
        "the client's certificate chain has an X.509 version 1 intermediate certificate \
         (\"{subject}\"); a version 1 certificate is never accepted as an issuer: re-issue it as \
         a v3 CA certificate"
    )]
    Intermediate {
        /// The intermediate's subject name.
        subject: String,
    },
}

impl From<V1Refusal> for rustls::Error {
    fn from(refusal: V1Refusal) -> Self {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(refusal))))
    }
}

/// The certificate's version, if it parses.
pub(crate) fn version(der: &[u8]) -> Option<X509Version> {
    x509_parser::parse_x509_certificate(der).ok().map(|(_, cert)| cert.version())
}

/// A `client_ca` certificate as an issuer of v1 leaves.
#[derive(Debug)]
struct Issuer {
    /// The DER subject name, compared with a leaf's issuer name.
    subject: Vec<u8>,
    /// The subject name as text, for messages.
    subject_text: String,
    /// The DER SubjectPublicKeyInfo.
    spki: Vec<u8>,
    /// Why this certificate may not issue certificates, if it may not.
    unusable: Option<&'static str>,
}

impl Issuer {
    fn from_cert(cert: &X509Certificate<'_>) -> Issuer {
        Issuer {
            subject: cert.subject().as_raw().to_vec(),
            subject_text: cert.subject().to_string(),
            spki: cert.public_key().raw.to_vec(),
            unusable: issuing_defect(cert),
        }
    }
}

/// What keeps `ca` from issuing certificates, if anything.
fn issuing_defect(ca: &X509Certificate<'_>) -> Option<&'static str> {
    if ca.version() != X509Version::V3 {
        return Some("it is not an X.509 version 3 certificate (a version 1 certificate is never an issuer)");
    }
    match ca.basic_constraints() {
        Ok(Some(constraints)) if constraints.value.ca => {}
        Ok(_) => return Some("its basic constraints do not make it a CA (cA is not set)"),
        Err(_) => return Some("its basic constraints extension is malformed or repeated"),
    }
    match ca.key_usage() {
        Ok(None) => None,
        Ok(Some(usage)) if usage.value.key_cert_sign() => None,
        Ok(Some(_)) => Some("its key usage does not include keyCertSign"),
        Err(_) => Some("its key usage extension is malformed or repeated"),
    }
}

/// The `client_ca` certificates of a listener that accepts v1 client certificates.
#[derive(Debug)]
pub(crate) struct V1Issuers {
    issuers: Vec<Issuer>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl V1Issuers {
    /// Reads the CA certificates. Fails, with the reason, if none of them can issue v1 leaves:
    /// a listener configured to accept v1 certificates that never could is a mistake to report
    /// at start.
    pub(crate) fn new(
        roots: &[CertificateDer<'_>],
        algorithms: WebPkiSupportedAlgorithms,
    ) -> Result<V1Issuers, String> {
        let mut issuers = Vec::with_capacity(roots.len());
        for root in roots {
            let (_, cert) = x509_parser::parse_x509_certificate(root.as_ref())
                .map_err(|e| format!("a client_ca certificate does not parse: {e}"))?;
            issuers.push(Issuer::from_cert(&cert));
        }
        if issuers.iter().all(|issuer| issuer.unusable.is_some()) {
            let reasons: Vec<String> = issuers
                .iter()
                .map(|i| format!("\"{}\": {}", i.subject_text, i.unusable.unwrap_or_default()))
                .collect();
            return Err(format!(
                "tls.allow_v1_client_certs = true, but no client_ca certificate can issue client \
                 certificates: {}",
                reasons.join("; ")
            ));
        }
        Ok(V1Issuers { issuers, algorithms })
    }

    /// Checks a v1 leaf (see the module doc). Expiry is reported with rustls's own error, so
    /// it reads the same as for a v3 certificate.
    pub(crate) fn verify(&self, leaf_der: &[u8], now: UnixTime) -> Result<(), rustls::Error> {
        let (rest, leaf) =
            x509_parser::parse_x509_certificate(leaf_der).map_err(|_| CertificateError::BadEncoding)?;
        if !rest.is_empty() {
            return Err(CertificateError::BadEncoding.into());
        }
        if !outer_structure_is_strict(leaf_der) {
            return Err(CertificateError::BadEncoding.into());
        }
        if leaf.version() != X509Version::V1 {
            return Err(V1Refusal::Malformed("it is not a version 1 certificate").into());
        }
        if !leaf.extensions().is_empty() {
            return Err(V1Refusal::Malformed("a version 1 certificate cannot have extensions").into());
        }
        if leaf.signature_value.unused_bits != 0 {
            return Err(V1Refusal::Malformed("its signature has unused bits").into());
        }
        if leaf.tbs_certificate.signature != leaf.signature_algorithm {
            return Err(V1Refusal::Malformed("its signed and outer signature algorithms differ").into());
        }
        self.verify_issued(&leaf, leaf_der)?;
        check_validity(&leaf, now)
    }

    /// Verifies that a `client_ca` certificate issued `leaf` directly. Several CA certificates
    /// may share a name (a key rotation): any one of them whose key verifies the signature will
    /// do, and the refusal names the most telling failure.
    fn verify_issued(&self, leaf: &X509Certificate<'_>, leaf_der: &[u8]) -> Result<(), V1Refusal> {
        let issuer_name = leaf.issuer().as_raw();
        let signature_alg =
            signature_algorithm_id(leaf_der).ok_or(V1Refusal::Malformed("it does not parse"))?;
        let mut refusal = None;
        for issuer in self.issuers.iter().filter(|issuer| issuer.subject == issuer_name) {
            let issuer_text = || issuer.subject_text.clone();
            if let Some(reason) = issuer.unusable {
                refusal.get_or_insert(V1Refusal::IssuerUnusable { issuer: issuer_text(), reason });
                continue;
            }
            match verify_signed_data(
                &self.algorithms,
                &issuer.spki,
                signature_alg,
                leaf.tbs_certificate.as_ref(),
                &leaf.signature_value.data,
            ) {
                Ok(()) => return Ok(()),
                Err(SignatureFailure::Invalid) => {
                    refusal = Some(V1Refusal::BadSignature { issuer: issuer_text() });
                }
                Err(SignatureFailure::Unsupported) => {
                    if !matches!(refusal, Some(V1Refusal::BadSignature { .. })) {
                        refusal = Some(V1Refusal::UnsupportedAlgorithm {
                            algorithm: algorithm_name(&leaf.signature_algorithm.algorithm),
                            issuer: issuer_text(),
                        });
                    }
                }
            }
        }
        Err(refusal.unwrap_or_else(|| V1Refusal::UnknownIssuer { issuer: leaf.issuer().to_string() }))
    }
}

fn check_validity(leaf: &X509Certificate<'_>, now: UnixTime) -> Result<(), rustls::Error> {
    let validity = leaf.validity();
    let (not_before, not_after) = (validity.not_before.timestamp(), validity.not_after.timestamp());
    let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    // Negative times (before 1970) cannot be represented by UnixTime; they are in the past.
    let unix = |t: i64| UnixTime::since_unix_epoch(std::time::Duration::from_secs(t.max(0).unsigned_abs()));
    if secs < not_before {
        return Err(CertificateError::NotValidYetContext { time: now, not_before: unix(not_before) }.into());
    }
    if secs > not_after {
        return Err(CertificateError::ExpiredContext { time: now, not_after: unix(not_after) }.into());
    }
    Ok(())
}

/// How a signature check failed.
#[derive(Debug, PartialEq, Eq)]
enum SignatureFailure {
    /// No supported algorithm has this signature algorithm for this kind of key.
    Unsupported,
    /// The signature is wrong.
    Invalid,
}

/// Verifies `signature` over `message` under the key in `spki`, with the algorithm whose
/// signature identifier is `signature_alg` and whose key identifier is the key's — the way
/// webpki picks one.
fn verify_signed_data(
    algorithms: &WebPkiSupportedAlgorithms,
    spki: &[u8],
    signature_alg: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<(), SignatureFailure> {
    let (key_alg, key) = split_spki(spki).ok_or(SignatureFailure::Unsupported)?;
    let alg = algorithms
        .all
        .iter()
        .find(|alg| {
            alg.signature_alg_id().as_ref() == signature_alg && alg.public_key_alg_id().as_ref() == key_alg
        })
        .ok_or(SignatureFailure::Unsupported)?;
    alg.verify_signature(key, message, signature).map_err(|_| SignatureFailure::Invalid)
}

/// Verifies a TLS 1.2 handshake signature by the key in `spki`, trying each algorithm the
/// scheme maps to (in TLS 1.2 the scheme does not fix an ECDSA curve), as rustls does for
/// certificates webpki can parse.
pub(crate) fn verify_tls12_signature(
    message: &[u8],
    spki: &[u8],
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, algs)| *algs)
        .ok_or(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
    let (key_alg, key) = split_spki(spki).ok_or(CertificateError::BadEncoding)?;
    let alg = candidates
        .iter()
        .find(|alg| alg.public_key_alg_id().as_ref() == key_alg)
        .ok_or(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
    alg.verify_signature(key, message, dss.signature())
        .map(|()| HandshakeSignatureValid::assertion())
        .map_err(|_| CertificateError::BadSignature.into())
}

/// Verifies a TLS 1.3 handshake signature by the key in `spki` (rustls's raw-key helper).
pub(crate) fn verify_tls13_signature(
    message: &[u8],
    spki: &[u8],
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    rustls::crypto::verify_tls13_signature_with_raw_key(
        message,
        &SubjectPublicKeyInfoDer::from(spki),
        dss,
        algorithms,
    )
}

/// The DER SubjectPublicKeyInfo of a certificate, if it parses.
pub(crate) fn subject_public_key_info(der: &[u8]) -> Option<Vec<u8>> {
    x509_parser::parse_x509_certificate(der).ok().map(|(_, cert)| cert.public_key().raw.to_vec())
}

/// Reads one DER element of `tag` from the front of `input`: its contents and what follows.
fn element(input: &[u8], tag: Tag) -> Option<(&[u8], &[u8])> {
    let (rest, any) = Any::from_der(input).ok()?;
    // The class and the constructed bit too: a tag number alone lets `[APPLICATION 3]` pass for
    // a BIT STRING, and a primitive 0x10 for a SEQUENCE (DER has SEQUENCE constructed and BIT
    // STRING primitive).
    let constructed = tag == Tag::Sequence;
    (any.tag() == tag && any.header.class() == Class::Universal && any.header.constructed() == constructed)
        .then_some((any.data, rest))
}

/// Whether the certificate's outer structure is exactly SEQUENCE { tbsCertificate SEQUENCE,
/// signatureAlgorithm SEQUENCE, signatureValue BIT STRING } with universal tags and nothing
/// after: the parser tolerates a signature under another tag class, and the signature value
/// is the one part of a certificate that no signature covers.
fn outer_structure_is_strict(cert: &[u8]) -> bool {
    let Some((body, rest)) = element(cert, Tag::Sequence) else { return false };
    let Some((_, body)) = element(body, Tag::Sequence) else { return false };
    let Some((_, body)) = element(body, Tag::Sequence) else { return false };
    let Some((signature, after)) = element(body, Tag::BitString) else { return false };
    // A signature is whole bytes: the BIT STRING's first content byte (its count of unused
    // bits) is 0. x509-parser hands the bytes after it to the verifier, so without this check a
    // certificate whose count was changed still verified.
    rest.is_empty() && after.is_empty() && signature.first() == Some(&0)
}

/// The contents of a SubjectPublicKeyInfo's AlgorithmIdentifier (the form rustls's algorithms
/// give theirs in) and the key's bits.
fn split_spki(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (body, rest) = element(spki, Tag::Sequence)?;
    if !rest.is_empty() {
        return None;
    }
    let (algorithm, body) = element(body, Tag::Sequence)?;
    let (bits, rest) = element(body, Tag::BitString)?;
    // The first content byte of a BIT STRING counts unused bits; a key has none.
    match bits.split_first() {
        Some((0, key)) if rest.is_empty() => Some((algorithm, key)),
        _ => None,
    }
}

/// The contents of a certificate's outer signatureAlgorithm.
fn signature_algorithm_id(cert: &[u8]) -> Option<&[u8]> {
    let (body, _) = element(cert, Tag::Sequence)?;
    let (_, body) = element(body, Tag::Sequence)?; // tbsCertificate
    let (algorithm, _) = element(body, Tag::Sequence)?;
    Some(algorithm)
}

/// A signature algorithm's name for a message: the common ones by name, others by OID.
fn algorithm_name(oid: &x509_parser::der_parser::Oid<'_>) -> String {
    let dotted = oid.to_id_string();
    let name = match dotted.as_str() {
        "1.2.840.113549.1.1.4" => "md5WithRSAEncryption (MD5 is broken)",
        "1.2.840.113549.1.1.5" | "1.3.14.3.2.29" => "sha1WithRSAEncryption (SHA-1 is broken)",
        "1.2.840.10045.4.1" => "ecdsa-with-SHA1 (SHA-1 is broken)",
        "1.2.840.10040.4.3" => "dsa-with-sha1 (DSA and SHA-1)",
        "1.2.840.113549.1.1.14" => "sha224WithRSAEncryption",
        "1.2.840.113549.1.1.11" => "sha256WithRSAEncryption",
        "1.2.840.113549.1.1.12" => "sha384WithRSAEncryption",
        "1.2.840.113549.1.1.13" => "sha512WithRSAEncryption",
        "1.2.840.113549.1.1.10" => "RSASSA-PSS",
        "1.2.840.10045.4.3.1" => "ecdsa-with-SHA224",
        "1.2.840.10045.4.3.2" => "ecdsa-with-SHA256",
        "1.2.840.10045.4.3.3" => "ecdsa-with-SHA384",
        "1.2.840.10045.4.3.4" => "ecdsa-with-SHA512",
        "1.3.101.112" => "Ed25519",
        "1.3.101.113" => "Ed448",
        _ => return format!("the algorithm {dotted}"),
    };
    format!("{name} ({dotted})")
}

#[cfg(test)]
mod tests;
