//! The relay over TLS (`relay-tcp` and `relay-ws` with `tls`): certificates made in the test,
//! rustls as the client, the identity of a client certificate through the x509 provider and the
//! ACL of its builtin record on relay addresses.

mod common;
#[path = "common/pki.rs"]
#[allow(unreachable_pub, dead_code)]
mod pki;

use std::net::SocketAddr;
use std::sync::Arc;

use common::within;
use futures_util::{SinkExt, StreamExt};
use mesgd::Server;
use mesgd::config::Config;
use mesgd_core::acl::{Permission, Rule};
use mesgd_providers::builtin::{AuthType, Store};
use pki::{Ca, Pem};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::Message;

const CONFIG: &str = r#"
[mqtt]
sys_interval = 0
[auth]
allow_anonymous = false
[[auth.providers]]
type = "x509"
[[auth.providers]]
type = "builtin"
pbkdf2_iterations = 1000
[[listeners]]
name = "relay-tls"
kind = "relay-tcp"
bind = "127.0.0.1:0"
tls = { cert = "{dir}/server.pem", key = "{dir}/server.key", client_ca = "{dir}/ca.pem", require_client_cert = true }
[[listeners]]
name = "relay-wss"
kind = "relay-ws"
bind = "127.0.0.1:0"
tls = { cert = "{dir}/server.pem", key = "{dir}/server.key", client_ca = "{dir}/ca.pem" }
"#;

struct Fixture {
    server: Server,
    dir: tempfile::TempDir,
    ca: Ca,
}

impl Fixture {
    /// Two x509 devices that may hold only their own address and send to any.
    async fn start() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("mesgd relay test CA");
        ca.write(dir.path(), "ca.pem");
        ca.server(dir.path(), "server");
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        let store = Store::open(&dir.path().join("data/config.db")).unwrap();
        store.set_pbkdf2_iterations(1000).unwrap();
        for device in ["device-1", "device-2"] {
            store.add_user(device, AuthType::X509, None, false).unwrap();
            store.add_rule(device, Rule::new("$relay/addr/%u", Permission::Read), None).unwrap();
            store.add_rule(device, Rule::new("$relay/addr/#", Permission::Write), None).unwrap();
        }
        let text = format!("[storage]\ndir = \"{}/data\"\n{CONFIG}", dir.path().display())
            .replace("{dir}", &dir.path().display().to_string());
        let server = Server::start(Config::from_toml(&text, None).expect("config")).await.expect("starts");
        Fixture { server, dir, ca }
    }

    fn addr(&self, name: &str) -> SocketAddr {
        self.server.local_addr(name).expect("listener")
    }

    /// A TLS connection to `listener`, with the client certificate of `cn` if given.
    async fn tls(&self, listener: &str, cn: Option<&str>) -> std::io::Result<TlsStream<TcpStream>> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.dir.path().join("ca.pem")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match cn {
            Some(cn) => {
                let pem: Pem = self.ca.client(self.dir.path(), cn);
                let chain = vec![CertificateDer::from_pem_file(&pem.cert).unwrap()];
                let key = PrivateKeyDer::from_pem_file(&pem.key).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(self.addr(listener)).await?;
        let mut tls = connector.connect("localhost".try_into().unwrap(), tcp).await?;
        // TLS 1.3 reports a refused client certificate after the handshake: make the server
        // speak (or fail) before the caller goes on.
        tls.flush().await?;
        Ok(tls)
    }
}

/// Length-prefixed relay frames over a TLS stream.
struct TlsRelay(TlsStream<TcpStream>);

impl TlsRelay {
    async fn send(&mut self, v: Value) {
        let body = v.to_string();
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(body.as_bytes());
        self.0.write_all(&frame).await.unwrap();
    }

    /// The next frame, or `None` when the server closed the connection.
    async fn recv(&mut self) -> Option<Value> {
        within("a relay frame over TLS", async {
            let len = self.0.read_u32().await.ok()?;
            let mut body = vec![0u8; len as usize];
            self.0.read_exact(&mut body).await.ok()?;
            Some(serde_json::from_slice(&body).expect("JSON"))
        })
        .await
    }
}

type Wss = tokio_tungstenite::WebSocketStream<TlsStream<TcpStream>>;

/// The next text message on a secure WebSocket, as JSON.
async fn next(ws: &mut Wss) -> Value {
    match within("a wss message", ws.next()).await {
        Some(Ok(Message::Text(t))) => serde_json::from_str(t.as_str()).unwrap(),
        other => panic!("no text message: {other:?}"),
    }
}

#[tokio::test]
async fn a_client_certificate_is_the_relay_identity_and_its_rules_gate_addresses() {
    let f = Fixture::start().await;
    let mut one = TlsRelay(f.tls("relay-tls", Some("device-1")).await.expect("handshake"));
    // The certificate's CN is the user: its rules allow its own address only.
    one.send(json!({"t": "register", "addr": "device-2"})).await;
    let refused = one.recv().await.expect("an answer");
    assert_eq!((&refused["t"], &refused["msg"]), (&json!("error"), &json!("not authorized")), "{refused}");
    one.send(json!({"t": "register", "addr": "device-1"})).await;
    assert_eq!(one.recv().await.expect("registered")["t"], "registered");
    one.send(json!({"t": "capabilities"})).await;
    let caps = one.recv().await.expect("capabilities");
    assert_eq!(caps["transports"]["tls"], f.addr("relay-tls").port(), "{caps}");
    assert_eq!(caps["transports"]["wss"], f.addr("relay-wss").port(), "{caps}");

    // device-2 over secure WebSocket, its certificate optional on that listener but given.
    let tls = f.tls("relay-wss", Some("device-2")).await.expect("handshake");
    let (mut two, _) = tokio_tungstenite::client_async("wss://localhost/relay", tls).await.expect("upgrade");
    two.send(Message::text(json!({"t": "register", "addr": "device-2"}).to_string())).await.unwrap();
    assert_eq!(next(&mut two).await["t"], "registered");
    one.send(json!({"t": "send", "to": "device-2", "ct": "over tls"})).await;
    let deliver = next(&mut two).await;
    assert_eq!((&deliver["from"], &deliver["ct"]), (&json!("device-1"), &json!("over tls")), "{deliver}");

    // Without a certificate on wss there is no identity: anonymous access is off.
    let tls = f.tls("relay-wss", None).await.expect("handshake without a certificate");
    let (mut anon, _) = tokio_tungstenite::client_async("wss://localhost/relay", tls).await.expect("upgrade");
    anon.send(Message::text(json!({"t": "register", "addr": "device-1b"}).to_string())).await.unwrap();
    let refused = next(&mut anon).await;
    assert_eq!(refused["msg"], "not authorized", "{refused}");
}

#[tokio::test]
async fn a_listener_that_requires_a_certificate_refuses_a_client_without_one() {
    let f = Fixture::start().await;
    let outcome = match f.tls("relay-tls", None).await {
        Err(e) => Err(e.to_string()),
        Ok(tls) => {
            // TLS 1.3: the refusal arrives as an alert on the first read.
            let mut relay = TlsRelay(tls);
            relay.send(json!({"t": "list_online"})).await;
            match relay.recv().await {
                None => Err("closed".into()),
                Some(v) => Ok(v),
            }
        }
    };
    assert!(outcome.is_err(), "served without a client certificate: {outcome:?}");
    // A client with a certificate is still served.
    let mut ok = TlsRelay(f.tls("relay-tls", Some("device-1")).await.expect("handshake"));
    ok.send(json!({"t": "list_online"})).await;
    assert_eq!(ok.recv().await.expect("an answer")["t"], "online_count");
}
