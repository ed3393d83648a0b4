//! X.509 version 1 client certificates (`tls.allow_v1_client_certs`), made by the real `openssl`
//! command line as fleets make them, presented by rumqttc over TLS 1.3 and by a rustls client
//! limited to TLS 1.2, to listeners with and without the option; admitted by the x509 provider.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;
#[path = "common/openssl.rs"]
#[allow(unreachable_pub, dead_code)]
mod openssl;
#[path = "common/pki.rs"]
#[allow(unreachable_pub, dead_code)]
mod pki;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::BytesMut;
use common::v3::{self, QoS};
use common::{connect_bytes, within};
use mesgd::Server;
use mesgd::config::Config;
use mesgd_core::acl::{Permission, Rule};
use mesgd_core::mqtt::{self, Packet, ProtocolVersion, ReasonCode};
use mesgd_providers::builtin::{AuthType, Store};
use openssl::{Issued, Key, OpensslCa};
use rumqttc::{SubscribeReasonCode, TlsConfiguration, Transport};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{ClientConfig, RootCertStore, SupportedProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Two mutual-TLS listeners that trust the openssl-made fleet CA: `v3only` as before, `v1ok`
/// with `allow_v1_client_certs`. The server certificate comes from a separate CA.
const LISTENERS: &str = r#"
[[listeners]]
name = "v3only"
kind = "mqtt"
bind = "127.0.0.1:0"
tls = { cert = "server.pem", key = "server.key", client_ca = "fleet.pem", require_client_cert = true }
[[listeners]]
name = "v1ok"
kind = "mqtt"
bind = "127.0.0.1:0"
tls = { cert = "server.pem", key = "server.key", client_ca = "fleet.pem", require_client_cert = true, allow_v1_client_certs = true }
"#;

const X509_CHAIN: &str = r#"
[storage]
dir = "data"
[mqtt]
sys_interval = 0
[auth]
allow_anonymous = false
[[auth.providers]]
type = "x509"
[[auth.providers]]
type = "builtin"
pbkdf2_iterations = 1000
"#;

/// The files of a test: the server's CA and certificate, the fleet CA, and the records.
struct Pki {
    dir: tempfile::TempDir,
    server_ca: pki::Ca,
    fleet: OpensslCa,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let server_ca = pki::Ca::new("server CA");
        server_ca.server(dir.path(), "server");
        let fleet = OpensslCa::new(dir.path(), "fleet", "Fleet CA", Key::P256);
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        let store = Store::open(&dir.path().join("data/config.db")).unwrap();
        store.set_pbkdf2_iterations(1000).unwrap();
        store.add_user("device-1", AuthType::X509, None, false).unwrap();
        store.add_rule("device-1", Rule::new("devices/%u/#", Permission::ReadWrite), None).unwrap();
        Pki { dir, server_ca, fleet }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn config_text(&self) -> String {
        format!("{X509_CHAIN}{LISTENERS}")
    }

    fn write_config(&self) -> std::path::PathBuf {
        let path = self.path().join("mesgd.toml");
        std::fs::write(&path, self.config_text()).unwrap();
        path
    }

    async fn start(&self) -> Server {
        let config = Config::from_toml(&self.config_text(), Some(&self.write_config())).expect("config");
        Server::start(config).await.expect("server starts")
    }

    /// A rustls client configuration presenting `client` (its whole file as the chain). The
    /// certificate is loaded without rustls's client-side check that it matches the key, which
    /// parses it with webpki and so cannot read a v1 certificate (OpenSSL-based clients such as
    /// mosquitto_pub present v1 certificates as they are).
    fn client_config(
        &self,
        client: &Issued,
        versions: &[&'static SupportedProtocolVersion],
    ) -> Arc<ClientConfig> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.server_ca.pem().as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let chain: Vec<_> =
            CertificateDer::pem_file_iter(&client.cert).unwrap().map(Result::unwrap).collect();
        let key = provider
            .key_provider
            .load_private_key(PrivateKeyDer::from_pem_file(&client.key).unwrap())
            .unwrap();
        let config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(CertifiedKey::new(chain, key))));
        Arc::new(config)
    }

    /// rumqttc options over TLS (1.3 is what it negotiates) with `client`.
    fn options(&self, id: &str, addr: SocketAddr, client: &Issued) -> v3::MqttOptions {
        let mut o = v3::options(id, addr.port());
        let config = self.client_config(client, &[&rustls::version::TLS13, &rustls::version::TLS12]);
        o.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(config)));
        o
    }

    /// Connects over TLS 1.2 only with `client`, sends a certificate-only CONNECT and returns
    /// the answer, or why there was none.
    async fn connect_tls12(&self, addr: SocketAddr, client: &Issued) -> Result<Packet, String> {
        let connector =
            tokio_rustls::TlsConnector::from(self.client_config(client, &[&rustls::version::TLS12]));
        let tcp = TcpStream::connect(addr).await.unwrap();
        within("a TLS 1.2 connect", async {
            let mut tls =
                connector.connect("localhost".try_into().unwrap(), tcp).await.map_err(|e| e.to_string())?;
            assert_eq!(tls.get_ref().1.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
            tls.write_all(&connect_bytes(4, "tls12", 0x02)).await.map_err(|e| e.to_string())?;
            let mut buf = BytesMut::new();
            loop {
                if let Some(p) = mqtt::decode(&mut buf, Some(ProtocolVersion::V311), u32::MAX).unwrap() {
                    return Ok(p);
                }
                match tls.read_buf(&mut buf).await {
                    Ok(0) => return Err("closed".to_string()),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await
    }
}

fn accepted(answer: &Result<Packet, String>) -> bool {
    matches!(answer, Ok(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success)
}

/// The real binary, the Mosquitto recipe's certificate, a listener without the option: the
/// handshake fails and the log says what is wrong and which option accepts it.
#[tokio::test]
async fn a_v1_certificate_is_refused_by_default_with_a_reason_in_plain_words() {
    let pki = Pki::new();
    let device = pki.fleet.v1_client("device-1", "device-1");
    let mut daemon = daemon::Daemon::start(&pki.write_config(), &["v3only", "v1ok"]).await;
    let err = v3::connect_err(pki.options("d1", daemon.addr("v3only"), &device)).await;
    assert!(err.contains("CertificateUnknown"), "the client is told by an alert: {err}");
    let line = daemon.log_line("TLS handshake failed").await;
    assert!(line.contains("listener=v3only"), "{line}");
    assert!(
        line.contains(
            "client certificate is X.509 version 1 (made without extensions, as `openssl x509 -req` does \
             by default); re-issue it as v3 or set tls.allow_v1_client_certs = true on listener v3only"
        ),
        "{line}"
    );
    assert!(!line.contains("UnsupportedCertVersion"), "{line}");
    // The listener with the option admits the same certificate.
    v3::connect(pki.options("d1", daemon.addr("v1ok"), &device)).await;

    // A v3 leaf through a v1 intermediate: the log names the intermediate as the fault.
    let intermediate = pki.fleet.v1_intermediate("inter", "Fleet intermediate");
    let leaf = intermediate.v3_client("via-v3", "device-1");
    let chained = pki.path().join("via-v3-chain.pem");
    std::fs::write(&chained, [leaf.cert_pem(), intermediate.issued.cert_pem()].concat()).unwrap();
    let via = Issued { cert: chained, key: leaf.key };
    v3::connect_err(pki.options("via", daemon.addr("v1ok"), &via)).await;
    let line = daemon.log_line("TLS handshake failed").await;
    assert!(
        line.contains("listener=v1ok")
            && line.contains("version 1 intermediate certificate (\"CN=Fleet intermediate\")")
            && line.contains("never accepted as an issuer"),
        "{line}"
    );
}

#[tokio::test]
async fn a_v1_certificate_is_admitted_by_its_common_name_where_allowed() {
    let pki = Pki::new();
    let server = pki.start().await;
    let addr = server.local_addr("v1ok").unwrap();
    let device = pki.fleet.v1_client("device-1", "device-1");

    let (mut client, _) = v3::connect(pki.options("d1", addr, &device)).await;
    let own = client.subscribe("devices/device-1/#", QoS::AtLeastOnce).await;
    assert_eq!(
        own.return_codes,
        [SubscribeReasonCode::Success(QoS::AtLeastOnce)],
        "the record's ACL, %u = CN"
    );
    let other = client.subscribe("devices/device-2/#", QoS::AtLeastOnce).await;
    assert_eq!(other.return_codes, [SubscribeReasonCode::Failure]);

    // A Common Name without a record passes the x509 provider by, and nothing else admits it.
    let stranger = pki.fleet.v1_client("stranger", "stranger");
    let err = v3::connect_err(pki.options("s", addr, &stranger)).await;
    assert!(err.contains("NotAuthorized"), "{err}");

    // TLS 1.2, whose handshake signature takes another path, with an EC and an RSA key.
    let rsa = pki.fleet.v1_client_with("device-1-rsa", "device-1", Key::Rsa2048, &[]);
    for cert in [&device, &rsa] {
        let answer = pki.connect_tls12(addr, cert).await;
        assert!(accepted(&answer), "{answer:?}");
    }
}

#[tokio::test]
async fn foreign_expired_altered_and_badly_chained_v1_certificates_are_refused() {
    let pki = Pki::new();
    let server = pki.start().await;
    let addr = server.local_addr("v1ok").unwrap();
    let dir = pki.path();
    // Another CA under the same name (only the signature tells them apart), and one under its own.
    let impostor = OpensslCa::new(dir, "impostor", "Fleet CA", Key::P256);
    let other = OpensslCa::new(dir, "other", "Other CA", Key::P256);
    let good = pki.fleet.v1_client("good", "device-1");
    // Right certificate, wrong private key: only the handshake signature can catch it.
    let wrong_key = Issued { cert: good.cert.clone(), key: other.v1_client("spare", "device-1").key };
    // A v1 leaf issued by a v1 intermediate, sent with its chain.
    let intermediate = pki.fleet.v1_intermediate("inter", "Fleet intermediate");
    let via = intermediate.v1_client("via", "device-1");
    let chained = dir.join("via-chain.pem");
    std::fs::write(&chained, [via.cert_pem(), intermediate.issued.cert_pem()].concat()).unwrap();
    let via = Issued { cert: chained, key: via.key };

    // The alert tells the client which check failed: CertificateUnknown carries mesgd's own
    // reasons (logged in words), DecryptError a handshake signature that does not verify.
    let refused = [
        (
            "signed by another key under the CA's name",
            impostor.v1_client("forged", "device-1"),
            "CertificateUnknown",
        ),
        ("signed by another CA", other.v1_client("foreign", "device-1"), "CertificateUnknown"),
        (
            "expired",
            pki.fleet.v1_client_dated("expired", "device-1", "20200101000000Z", "20200201000000Z"),
            "CertificateExpired",
        ),
        (
            "not yet valid",
            pki.fleet.v1_client_dated("early", "device-1", "20990101000000Z", "20990201000000Z"),
            "CertificateExpired",
        ),
        ("signature altered", openssl::with_altered_signature(dir, "altered", &good), "CertificateUnknown"),
        ("the key does not match the certificate", wrong_key, "DecryptError"),
        ("issued by a v1 intermediate", via, "CertificateUnknown"),
    ];
    for (what, cert, alert) in &refused {
        let err = v3::connect_err(pki.options("refused", addr, cert)).await;
        assert!(err.contains(&format!("AlertReceived({alert})")), "{what}: {err}");
        let answer = pki.connect_tls12(addr, cert).await;
        assert_eq!(answer, Err(format!("received fatal alert: {alert}")), "{what} over TLS 1.2");
    }
    // The listener still admits the good certificate.
    v3::connect(pki.options("good", addr, &good)).await;
    assert!(accepted(&pki.connect_tls12(addr, &good).await));
}

#[tokio::test]
async fn v3_certificates_work_on_both_listeners_and_never_through_a_v1_intermediate() {
    let pki = Pki::new();
    let server = pki.start().await;
    let v3_cert = pki.fleet.v3_client("device-1-v3", "device-1");
    let other = OpensslCa::new(pki.path(), "other", "Other CA", Key::P256);
    let foreign = other.v3_client("foreign-v3", "device-1");
    // A v3 leaf signed by a v1 intermediate, sent with its chain.
    let intermediate = pki.fleet.v1_intermediate("inter", "Fleet intermediate");
    let leaf = intermediate.v3_client("via-v3", "device-1");
    let chained = pki.path().join("via-v3-chain.pem");
    std::fs::write(&chained, [leaf.cert_pem(), intermediate.issued.cert_pem()].concat()).unwrap();
    let via = Issued { cert: chained, key: leaf.key };

    for listener in ["v3only", "v1ok"] {
        let addr = server.local_addr(listener).unwrap();
        let (mut client, _) = v3::connect(pki.options("v3", addr, &v3_cert)).await;
        let own = client.subscribe("devices/device-1/#", QoS::AtLeastOnce).await;
        assert_eq!(own.return_codes, [SubscribeReasonCode::Success(QoS::AtLeastOnce)], "{listener}");
        assert!(accepted(&pki.connect_tls12(addr, &v3_cert).await), "{listener}: TLS 1.2");
        v3::connect_err(pki.options("foreign", addr, &foreign)).await;
        v3::connect_err(pki.options("via", addr, &via)).await;
    }
}

#[tokio::test]
async fn the_option_needs_a_client_ca_that_can_issue_certificates() {
    let pki = Pki::new();
    let without_ca = format!(
        "{X509_CHAIN}[[listeners]]\nname = \"x\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
         tls = {{ cert = \"server.pem\", key = \"server.key\", allow_v1_client_certs = true }}\n"
    );
    let err = Config::from_toml(&without_ca, None).unwrap_err().to_string();
    assert!(err.contains("listeners[0].tls.allow_v1_client_certs") && err.contains("client_ca"), "{err}");

    // A client_ca that is not a CA certificate cannot issue v1 leaves: refused at start.
    let not_ca = OpensslCa::new_with(
        pki.path(),
        "notca",
        "Not a CA",
        Key::P256,
        &["-addext", "basicConstraints=critical,CA:FALSE"],
    );
    let text = pki.config_text().replace("fleet.pem", "notca.pem");
    let config = Config::from_toml(&text, Some(&pki.write_config())).unwrap();
    let err = Server::start(config).await.unwrap_err().to_string();
    assert!(err.contains("notca.pem") && err.contains("cA is not set"), "{err}");
    drop(not_ca);
}
