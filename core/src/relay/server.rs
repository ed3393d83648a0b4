//! The relay → client catalogue: [`ServerMessage`] and its encoder.
//!
//! Every message is a flat JSON object whose first key is `"t"`, written straight into the send
//! buffer: fixed keys as byte strings, values escaped on the way (or, for strings that came from
//! a client frame, copied as the literal the client sent). No intermediate document is built.
//! With [`super::frame::encode_with`] a TCP frame is encoded in place, length prefix included.
//!
//! Field choices where the seed's table leaves room:
//! - `deliver` always carries `pub` and `nonce` (`null` when the sender set none) and carries
//!   `id` only when the sender set one; `kind` is `"queued"` or `"live"`.
//! - `message` carries `from: null` for a retained replay, and `"enc":"base64"` when `ct` is the
//!   base64 of a binary MQTT payload ([`super::payload`]).
//! - `error` carries `"fatal":true` when the relay closes the connection after it.

use bytes::{BufMut, BytesMut};

use super::capabilities::Capabilities;
use super::client::{PipeData, Send};
use super::error::RelayError;
use super::json::{JsonStr, key, write_bool, write_str, write_u64};
use super::payload::CtEncoding;
use super::turn::TurnCredentials;

/// Whether a `deliver` comes from the offline queue or straight from the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliverKind {
    /// Flushed from the store-and-forward queue at `register`.
    Queued,
    /// Sent while the recipient was connected.
    Live,
}

impl DeliverKind {
    /// The wire value of `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliverKind::Queued => "queued",
            DeliverKind::Live => "live",
        }
    }
}

/// The fields of a `deliver`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deliver<'a> {
    /// The sender's address.
    pub from: &'a str,
    /// The opaque content.
    pub ct: JsonStr<'a>,
    /// `pub`, if the sender set it.
    pub public_key: Option<JsonStr<'a>>,
    /// `nonce`, if the sender set it.
    pub nonce: Option<JsonStr<'a>>,
    /// `id`, if the sender set one.
    pub id: Option<JsonStr<'a>>,
    /// Queued or live.
    pub kind: DeliverKind,
}

impl<'a> Send<'a> {
    /// The `deliver` for this `send` from `from`: `ct`, `pub`, `nonce` and `id` are the
    /// sender's literals, copied without being parsed again.
    pub fn deliver<'b>(&self, from: &'b str, kind: DeliverKind) -> Deliver<'b>
    where
        'a: 'b,
    {
        Deliver { from, ct: self.ct, public_key: self.public_key, nonce: self.nonce, id: self.id, kind }
    }
}

impl PipeData<'_> {
    /// The `pipe_data` to send to the other end: the same `pipe_id` and members.
    pub fn forward(&self) -> ServerMessage<'_> {
        ServerMessage::PipeData { pipe_id: &self.pipe_id, fields: &self.fields }
    }
}

/// One message to a client.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum ServerMessage<'a> {
    /// `registered{addr, queued}`.
    Registered {
        /// The address now held.
        addr: &'a str,
        /// How many queued messages were flushed just before.
        queued: u64,
    },
    /// `deliver{from, ct, pub, nonce, id?, kind}`.
    Deliver(Deliver<'a>),
    /// `ack{id, from}`: a recipient's confirmation, forwarded to the sender.
    Ack {
        /// The `send`'s id, as the recipient sent it.
        id: JsonStr<'a>,
        /// The recipient's address.
        from: &'a str,
    },
    /// `queued{to}`.
    Queued {
        /// The offline recipient.
        to: &'a str,
    },
    /// `capabilities{transports, load_tier, load_factor, …limits}`.
    Capabilities(&'a Capabilities<'a>),
    /// `online_count{count}`.
    OnlineCount {
        /// Registered addresses relay-wide.
        count: u64,
    },
    /// `turn_credentials{urls, username, credential, ttl}`.
    TurnCredentials(&'a TurnCredentials<'a>),
    /// `pipe_open{pipe_id, peer}`, to the opener.
    PipeOpen {
        /// The pipe.
        pipe_id: &'a str,
        /// The peer's address.
        peer: &'a str,
    },
    /// `pipe_incoming{pipe_id, peer}`, to the peer.
    PipeIncoming {
        /// The pipe.
        pipe_id: &'a str,
        /// The opener's address.
        peer: &'a str,
    },
    /// `pipe_data{pipe_id, …}` with the sender's other members verbatim
    /// ([`PipeData::forward`] builds it).
    PipeData {
        /// The pipe.
        pipe_id: &'a str,
        /// The members to forward, each `"key":value` exactly as sent.
        fields: &'a [&'a str],
    },
    /// `pipe_closed{pipe_id}`.
    PipeClosed {
        /// The pipe.
        pipe_id: &'a str,
    },
    /// `waiting{game}`.
    Waiting {
        /// The game tag.
        game: &'a str,
    },
    /// `matched{game, peer}`.
    Matched {
        /// The game tag.
        game: &'a str,
        /// The other caller's address.
        peer: &'a str,
    },
    /// `joined_room{room, members}`.
    JoinedRoom {
        /// The room.
        room: &'a str,
        /// Its member count, the joiner included.
        members: u64,
    },
    /// `room_deliver{room, from, ct}`.
    RoomDeliver {
        /// The room.
        room: &'a str,
        /// The sender's address.
        from: &'a str,
        /// The opaque content.
        ct: JsonStr<'a>,
    },
    /// `subscribed{topic}`.
    Subscribed {
        /// The filter.
        topic: &'a str,
    },
    /// `unsubscribed{topic}`.
    Unsubscribed {
        /// The filter.
        topic: &'a str,
    },
    /// `message{topic, from, ct, retained}` (plus `enc` for a binary MQTT payload).
    Message {
        /// The topic name.
        topic: &'a str,
        /// The publisher, `None` (`null`) for a retained replay.
        from: Option<&'a str>,
        /// The content.
        ct: JsonStr<'a>,
        /// Whether this is a retained replay.
        retained: bool,
        /// How `ct` is encoded.
        encoding: CtEncoding,
    },
    /// `error{msg}` (plus `fatal: true` when the connection is closed after it).
    Error {
        /// The refusal.
        error: RelayError,
        /// Whether the relay closes the connection after sending it.
        fatal: bool,
    },
    /// `challenge{nonce}` (mesgd, key proof).
    Challenge {
        /// The standard base64 of the nonce.
        nonce: &'a str,
    },
}

/// Appends `{"t":"<name>"`.
fn open(buf: &mut BytesMut, name: &str) {
    buf.reserve(name.len() + 8);
    buf.put_slice(b"{\"t\":\"");
    buf.put_slice(name.as_bytes());
    buf.put_u8(b'"');
}

fn str_field(buf: &mut BytesMut, key: &[u8], value: &str) {
    buf.put_slice(key);
    write_str(buf, value);
}

fn optional_literal(buf: &mut BytesMut, key: &[u8], value: Option<JsonStr<'_>>) {
    buf.put_slice(key);
    match value {
        Some(v) => v.write(buf),
        None => buf.put_slice(b"null"),
    }
}

fn optional_str(buf: &mut BytesMut, key: &[u8], value: Option<&str>) {
    buf.put_slice(key);
    match value {
        Some(v) => write_str(buf, v),
        None => buf.put_slice(b"null"),
    }
}

impl ServerMessage<'_> {
    /// The wire name of the message type.
    pub fn type_name(&self) -> &'static str {
        match self {
            ServerMessage::Registered { .. } => "registered",
            ServerMessage::Deliver(_) => "deliver",
            ServerMessage::Ack { .. } => "ack",
            ServerMessage::Queued { .. } => "queued",
            ServerMessage::Capabilities(_) => "capabilities",
            ServerMessage::OnlineCount { .. } => "online_count",
            ServerMessage::TurnCredentials(_) => "turn_credentials",
            ServerMessage::PipeOpen { .. } => "pipe_open",
            ServerMessage::PipeIncoming { .. } => "pipe_incoming",
            ServerMessage::PipeData { .. } => "pipe_data",
            ServerMessage::PipeClosed { .. } => "pipe_closed",
            ServerMessage::Waiting { .. } => "waiting",
            ServerMessage::Matched { .. } => "matched",
            ServerMessage::JoinedRoom { .. } => "joined_room",
            ServerMessage::RoomDeliver { .. } => "room_deliver",
            ServerMessage::Subscribed { .. } => "subscribed",
            ServerMessage::Unsubscribed { .. } => "unsubscribed",
            ServerMessage::Message { .. } => "message",
            ServerMessage::Error { .. } => "error",
            ServerMessage::Challenge { .. } => "challenge",
        }
    }

    /// Appends the message's JSON object to `buf`.
    pub fn encode(&self, buf: &mut BytesMut) {
        if let ServerMessage::Capabilities(caps) = self {
            return caps.encode(buf);
        }
        open(buf, self.type_name());
        match *self {
            ServerMessage::Registered { addr, queued } => {
                str_field(buf, key!("addr"), addr);
                buf.put_slice(key!("queued"));
                write_u64(buf, queued);
            }
            ServerMessage::Deliver(ref d) => encode_deliver(buf, d),
            ServerMessage::Ack { id, from } => {
                buf.put_slice(key!("id"));
                id.write(buf);
                str_field(buf, key!("from"), from);
            }
            ServerMessage::Queued { to } => str_field(buf, key!("to"), to),
            ServerMessage::Capabilities(_) => {}
            ServerMessage::OnlineCount { count } => {
                buf.put_slice(key!("count"));
                write_u64(buf, count);
            }
            ServerMessage::TurnCredentials(creds) => {
                buf.put_slice(key!("urls"));
                buf.put_u8(b'[');
                for (i, url) in creds.urls.iter().enumerate() {
                    if i > 0 {
                        buf.put_u8(b',');
                    }
                    write_str(buf, url);
                }
                buf.put_u8(b']');
                optional_str(buf, key!("username"), creds.username.as_deref());
                optional_str(buf, key!("credential"), creds.credential.as_deref());
                buf.put_slice(key!("ttl"));
                write_u64(buf, creds.ttl);
            }
            ServerMessage::PipeOpen { pipe_id, peer } | ServerMessage::PipeIncoming { pipe_id, peer } => {
                str_field(buf, key!("pipe_id"), pipe_id);
                str_field(buf, key!("peer"), peer);
            }
            ServerMessage::PipeData { pipe_id, fields } => {
                str_field(buf, key!("pipe_id"), pipe_id);
                for member in fields {
                    buf.put_u8(b',');
                    buf.put_slice(member.as_bytes());
                }
            }
            ServerMessage::PipeClosed { pipe_id } => str_field(buf, key!("pipe_id"), pipe_id),
            ServerMessage::Waiting { game } => str_field(buf, key!("game"), game),
            ServerMessage::Matched { game, peer } => {
                str_field(buf, key!("game"), game);
                str_field(buf, key!("peer"), peer);
            }
            ServerMessage::JoinedRoom { room, members } => {
                str_field(buf, key!("room"), room);
                buf.put_slice(key!("members"));
                write_u64(buf, members);
            }
            ServerMessage::RoomDeliver { room, from, ct } => {
                str_field(buf, key!("room"), room);
                str_field(buf, key!("from"), from);
                buf.put_slice(key!("ct"));
                ct.write(buf);
            }
            ServerMessage::Subscribed { topic } | ServerMessage::Unsubscribed { topic } => {
                str_field(buf, key!("topic"), topic);
            }
            ServerMessage::Message { topic, from, ct, retained, encoding } => {
                str_field(buf, key!("topic"), topic);
                optional_str(buf, key!("from"), from);
                buf.put_slice(key!("ct"));
                ct.write(buf);
                buf.put_slice(key!("retained"));
                write_bool(buf, retained);
                if let Some(enc) = encoding.enc() {
                    str_field(buf, key!("enc"), enc);
                }
            }
            ServerMessage::Error { error, fatal } => {
                str_field(buf, key!("msg"), &error.message());
                if fatal {
                    buf.put_slice(key!("fatal"));
                    write_bool(buf, true);
                }
            }
            ServerMessage::Challenge { nonce } => str_field(buf, key!("nonce"), nonce),
        }
        buf.put_u8(b'}');
    }
}

/// The hot path of a direct send: the sender's literals are copied, only `from` is escaped.
fn encode_deliver(buf: &mut BytesMut, d: &Deliver<'_>) {
    let literals = [Some(d.ct), d.public_key, d.nonce, d.id];
    let size: usize = literals.iter().flatten().map(JsonStr::max_encoded_len).sum();
    buf.reserve(size + d.from.len() + 72);
    str_field(buf, key!("from"), d.from);
    buf.put_slice(key!("ct"));
    d.ct.write(buf);
    optional_literal(buf, key!("pub"), d.public_key);
    optional_literal(buf, key!("nonce"), d.nonce);
    if let Some(id) = d.id {
        buf.put_slice(key!("id"));
        id.write(buf);
    }
    str_field(buf, key!("kind"), d.kind.as_str());
}
