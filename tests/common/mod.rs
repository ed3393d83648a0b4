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

/// Encodes an MQTT string (2-byte length + bytes).
pub fn mqtt_str(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// A fixed header + body: `first` byte, variable-byte remaining length, `body`.
pub fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![first];
    let mut n = body.len();
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        v.push(b);
        if n == 0 {
            break;
        }
    }
    v.extend_from_slice(body);
    v
}

/// A CONNECT for `client_id` at protocol `level` with the given flags, keep-alive 60.
pub fn connect_bytes(level: u8, client_id: &str, flags: u8) -> Vec<u8> {
    let mut body = mqtt_str(if level == 3 { "MQIsdp" } else { "MQTT" });
    body.push(level);
    body.push(flags);
    body.extend_from_slice(&60u16.to_be_bytes());
    if level == 5 {
        body.push(0); // no properties
    }
    body.extend_from_slice(&mqtt_str(client_id));
    packet(0x10, &body)
}

impl Raw {
    pub async fn open(addr: SocketAddr, version: ProtocolVersion) -> Raw {
        let stream = within("TCP connect", TcpStream::connect(addr)).await.expect("connect");
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
