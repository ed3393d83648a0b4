//! Certificates made with the real `openssl` command line, the way fleets make them: a CA by
//! `openssl req -x509`, and client certificates by `openssl x509 -req` without an extension file
//! (which makes X.509 version 1 certificates) or with one (version 3), or by `openssl ca` for
//! chosen validity dates. Self-contained, so unit tests can include it too.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A key type for `openssl req -newkey`.
#[derive(Clone, Copy, Debug)]
pub enum Key {
    P256,
    P384,
    P521,
    Rsa2048,
    Ed25519,
}

impl Key {
    fn newkey_args(self) -> &'static [&'static str] {
        match self {
            Key::P256 => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            Key::P384 => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
            Key::P521 => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-521"],
            Key::Rsa2048 => &["-newkey", "rsa:2048"],
            Key::Ed25519 => &["-newkey", "ed25519"],
        }
    }
}

/// A certificate and its private key, as PEM files.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Issued {
    pub fn cert_pem(&self) -> Vec<u8> {
        std::fs::read(&self.cert).unwrap()
    }

    /// The first certificate of the file, DER.
    pub fn cert_der(&self) -> Vec<u8> {
        use rustls::pki_types::pem::PemObject as _;
        rustls::pki_types::CertificateDer::from_pem_file(&self.cert).unwrap().to_vec()
    }
}

/// Runs `openssl ARGS` in `dir`; panics with its output if it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl").args(args).current_dir(dir).output().unwrap_or_else(|e| {
        panic!("these tests need the openssl command line (Debian package `openssl`): {e}")
    });
    assert!(
        output.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A certificate authority made with `openssl req -x509` (a v3 certificate with basic
/// constraints `CA:TRUE`), whose files live in `dir`.
pub struct OpensslCa {
    dir: PathBuf,
    stem: String,
    pub issued: Issued,
}

impl OpensslCa {
    /// A new self-signed CA `CN=cn`, written to `dir/{stem}.pem` and `dir/{stem}.key`.
    pub fn new(dir: &Path, stem: &str, cn: &str, key: Key) -> OpensslCa {
        Self::new_with(dir, stem, cn, key, &[])
    }

    /// As [`OpensslCa::new`], with more arguments for `openssl req`.
    pub fn new_with(dir: &Path, stem: &str, cn: &str, key: Key, extra: &[&str]) -> OpensslCa {
        let (cert, key_file) = (format!("{stem}.pem"), format!("{stem}.key"));
        let subject = format!("/CN={cn}");
        let mut args = vec!["req", "-x509", "-nodes", "-days", "30", "-subj", &subject];
        args.extend_from_slice(key.newkey_args());
        args.extend_from_slice(&["-keyout", &key_file, "-out", &cert]);
        args.extend_from_slice(extra);
        openssl(dir, &args);
        OpensslCa {
            dir: dir.to_owned(),
            stem: stem.to_owned(),
            issued: Issued { cert: dir.join(cert), key: dir.join(key_file) },
        }
    }

    /// A key and a certificate signing request `CN=cn`, as `dir/{name}.key` and `.csr`.
    fn request(&self, name: &str, cn: &str, key: Key) -> (String, String) {
        let (key_file, csr) = (format!("{name}.key"), format!("{name}.csr"));
        let subject = format!("/CN={cn}");
        let mut args = vec!["req", "-nodes", "-subj", &subject];
        args.extend_from_slice(key.newkey_args());
        args.extend_from_slice(&["-keyout", &key_file, "-out", &csr]);
        openssl(&self.dir, &args);
        (key_file, csr)
    }

    /// `openssl x509 -req` on a new request, with `extra` arguments (an `-extfile`, a digest,
    /// `-sigopt`s): without an extension file the certificate is version 1.
    fn sign(&self, name: &str, cn: &str, key: Key, extra: &[&str]) -> Issued {
        let (key_file, csr) = self.request(name, cn, key);
        let (ca_cert, ca_key, out) =
            (format!("{}.pem", self.stem), format!("{}.key", self.stem), format!("{name}.pem"));
        let mut args = vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "30",
            "-out",
            &out,
        ];
        args.extend_from_slice(extra);
        openssl(&self.dir, &args);
        Issued { cert: self.dir.join(out), key: self.dir.join(key_file) }
    }

    /// A version 1 client certificate `CN=cn`, made exactly as the common recipe makes it.
    pub fn v1_client(&self, name: &str, cn: &str) -> Issued {
        self.sign(name, cn, Key::P256, &[])
    }

    /// A version 1 certificate with a key of `key`, signed with `extra` options (e.g. `-sha384`
    /// or `-sigopt rsa_padding_mode:pss`).
    pub fn v1_client_with(&self, name: &str, cn: &str, key: Key, extra: &[&str]) -> Issued {
        self.sign(name, cn, key, extra)
    }

    /// A version 3 client certificate (extended key usage clientAuth), as docs/tls.md makes it.
    pub fn v3_client(&self, name: &str, cn: &str) -> Issued {
        let ext = format!("{name}.ext");
        std::fs::write(self.dir.join(&ext), "extendedKeyUsage=clientAuth\n").unwrap();
        self.sign(name, cn, Key::P256, &["-extfile", &ext])
    }

    /// A version 1 intermediate: another CA's key, certified by this one with `openssl x509
    /// -req` (so without extensions), able to sign with the methods of [`OpensslCa`].
    pub fn v1_intermediate(&self, stem: &str, cn: &str) -> OpensslCa {
        let issued = self.sign(stem, cn, Key::P256, &[]);
        OpensslCa { dir: self.dir.clone(), stem: stem.to_owned(), issued }
    }

    /// A version 1 client certificate valid from `start` to `end` (`YYYYMMDDHHMMSSZ`), made by
    /// `openssl ca` (which, without an extensions section, makes version 1 certificates).
    pub fn v1_client_dated(&self, name: &str, cn: &str, start: &str, end: &str) -> Issued {
        let (key_file, csr) = self.request(name, cn, Key::P256);
        let (config, index) = (format!("{}-ca.cnf", self.stem), format!("{}-index.txt", self.stem));
        if !self.dir.join(&index).exists() {
            std::fs::write(self.dir.join(&index), "").unwrap();
        }
        std::fs::write(
            self.dir.join(&config),
            format!(
                "[ca]\ndefault_ca = this\n[this]\ndatabase = {index}\nnew_certs_dir = .\n\
                 certificate = {stem}.pem\nprivate_key = {stem}.key\ndefault_md = sha256\n\
                 policy = any\nrand_serial = yes\nunique_subject = no\n[any]\ncommonName = supplied\n",
                stem = self.stem
            ),
        )
        .unwrap();
        let out = format!("{name}.pem");
        openssl(
            &self.dir,
            &[
                "ca",
                "-batch",
                "-notext",
                "-config",
                &config,
                "-in",
                &csr,
                "-startdate",
                start,
                "-enddate",
                end,
                "-out",
                &out,
            ],
        );
        Issued { cert: self.dir.join(out), key: self.dir.join(key_file) }
    }
}

/// Writes `der` as a PEM certificate file `dir/{name}.pem` (through openssl, which does not
/// check signatures when it converts).
pub fn write_der_cert(dir: &Path, name: &str, der: &[u8]) -> PathBuf {
    let der_file = format!("{name}.der");
    std::fs::write(dir.join(&der_file), der).unwrap();
    let out = format!("{name}.pem");
    openssl(dir, &["x509", "-inform", "der", "-in", &der_file, "-out", &out]);
    dir.join(out)
}

/// A copy of `issued` whose certificate has its last signature byte changed.
pub fn with_altered_signature(dir: &Path, name: &str, issued: &Issued) -> Issued {
    let mut der = issued.cert_der();
    // The certificate ends with its signature; for ECDSA the last byte is the low byte of `s`,
    // so the certificate still parses and only the signature is wrong.
    *der.last_mut().unwrap() ^= 0x01;
    Issued { cert: write_der_cert(dir, name, &der), key: issued.key.clone() }
}
