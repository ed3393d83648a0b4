//! Relay clients over the three real transports: length-prefixed frames on a `TcpStream`,
//! text messages through tokio-tungstenite, datagrams on a `UdpSocket`. Every read is bounded
//! by [`WAIT`](super::WAIT).

use std::net::SocketAddr;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::{TestServer, within};

/// Which transport a client uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Tcp,
    Ws,
    Udp,
}

pub const KINDS: [Kind; 3] = [Kind::Tcp, Kind::Ws, Kind::Udp];

/// The listener config of a relay of each kind, named `relay-tcp`, `relay-ws` and `relay-udp`.
pub const LISTENERS: &str = "[[listeners]]\nname = \"relay-tcp\"\nkind = \"relay-tcp\"\nbind = \"127.0.0.1:0\"\n\
     [[listeners]]\nname = \"relay-ws\"\nkind = \"relay-ws\"\nbind = \"127.0.0.1:0\"\n\
     [[listeners]]\nname = \"relay-udp\"\nkind = \"relay-udp\"\nbind = \"127.0.0.1:0\"\n";

/// A test server with the three relay listeners, anonymous access, `$SYS` off (unless `extra`
/// has an `[mqtt]` table of its own) and `extra` appended.
pub async fn server(extra: &str) -> TestServer {
    let sys = if extra.contains("[mqtt]") { "" } else { "[mqtt]\nsys_interval = 0\n" };
    TestServer::start_with(&format!("{LISTENERS}[auth]\nallow_anonymous = true\n{sys}{extra}")).await
}

/// The address of `server`'s relay listener of `kind`.
pub fn addr(server: &TestServer, kind: Kind) -> SocketAddr {
    let name = match kind {
        Kind::Tcp => "relay-tcp",
        Kind::Ws => "relay-ws",
        Kind::Udp => "relay-udp",
    };
    server.server.as_ref().expect("running").local_addr(name).expect("relay listener")
}

enum Wire {
    Tcp(TcpStream),
    Ws(Box<WebSocketStream<TcpStream>>),
    Udp(UdpSocket),
}

/// One relay client.
pub struct Client {
    wire: Wire,
    pub kind: Kind,
}

impl Client {
    /// Connects to `server`'s relay listener of `kind`.
    pub async fn connect(server: &TestServer, kind: Kind) -> Client {
        Client::connect_to(addr(server, kind), kind, "/relay").await
    }

    /// Connects to `server`'s relay listener of `kind` and registers `addr`.
    pub async fn registered(server: &TestServer, kind: Kind, addr: &str) -> Client {
        let mut client = Client::connect(server, kind).await;
        client.register(addr).await;
        client
    }

    /// Connects to a relay listener at `to` (WebSocket at `path`, which may carry a query).
    pub async fn connect_to(to: SocketAddr, kind: Kind, path: &str) -> Client {
        let wire = match kind {
            Kind::Tcp => Wire::Tcp(TcpStream::connect(to).await.expect("tcp connect")),
            Kind::Ws => {
                let stream = TcpStream::connect(to).await.expect("tcp connect");
                let url = format!("ws://{to}{path}");
                let (ws, _) = tokio_tungstenite::client_async(url, stream).await.expect("websocket upgrade");
                Wire::Ws(Box::new(ws))
            }
            Kind::Udp => {
                let socket = UdpSocket::bind("127.0.0.1:0").await.expect("udp bind");
                socket.connect(to).await.expect("udp connect");
                Wire::Udp(socket)
            }
        };
        Client { wire, kind }
    }

    /// Sends `body` as one frame, whatever it holds.
    pub async fn send_raw(&mut self, body: &[u8]) {
        match &mut self.wire {
            Wire::Tcp(s) => {
                let mut frame = (body.len() as u32).to_be_bytes().to_vec();
                frame.extend_from_slice(body);
                s.write_all(&frame).await.expect("tcp write");
            }
            Wire::Ws(ws) => {
                let text = String::from_utf8(body.to_vec()).expect("text frame");
                ws.send(Message::text(text)).await.expect("ws write");
            }
            Wire::Udp(s) => {
                s.send(body).await.expect("udp send");
            }
        }
    }

    /// Sends one JSON message.
    pub async fn send(&mut self, message: Value) {
        self.send_raw(message.to_string().as_bytes()).await;
    }

    /// The next frame's body, or `None` when the connection ended (TCP, WebSocket).
    pub async fn recv_raw(&mut self) -> Option<Vec<u8>> {
        within("a relay frame", async {
            match &mut self.wire {
                Wire::Tcp(s) => {
                    let mut len = [0u8; 4];
                    s.read_exact(&mut len).await.ok()?;
                    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                    s.read_exact(&mut body).await.ok()?;
                    Some(body)
                }
                Wire::Ws(ws) => loop {
                    match ws.next().await? {
                        Ok(Message::Text(t)) => return Some(t.as_bytes().to_vec()),
                        Ok(Message::Binary(b)) => return Some(b.to_vec()),
                        Ok(Message::Close(_)) | Err(_) => return None,
                        Ok(_) => continue,
                    }
                },
                Wire::Udp(s) => {
                    let mut buf = vec![0u8; 70_000];
                    let n = s.recv(&mut buf).await.expect("udp recv");
                    buf.truncate(n);
                    Some(buf)
                }
            }
        })
        .await
    }

    /// The next message.
    pub async fn recv(&mut self) -> Value {
        let body = self.recv_raw().await.expect("connection open");
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("relay sent invalid JSON ({e}): {body:?}"))
    }

    /// The next message, which must be of type `t`.
    pub async fn expect(&mut self, t: &str) -> Value {
        let message = self.recv().await;
        assert_eq!(message["t"], t, "expected a {t:?} over {:?}, got {message}", self.kind);
        message
    }

    /// The next message, which must be `error{msg}`.
    pub async fn expect_error(&mut self, msg: &str) -> Value {
        let message = self.expect("error").await;
        assert_eq!(message["msg"], msg, "over {:?}: {message}", self.kind);
        message
    }

    /// Registers `addr` and returns `registered`.
    pub async fn register(&mut self, addr: &str) -> Value {
        self.send(serde_json::json!({"t": "register", "addr": addr})).await;
        let registered = self.expect("registered").await;
        assert_eq!(registered["addr"], addr);
        registered
    }

    /// Waits until the server closed a TCP or WebSocket connection (frames before the end are
    /// returned).
    pub async fn closed(&mut self) -> Vec<Value> {
        let mut before = Vec::new();
        while let Some(body) = self.recv_raw().await {
            before.push(serde_json::from_slice(&body).expect("json"));
        }
        before
    }

    /// The WebSocket, for tests of its own framing.
    pub fn ws(&mut self) -> &mut WebSocketStream<TcpStream> {
        match &mut self.wire {
            Wire::Ws(ws) => ws,
            _ => panic!("not a WebSocket client"),
        }
    }

    /// Skips WebSocket messages until one that `pick` takes (a pong, a close frame, ...).
    pub async fn ws_until<T>(&mut self, what: &str, mut pick: impl FnMut(Message) -> Option<T>) -> T {
        let ws = self.ws();
        within(what, async {
            loop {
                match ws.next().await {
                    Some(Ok(message)) => {
                        if let Some(v) = pick(message) {
                            return v;
                        }
                    }
                    other => panic!("no {what}: {other:?}"),
                }
            }
        })
        .await
    }

    /// The TCP stream, for tests of its own framing.
    pub fn tcp(&mut self) -> &mut TcpStream {
        match &mut self.wire {
            Wire::Tcp(s) => s,
            _ => panic!("not a TCP client"),
        }
    }

    /// Closes the connection (a UDP client cannot: its address is released after `udp_idle_s`).
    pub async fn close(self) {
        match self.wire {
            Wire::Tcp(mut s) => {
                let _ = s.shutdown().await;
                let mut rest = Vec::new();
                let _ = within("the relay to close", s.read_to_end(&mut rest)).await;
            }
            Wire::Ws(mut ws) => {
                let _ = ws.close().await;
                while let Some(Ok(_)) = ws.next().await {}
            }
            Wire::Udp(_) => {}
        }
    }
}
