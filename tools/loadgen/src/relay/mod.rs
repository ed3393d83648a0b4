//! The JSON relay (docs/relay.md): one flat JSON object with a `"t"` field per frame — after a
//! 4-byte big-endian length on TCP, one per WebSocket text frame, one per UDP datagram.
//!
//! The generator uses `register`, `join_room`, `send` → `deliver` and `room_send` →
//! `room_deliver`. A load message's `ct` is the text stamp padded with `x` to `--payload`
//! characters. An `error` or `queued` answer to a send gives its credits back (the message will
//! not be delivered) and is counted by its `msg`, so a rate-limited relay shows up as errors and
//! a lower rate, never as a stall.

pub(crate) mod backlog;
pub(crate) mod load;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::SetupError;
use crate::link::{Framing, Link, Writer};
use crate::mqtt::Credentials;
use crate::run::{Incoming, Wire};
use crate::stamp::{self, Stamp};
use crate::stats::Errors;

/// How long a `registered` or `joined_room` may take.
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The relay transport to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Transport {
    /// Length-prefixed frames over TCP.
    Tcp,
    /// Text frames over WebSocket.
    Ws,
    /// Datagrams.
    Udp,
}

impl Transport {
    /// The name used in rows.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Ws => "ws",
            Transport::Udp => "udp",
        }
    }
}

/// Where and how to reach the relay.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    /// The listener's address.
    pub(crate) addr: SocketAddr,
    /// Its transport.
    pub(crate) transport: Transport,
    /// The URL path for WebSocket (any path reaches the relay listener).
    pub(crate) path: String,
    /// Credentials sent in `register` (and as `Authorization: Bearer` on WebSocket).
    pub(crate) creds: Credentials,
}

impl Endpoint {
    /// Opens one connection (a socket of its own for UDP).
    pub(crate) async fn open(&self) -> Result<Link, SetupError> {
        match self.transport {
            Transport::Tcp => Link::tcp(self.addr, Framing::Length32).await,
            Transport::Udp => Link::udp(self.addr).await,
            Transport::Ws => {
                let headers: Vec<(String, String)> = match &self.creds.token {
                    Some(t) => vec![("Authorization".into(), format!("Bearer {t}"))],
                    None => Vec::new(),
                };
                Link::websocket(self.addr, &self.path, &headers).await
            }
        }
    }

    /// Opens a connection and registers `addr` on it.
    pub(crate) async fn registered(&self, addr: &str) -> Result<Link, SetupError> {
        let mut link = self.open().await?;
        let mut req = json!({"t": "register", "addr": addr});
        if let Some(u) = &self.creds.username {
            req["username"] = json!(u);
        }
        if let Some(p) = &self.creds.password {
            req["password"] = json!(p);
        }
        if let Some(t) = &self.creds.token {
            req["token"] = json!(t);
        }
        request(&mut link, &req, "registered").await?;
        Ok(link)
    }
}

/// Sends `req` and waits for the reply of type `want`, skipping other frames (such as a backlog
/// flushed before `registered`). An `error` reply is a refusal with its `msg`.
pub(crate) async fn request(link: &mut Link, req: &Value, want: &'static str) -> Result<Value, SetupError> {
    let body = req.to_string();
    link.writer.message(|b| b.extend_from_slice(body.as_bytes()));
    link.writer.flush().await.map_err(SetupError::io(want))?;
    let deadline = tokio::time::Instant::now() + REPLY_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let msg = link.next_message(want, left).await?;
        let Ok(reply) = serde_json::from_slice::<Value>(&msg) else { continue };
        match reply["t"].as_str() {
            Some(t) if t == want => return Ok(reply),
            Some("error") => {
                let reason = reply["msg"].as_str().unwrap_or("error without msg").to_owned();
                return Err(SetupError::Refused { what: want, reason });
            }
            _ => {}
        }
    }
}

/// Joins `room`; returns the member count the relay reports.
pub(crate) async fn join(link: &mut Link, room: &str) -> Result<u64, SetupError> {
    let reply = request(link, &json!({"t": "join_room", "room": room}), "joined_room").await?;
    Ok(reply["members"].as_u64().unwrap_or(0))
}

/// The members of a relay frame the generator reads.
#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(borrow)]
    t: Cow<'a, str>,
    #[serde(borrow, default)]
    ct: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    msg: Option<Cow<'a, str>>,
}

/// What a relay frame says, for the load.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `deliver` or `room_deliver`, with the stamp of its `ct`.
    Delivery(Option<Stamp>),
    /// `error` with its `msg`.
    Error(String),
    /// `queued`: the receiver was offline.
    Queued,
    /// Any other type.
    Other(String),
    /// Not a JSON object with a string `t`.
    Bad,
}

/// Reads a relay frame.
pub(crate) fn reply(body: &[u8]) -> Reply {
    let Ok(f) = serde_json::from_slice::<Frame<'_>>(body) else { return Reply::Bad };
    match &*f.t {
        "deliver" | "room_deliver" => {
            Reply::Delivery(f.ct.as_deref().and_then(|ct| stamp::read_text(ct.as_bytes())))
        }
        "error" => Reply::Error(f.msg.map_or_else(|| "error without msg".to_owned(), Cow::into_owned)),
        "queued" => Reply::Queued,
        other => Reply::Other(other.to_owned()),
    }
}

/// The fixed start of a load message: `{"t":"send","to":ADDR,"ct":"` or the `room_send` form.
pub(crate) fn message_head(kind: &str, target_key: &str, target: &str) -> Vec<u8> {
    let mut head = format!("{{\"t\":\"{kind}\",\"{target_key}\":").into_bytes();
    serde_json::to_writer(&mut head, target).expect("a string serialises");
    head.extend_from_slice(b",\"ct\":\"");
    head
}

/// A sender of `send` or `room_send` frames.
pub(crate) struct Sender {
    head: Vec<u8>,
    payload: usize,
}

impl Sender {
    /// Sends to the address `to`.
    pub(crate) fn to_addr(to: &str, payload: usize) -> Sender {
        Sender { head: message_head("send", "to", to), payload }
    }

    /// Sends to the room `room`.
    pub(crate) fn to_room(room: &str, payload: usize) -> Sender {
        Sender { head: message_head("room_send", "room", room), payload }
    }
}

impl Wire for Sender {
    fn put(&mut self, w: &mut Writer, stamp: Stamp) {
        let (head, len) = (&self.head, self.payload);
        w.message(|b| {
            b.extend_from_slice(head);
            stamp::put_text(b, stamp, len);
            b.extend_from_slice(b"\"}");
        });
    }

    fn read(&mut self, msg: &[u8], _w: &mut Writer, errors: &Errors) -> Incoming {
        match reply(msg) {
            Reply::Error(m) => {
                errors.add(&m);
                Incoming::Refused
            }
            Reply::Queued => {
                errors.add("queued");
                Incoming::Refused
            }
            Reply::Delivery(_) => {
                errors.add("delivery to a sender");
                Incoming::Ignored
            }
            Reply::Other(t) => {
                errors.add(&format!("unexpected {t}"));
                Incoming::Ignored
            }
            Reply::Bad => {
                errors.add("frame that is not a relay message");
                Incoming::Ignored
            }
        }
    }
}

/// A receiver of `deliver` or `room_deliver` frames.
pub(crate) struct Receiver;

impl Wire for Receiver {
    fn put(&mut self, _w: &mut Writer, _stamp: Stamp) {}

    fn read(&mut self, msg: &[u8], _w: &mut Writer, errors: &Errors) -> Incoming {
        match reply(msg) {
            Reply::Delivery(stamp) => Incoming::Delivery(stamp),
            Reply::Error(m) => {
                errors.add(&m);
                Incoming::Ignored
            }
            Reply::Queued => {
                errors.add("queued");
                Incoming::Ignored
            }
            Reply::Other(t) => {
                errors.add(&format!("unexpected {t}"));
                Incoming::Ignored
            }
            Reply::Bad => {
                errors.add("frame that is not a relay message");
                Incoming::Ignored
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn replies_in_any_layout() {
        let s = "0123456789abcdef00000007";
        let cases = [
            (
                format!(r#"{{"t":"deliver","from":"a","ct":"{s}xx","pub":null,"nonce":null,"kind":"live"}}"#),
                Reply::Delivery(Some(Stamp { sent_ns: 0x0123_4567_89ab_cdef, source: 7 })),
            ),
            (
                format!(
                    r#" {{ "ct" : "{s}", "from":"a\"}}b", "n":[1,{{"x":"]}}"}}], "t" : "room_deliver" }} "#
                ),
                Reply::Delivery(Some(Stamp { sent_ns: 0x0123_4567_89ab_cdef, source: 7 })),
            ),
            (r#"{"t":"deliver","ct":"short"}"#.into(), Reply::Delivery(None)),
            (
                r#"{"t":"error","msg":"rate limit exceeded"}"#.into(),
                Reply::Error("rate limit exceeded".into()),
            ),
            (r#"{"t":"error"}"#.into(), Reply::Error("error without msg".into())),
            (r#"{"t":"queued","to":"b"}"#.into(), Reply::Queued),
            (r#"{"t":"pipe_data","pipe_id":"x"}"#.into(), Reply::Other("pipe_data".into())),
            (r#"{"t":"\u0064eliver","ct":"nothex"}"#.into(), Reply::Delivery(None)),
        ];
        for (text, want) in cases {
            assert_eq!(reply(text.as_bytes()), want, "{text}");
        }
        for bad in [&br#"{"t":"deliver""#[..], b"[1]", b"{}", br#"{"t":5}"#, b"", br#"{"t":"a","t":"b"}"#] {
            assert_eq!(reply(bad), Reply::Bad, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn sender_frames_are_the_documented_json() {
        let mut w = Vec::new();
        let head = message_head("send", "to", "lg\"x");
        w.extend_from_slice(&head);
        stamp::put_text(&mut w, Stamp { sent_ns: 5, source: 1 }, 30);
        w.extend_from_slice(b"\"}");
        let v: Value = serde_json::from_slice(&w).unwrap();
        assert_eq!(v, json!({"t": "send", "to": "lg\"x", "ct": "000000000000000500000001xxxxxx"}));
        let room = message_head("room_send", "room", "r");
        assert_eq!(room, br#"{"t":"room_send","room":"r","ct":""#);
    }

    proptest! {
        #[test]
        fn reply_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = reply(&bytes);
        }
    }
}
