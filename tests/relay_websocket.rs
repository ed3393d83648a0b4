//! The relay's WebSocket framing (RFC 6455) at the byte level: pings and pongs, the closing
//! handshake, fragmented messages, framing errors and their close statuses, and the server's
//! keep-alive probe. tokio-tungstenite is the independent client where a library can say it;
//! raw bytes where only a misbehaving client can.

mod common;

use common::relay::{self, Client, Kind};
use common::within;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const MASK: [u8; 4] = [0x12, 0x34, 0x56, 0x78];

/// A client frame with `first` as its FIN/RSV/opcode byte, masked (or not, to break the rules).
fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut out = vec![first, payload.len() as u8 | if masked { 0x80 } else { 0 }];
    if masked {
        out.extend_from_slice(&MASK);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

/// A WebSocket upgraded by hand, for frames no library would send.
struct Raw {
    stream: TcpStream,
}

impl Raw {
    async fn connect(server: &common::TestServer) -> Raw {
        let addr = relay::addr(server, Kind::Ws);
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!(
            "GET /relay HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            within("the upgrade answer", stream.read_exact(&mut byte)).await.expect("upgrade answer");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        // RFC 6455 section 1.3's example key and its answer.
        assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
        Raw { stream }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// The next server frame: its first byte and its payload (server frames are not masked),
    /// or `None` at the end of the stream.
    async fn read(&mut self) -> Option<(u8, Vec<u8>)> {
        within("a server frame", async {
            let mut head = [0u8; 2];
            self.stream.read_exact(&mut head).await.ok()?;
            assert_eq!(head[1] & 0x80, 0, "a server frame is never masked");
            let len = match head[1] & 0x7F {
                126 => u64::from(self.stream.read_u16().await.unwrap()),
                127 => self.stream.read_u64().await.unwrap(),
                n => u64::from(n),
            };
            let mut payload = vec![0u8; len as usize];
            self.stream.read_exact(&mut payload).await.unwrap();
            Some((head[0], payload))
        })
        .await
    }

    /// The next text message, as JSON (control frames before it are skipped).
    async fn json(&mut self) -> Value {
        loop {
            let (first, payload) = self.read().await.expect("a frame");
            if first == 0x81 {
                return serde_json::from_slice(&payload).expect("JSON");
            }
        }
    }

    /// The close frame's status and reason, then the end of the stream.
    async fn close(&mut self) -> (u16, String) {
        loop {
            let (first, payload) = self.read().await.expect("a close frame before the end");
            if first == 0x88 {
                let code = u16::from_be_bytes([payload[0], payload[1]]);
                let reason = String::from_utf8(payload[2..].to_vec()).unwrap();
                assert!(self.read().await.is_none(), "the connection ends after the close frame");
                return (code, reason);
            }
        }
    }
}

#[tokio::test]
async fn pings_are_answered_with_their_payload_and_a_close_is_echoed() {
    let server = relay::server("").await;
    let mut c = Client::connect(&server, Kind::Ws).await;
    c.register("pinger").await;
    c.ws().send(Message::Ping(b"are you there".to_vec().into())).await.unwrap();
    let pong = c
        .ws_until("the pong", |m| match m {
            Message::Pong(payload) => Some(payload),
            _ => None,
        })
        .await;
    assert_eq!(&pong[..], b"are you there");
    let close = CloseFrame { code: CloseCode::Away, reason: "bye".into() };
    c.ws().send(Message::Close(Some(close))).await.unwrap();
    let echoed = c
        .ws_until("the echoed close", |m| match m {
            Message::Close(frame) => Some(frame),
            _ => None,
        })
        .await
        .expect("a status");
    assert_eq!(echoed.code, CloseCode::Away, "the client's status is echoed");
    assert!(within("the end", c.ws().next()).await.is_none(), "then the connection ends");
}

#[tokio::test]
async fn a_fragmented_message_with_a_ping_inside_is_one_message() {
    let server = relay::server("").await;
    let mut raw = Raw::connect(&server).await;
    let register = json!({"t": "register", "addr": "fragments"}).to_string();
    let (a, rest) = register.as_bytes().split_at(5);
    let (b, c) = rest.split_at(7);
    let mut bytes = frame(0x01, a, true); // text, not FIN
    bytes.extend(frame(0x00, b, true)); // continuation
    bytes.extend(frame(0x89, b"mid", true)); // a ping between fragments
    bytes.extend(frame(0x80, c, true)); // continuation, FIN
    raw.send(&bytes).await;
    let (first, payload) = raw.read().await.expect("the pong");
    assert_eq!((first, &payload[..]), (0x8A, &b"mid"[..]), "the ping is answered at once");
    let registered = raw.json().await;
    assert_eq!(registered["t"], "registered", "{registered}");
    assert_eq!(registered["addr"], "fragments", "{registered}");
}

#[tokio::test]
async fn framing_errors_close_with_their_status() {
    let server = relay::server("").await;
    let cases: [(&str, Vec<u8>, u16, &str); 5] = [
        ("an unmasked frame", frame(0x81, b"{}", false), 1002, "protocol error"),
        ("a reserved opcode", frame(0x83, b"x", true), 1002, "protocol error"),
        ("a reserved bit", frame(0xC1, b"{}", true), 1002, "protocol error"),
        ("a continuation with nothing to continue", frame(0x80, b"x", true), 1002, "protocol error"),
        ("text that is not UTF-8", frame(0x81, &[0xC3, 0x28], true), 1007, "invalid json"),
    ];
    for (what, bytes, code, reason) in cases {
        let mut raw = Raw::connect(&server).await;
        raw.send(&bytes).await;
        assert_eq!(raw.close().await, (code, reason.to_string()), "{what}");
    }
    // The listener is unharmed: a well-behaved client is served.
    let mut c = Client::connect(&server, Kind::Ws).await;
    c.register("after-the-errors").await;
}

#[tokio::test]
async fn a_client_that_does_not_answer_pings_is_closed_and_one_that_does_is_kept() {
    let server = relay::server("[relay]\nws_ping_interval_s = 1\nws_pong_timeout_s = 1\n").await;
    let mut silent = Raw::connect(&server).await;
    silent.send(&frame(0x81, json!({"t": "register", "addr": "silent"}).to_string().as_bytes(), true)).await;
    assert_eq!(silent.json().await["t"], "registered");
    // tungstenite answers pings as it reads. A second ping only comes after the first was
    // answered: a client that had not answered would have been closed at that moment instead.
    let mut alive = Client::connect(&server, Kind::Ws).await;
    alive.register("alive").await;
    let reader = tokio::spawn(async move {
        let mut pings = 0;
        while pings < 2 {
            match alive.ws().next().await {
                Some(Ok(Message::Ping(_))) => pings += 1,
                Some(Ok(_)) => {}
                other => panic!("the answering client was closed: {other:?}"),
            }
        }
        alive
    });
    let (first, payload) = silent.read().await.expect("a ping after the idle interval");
    assert_eq!((first, payload.len()), (0x89, 0), "an empty ping");
    assert_eq!(silent.close().await, (1001, "no answer to ping".to_string()));
    let mut alive = within("two pings to the answering client", reader).await.unwrap();
    alive.send(json!({"t": "list_online"})).await;
    assert_eq!(alive.expect("online_count").await["count"], 1, "only the answering client is online");
}
