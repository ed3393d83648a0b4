//! The relay's refusals and the exact `msg` strings of its `error` frames.
//!
//! The seed's error reference fixes ten strings; clients match on them, so they live here once,
//! as constants in [`msg`], and [`RelayError`] maps every refusal onto one of them or onto one of
//! the strings mesgd adds for cases the seed does not cover (a field of the wrong type, key
//! proof, pipes, caps). Additions follow the seed's style: short, lowercase, no trailing period.
//! No message echoes client data: a wrong field is named, never its value.

use std::borrow::Cow;
use std::fmt;

/// The `msg` strings of `error` frames.
pub mod msg {
    /// Seed: the address is empty or over 256 characters (mesgd also: it has the shape of a
    /// derived address but no matching key).
    pub const INVALID_ADDRESS: &str = "invalid address";
    /// Seed: someone else currently holds that exact address.
    pub const ADDRESS_IN_USE: &str = "address in use";
    /// Seed: `pubkey` was not valid base64 (mesgd also: not a 32-byte Ed25519 key where one is
    /// needed, or empty, or longer than 512 bytes).
    pub const INVALID_PUBKEY: &str = "invalid pubkey";
    /// Seed: the alias is bound to another key.
    pub const ALIAS_BOUND: &str = "alias bound to a different key";
    /// Seed: the relay is under heavy load.
    pub const OVERLOADED: &str = "relay overloaded, retry later";
    /// Seed: a message that needs an address came before a successful `register`.
    pub const REGISTER_FIRST: &str = "register first";
    /// Seed: `room_send` without a prior `join_room`.
    pub const JOIN_ROOM_FIRST: &str = "join a room first";
    /// Seed: the per-connection message or byte budget is exhausted.
    pub const RATE_LIMITED: &str = "rate limit exceeded";
    /// Seed: the `t` field did not match anything in the catalogue.
    pub const UNKNOWN_MESSAGE_TYPE: &str = "unknown message type";
    /// Seed: the frame was not parseable JSON (mesgd: on every transport, and also when it is
    /// JSON but not an object).
    pub const INVALID_JSON: &str = "invalid json";

    /// mesgd: the prefix of "invalid field: NAME", a known message type whose field `NAME` is
    /// missing, of the wrong JSON type, or repeated.
    pub const INVALID_FIELD_PREFIX: &str = "invalid field: ";
    /// mesgd: a frame (or a message once forwarded) is over the transport's size limit.
    pub const FRAME_TOO_LARGE: &str = "frame too large";
    /// mesgd: `require_key_proof` is on and a `register` with a `pubkey` carries no `sig`, or
    /// no `challenge` was asked for first.
    pub const KEY_PROOF_REQUIRED: &str = "key proof required";
    /// mesgd: the `sig` of a `register` does not verify.
    pub const INVALID_SIGNATURE: &str = "invalid signature";
    /// mesgd: a second `register` on a connection that already holds an address.
    pub const ALREADY_REGISTERED: &str = "already registered";
    /// mesgd: `open_pipe` to an address that is not connected right now.
    pub const PEER_NOT_CONNECTED: &str = "peer not connected";
    /// mesgd: `open_pipe` to the connection's own address.
    pub const PIPE_TO_SELF: &str = "cannot open a pipe to yourself";
    /// mesgd: `pipe_data` with a `pipe_id` this connection is not an end of.
    pub const UNKNOWN_PIPE: &str = "unknown pipe";
    /// mesgd: a `subscribe`, `unsubscribe` or `publish` topic that is not a valid filter or
    /// name (for `publish`: it has wildcards).
    pub const INVALID_TOPIC: &str = "invalid topic";
    /// mesgd: the client's ACL does not allow the topic, address, room or game.
    pub const NOT_AUTHORIZED: &str = "not authorized";
    /// mesgd: the connection's output waiting to be sent passed `[relay] max_output_bytes` (it
    /// stopped reading); sent with `fatal: true` as the connection is closed.
    pub const OUTPUT_LIMIT: &str = "output limit exceeded";
    /// mesgd: the prefix of "limit reached: WHAT", a count cap of the relay's state.
    pub const LIMIT_REACHED_PREFIX: &str = "limit reached: ";
}

/// A count cap of the relay's state that a request ran into. The name appears in the error
/// message after "limit reached: ".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// Pipes one connection is an end of.
    PipesPerConnection,
    /// Pipes relay-wide.
    Pipes,
    /// Rooms one connection is a member of.
    RoomsPerConnection,
    /// Members of one room.
    RoomMembers,
    /// Rooms relay-wide.
    Rooms,
    /// Games one connection waits in.
    GamesPerConnection,
    /// Waiting callers relay-wide.
    MatchWaiters,
    /// Alias bindings relay-wide.
    AliasBindings,
    /// Topic subscriptions of one connection.
    Subscriptions,
}

impl Limit {
    /// The name used in the error message.
    pub fn name(self) -> &'static str {
        match self {
            Limit::PipesPerConnection => "pipes per connection",
            Limit::Pipes => "pipes",
            Limit::RoomsPerConnection => "rooms per connection",
            Limit::RoomMembers => "room members",
            Limit::Rooms => "rooms",
            Limit::GamesPerConnection => "games per connection",
            Limit::MatchWaiters => "match waiters",
            Limit::AliasBindings => "alias bindings",
            Limit::Subscriptions => "subscriptions per connection",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A refusal the relay answers with an `error` frame. [`RelayError::message`] is its `msg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// [`msg::INVALID_ADDRESS`].
    #[error("{}", msg::INVALID_ADDRESS)]
    InvalidAddress,
    /// [`msg::ADDRESS_IN_USE`].
    #[error("{}", msg::ADDRESS_IN_USE)]
    AddressInUse,
    /// [`msg::INVALID_PUBKEY`].
    #[error("{}", msg::INVALID_PUBKEY)]
    InvalidPubkey,
    /// [`msg::ALIAS_BOUND`].
    #[error("{}", msg::ALIAS_BOUND)]
    AliasBound,
    /// [`msg::OVERLOADED`].
    #[error("{}", msg::OVERLOADED)]
    Overloaded,
    /// [`msg::REGISTER_FIRST`].
    #[error("{}", msg::REGISTER_FIRST)]
    RegisterFirst,
    /// [`msg::JOIN_ROOM_FIRST`].
    #[error("{}", msg::JOIN_ROOM_FIRST)]
    JoinRoomFirst,
    /// [`msg::RATE_LIMITED`].
    #[error("{}", msg::RATE_LIMITED)]
    RateLimited,
    /// [`msg::UNKNOWN_MESSAGE_TYPE`].
    #[error("{}", msg::UNKNOWN_MESSAGE_TYPE)]
    UnknownMessageType,
    /// [`msg::INVALID_JSON`].
    #[error("{}", msg::INVALID_JSON)]
    InvalidJson,
    /// "invalid field: NAME" ([`msg::INVALID_FIELD_PREFIX`]): the field of a known message
    /// type is missing, of the wrong JSON type, or repeated.
    #[error("{}{}", msg::INVALID_FIELD_PREFIX, .0)]
    InvalidField(&'static str),
    /// [`msg::FRAME_TOO_LARGE`].
    #[error("{}", msg::FRAME_TOO_LARGE)]
    FrameTooLarge,
    /// [`msg::KEY_PROOF_REQUIRED`].
    #[error("{}", msg::KEY_PROOF_REQUIRED)]
    KeyProofRequired,
    /// [`msg::INVALID_SIGNATURE`].
    #[error("{}", msg::INVALID_SIGNATURE)]
    InvalidSignature,
    /// [`msg::ALREADY_REGISTERED`].
    #[error("{}", msg::ALREADY_REGISTERED)]
    AlreadyRegistered,
    /// [`msg::PEER_NOT_CONNECTED`].
    #[error("{}", msg::PEER_NOT_CONNECTED)]
    PeerNotConnected,
    /// [`msg::PIPE_TO_SELF`].
    #[error("{}", msg::PIPE_TO_SELF)]
    PipeToSelf,
    /// [`msg::UNKNOWN_PIPE`].
    #[error("{}", msg::UNKNOWN_PIPE)]
    UnknownPipe,
    /// [`msg::INVALID_TOPIC`].
    #[error("{}", msg::INVALID_TOPIC)]
    InvalidTopic,
    /// [`msg::NOT_AUTHORIZED`].
    #[error("{}", msg::NOT_AUTHORIZED)]
    NotAuthorized,
    /// [`msg::OUTPUT_LIMIT`].
    #[error("{}", msg::OUTPUT_LIMIT)]
    OutputLimit,
    /// "limit reached: WHAT" ([`msg::LIMIT_REACHED_PREFIX`]).
    #[error("{}{}", msg::LIMIT_REACHED_PREFIX, .0)]
    LimitReached(Limit),
}

impl RelayError {
    /// The `msg` of the `error` frame: borrowed for every fixed string, built for the two
    /// families with a name in them.
    pub fn message(&self) -> Cow<'static, str> {
        let fixed = match self {
            RelayError::InvalidAddress => msg::INVALID_ADDRESS,
            RelayError::AddressInUse => msg::ADDRESS_IN_USE,
            RelayError::InvalidPubkey => msg::INVALID_PUBKEY,
            RelayError::AliasBound => msg::ALIAS_BOUND,
            RelayError::Overloaded => msg::OVERLOADED,
            RelayError::RegisterFirst => msg::REGISTER_FIRST,
            RelayError::JoinRoomFirst => msg::JOIN_ROOM_FIRST,
            RelayError::RateLimited => msg::RATE_LIMITED,
            RelayError::UnknownMessageType => msg::UNKNOWN_MESSAGE_TYPE,
            RelayError::InvalidJson => msg::INVALID_JSON,
            RelayError::FrameTooLarge => msg::FRAME_TOO_LARGE,
            RelayError::KeyProofRequired => msg::KEY_PROOF_REQUIRED,
            RelayError::InvalidSignature => msg::INVALID_SIGNATURE,
            RelayError::AlreadyRegistered => msg::ALREADY_REGISTERED,
            RelayError::PeerNotConnected => msg::PEER_NOT_CONNECTED,
            RelayError::PipeToSelf => msg::PIPE_TO_SELF,
            RelayError::UnknownPipe => msg::UNKNOWN_PIPE,
            RelayError::InvalidTopic => msg::INVALID_TOPIC,
            RelayError::NotAuthorized => msg::NOT_AUTHORIZED,
            RelayError::OutputLimit => msg::OUTPUT_LIMIT,
            RelayError::InvalidField(_) | RelayError::LimitReached(_) => {
                return Cow::Owned(self.to_string());
            }
        };
        Cow::Borrowed(fixed)
    }

    /// Whether the message is one of the seed's ten strings (the rest are mesgd's additions).
    pub fn is_seed_message(&self) -> bool {
        matches!(
            self,
            RelayError::InvalidAddress
                | RelayError::AddressInUse
                | RelayError::InvalidPubkey
                | RelayError::AliasBound
                | RelayError::Overloaded
                | RelayError::RegisterFirst
                | RelayError::JoinRoomFirst
                | RelayError::RateLimited
                | RelayError::UnknownMessageType
                | RelayError::InvalidJson
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's error reference, copied from the specification's table.
    const SEED_TABLE: [(RelayError, &str); 10] = [
        (RelayError::InvalidAddress, "invalid address"),
        (RelayError::AddressInUse, "address in use"),
        (RelayError::InvalidPubkey, "invalid pubkey"),
        (RelayError::AliasBound, "alias bound to a different key"),
        (RelayError::Overloaded, "relay overloaded, retry later"),
        (RelayError::RegisterFirst, "register first"),
        (RelayError::JoinRoomFirst, "join a room first"),
        (RelayError::RateLimited, "rate limit exceeded"),
        (RelayError::UnknownMessageType, "unknown message type"),
        (RelayError::InvalidJson, "invalid json"),
    ];

    #[test]
    fn seed_strings_are_exact() {
        for (error, text) in SEED_TABLE {
            assert_eq!(error.message(), text);
            assert_eq!(error.to_string(), text);
            assert!(error.is_seed_message(), "{text}");
        }
    }

    #[test]
    fn named_families_carry_the_name() {
        assert_eq!(RelayError::InvalidField("to").message(), "invalid field: to");
        assert_eq!(
            RelayError::LimitReached(Limit::RoomsPerConnection).message(),
            "limit reached: rooms per connection"
        );
        assert!(!RelayError::InvalidField("to").is_seed_message());
    }

    #[test]
    fn message_and_display_agree() {
        let all = [
            RelayError::FrameTooLarge,
            RelayError::KeyProofRequired,
            RelayError::InvalidSignature,
            RelayError::AlreadyRegistered,
            RelayError::PeerNotConnected,
            RelayError::PipeToSelf,
            RelayError::UnknownPipe,
            RelayError::InvalidTopic,
            RelayError::NotAuthorized,
            RelayError::OutputLimit,
            RelayError::LimitReached(Limit::Pipes),
            RelayError::LimitReached(Limit::Subscriptions),
            RelayError::InvalidField("ct"),
        ];
        for error in all.into_iter().chain(SEED_TABLE.map(|(e, _)| e)) {
            assert_eq!(error.message(), error.to_string());
            assert!(!error.message().ends_with('.'));
        }
    }
}
