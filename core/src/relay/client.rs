//! The client → relay catalogue: [`parse`] turns one frame into a typed [`ClientMessage`].
//!
//! Every row of the seed's "Client → relay" table is a variant with its fields; mesgd adds
//! `challenge` (the key-proof exchange) and, on `register`, `sig`, `username`, `password` and
//! `token`. Values borrow from the frame. String values the relay forwards (`ct`, `pub`,
//! `nonce`, `id`) stay [`JsonStr`] literals so that they are copied, never re-encoded; values it
//! looks at (addresses, names, topics, pipe ids) are unescaped.
//!
//! The outcome of a frame that is not a well-formed message, in the order it is checked:
//! 1. not UTF-8, not JSON, or JSON but not an object: [`ParseError::InvalidJson`] → `invalid json`;
//! 2. an object whose `t` is missing, not a string, repeated, or not in the catalogue:
//!    [`ParseError::UnknownMessageType`] → `unknown message type`;
//! 3. a known type whose field is missing (when required), of the wrong JSON type, or repeated:
//!    [`ParseError::InvalidField`] → `invalid field: NAME`;
//! 4. an address field (`to`, `register`'s `addr`) that is empty or over 256 characters:
//!    [`ParseError::InvalidAddress`] → `invalid address`.
//!
//! `null` counts as absent for optional fields and as the wrong type for required ones. Members
//! the catalogue does not name are ignored, except on `pipe_data`, which forwards them.

use std::borrow::Cow;
use std::fmt;

use smallvec::SmallVec;

use super::address;
use super::error::RelayError;
use super::json::JsonStr;
use super::scan::{self, Member, Value};

/// The longest room name or game tag, in characters (the same bound as an address).
pub const MAX_NAME_CHARS: usize = 256;

/// One message from a client.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientMessage<'a> {
    /// `register`: claim an address.
    Register(Register<'a>),
    /// `send`: deliver to one address, queued if it is offline.
    Send(Send<'a>),
    /// `ack`: confirm receipt of a `send` that had an id.
    Ack {
        /// The address the confirmation goes to (the original sender).
        to: Cow<'a, str>,
        /// The id of the `send` being confirmed.
        id: JsonStr<'a>,
    },
    /// `capabilities`: ask for the transports, the load and the limits.
    Capabilities,
    /// `list_online`: ask how many addresses are registered.
    ListOnline,
    /// `turn_credentials`: mint TURN credentials.
    TurnCredentials,
    /// `open_pipe`: open a tunnel to a connected address.
    OpenPipe {
        /// The peer's address.
        to: Cow<'a, str>,
    },
    /// `pipe_data`: send on an open pipe.
    PipeData(PipeData<'a>),
    /// `close_pipe`: tear a pipe down.
    ClosePipe {
        /// The pipe.
        pipe_id: Cow<'a, str>,
    },
    /// `find_match`: pair up under a game tag.
    FindMatch {
        /// The free-form tag.
        game: Cow<'a, str>,
    },
    /// `join_room`: join a broadcast group.
    JoinRoom {
        /// The room's name.
        room: Cow<'a, str>,
    },
    /// `room_send`: broadcast to every other member.
    RoomSend {
        /// The room's name.
        room: Cow<'a, str>,
        /// The opaque content.
        ct: JsonStr<'a>,
    },
    /// `subscribe`: add a topic filter (may contain `+` and `#`).
    Subscribe {
        /// The filter, not yet validated.
        topic: Cow<'a, str>,
    },
    /// `unsubscribe`: remove the exact filter subscribed before.
    Unsubscribe {
        /// The filter.
        topic: Cow<'a, str>,
    },
    /// `publish`: publish to a concrete topic.
    Publish {
        /// The topic name, not yet validated.
        topic: Cow<'a, str>,
        /// The opaque content; becomes the MQTT payload as the string's bytes.
        ct: JsonStr<'a>,
        /// Whether to keep it as the topic's retained message (`false` when absent).
        retain: bool,
    },
    /// `challenge` (mesgd): ask for a nonce to sign for a key-proof `register`.
    Challenge,
}

/// The fields of `register`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Register<'a> {
    /// The requested address; may be absent when `pubkey` is given.
    pub addr: Option<Cow<'a, str>>,
    /// The standard base64 of the raw public key, not yet decoded.
    pub pubkey: Option<Cow<'a, str>>,
    /// mesgd: the standard base64 of an Ed25519 signature over the challenge (key proof).
    pub sig: Option<Cow<'a, str>>,
    /// mesgd: credentials for the provider chain.
    pub username: Option<Cow<'a, str>>,
    /// mesgd: credentials for the provider chain. Never shown by `Debug`.
    pub password: Option<Cow<'a, str>>,
    /// mesgd: a bearer token for the provider chain. Never shown by `Debug`.
    pub token: Option<Cow<'a, str>>,
}

impl fmt::Debug for Register<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Register")
            .field("addr", &self.addr)
            .field("pubkey", &self.pubkey)
            .field("sig", &self.sig.as_ref().map(|_| "<present>"))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The fields of `send`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Send<'a> {
    /// The recipient's address (validated: 1–256 characters).
    pub to: Cow<'a, str>,
    /// The opaque content.
    pub ct: JsonStr<'a>,
    /// `pub` (end-to-end convention: the sender's public key).
    pub public_key: Option<JsonStr<'a>>,
    /// `nonce` (end-to-end convention).
    pub nonce: Option<JsonStr<'a>>,
    /// The sender's id for this message; the recipient's `ack` echoes it.
    pub id: Option<JsonStr<'a>>,
}

/// The fields of `pipe_data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipeData<'a> {
    /// The pipe.
    pub pipe_id: Cow<'a, str>,
    /// Every member other than `t` and `pipe_id`, exactly as sent (`"key":value`), in order.
    pub fields: SmallVec<[&'a str; 4]>,
}

/// Why a frame is not a message of the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not UTF-8, not JSON, or not a JSON object.
    #[error("invalid json at byte {offset}: expected {expected}")]
    InvalidJson {
        /// Where the problem is.
        offset: usize,
        /// What was expected there.
        expected: &'static str,
    },
    /// `t` is missing, not a string, repeated, or names no message type.
    #[error("unknown message type")]
    UnknownMessageType,
    /// A field of a known type is missing, of the wrong JSON type, or repeated.
    #[error("invalid field `{0}`")]
    InvalidField(&'static str),
    /// An address field is empty or over 256 characters.
    #[error("invalid address in field `{0}`")]
    InvalidAddress(&'static str),
}

impl ParseError {
    /// The refusal to send back.
    pub fn relay_error(&self) -> RelayError {
        match self {
            ParseError::InvalidJson { .. } => RelayError::InvalidJson,
            ParseError::UnknownMessageType => RelayError::UnknownMessageType,
            ParseError::InvalidField(name) => RelayError::InvalidField(name),
            ParseError::InvalidAddress(_) => RelayError::InvalidAddress,
        }
    }
}

impl<'a> ClientMessage<'a> {
    /// The wire name of the message type.
    pub fn type_name(&self) -> &'static str {
        match self {
            ClientMessage::Register(_) => "register",
            ClientMessage::Send(_) => "send",
            ClientMessage::Ack { .. } => "ack",
            ClientMessage::Capabilities => "capabilities",
            ClientMessage::ListOnline => "list_online",
            ClientMessage::TurnCredentials => "turn_credentials",
            ClientMessage::OpenPipe { .. } => "open_pipe",
            ClientMessage::PipeData(_) => "pipe_data",
            ClientMessage::ClosePipe { .. } => "close_pipe",
            ClientMessage::FindMatch { .. } => "find_match",
            ClientMessage::JoinRoom { .. } => "join_room",
            ClientMessage::RoomSend { .. } => "room_send",
            ClientMessage::Subscribe { .. } => "subscribe",
            ClientMessage::Unsubscribe { .. } => "unsubscribe",
            ClientMessage::Publish { .. } => "publish",
            ClientMessage::Challenge => "challenge",
        }
    }

    /// Whether the message needs a registered address (`register first` otherwise). Only
    /// `register`, `challenge`, `capabilities` and `list_online` work before: they name no
    /// address and reveal nothing but counts.
    pub fn needs_registration(&self) -> bool {
        !matches!(
            self,
            ClientMessage::Register(_)
                | ClientMessage::Challenge
                | ClientMessage::Capabilities
                | ClientMessage::ListOnline
        )
    }

    /// Whether the message tears something down (`close_pipe`, `unsubscribe`): never refused by
    /// the rate limiter, since refusing it would keep load in place.
    pub fn is_teardown(&self) -> bool {
        matches!(self, ClientMessage::ClosePipe { .. } | ClientMessage::Unsubscribe { .. })
    }
}

/// Parses one frame (a TCP frame body, a WebSocket text message or a UDP datagram).
pub fn parse(frame: &[u8]) -> Result<ClientMessage<'_>, ParseError> {
    let text = std::str::from_utf8(frame)
        .map_err(|e| ParseError::InvalidJson { offset: e.valid_up_to(), expected: "UTF-8 text" })?;
    let members = scan::scan_object(text)
        .map_err(|e| ParseError::InvalidJson { offset: e.offset, expected: e.reason })?;
    let fields = Fields { members: &members };
    let t = match fields.unique("t") {
        Ok(Some(Member { value: Value::Str(t), .. })) => t.to_text(),
        _ => return Err(ParseError::UnknownMessageType),
    };
    let message = match &*t {
        "register" => ClientMessage::Register(Register {
            addr: fields.optional_address("addr")?,
            pubkey: fields.optional_text("pubkey")?,
            sig: fields.optional_text("sig")?,
            username: fields.optional_text("username")?,
            password: fields.optional_text("password")?,
            token: fields.optional_text("token")?,
        }),
        "send" => ClientMessage::Send(Send {
            to: fields.required_address("to")?,
            ct: fields.required_str("ct")?,
            public_key: fields.optional_str("pub")?,
            nonce: fields.optional_str("nonce")?,
            id: fields.optional_str("id")?,
        }),
        "ack" => ClientMessage::Ack { to: fields.required_address("to")?, id: fields.required_str("id")? },
        "capabilities" => ClientMessage::Capabilities,
        "list_online" => ClientMessage::ListOnline,
        "turn_credentials" => ClientMessage::TurnCredentials,
        "challenge" => ClientMessage::Challenge,
        "open_pipe" => ClientMessage::OpenPipe { to: fields.required_address("to")? },
        "pipe_data" => {
            let pipe_id = fields.required_text("pipe_id")?;
            let fields =
                members.iter().filter(|m| m.key != "t" && m.key != "pipe_id").map(|m| m.span).collect();
            ClientMessage::PipeData(PipeData { pipe_id, fields })
        }
        "close_pipe" => ClientMessage::ClosePipe { pipe_id: fields.required_text("pipe_id")? },
        "find_match" => ClientMessage::FindMatch { game: fields.required_name("game")? },
        "join_room" => ClientMessage::JoinRoom { room: fields.required_name("room")? },
        "room_send" => {
            ClientMessage::RoomSend { room: fields.required_name("room")?, ct: fields.required_str("ct")? }
        }
        "subscribe" => ClientMessage::Subscribe { topic: fields.required_text("topic")? },
        "unsubscribe" => ClientMessage::Unsubscribe { topic: fields.required_text("topic")? },
        "publish" => ClientMessage::Publish {
            topic: fields.required_text("topic")?,
            ct: fields.required_str("ct")?,
            retain: fields.optional_bool("retain")?.unwrap_or(false),
        },
        _ => return Err(ParseError::UnknownMessageType),
    };
    Ok(message)
}

/// Field lookup over the scanned members.
struct Fields<'m, 'a> {
    members: &'m [Member<'a>],
}

impl<'m, 'a> Fields<'m, 'a> {
    /// The member named `name`; an error if it occurs more than once.
    fn unique(&self, name: &'static str) -> Result<Option<&'m Member<'a>>, ParseError> {
        let mut found = None;
        for member in self.members {
            if member.key == name {
                if found.is_some() {
                    return Err(ParseError::InvalidField(name));
                }
                found = Some(member);
            }
        }
        Ok(found)
    }

    /// A string field that may be absent or `null`.
    fn optional_str(&self, name: &'static str) -> Result<Option<JsonStr<'a>>, ParseError> {
        match self.unique(name)?.map(|m| m.value) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(_) => Err(ParseError::InvalidField(name)),
        }
    }

    fn required_str(&self, name: &'static str) -> Result<JsonStr<'a>, ParseError> {
        self.optional_str(name)?.ok_or(ParseError::InvalidField(name))
    }

    fn optional_text(&self, name: &'static str) -> Result<Option<Cow<'a, str>>, ParseError> {
        Ok(self.optional_str(name)?.map(|s| s.to_text()))
    }

    fn required_text(&self, name: &'static str) -> Result<Cow<'a, str>, ParseError> {
        Ok(self.required_str(name)?.to_text())
    }

    fn optional_address(&self, name: &'static str) -> Result<Option<Cow<'a, str>>, ParseError> {
        let addr = self.optional_text(name)?;
        match &addr {
            Some(a) if !address::is_valid_address(a) => Err(ParseError::InvalidAddress(name)),
            _ => Ok(addr),
        }
    }

    fn required_address(&self, name: &'static str) -> Result<Cow<'a, str>, ParseError> {
        self.optional_address(name)?.ok_or(ParseError::InvalidField(name))
    }

    /// A room name or game tag: 1–256 characters.
    fn required_name(&self, name: &'static str) -> Result<Cow<'a, str>, ParseError> {
        let text = self.required_text(name)?;
        if text.is_empty() || text.chars().nth(MAX_NAME_CHARS).is_some() {
            return Err(ParseError::InvalidField(name));
        }
        Ok(text)
    }

    fn optional_bool(&self, name: &'static str) -> Result<Option<bool>, ParseError> {
        match self.unique(name)?.map(|m| m.value) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(ParseError::InvalidField(name)),
        }
    }
}
