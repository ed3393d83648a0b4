//! Certificates made in the test: a CA, a server certificate for 127.0.0.1 / localhost, and
//! client certificates with a chosen Common Name and validity — written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate authority that can sign server and client certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// PEM files of one certificate and its key.
#[derive(Clone, Debug)]
pub struct Pem {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pem {
    pub fn cert_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.cert).unwrap()
    }
    pub fn key_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.key).unwrap()
    }
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA certificate to `dir/name`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.pem()).unwrap();
        path
    }

    fn sign(&self, params: &CertificateParams, dir: &Path, name: &str) -> Pem {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let pem = Pem { cert: dir.join(format!("{name}.pem")), key: dir.join(format!("{name}.key")) };
        std::fs::write(&pem.cert, cert.pem()).unwrap();
        std::fs::write(&pem.key, key.serialize_pem()).unwrap();
        pem
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self, dir: &Path, name: &str) -> Pem {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params.distinguished_name.push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(&params, dir, name)
    }

    /// A client certificate with Common Name `cn`, valid from `days_from_now.0` to
    /// `days_from_now.1` days from now, for `usage`.
    pub fn client_with(
        &self,
        dir: &Path,
        cn: &str,
        days_from_now: (i64, i64),
        usage: ExtendedKeyUsagePurpose,
    ) -> Pem {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .subject_alt_names
            .push(SanType::Rfc822Name(format!("{cn}@devices.example").try_into().unwrap()));
        params.extended_key_usages = vec![usage];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now + time::Duration::days(days_from_now.0);
        params.not_after = now + time::Duration::days(days_from_now.1);
        self.sign(&params, dir, &format!("client-{cn}"))
    }

    /// A currently valid client certificate for client authentication.
    pub fn client(&self, dir: &Path, cn: &str) -> Pem {
        self.client_with(dir, cn, (-1, 30), ExtendedKeyUsagePurpose::ClientAuth)
    }
}
