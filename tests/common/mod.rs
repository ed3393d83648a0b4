//! Shared test harness: an in-process server on `127.0.0.1:0`, rumqttc clients (v3.1.1 and v5)
//! whose events arrive on a channel, and a raw-socket client for bytes no library would send.
//!
//! Every wait is bounded (`WAIT`), and tests wait for events, never for time to pass.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use mesgd::Server;
use mesgd::config::Config;
use mesgd_core::mqtt::{self, Packet, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The longest any single expected event may take.
pub const WAIT: Duration = Duration::from_secs(10);

/// A server running in this process, with its own storage directory.
pub struct TestServer {
    pub server: Option<Server>,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts a server with anonymous access, `$SYS` off (unless `extra` has an `[mqtt]` table
    /// of its own), and `extra` appended to the config.
    pub async fn start(extra: &str) -> TestServer {
        let sys = if extra.contains("[mqtt]") { "" } else { "[mqtt]\nsys_interval = 0\n" };
        Self::start_with(&format!("[auth]\nallow_anonymous = true\n{sys}{extra}")).await
    }

    /// Starts a server whose config is the listener and storage plus `body` verbatim.
    pub async fn start_with(body: &str) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = format!(
            "[storage]\ndir = {:?}\n[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n{body}",
            dir.path().display().to_string()
        );
        let config = Config::from_toml(&text, None).expect("test config");
        let server = Server::start(config).await.expect("server starts");
        let addr = server.local_addr("mqtt").expect("listener");
        TestServer { server: Some(server), addr, dir }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn broker(&self) -> &std::sync::Arc<mesgd_core::broker::Broker> {
        self.server.as_ref().expect("running").broker()
    }

    pub async fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }
}

/// Awaits `fut` for at most [`WAIT`], panicking with `what` on timeout.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

// ---------------------------------------------------------------------------- rumqttc v3.1.1

pub mod nats;
pub mod nats_cluster;
pub mod npm;
pub mod packets;
pub mod persistent;
pub mod relay;

pub use packets::{connect_bytes, mqtt_str, packet};

pub mod v3 {
    use super::*;
    pub use rumqttc::{AsyncClient, Event, EventLoop, LastWill, MqttOptions, Packet, QoS};

    /// A connected rumqttc 3.1.1 client and the incoming packets its event loop saw.
    pub struct Client {
        pub client: AsyncClient,
        pub events: mpsc::UnboundedReceiver<Result<Packet, String>>,
        task: tokio::task::JoinHandle<()>,
    }

    pub fn options(id: &str, port: u16) -> MqttOptions {
        let mut o = MqttOptions::new(id, "127.0.0.1", port);
        o.set_keep_alive(Duration::from_secs(30));
        o
    }

    /// Connects and waits for CONNACK (returned, so tests can check its fields).
    pub async fn connect(options: MqttOptions) -> (Client, rumqttc::ConnAck) {
        let (client, mut eventloop) = AsyncClient::new(options, 100);
        let (tx, mut events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(p)) => {
                        if tx.send(Ok(p)).is_err() {
                            return;
                        }
                    }
                    Ok(Event::Outgoing(_)) => {}
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                }
            }
        });
        let connack = within("CONNACK", async {
            loop {
                match events.recv().await {
                    Some(Ok(Packet::ConnAck(c))) => return c,
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => panic!("connect failed: {e}"),
                    None => panic!("event loop ended before CONNACK"),
                }
            }
        })
        .await;
        (Client { client, events, task }, connack)
    }

    /// Connects and returns the error the event loop reported (for refused connects).
    pub async fn connect_err(options: MqttOptions) -> String {
        let (_client, mut eventloop) = AsyncClient::new(options, 10);
        within("connect error", async {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(c))) => panic!("unexpectedly accepted: {c:?}"),
                    Ok(_) => continue,
                    Err(e) => return format!("{e:?}"),
                }
            }
        })
        .await
    }

    impl Client {
        /// The next incoming packet that `pick` accepts; others are skipped.
        pub async fn next<T>(&mut self, what: &str, mut pick: impl FnMut(Packet) -> Option<T>) -> T {
            let events = &mut self.events;
            within(what, async {
                loop {
                    match events.recv().await {
                        Some(Ok(p)) => {
                            if let Some(t) = pick(p) {
                                return t;
                            }
                        }
                        Some(Err(e)) => panic!("connection error while waiting for {what}: {e}"),
                        None => panic!("event loop ended while waiting for {what}"),
                    }
                }
            })
            .await
        }

        pub async fn next_publish(&mut self) -> rumqttc::Publish {
            self.next("PUBLISH", |p| if let Packet::Publish(p) = p { Some(p) } else { None }).await
        }

        pub async fn suback(&mut self) -> rumqttc::SubAck {
            self.next("SUBACK", |p| if let Packet::SubAck(s) = p { Some(s) } else { None }).await
        }

        pub async fn subscribe(&mut self, filter: &str, qos: QoS) -> rumqttc::SubAck {
            self.client.subscribe(filter, qos).await.expect("subscribe request");
            self.suback().await
        }

        /// Waits for the connection to end; returns the error text.
        pub async fn closed(&mut self) -> String {
            let events = &mut self.events;
            within("connection end", async {
                loop {
                    match events.recv().await {
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return e,
                        None => return "ended".into(),
                    }
                }
            })
            .await
        }

        /// Sends DISCONNECT and waits until the event loop has ended.
        pub async fn disconnect(mut self) {
            let _ = self.client.disconnect().await;
            let _ = self.closed().await;
            self.task.abort();
        }

        /// Drops the connection without DISCONNECT (an abnormal close, as if the network failed).
        pub fn kill(self) {
            self.task.abort();
        }
    }
}

// ---------------------------------------------------------------------------- rumqttc v5

pub mod v5 {
    use super::*;
    pub use rumqttc::v5::mqttbytes::QoS;
    pub use rumqttc::v5::mqttbytes::v5::{ConnectProperties, Packet, PublishProperties};
    pub use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};

    pub struct Client {
        pub client: AsyncClient,
        pub events: mpsc::UnboundedReceiver<Result<Packet, String>>,
        task: tokio::task::JoinHandle<()>,
    }

    pub fn options(id: &str, port: u16) -> MqttOptions {
        let mut o = MqttOptions::new(id, "127.0.0.1", port);
        o.set_keep_alive(Duration::from_secs(30));
        o
    }

    pub async fn connect(options: MqttOptions) -> (Client, rumqttc::v5::mqttbytes::v5::ConnAck) {
        let (client, mut eventloop) = AsyncClient::new(options, 100);
        let (tx, mut events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(p)) => {
                        if tx.send(Ok(p)).is_err() {
                            return;
                        }
                    }
                    Ok(Event::Outgoing(_)) => {}
                    Err(e) => {
                        let _ = tx.send(Err(format!("{e:?}")));
                        return;
                    }
                }
            }
        });
        let connack = within("CONNACK", async {
            loop {
                match events.recv().await {
                    Some(Ok(Packet::ConnAck(c))) => return c,
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => panic!("connect failed: {e}"),
                    None => panic!("event loop ended before CONNACK"),
                }
            }
        })
        .await;
        (Client { client, events, task }, connack)
    }

    pub async fn connect_err(options: MqttOptions) -> String {
        let (_client, mut eventloop) = AsyncClient::new(options, 10);
        within("connect error", async {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(c))) => panic!("unexpectedly accepted: {c:?}"),
                    Ok(_) => continue,
                    Err(e) => return format!("{e:?}"),
                }
            }
        })
        .await
    }

    impl Client {
        pub async fn next<T>(&mut self, what: &str, mut pick: impl FnMut(Packet) -> Option<T>) -> T {
            let events = &mut self.events;
            within(what, async {
                loop {
                    match events.recv().await {
                        Some(Ok(p)) => {
                            if let Some(t) = pick(p) {
                                return t;
                            }
                        }
                        Some(Err(e)) => panic!("connection error while waiting for {what}: {e}"),
                        None => panic!("event loop ended while waiting for {what}"),
                    }
                }
            })
            .await
        }

        pub async fn next_publish(&mut self) -> rumqttc::v5::mqttbytes::v5::Publish {
            self.next("PUBLISH", |p| if let Packet::Publish(p) = p { Some(p) } else { None }).await
        }

        pub async fn suback(&mut self) -> rumqttc::v5::mqttbytes::v5::SubAck {
            self.next("SUBACK", |p| if let Packet::SubAck(s) = p { Some(s) } else { None }).await
        }

        pub async fn subscribe(&mut self, filter: &str, qos: QoS) -> rumqttc::v5::mqttbytes::v5::SubAck {
            self.client.subscribe(filter, qos).await.expect("subscribe request");
            self.suback().await
        }

        pub async fn closed(&mut self) -> String {
            let events = &mut self.events;
            within("connection end", async {
                loop {
                    match events.recv().await {
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return e,
                        None => return "ended".into(),
                    }
                }
            })
            .await
        }

        pub async fn disconnect(mut self) {
            let _ = self.client.disconnect().await;
            let _ = self.closed().await;
            self.task.abort();
        }

        pub fn kill(self) {
            self.task.abort();
        }
    }
}

// ---------------------------------------------------------------------------- raw sockets

/// A client that writes hand-assembled bytes and decodes what the server answers.
pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
    pub version: ProtocolVersion,
}

impl Raw {
    pub async fn open(addr: SocketAddr, version: ProtocolVersion) -> Raw {
        let stream = within("TCP connect", TcpStream::connect(addr)).await.expect("connect");
        Raw { stream, buf: BytesMut::new(), version }
    }

    /// Opens a connection from the loopback address `source` (any of 127.0.0.0/8 on Linux), so
    /// that a test can be several hosts at once.
    pub async fn open_from(addr: SocketAddr, source: std::net::IpAddr, version: ProtocolVersion) -> Raw {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(SocketAddr::new(source, 0)).expect("bind the source address");
        let stream = within("TCP connect", socket.connect(addr)).await.expect("connect");
        Raw { stream, buf: BytesMut::new(), version }
    }

    /// Opens a connection and completes a clean-session CONNECT, asserting success.
    pub async fn connected(addr: SocketAddr, version: ProtocolVersion, client_id: &str) -> Raw {
        let mut raw = Raw::open(addr, version).await;
        let level = match version {
            ProtocolVersion::V31 => 3,
            ProtocolVersion::V311 => 4,
            ProtocolVersion::V5 => 5,
        };
        raw.send(&connect_bytes(level, client_id, 0x02)).await;
        match raw.recv().await {
            Some(Packet::ConnAck(c)) => assert!(!c.reason_code.is_error(), "CONNACK {c:?}"),
            other => panic!("expected CONNACK, got {other:?}"),
        }
        raw
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Writes `bytes`; false when the server has gone (the write failed), for a client that
    /// answers a server that may be killed at any moment.
    pub async fn try_send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).await.is_ok()
    }

    /// The next packet, or `None` when the server closed the connection.
    pub async fn recv(&mut self) -> Option<Packet> {
        within("a packet from the server", async {
            loop {
                match mqtt::decode(&mut self.buf, Some(self.version), u32::MAX) {
                    Ok(Some(p)) => return Some(p),
                    Ok(None) => {}
                    Err(e) => panic!("server sent an undecodable packet: {e}"),
                }
                self.buf.reserve(4096);
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
    }

    /// Reads until the server closes; returns the packets it sent before that.
    pub async fn until_closed(&mut self) -> Vec<Packet> {
        let mut seen = Vec::new();
        while let Some(p) = self.recv().await {
            seen.push(p);
        }
        seen
    }
}

// ---------------------------------------------------------------------------- authentication

/// A storage directory shared by the `mesgd` command line and an in-process server, signed
/// tokens, and MQTT clients of either protocol version behind one interface, for the tests of
/// the provider chain and the ACL.
pub mod auth {
    use std::collections::VecDeque;
    use std::path::PathBuf;
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    /// The HS256 key of the jwt provider in these tests.
    pub const JWT_SECRET: &str = "an HS256 key of at least thirty-two bytes, for tests only";

    /// A `[[auth.providers]]` table for the jwt provider with [`JWT_SECRET`] and `extra` keys.
    pub fn jwt_provider(extra: &str) -> String {
        format!("[[auth.providers]]\ntype = \"jwt\"\nsecret = {JWT_SECRET:?}\n{extra}\n")
    }

    /// Seconds since the Unix epoch.
    pub fn unix_now() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
    }

    /// An HS256 token over `claims`, signed with `secret`.
    pub fn sign_with(claims: &serde_json::Value, secret: &[u8]) -> String {
        let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        jsonwebtoken::encode(&header, claims, &jsonwebtoken::EncodingKey::from_secret(secret)).expect("signs")
    }

    /// A token for `sub` valid for ten minutes, with `acl` as its ACL claim (`None`: no claim).
    pub fn token(sub: &str, acl: Option<serde_json::Value>) -> String {
        let mut claims = serde_json::json!({"sub": sub, "exp": unix_now() + 600});
        if let Some(acl) = acl {
            claims["acl"] = acl;
        }
        sign_with(&claims, JWT_SECRET.as_bytes())
    }

    /// A storage directory with a config file naming it, so that `mesgd --config <file> user ...`
    /// and a server started with [`TestServer::start_on`] use the same `config.db`.
    pub struct Storage {
        pub dir: tempfile::TempDir,
        pub config: PathBuf,
    }

    impl Storage {
        /// A fresh directory. New passwords are hashed with the smallest PBKDF2 count: the
        /// command line has no switch for it (the provider's `pbkdf2_iterations` is applied when
        /// a server starts), so the setting is written through the store API before any user
        /// exists.
        pub fn new() -> Storage {
            let dir = tempfile::tempdir().expect("temp dir");
            let config = dir.path().join("mesgd.toml");
            let text = format!(
                "[storage]\ndir = {:?}\n[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n",
                dir.path().display().to_string()
            );
            std::fs::write(&config, text).expect("write the config file");
            let db = mesgd_providers::builtin::config_db_path(dir.path());
            mesgd_providers::builtin::Store::open(&db)
                .expect("user store")
                .set_pbkdf2_iterations(mesgd_providers::builtin::password::MIN_PBKDF2_ITERATIONS)
                .expect("fast hashes for tests");
            Storage { dir, config }
        }

        /// Runs the real binary: `mesgd --config <file> <args>`, with `stdin` on its standard
        /// input. Returns (success, stdout, stderr).
        pub async fn run(&self, args: &[&str], stdin: &str) -> (bool, String, String) {
            use tokio::io::AsyncWriteExt as _;
            let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesgd"))
                .arg("--config")
                .arg(&self.config)
                .args(args)
                .env_remove("MESGD_CONFIG")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("mesgd runs");
            let mut input = child.stdin.take().expect("stdin");
            input.write_all(stdin.as_bytes()).await.expect("write stdin");
            drop(input);
            let out = within("mesgd to exit", child.wait_with_output()).await.expect("mesgd output");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }

        /// Runs `mesgd <args>` and panics unless it succeeds; returns its output.
        pub async fn mesgd(&self, args: &[&str], stdin: &str) -> String {
            let (ok, out, err) = self.run(args, stdin).await;
            assert!(ok, "mesgd {args:?} failed: {err}");
            out
        }

        /// `mesgd user add NAME --password-stdin`, the password on standard input.
        pub async fn add_user(&self, name: &str, password: &str) {
            self.mesgd(&["user", "add", name, "--password-stdin"], &format!("{password}\n")).await;
        }

        /// `mesgd acl add NAME PATTERN PERMISSION`.
        pub async fn add_rule(&self, name: &str, pattern: &str, permission: &str) {
            self.mesgd(&["acl", "add", name, pattern, permission], "").await;
        }
    }

    impl TestServer {
        /// Starts a server on `storage`'s directory, with `body` after the listener.
        pub async fn start_on(storage: &Storage, body: &str) -> TestServer {
            let own = tempfile::tempdir().expect("temp dir");
            let text = format!(
                "[storage]\ndir = {:?}\n[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n{body}",
                storage.dir.path().display().to_string()
            );
            let config = Config::from_toml(&text, None).expect("test config");
            let server = Server::start(config).await.expect("server starts");
            let addr = server.local_addr("mqtt").expect("listener");
            TestServer { server: Some(server), addr, dir: own }
        }
    }

    /// A clean-session CONNECT at protocol `level` with optional username and password (5.0
    /// allows a password without a username), keep-alive 60.
    pub fn login_bytes(
        level: u8,
        client_id: &str,
        username: Option<&str>,
        password: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut body = mqtt_str("MQTT");
        body.push(level);
        let flags =
            0x02 | if username.is_some() { 0x80 } else { 0 } | if password.is_some() { 0x40 } else { 0 };
        body.push(flags);
        body.extend_from_slice(&60u16.to_be_bytes());
        if level == 5 {
            body.push(0); // no properties
        }
        body.extend_from_slice(&mqtt_str(client_id));
        if let Some(username) = username {
            body.extend_from_slice(&mqtt_str(username));
        }
        if let Some(password) = password {
            body.extend_from_slice(&(password.len() as u16).to_be_bytes());
            body.extend_from_slice(password);
        }
        packet(0x10, &body)
    }

    /// Logs in over a raw connection: returns it and the CONNACK's reason code. The raw client
    /// decodes every DISCONNECT the server may send (rumqttc 0.25 cannot read a 5.0 DISCONNECT
    /// that carries a reason code but no property length, which the specification allows).
    pub async fn raw_login(
        addr: SocketAddr,
        version: ProtocolVersion,
        client_id: &str,
        username: Option<&str>,
        password: Option<&[u8]>,
    ) -> (Raw, mesgd_core::mqtt::ReasonCode) {
        let level = if version == ProtocolVersion::V5 { 5 } else { 4 };
        let mut raw = Raw::open(addr, version).await;
        raw.send(&login_bytes(level, client_id, username, password)).await;
        match raw.recv().await {
            Some(Packet::ConnAck(c)) => (raw, c.reason_code),
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    /// Reads until the server closes; returns the reason of the DISCONNECT it sent, if any.
    pub async fn disconnect_reason(raw: &mut Raw) -> Option<mesgd_core::mqtt::ReasonCode> {
        raw.until_closed().await.into_iter().find_map(|p| match p {
            Packet::Disconnect(d) => Some(d.reason_code),
            _ => None,
        })
    }

    /// The protocol version a client speaks.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Proto {
        /// MQTT 3.1.1.
        V3,
        /// MQTT 5.0.
        V5,
    }

    /// Both versions, for tests that run once per version.
    pub const BOTH: [Proto; 2] = [Proto::V3, Proto::V5];

    impl Proto {
        /// The CONNACK code for wrong credentials: 3.1.1 return code 4, 5.0 0x86.
        pub fn bad_credentials(self) -> u8 {
            if self == Proto::V3 { 4 } else { 0x86 }
        }

        /// The CONNACK code for a client that may not connect: 3.1.1 return code 5, 5.0 0x87.
        pub fn not_authorized(self) -> u8 {
            if self == Proto::V3 { 5 } else { 0x87 }
        }

        /// The SUBACK code of a filter the ACL refuses: 3.1.1 0x80, 5.0 0x87.
        pub fn sub_refused(self) -> u8 {
            if self == Proto::V3 { 0x80 } else { 0x87 }
        }

        /// The raw codec's version.
        pub fn version(self) -> ProtocolVersion {
            if self == Proto::V3 { ProtocolVersion::V311 } else { ProtocolVersion::V5 }
        }

        /// The PUBACK / PUBREC code of a publish the ACL refuses: 3.1.1 has none (the flow
        /// completes as if accepted), 5.0 0x87.
        pub fn pub_refused(self) -> u8 {
            if self == Proto::V3 { 0 } else { 0x87 }
        }
    }

    /// What a client sends in CONNECT.
    #[derive(Clone, Debug)]
    pub struct Login {
        pub proto: Proto,
        pub port: u16,
        pub client_id: String,
        pub credentials: Option<(String, String)>,
        pub will: Option<(String, Vec<u8>)>,
        /// Resume (or create) a session that outlives the connection.
        pub persistent: bool,
    }

    impl Login {
        /// A clean-session CONNECT without credentials or will.
        pub fn new(proto: Proto, port: u16, client_id: &str) -> Login {
            Login {
                proto,
                port,
                client_id: client_id.into(),
                credentials: None,
                will: None,
                persistent: false,
            }
        }

        /// With a persistent session: clean session 0 (3.1.1), or clean start 0 and a session
        /// expiry of an hour (5.0).
        pub fn persistent(mut self) -> Login {
            self.persistent = true;
            self
        }

        /// With a username and password.
        pub fn user(mut self, username: &str, password: &str) -> Login {
            self.credentials = Some((username.into(), password.into()));
            self
        }

        /// With a QoS 1 will.
        pub fn will(mut self, topic: &str, payload: &[u8]) -> Login {
            self.will = Some((topic.into(), payload.to_vec()));
            self
        }

        fn v3_options(&self) -> rumqttc::MqttOptions {
            let mut o = v3::options(&self.client_id, self.port);
            o.set_clean_session(!self.persistent);
            if let Some((u, p)) = &self.credentials {
                o.set_credentials(u.clone(), p.clone());
            }
            if let Some((topic, payload)) = &self.will {
                o.set_last_will(rumqttc::LastWill::new(
                    topic.clone(),
                    payload.clone(),
                    rumqttc::QoS::AtLeastOnce,
                    false,
                ));
            }
            o
        }

        fn v5_options(&self) -> rumqttc::v5::MqttOptions {
            let mut o = v5::options(&self.client_id, self.port);
            if self.persistent {
                o.set_clean_start(false);
                o.set_session_expiry_interval(Some(3600));
            }
            if let Some((u, p)) = &self.credentials {
                o.set_credentials(u.clone(), p.clone());
            }
            if let Some((topic, payload)) = &self.will {
                o.set_last_will(rumqttc::v5::mqttbytes::v5::LastWill::new(
                    topic.clone(),
                    payload.clone(),
                    rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                    false,
                    None,
                ));
            }
            o
        }

        /// Connects, expecting success.
        pub async fn connect(&self) -> Client {
            match self.try_connect().await {
                Ok(client) => client,
                Err(code) => panic!("{} refused with CONNACK code {code:#04x}", self.client_id),
            }
        }

        /// Connects, expecting a refusal; returns the CONNACK code as sent on the wire.
        pub async fn refused(&self) -> u8 {
            match self.try_connect().await {
                Ok(_) => panic!("{} was admitted", self.client_id),
                Err(code) => code,
            }
        }

        /// Connects: the client, or the CONNACK code of a refusal.
        pub async fn try_connect(&self) -> Result<Client, u8> {
            let (tx, mut events) = mpsc::unbounded_channel();
            let (inner, task) = match self.proto {
                Proto::V3 => {
                    let (client, mut eventloop) = rumqttc::AsyncClient::new(self.v3_options(), 100);
                    let task = tokio::spawn(async move {
                        loop {
                            let event = match eventloop.poll().await {
                                Ok(rumqttc::Event::Incoming(p)) => Ev::from_v3(p),
                                Ok(rumqttc::Event::Outgoing(_)) => continue,
                                Err(rumqttc::ConnectionError::ConnectionRefused(code)) => {
                                    Ev::Refused(code as u8)
                                }
                                Err(e) => Ev::Closed { reason: None, text: e.to_string() },
                            };
                            let last = matches!(event, Ev::Refused(_) | Ev::Closed { .. });
                            if tx.send(event).is_err() || last {
                                return;
                            }
                        }
                    });
                    (Inner::V3(client), task)
                }
                Proto::V5 => {
                    let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(self.v5_options(), 100);
                    let task = tokio::spawn(async move {
                        loop {
                            let event = match eventloop.poll().await {
                                Ok(rumqttc::v5::Event::Incoming(p)) => Ev::from_v5(p),
                                Ok(rumqttc::v5::Event::Outgoing(_)) => continue,
                                Err(rumqttc::v5::ConnectionError::ConnectionRefused(code)) => {
                                    Ev::Refused(v5_connack_code(code))
                                }
                                Err(rumqttc::v5::ConnectionError::MqttState(
                                    rumqttc::v5::StateError::ServerDisconnect { reason_code, .. },
                                )) => Ev::Closed {
                                    reason: Some(reason_code as u8),
                                    text: format!("DISCONNECT {reason_code:?}"),
                                },
                                Err(e) => Ev::Closed { reason: None, text: e.to_string() },
                            };
                            let last = matches!(event, Ev::Refused(_) | Ev::Closed { .. });
                            if tx.send(event).is_err() || last {
                                return;
                            }
                        }
                    });
                    (Inner::V5(client), task)
                }
            };
            let outcome = within("CONNACK", async {
                loop {
                    match events.recv().await {
                        Some(Ev::ConnAck) => return Ok(()),
                        Some(Ev::Refused(code)) => return Err(code),
                        Some(Ev::Closed { text, .. }) => panic!("connection failed before CONNACK: {text}"),
                        Some(_) => continue,
                        None => panic!("event loop ended before CONNACK"),
                    }
                }
            })
            .await;
            match outcome {
                Ok(()) => Ok(Client { inner, events, task, pending: VecDeque::new() }),
                Err(code) => {
                    task.abort();
                    Err(code)
                }
            }
        }
    }

    fn v5_connack_code(code: rumqttc::v5::mqttbytes::v5::ConnectReturnCode) -> u8 {
        use rumqttc::v5::mqttbytes::v5::ConnectReturnCode as C;
        match code {
            C::UnspecifiedError => 0x80,
            C::ClientIdentifierNotValid => 0x85,
            C::BadUserNamePassword => 0x86,
            C::NotAuthorized => 0x87,
            C::ServerUnavailable => 0x88,
            C::Banned => 0x8A,
            C::BadAuthenticationMethod => 0x8C,
            other => panic!("unexpected CONNACK code {other:?}"),
        }
    }

    /// A message as the receiver got it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Msg {
        pub topic: String,
        pub payload: Vec<u8>,
        pub retain: bool,
    }

    /// An event of either client library, in wire terms.
    #[derive(Debug)]
    enum Ev {
        ConnAck,
        Refused(u8),
        Publish(Msg),
        SubAck(Vec<u8>),
        PubAck(u8),
        PubRec(u8),
        Other,
        Closed { reason: Option<u8>, text: String },
    }

    impl Ev {
        fn from_v3(p: rumqttc::Packet) -> Ev {
            use rumqttc::Packet as P;
            match p {
                P::ConnAck(_) => Ev::ConnAck,
                P::Publish(p) => {
                    Ev::Publish(Msg { topic: p.topic, payload: p.payload.to_vec(), retain: p.retain })
                }
                P::SubAck(s) => Ev::SubAck(
                    s.return_codes
                        .iter()
                        .map(|c| match c {
                            rumqttc::SubscribeReasonCode::Success(q) => *q as u8,
                            rumqttc::SubscribeReasonCode::Failure => 0x80,
                        })
                        .collect(),
                ),
                P::PubAck(_) => Ev::PubAck(0),
                P::PubRec(_) => Ev::PubRec(0),
                _ => Ev::Other,
            }
        }

        fn from_v5(p: rumqttc::v5::mqttbytes::v5::Packet) -> Ev {
            use rumqttc::v5::mqttbytes::v5::{
                Packet as P, PubAckReason, PubRecReason, SubscribeReasonCode as S,
            };
            match p {
                P::ConnAck(_) => Ev::ConnAck,
                P::Publish(p) => Ev::Publish(Msg {
                    topic: String::from_utf8(p.topic.to_vec()).expect("UTF-8 topic"),
                    payload: p.payload.to_vec(),
                    retain: p.retain,
                }),
                P::SubAck(s) => Ev::SubAck(
                    s.return_codes
                        .iter()
                        .map(|c| match c {
                            S::Success(q) => *q as u8,
                            S::Failure | S::Unspecified => 0x80,
                            S::ImplementationSpecific => 0x83,
                            S::NotAuthorized => 0x87,
                            S::TopicFilterInvalid => 0x8F,
                            S::PkidInUse => 0x91,
                            S::QuotaExceeded => 0x97,
                            S::SharedSubscriptionsNotSupported => 0x9E,
                            S::SubscriptionIdNotSupported => 0xA1,
                            S::WildcardSubscriptionsNotSupported => 0xA2,
                        })
                        .collect(),
                ),
                P::PubAck(a) => Ev::PubAck(match a.reason {
                    PubAckReason::Success => 0,
                    PubAckReason::NoMatchingSubscribers => 0x10,
                    PubAckReason::NotAuthorized => 0x87,
                    PubAckReason::PayloadFormatInvalid => 0x99,
                    _ => 0x80,
                }),
                P::PubRec(r) => Ev::PubRec(match r.reason {
                    PubRecReason::Success => 0,
                    PubRecReason::NoMatchingSubscribers => 0x10,
                    PubRecReason::NotAuthorized => 0x87,
                    PubRecReason::PayloadFormatInvalid => 0x99,
                    _ => 0x80,
                }),
                _ => Ev::Other,
            }
        }
    }

    enum Inner {
        V3(rumqttc::AsyncClient),
        V5(rumqttc::v5::AsyncClient),
    }

    /// How a connection ended.
    #[derive(Debug)]
    pub struct Closed {
        /// The 5.0 DISCONNECT reason code, if the server sent one that rumqttc could read (see
        /// [`raw_login`] for the case it cannot).
        pub reason: Option<u8>,
        /// What the client library said.
        pub text: String,
    }

    /// A connected client of either version. Messages that arrive while the test waits for an
    /// acknowledgement are kept for [`Client::next_publish`].
    pub struct Client {
        inner: Inner,
        events: mpsc::UnboundedReceiver<Ev>,
        task: tokio::task::JoinHandle<()>,
        pending: VecDeque<Msg>,
    }

    impl Drop for Client {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    fn qos_v3(qos: u8) -> rumqttc::QoS {
        rumqttc::qos(qos).expect("QoS 0, 1 or 2")
    }

    fn qos_v5(qos: u8) -> rumqttc::v5::mqttbytes::QoS {
        rumqttc::v5::mqttbytes::qos(qos).expect("QoS 0, 1 or 2")
    }

    impl Client {
        async fn next_event<T>(&mut self, what: &str, mut pick: impl FnMut(Ev) -> Option<T>) -> T {
            let (events, pending) = (&mut self.events, &mut self.pending);
            within(what, async {
                loop {
                    match events.recv().await {
                        Some(Ev::Publish(m)) => pending.push_back(m),
                        Some(Ev::Closed { text, .. }) => {
                            panic!("connection ended while waiting for {what}: {text}")
                        }
                        Some(event) => {
                            if let Some(t) = pick(event) {
                                return t;
                            }
                        }
                        None => panic!("event loop ended while waiting for {what}"),
                    }
                }
            })
            .await
        }

        /// Subscribes to `filter` at QoS 1; returns the SUBACK code (0..=2 granted, else refused).
        pub async fn subscribe(&mut self, filter: &str) -> u8 {
            match &self.inner {
                Inner::V3(c) => c.subscribe(filter, rumqttc::QoS::AtLeastOnce).await.expect("subscribe"),
                Inner::V5(c) => {
                    c.subscribe(filter, rumqttc::v5::mqttbytes::QoS::AtLeastOnce).await.expect("subscribe")
                }
            }
            let codes =
                self.next_event("SUBACK", |e| if let Ev::SubAck(c) = e { Some(c) } else { None }).await;
            assert_eq!(codes.len(), 1, "one code per filter");
            codes[0]
        }

        /// Subscribes and asserts that the subscription was granted.
        pub async fn subscribe_ok(&mut self, filter: &str) {
            let code = self.subscribe(filter).await;
            assert!(code <= 2, "subscription to {filter:?} refused with {code:#04x}");
        }

        /// Publishes; for QoS 1 and 2 waits for the PUBACK / PUBREC and returns its code (3.1.1: 0).
        pub async fn publish(&mut self, topic: &str, qos: u8, retain: bool, payload: &[u8]) -> Option<u8> {
            match &self.inner {
                Inner::V3(c) => {
                    c.publish(topic, qos_v3(qos), retain, payload.to_vec()).await.expect("publish")
                }
                Inner::V5(c) => {
                    c.publish(topic, qos_v5(qos), retain, payload.to_vec()).await.expect("publish")
                }
            }
            match qos {
                0 => None,
                1 => Some(
                    self.next_event("PUBACK", |e| if let Ev::PubAck(c) = e { Some(c) } else { None }).await,
                ),
                _ => Some(
                    self.next_event("PUBREC", |e| if let Ev::PubRec(c) = e { Some(c) } else { None }).await,
                ),
            }
        }

        /// The next message delivered to this client.
        pub async fn next_publish(&mut self) -> Msg {
            if let Some(m) = self.pending.pop_front() {
                return m;
            }
            let events = &mut self.events;
            within("PUBLISH", async {
                loop {
                    match events.recv().await {
                        Some(Ev::Publish(m)) => return m,
                        Some(Ev::Closed { text, .. }) => {
                            panic!("connection ended while waiting for PUBLISH: {text}")
                        }
                        Some(_) => continue,
                        None => panic!("event loop ended while waiting for PUBLISH"),
                    }
                }
            })
            .await
        }

        /// Waits for the server to end the connection.
        pub async fn closed(&mut self) -> Closed {
            let events = &mut self.events;
            within("the connection to end", async {
                loop {
                    match events.recv().await {
                        Some(Ev::Closed { reason, text }) => return Closed { reason, text },
                        Some(_) => continue,
                        None => return Closed { reason: None, text: "event loop ended".into() },
                    }
                }
            })
            .await
        }

        /// Drops the connection without DISCONNECT, as if the network failed.
        pub fn kill(self) {
            self.task.abort();
        }
    }
}
