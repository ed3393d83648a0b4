//! TLS listeners with client certificates, the x509 provider, and MQTT over WebSocket (ws and
//! wss) — with certificates made in the test, rumqttc over TLS, tokio-tungstenite, raw sockets.

mod common;
#[path = "common/pki.rs"]
#[allow(unreachable_pub)]
mod pki;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::BytesMut;
use common::v3::{self, QoS};
use common::{Raw, connect_bytes, mqtt_str, packet, within};
use futures_util::{SinkExt, StreamExt};
use mesgd::Server;
use mesgd::config::Config;
use mesgd_core::mqtt::{self, Packet, ProtocolVersion, ReasonCode};
use pki::{Ca, Pem};
use rumqttc::{TlsConfiguration, Transport};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A server with the listeners in `listeners` (TOML), files in its own temp dir.
struct Fixture {
    server: Server,
    dir: tempfile::TempDir,
    ca: Ca,
}

impl Fixture {
    /// Writes a CA and a server certificate, then starts a server whose config is
    /// `listeners` + `rest`; `{dir}` in them is replaced by the temp dir.
    async fn start(listeners: &str, rest: &str) -> Fixture {
        Self::start_prepared(listeners, rest, |_| {}).await
    }

    /// As [`Fixture::start`], running `prepare` on the temp dir before the server starts.
    async fn start_prepared(listeners: &str, rest: &str, prepare: impl FnOnce(&Path)) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("mesgd test CA");
        ca.write(dir.path(), "ca.pem");
        ca.server(dir.path(), "server");
        prepare(dir.path());
        let text = format!(
            "[storage]\ndir = \"{d}/data\"\n[mqtt]\nsys_interval = 0\n{rest}\n{listeners}",
            d = dir.path().display()
        )
        .replace("{dir}", &dir.path().display().to_string());
        let config = Config::from_toml(&text, None).expect("config");
        let server = Server::start(config).await.expect("server starts");
        Fixture { server, dir, ca }
    }

    fn addr(&self, name: &str) -> SocketAddr {
        self.server.local_addr(name).expect("listener")
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn client(&self, cn: &str) -> Pem {
        self.ca.client(self.path(), cn)
    }
}

const TLS_LISTENERS: &str = r#"
[[listeners]]
name = "plain"
kind = "mqtt"
bind = "127.0.0.1:0"
[[listeners]]
name = "tls"
kind = "mqtt"
bind = "127.0.0.1:0"
tls = { cert = "{dir}/server.pem", key = "{dir}/server.key" }
[[listeners]]
name = "mtls"
kind = "mqtt"
bind = "127.0.0.1:0"
tls = { cert = "{dir}/server.pem", key = "{dir}/server.key", client_ca = "{dir}/ca.pem", require_client_cert = true }
[[listeners]]
name = "optional"
kind = "mqtt"
bind = "127.0.0.1:0"
tls = { cert = "{dir}/server.pem", key = "{dir}/server.key", client_ca = "{dir}/ca.pem" }
"#;

const ANONYMOUS: &str = "[auth]\nallow_anonymous = true\n";

fn tls_options(id: &str, addr: SocketAddr, ca_pem: Vec<u8>, client: Option<&Pem>) -> v3::MqttOptions {
    let mut o = v3::options(id, addr.port());
    o.set_transport(Transport::tls_with_config(TlsConfiguration::Simple {
        ca: ca_pem,
        alpn: None,
        client_auth: client.map(|c| (c.cert_bytes(), c.key_bytes())),
    }));
    o
}

#[tokio::test]
async fn tls_clients_exchange_messages_with_plain_clients() {
    let f = Fixture::start(TLS_LISTENERS, ANONYMOUS).await;
    let ca = f.ca.pem().into_bytes();
    let (mut tls_sub, _) = v3::connect(tls_options("tls-sub", f.addr("tls"), ca.clone(), None)).await;
    tls_sub.subscribe("x/#", QoS::AtLeastOnce).await;
    let (plain, _) = v3::connect(v3::options("plain", f.addr("plain").port())).await;
    plain.client.publish("x/1", QoS::AtLeastOnce, false, "over tls").await.unwrap();
    assert_eq!(&tls_sub.next_publish().await.payload[..], b"over tls");
    // And a client with a certificate on the mutual-TLS listener publishes to the TLS one.
    let device = f.client("device-1");
    let (mtls, _) = v3::connect(tls_options("mtls", f.addr("mtls"), ca.clone(), Some(&device))).await;
    mtls.client.publish("x/2", QoS::AtLeastOnce, false, "from mtls").await.unwrap();
    assert_eq!(&tls_sub.next_publish().await.payload[..], b"from mtls");
}

#[tokio::test]
async fn required_client_certificates_refuse_missing_foreign_expired_and_wrong_usage() {
    let f = Fixture::start(TLS_LISTENERS, ANONYMOUS).await;
    let ca = f.ca.pem().into_bytes();
    let other = Ca::new("another CA");
    let foreign = other.client(f.path(), "intruder");
    let expired = f.ca.client_with(f.path(), "old", (-30, -1), rcgen::ExtendedKeyUsagePurpose::ClientAuth);
    let future = f.ca.client_with(f.path(), "early", (1, 30), rcgen::ExtendedKeyUsagePurpose::ClientAuth);
    let server_only =
        f.ca.client_with(f.path(), "misused", (-1, 30), rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    for (what, cert) in [
        ("no certificate", None),
        ("a certificate from another CA", Some(&foreign)),
        ("an expired certificate", Some(&expired)),
        ("a certificate not yet valid", Some(&future)),
        ("a certificate for server authentication only", Some(&server_only)),
    ] {
        let err = v3::connect_err(tls_options("refused", f.addr("mtls"), ca.clone(), cert)).await;
        assert!(!err.is_empty(), "{what}: refused");
    }
    // On the optional listener no certificate is fine, but a bad one is still refused.
    let (ok, _) = v3::connect(tls_options("anon", f.addr("optional"), ca.clone(), None)).await;
    ok.disconnect().await;
    v3::connect_err(tls_options("refused", f.addr("optional"), ca.clone(), Some(&foreign))).await;
    // The broker is unharmed.
    let good = f.client("good");
    v3::connect(tls_options("good", f.addr("mtls"), ca, Some(&good))).await;
}

#[tokio::test]
async fn plain_mqtt_on_a_tls_port_and_tls_on_a_plain_port_are_refused_cleanly() {
    let f = Fixture::start(TLS_LISTENERS, ANONYMOUS).await;
    let mut raw = Raw::open(f.addr("tls"), ProtocolVersion::V311).await;
    raw.send(&connect_bytes(4, "plain-on-tls", 0x02)).await;
    let mut buf = Vec::new();
    let _ = within("close", raw.stream.read_to_end(&mut buf)).await;
    assert!(!buf.starts_with(&[0x20]), "no CONNACK on a TLS port");

    let ca = f.ca.pem().into_bytes();
    let err = v3::connect_err(tls_options("tls-on-plain", f.addr("plain"), ca, None)).await;
    assert!(!err.is_empty());
    // Both listeners still serve.
    Raw::connected(f.addr("plain"), ProtocolVersion::V311, "after").await;
}

#[tokio::test]
async fn tls_reload_swaps_certificates_for_new_connections_and_keeps_old_ones() {
    let f = Fixture::start(TLS_LISTENERS, ANONYMOUS).await;
    let old_ca = f.ca.pem().into_bytes();
    let (mut before, _) = v3::connect(tls_options("before", f.addr("tls"), old_ca.clone(), None)).await;
    before.subscribe("r", QoS::AtLeastOnce).await;

    // New certificate from a new CA, then reload.
    let new_ca = Ca::new("rotated CA");
    let rotated = new_ca.server(f.path(), "rotated");
    std::fs::copy(&rotated.cert, f.path().join("server.pem")).unwrap();
    std::fs::copy(&rotated.key, f.path().join("server.key")).unwrap();
    f.server.reload_tls();
    v3::connect_err(tls_options("old-trust", f.addr("tls"), old_ca, None)).await;
    let (after, _) = v3::connect(tls_options("after", f.addr("tls"), new_ca.pem().into_bytes(), None)).await;
    after.client.publish("r", QoS::AtLeastOnce, false, "still here").await.unwrap();
    assert_eq!(&before.next_publish().await.payload[..], b"still here", "established connection kept");

    // A broken file keeps the current certificates.
    std::fs::write(f.path().join("server.pem"), "not a certificate").unwrap();
    f.server.reload_tls();
    v3::connect(tls_options("after-bad", f.addr("tls"), new_ca.pem().into_bytes(), None)).await;
}

// ------------------------------------------------------------------------------ x509 provider

const X509_CHAIN: &str = r#"
[auth]
allow_anonymous = false
[[auth.providers]]
type = "x509"
[[auth.providers]]
type = "builtin"
pbkdf2_iterations = 1000
"#;

#[tokio::test]
async fn x509_common_name_selects_a_record_and_its_acl() {
    use mesgd_core::acl::{Permission, Rule};
    use mesgd_providers::builtin::AuthType;
    // The records exist before the broker starts (a record added later is seen within the
    // provider's poll interval; the live-change tests cover that).
    let f = Fixture::start_prepared(TLS_LISTENERS, X509_CHAIN, |dir| {
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let store = mesgd_providers::builtin::Store::open(&dir.join("data/config.db")).unwrap();
        store.set_pbkdf2_iterations(1000).unwrap();
        store.add_user("device-1", AuthType::X509, None, false).unwrap();
        store.add_rule("device-1", Rule::new("devices/%u/#", Permission::ReadWrite), None).unwrap();
        store.add_user("basic-user", AuthType::Basic, Some(b"pw"), false).unwrap();
        store.add_rule("basic-user", Rule::new("#", Permission::ReadWrite), None).unwrap();
        store.add_user("device-off", AuthType::X509, None, true).unwrap();
        store.set_disabled("device-off", true).unwrap();
    })
    .await;
    let ca = f.ca.pem().into_bytes();

    // CN device-1, no username: admitted with the record's ACL, %u = CN.
    let cert = f.client("device-1");
    let (mut device, _) = v3::connect(tls_options("d1", f.addr("mtls"), ca.clone(), Some(&cert))).await;
    let ok = device.subscribe("devices/device-1/#", QoS::AtLeastOnce).await;
    assert_eq!(ok.return_codes, [rumqttc::SubscribeReasonCode::Success(QoS::AtLeastOnce)]);
    let refused = device.subscribe("devices/other/#", QoS::AtLeastOnce).await;
    assert_eq!(refused.return_codes, [rumqttc::SubscribeReasonCode::Failure]);

    // A CN without a record: x509 answers Next, builtin has no username → Next → refused.
    let unknown = f.client("stranger");
    let err = v3::connect_err(tls_options("s", f.addr("mtls"), ca.clone(), Some(&unknown))).await;
    assert!(err.contains("NotAuthorized") || err.contains("Refused"), "{err}");
    // A disabled record denies.
    let off = f.client("device-off");
    v3::connect_err(tls_options("off", f.addr("mtls"), ca.clone(), Some(&off))).await;

    // With a username x509 answers Next and builtin decides on the password.
    let mut o = tls_options("u", f.addr("mtls"), ca.clone(), Some(&cert));
    o.set_credentials("basic-user", "pw");
    let (mut basic, _) = v3::connect(o).await;
    let any = basic.subscribe("devices/other/#", QoS::AtLeastOnce).await;
    assert_eq!(any.return_codes, [rumqttc::SubscribeReasonCode::Success(QoS::AtLeastOnce)]);
    let mut o = tls_options("u2", f.addr("mtls"), ca, Some(&cert));
    o.set_credentials("basic-user", "wrong");
    v3::connect_err(o).await;
}

#[tokio::test]
async fn x509_without_builtin_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[storage]\ndir = \"{}\"\n[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[[auth.providers]]\ntype = \"x509\"\n",
        dir.path().display()
    );
    let err = Server::start(Config::from_toml(&text, None).unwrap()).await.unwrap_err().to_string();
    assert!(err.contains("x509") && err.contains("builtin"), "{err}");
}

#[tokio::test]
async fn unreadable_tls_files_are_refused_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.pem"), "garbage").unwrap();
    let text = format!(
        "[storage]\ndir = \"{d}\"\n[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\ntls = {{ cert = \"{d}/bad.pem\", key = \"{d}/missing.key\" }}\n",
        d = dir.path().display()
    );
    let err = Server::start(Config::from_toml(&text, None).unwrap()).await.unwrap_err().to_string();
    assert!(err.contains("bad.pem"), "{err}");
}

// ------------------------------------------------------------------------------ WebSocket

const WS_LISTENERS: &str = r#"
[[listeners]]
name = "plain"
kind = "mqtt"
bind = "127.0.0.1:0"
[[listeners]]
name = "ws"
kind = "mqtt-ws"
bind = "127.0.0.1:0"
[[listeners]]
name = "wss"
kind = "mqtt-ws"
bind = "127.0.0.1:0"
path = "/broker"
tls = { cert = "{dir}/server.pem", key = "{dir}/server.key", client_ca = "{dir}/ca.pem", require_client_cert = true }
[[listeners]]
name = "http"
kind = "http"
bind = "127.0.0.1:0"
"#;

async fn ws_open<S>(stream: S, url: &str, subprotocol: Option<&str>) -> Result<WebSocketStream<S>, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut request = url.into_client_request().unwrap();
    if let Some(p) = subprotocol {
        request.headers_mut().insert("Sec-WebSocket-Protocol", p.parse().unwrap());
    }
    tokio_tungstenite::client_async(request, stream).await.map(|(ws, _)| ws).map_err(|e| e.to_string())
}

/// Reads MQTT packets out of binary frames.
struct WsReader {
    buf: BytesMut,
}

impl WsReader {
    async fn packet<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ws: &mut WebSocketStream<S>,
    ) -> Option<Packet> {
        within("a packet over WebSocket", async {
            loop {
                if let Some(p) = mqtt::decode(&mut self.buf, Some(ProtocolVersion::V311), u32::MAX).unwrap() {
                    return Some(p);
                }
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => self.buf.extend_from_slice(&b),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                    Some(Ok(_)) => {}
                }
            }
        })
        .await
    }
}

fn subscribe_bytes(filter: &str) -> Vec<u8> {
    common::packets::subscribe_packet(1, filter, 1, false)
}

#[tokio::test]
async fn websocket_clients_talk_to_tcp_clients_with_any_framing() {
    let f = Fixture::start(WS_LISTENERS, ANONYMOUS).await;
    let tcp = TcpStream::connect(f.addr("ws")).await.unwrap();
    let mut ws = ws_open(tcp, &format!("ws://{}/mqtt", f.addr("ws")), Some("mqtt")).await.expect("upgrade");
    let mut reader = WsReader { buf: BytesMut::new() };
    // CONNECT split over two frames.
    let connect = connect_bytes(4, "ws-client", 0x02);
    ws.send(Message::Binary(connect[..5].to_vec().into())).await.unwrap();
    ws.send(Message::Binary(connect[5..].to_vec().into())).await.unwrap();
    assert!(
        matches!(reader.packet(&mut ws).await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success)
    );
    // SUBSCRIBE and PINGREQ in one frame.
    let mut both = subscribe_bytes("t/#");
    both.extend_from_slice(&packet(0xC0, &[]));
    ws.send(Message::Binary(both.into())).await.unwrap();
    assert!(matches!(reader.packet(&mut ws).await, Some(Packet::SubAck(_))));
    assert!(matches!(reader.packet(&mut ws).await, Some(Packet::PingResp)));

    let (mut tcp_client, _) = v3::connect(v3::options("tcp", f.addr("plain").port())).await;
    tcp_client.subscribe("from-ws", QoS::AtLeastOnce).await;
    tcp_client.client.publish("t/1", QoS::AtMostOnce, false, "to ws").await.unwrap();
    match reader.packet(&mut ws).await {
        Some(Packet::Publish(p)) => assert_eq!(&p.payload[..], b"to ws"),
        other => panic!("expected PUBLISH, got {other:?}"),
    }
    let mut publish = mqtt_str("from-ws");
    publish.extend_from_slice(b"hello tcp");
    ws.send(Message::Binary(packet(0x30, &publish).into())).await.unwrap();
    assert_eq!(&tcp_client.next_publish().await.payload[..], b"hello tcp");
}

#[tokio::test]
async fn secure_websocket_with_a_client_certificate() {
    let f = Fixture::start(WS_LISTENERS, ANONYMOUS).await;
    let client = f.client("browser");
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(f.path().join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    use rustls::pki_types::pem::PemObject;
    let chain = vec![rustls::pki_types::CertificateDer::from_pem_file(&client.cert).unwrap()];
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&client.key).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(f.addr("wss")).await.unwrap();
    let tls = connector.connect("localhost".try_into().unwrap(), tcp).await.unwrap();
    let mut ws = ws_open(tls, "wss://localhost/broker", Some("mqttv3.1")).await.expect("upgrade");
    ws.send(Message::Binary(connect_bytes(4, "wss-client", 0x02).into())).await.unwrap();
    let mut reader = WsReader { buf: BytesMut::new() };
    assert!(
        matches!(reader.packet(&mut ws).await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success)
    );
}

/// Sends a raw HTTP request and returns the status line.
async fn http_status(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = within("HTTP answer", s.read(&mut buf)).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn websocket_refusals_are_clean_http_answers() {
    let f = Fixture::start(WS_LISTENERS, ANONYMOUS).await;
    let addr = f.addr("ws");
    let upgrade = |path: &str, proto: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{proto}\r\n"
        )
    };
    assert!(http_status(addr, "GET /mqtt HTTP/1.1\r\nHost: x\r\n\r\n").await.contains("426"));
    assert!(http_status(addr, &upgrade("/other", "Sec-WebSocket-Protocol: mqtt\r\n")).await.contains("404"));
    assert!(http_status(addr, &upgrade("/mqtt", "Sec-WebSocket-Protocol: chat\r\n")).await.contains("400"));
    assert!(http_status(addr, &upgrade("/mqtt", "")).await.contains("400"));
    assert!(http_status(addr, &upgrade("/mqtt", "Sec-WebSocket-Protocol: mqtt\r\n")).await.contains("101"));

    // A frame far larger than max_packet_size closes the connection.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut ws = ws_open(tcp, &format!("ws://{addr}/mqtt"), Some("mqtt")).await.unwrap();
    let _ = ws.send(Message::Binary(vec![0u8; 2 * 1024 * 1024].into())).await;
    let closed = within("close", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return true,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(closed);
    // A text frame is not MQTT either.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut ws = ws_open(tcp, &format!("ws://{addr}/mqtt"), Some("mqtt")).await.unwrap();
    ws.send(Message::Text("hello".into())).await.unwrap();
    assert!(WsReader { buf: BytesMut::new() }.packet(&mut ws).await.is_none());
    // And the listener still works.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut ws = ws_open(tcp, &format!("ws://{addr}/mqtt"), Some("mqtt")).await.unwrap();
    ws.send(Message::Binary(connect_bytes(4, "fine", 0x02).into())).await.unwrap();
    let mut reader = WsReader { buf: BytesMut::new() };
    let _ = reader.packet(&mut ws).await;
}

/// The shared `http` listener carries MQTT over WebSocket at `/mqtt`, and answers 404 elsewhere.
#[tokio::test]
async fn the_http_listener_serves_mqtt_over_websocket_at_slash_mqtt() {
    let f = Fixture::start(WS_LISTENERS, ANONYMOUS).await;
    let addr = f.addr("http");
    let mut sub = Raw::connected(f.addr("plain"), ProtocolVersion::V311, "tcp-sub").await;
    sub.send(&common::packet(0x82, &[0, 1, 0, 1, b't', 0])).await;
    assert!(matches!(sub.recv().await, Some(Packet::SubAck(_))));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut ws = ws_open(tcp, &format!("ws://{addr}/mqtt"), Some("mqtt")).await.expect("upgrade");
    let mut reader = WsReader { buf: BytesMut::new() };
    ws.send(Message::Binary(connect_bytes(4, "http-ws", 0x02).into())).await.unwrap();
    assert!(
        matches!(reader.packet(&mut ws).await, Some(Packet::ConnAck(c)) if c.reason_code == ReasonCode::Success)
    );
    ws.send(Message::Binary(common::packet(0x30, &[0, 1, b't', b'h', b'i']).into())).await.unwrap();
    assert!(matches!(sub.recv().await, Some(Packet::Publish(p)) if &p.payload[..] == b"hi"));
    // Every unreserved path is a content-routing listener (426 to a plain GET); an unknown
    // reserved one is nobody's.
    assert!(http_status(addr, "GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n").await.contains("426"));
    assert!(http_status(addr, "GET /mqtt/x HTTP/1.1\r\nHost: x\r\n\r\n").await.contains("404"));
}
