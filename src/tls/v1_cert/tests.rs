//! The v1 check against certificates made by the real `openssl` command line.

use proptest::prelude::*;

use super::*;

#[path = "../../../tests/common/openssl.rs"]
#[allow(dead_code, unreachable_pub)]
mod openssl;

use openssl::{Issued, Key, OpensslCa};

fn algorithms() -> WebPkiSupportedAlgorithms {
    rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms
}

fn ders(cas: &[&Issued]) -> Vec<CertificateDer<'static>> {
    cas.iter().map(|ca| CertificateDer::from(ca.cert_der())).collect()
}

fn issuers(cas: &[&OpensslCa]) -> V1Issuers {
    let certs: Vec<&Issued> = cas.iter().map(|ca| &ca.issued).collect();
    V1Issuers::new(&ders(&certs), algorithms()).expect("usable CAs")
}

/// The refusal of ours inside a rustls error, if it is one.
fn refusal(error: &rustls::Error) -> Option<&V1Refusal> {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => other.0.downcast_ref(),
        _ => None,
    }
}

#[test]
fn v1_leaves_verify_with_each_algorithm_rustls_accepts_for_v3() {
    let dir = tempfile::tempdir().unwrap();
    let pss = |digest: &'static str| -> Vec<&'static str> {
        vec![digest, "-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:digest"]
    };
    let cases: Vec<(&str, Key, Vec<&str>)> = vec![
        ("rsa-pkcs1-sha256", Key::Rsa2048, vec!["-sha256"]),
        ("rsa-pkcs1-sha384", Key::Rsa2048, vec!["-sha384"]),
        ("rsa-pkcs1-sha512", Key::Rsa2048, vec!["-sha512"]),
        ("rsa-pss-sha256", Key::Rsa2048, pss("-sha256")),
        ("rsa-pss-sha384", Key::Rsa2048, pss("-sha384")),
        ("rsa-pss-sha512", Key::Rsa2048, pss("-sha512")),
        ("p256-sha256", Key::P256, vec!["-sha256"]),
        ("p256-sha384", Key::P256, vec!["-sha384"]),
        ("p384-sha384", Key::P384, vec!["-sha384"]),
        ("p384-sha256", Key::P384, vec!["-sha256"]),
        ("p521-sha512", Key::P521, vec!["-sha512"]),
        ("ed25519", Key::Ed25519, vec![]),
    ];
    for (name, ca_key, options) in cases {
        let ca = OpensslCa::new(dir.path(), &format!("ca-{name}"), &format!("CA {name}"), ca_key);
        let leaf = ca.v1_client_with(&format!("leaf-{name}"), "device-1", Key::P256, &options);
        let der = leaf.cert_der();
        assert_eq!(version(&der), Some(X509Version::V1), "{name}: openssl made a v1 certificate");
        issuers(&[&ca]).verify(&der, UnixTime::now()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn weak_and_unknown_signature_algorithms_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let ca = OpensslCa::new(dir.path(), "ca", "Fleet CA", Key::Rsa2048);
    for (digest, named) in [("-sha1", "SHA-1 is broken"), ("-sha224", "sha224WithRSAEncryption")] {
        let leaf = ca.v1_client_with(&format!("leaf{digest}"), "device-1", Key::P256, &[digest]);
        let error = issuers(&[&ca]).verify(&leaf.cert_der(), UnixTime::now()).unwrap_err();
        assert!(
            matches!(refusal(&error), Some(V1Refusal::UnsupportedAlgorithm { .. })),
            "{digest}: {error:?}"
        );
        let text = refusal(&error).unwrap().to_string();
        assert!(text.contains(named) && text.contains("Fleet CA"), "{text}");
    }
}

#[test]
fn only_a_client_ca_that_issued_the_leaf_directly_is_an_issuer() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = OpensslCa::new(dir.path(), "fleet", "Fleet CA", Key::P256);
    let impostor = OpensslCa::new(dir.path(), "impostor", "Fleet CA", Key::P256);
    let other = OpensslCa::new(dir.path(), "other", "Other CA", Key::P256);
    let intermediate = fleet.v1_intermediate("inter", "Fleet intermediate");
    // The time is read after the leaf was made: openssl dates it from the current second.
    let check = |issuers: &V1Issuers, leaf: &Issued| issuers.verify(&leaf.cert_der(), UnixTime::now());

    let trusted = issuers(&[&fleet]);
    check(&trusted, &fleet.v1_client("good", "device-1")).expect("issued by the fleet CA");

    // Same issuer name, another key: the signature decides.
    let error = check(&trusted, &impostor.v1_client("forged", "device-1")).unwrap_err();
    assert!(
        matches!(refusal(&error), Some(V1Refusal::BadSignature { issuer }) if issuer == "CN=Fleet CA"),
        "{error:?}"
    );

    let error = check(&trusted, &other.v1_client("foreign", "device-1")).unwrap_err();
    assert!(
        matches!(refusal(&error), Some(V1Refusal::UnknownIssuer { issuer }) if issuer == "CN=Other CA"),
        "{error:?}"
    );

    // Through a v1 intermediate: the intermediate is not a client_ca, and does not become one
    // by being configured as one.
    let via_intermediate = intermediate.v1_client("via", "device-1");
    let error = check(&trusted, &via_intermediate).unwrap_err();
    assert!(matches!(refusal(&error), Some(V1Refusal::UnknownIssuer { .. })), "{error:?}");
    let with_intermediate =
        V1Issuers::new(&ders(&[&fleet.issued, &intermediate.issued]), algorithms()).expect("fleet is usable");
    let error = check(&with_intermediate, &via_intermediate).unwrap_err();
    assert!(
        matches!(refusal(&error), Some(V1Refusal::IssuerUnusable { reason, .. }) if reason.contains("version 1")),
        "{error:?}"
    );

    // Two CAs with one name (a key rotation): a leaf from either verifies.
    let rotated = issuers(&[&fleet, &impostor]);
    check(&rotated, &fleet.v1_client("old-key", "device-1")).expect("first key");
    check(&rotated, &impostor.v1_client("new-key", "device-1")).expect("second key");
}

#[test]
fn a_client_ca_must_be_a_v3_ca_allowed_to_sign_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let not_ca = OpensslCa::new_with(
        dir.path(),
        "notca",
        "Not a CA",
        Key::P256,
        &["-addext", "basicConstraints=critical,CA:FALSE"],
    );
    let no_cert_sign = OpensslCa::new_with(
        dir.path(),
        "nosign",
        "No cert sign",
        Key::P256,
        &["-addext", "keyUsage=digitalSignature"],
    );
    // A self-signed v1 certificate, as `openssl x509 -req -signkey` makes.
    openssl::openssl(
        dir.path(),
        &[
            "req",
            "-newkey",
            "ed25519",
            "-nodes",
            "-subj",
            "/CN=Old CA",
            "-keyout",
            "old.key",
            "-out",
            "old.csr",
        ],
    );
    openssl::openssl(
        dir.path(),
        &["x509", "-req", "-in", "old.csr", "-signkey", "old.key", "-out", "old.pem"],
    );
    let v1_ca = Issued { cert: dir.path().join("old.pem"), key: dir.path().join("old.key") };

    for (ca, expected) in
        [(&not_ca.issued, "cA is not set"), (&no_cert_sign.issued, "keyCertSign"), (&v1_ca, "version 1")]
    {
        let error = V1Issuers::new(&ders(&[ca]), algorithms()).unwrap_err();
        assert!(error.contains(expected) && error.contains("allow_v1_client_certs"), "{error}");
    }
    // Alongside a usable CA they are kept, and a leaf they signed is refused with the reason.
    let fleet = OpensslCa::new(dir.path(), "fleet", "Fleet CA", Key::P256);
    let mixed =
        V1Issuers::new(&ders(&[&fleet.issued, &not_ca.issued]), algorithms()).expect("fleet is usable");
    let error = mixed.verify(&not_ca.v1_client("leaf", "device-1").cert_der(), UnixTime::now()).unwrap_err();
    assert!(
        matches!(refusal(&error), Some(V1Refusal::IssuerUnusable { reason, .. }) if reason.contains("cA")),
        "{error:?}"
    );
}

#[test]
fn validity_is_checked_against_the_time_given() {
    let dir = tempfile::tempdir().unwrap();
    let ca = OpensslCa::new(dir.path(), "ca", "Fleet CA", Key::P256);
    let leaf = ca.v1_client("leaf", "device-1").cert_der();
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let not_before = parsed.validity().not_before.timestamp() as u64;
    let not_after = parsed.validity().not_after.timestamp() as u64;
    let at = |secs: u64| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
    let trusted = issuers(&[&ca]);
    trusted.verify(&leaf, at(not_before)).expect("first second");
    trusted.verify(&leaf, at(not_after)).expect("last second");
    assert!(matches!(
        trusted.verify(&leaf, at(not_before - 1)),
        Err(rustls::Error::InvalidCertificate(CertificateError::NotValidYetContext { .. }))
    ));
    assert!(matches!(
        trusted.verify(&leaf, at(not_after + 1)),
        Err(rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { .. }))
    ));
}

#[test]
fn malformed_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = OpensslCa::new(dir.path(), "ca", "Fleet CA", Key::P256);
    let leaf = ca.v1_client("leaf", "device-1").cert_der();
    let v3 = ca.v3_client("v3", "device-1").cert_der();
    let mut trailing = leaf.clone();
    trailing.push(0);
    let mut renamed = leaf.clone();
    let at = renamed.windows(8).position(|w| w == b"device-1").expect("the CN is in the DER");
    renamed[at] = b'D';
    let trusted = issuers(&[&ca]);
    let bad_encoding =
        |e: &rustls::Error| matches!(e, rustls::Error::InvalidCertificate(CertificateError::BadEncoding));
    type Expected = fn(&rustls::Error) -> bool;
    let cases: Vec<(&str, Vec<u8>, Expected)> = vec![
        ("empty", vec![], bad_encoding),
        ("not DER", b"-----BEGIN CERTIFICATE-----".to_vec(), bad_encoding),
        ("truncated", leaf[..leaf.len() / 2].to_vec(), bad_encoding),
        ("trailing data", trailing, bad_encoding),
        ("a v3 certificate", v3, |e| matches!(refusal(e), Some(V1Refusal::Malformed(_)))),
        ("subject changed after signing", renamed, |e| {
            matches!(refusal(e), Some(V1Refusal::BadSignature { .. }))
        }),
    ];
    for (what, der, expected) in cases {
        let error = trusted.verify(&der, UnixTime::now()).expect_err(what);
        assert!(expected(&error), "{what}: {error:?}");
    }
}

#[test]
fn subject_public_key_info_table() {
    let dir = tempfile::tempdir().unwrap();
    let ca = OpensslCa::new(dir.path(), "ca", "Fleet CA", Key::P256);
    let spki = subject_public_key_info(&ca.issued.cert_der()).unwrap();
    let (algorithm, key) = split_spki(&spki).expect("a real SPKI splits");
    assert_eq!(key.len(), 65, "an uncompressed P-256 point");
    assert_eq!(algorithm[0], 0x06, "the algorithm starts with its OID");
    let mut trailing = spki.clone();
    trailing.push(0);
    let mut unused_bits = spki.clone();
    let bit_string_start = spki.len() - 66;
    assert_eq!(unused_bits[bit_string_start], 0);
    unused_bits[bit_string_start] = 3;
    for (what, der) in [
        ("empty", vec![]),
        ("a bare OID", vec![0x06, 0x01, 0x2a]),
        ("trailing data", trailing),
        ("unused bits in the key", unused_bits),
        ("truncated", spki[..spki.len() - 1].to_vec()),
    ] {
        assert!(split_spki(&der).is_none(), "{what}");
    }
    assert_eq!(subject_public_key_info(b"junk"), None);
    assert_eq!(signature_algorithm_id(b""), None);
}

/// The signature BIT STRING's count of unused bits is outside what is signed and what the
/// verifier reads; any value but 0 is refused (found by `any_changed_byte_is_refused`, when the
/// fixture's signature length put its index on that byte).
#[test]
fn a_signature_with_unused_bits_is_refused() {
    let (trusted, leaf) = &*FIXTURE;
    assert!(trusted.verify(leaf, UnixTime::now()).is_ok(), "the fixture itself verifies");
    let (certificate, _) = element(leaf, Tag::Sequence).unwrap();
    let (_, after_tbs) = element(certificate, Tag::Sequence).unwrap();
    let (_, after_algorithm) = element(after_tbs, Tag::Sequence).unwrap();
    let (signature, _) = element(after_algorithm, Tag::BitString).unwrap();
    let at = signature.as_ptr() as usize - leaf.as_ptr() as usize;
    assert_eq!(leaf[at], 0);
    for unused in [1u8, 7, 0x20, 0xff] {
        let mut der = leaf.clone();
        der[at] = unused;
        assert!(trusted.verify(&der, UnixTime::now()).is_err(), "{unused} unused bits were accepted");
    }
}

/// The outer structure's tags must be DER's: a constructed SEQUENCE and a primitive BIT STRING
/// (x509-parser took a primitive 0x10 for the signatureAlgorithm SEQUENCE; found by
/// `any_changed_byte_is_refused`).
#[test]
fn outer_tags_must_have_their_der_form() {
    let (trusted, leaf) = &*FIXTURE;
    let offset = |part: &[u8]| part.as_ptr() as usize - leaf.as_ptr() as usize;
    let (certificate, _) = element(leaf, Tag::Sequence).unwrap();
    let (_, after_tbs) = element(certificate, Tag::Sequence).unwrap();
    let (_, after_algorithm) = element(after_tbs, Tag::Sequence).unwrap();
    for (what, at, changed) in [
        ("the certificate SEQUENCE made primitive", 0, 0x10),
        ("the signatureAlgorithm SEQUENCE made primitive", offset(after_tbs), 0x10),
        ("the signature BIT STRING made constructed", offset(after_algorithm), 0x23),
    ] {
        let mut der = leaf.clone();
        der[at] = changed;
        assert!(trusted.verify(&der, UnixTime::now()).is_err(), "{what} was accepted");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Changing any one byte of a valid v1 certificate gets it refused (every byte is signed, is
    /// the signature, or is structure the check reads), and no input makes the check panic.
    #[test]
    fn any_changed_byte_is_refused(at in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let (trusted, leaf) = &*FIXTURE;
        let mut der = leaf.clone();
        let i = at.index(der.len());
        der[i] ^= flip;
        prop_assert!(trusted.verify(&der, UnixTime::now()).is_err(), "byte {} ^ {:#x} was accepted", i, flip);
    }
}

/// One CA and one leaf for the property test, made once.
static FIXTURE: std::sync::LazyLock<(V1Issuers, Vec<u8>)> = std::sync::LazyLock::new(|| {
    let dir = tempfile::tempdir().unwrap();
    let ca = OpensslCa::new(dir.path(), "ca", "Fleet CA", Key::P256);
    let leaf = ca.v1_client("leaf", "device-1").cert_der();
    (issuers(&[&ca]), leaf)
});
