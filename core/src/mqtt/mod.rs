//! The sans-I/O MQTT 3.1 / 3.1.1 / 5.0 codec.
//!
//! [`decode`] turns the front of a receive buffer into a [`Packet`] (or says it needs more
//! bytes), and [`decode_into`] does the same for a connection's hot path, decoding a PUBLISH
//! into a slot the caller reuses; [`encode`] appends a packet's bytes to a send buffer. Neither
//! touches a socket or a clock, so front ends over TCP, TLS and WebSocket share them, and they
//! can be fuzzed and property-tested on their own.
//!
//! The codec enforces everything a packet says about itself: framing, fixed header flags, string
//! and integer encodings, which properties and reason codes a packet may carry, and the value
//! ranges of the specifications. It does not judge what a packet means in its connection (topic
//! name and filter syntax, topic alias resolution, packet identifier state, client identifier
//! rules): the broker does, with its own validated types.
//!
//! # Decisions where the specifications leave room
//!
//! - Variable byte integers must be in their shortest form ([MQTT-1.5.5-1]); longer encodings
//!   are malformed.
//! - DUP on a QoS 0 PUBLISH is refused in 3.1.1 and 5.0 ([MQTT-3.3.1-2]) but accepted in 3.1,
//!   which has no such rule. 3.1 clients also send PUBREL, SUBSCRIBE and UNSUBSCRIBE as QoS 1
//!   messages with DUP set on retries, so 3.1 accepts flags `0b1010` there as well as `0b0010`.
//! - A 3.1 CONNECT whose user name or password flag is set but whose field is missing at the
//!   end of the packet is read as if the flag were clear (what Mosquitto does for old clients).
//! - A 3.1 CONNACK's first byte is reserved: it is ignored when read and written as 0, so
//!   `session_present` is always false in 3.1.
//! - An unknown protocol name is reported with reason code 0x84 like an unknown level: either
//!   way the server does not speak the client's protocol.
//! - AUTH with a reason code and no property length is accepted, as DISCONNECT allows.
//! - The encoder refuses what the decoder would refuse (strings with U+0000 or over 65,535
//!   bytes, out-of-range property values, reason codes the packet cannot carry, packet
//!   identifier 0 …), so bytes this codec sends always decode.
//! - `Debug` of CONNECT and of the properties carrying authentication data shows only the length
//!   of the password and of that data.
//!
//! # Layout
//!
//! - `packet`: the packet model ([`Packet`] and one struct per packet), [`ProtocolVersion`],
//!   [`QoS`], [`SubscriptionOptions`].
//! - `properties`: the MQTT 5.0 property sets and their per-packet rules.
//! - `reason`: [`ReasonCode`], which packet may carry which code, the 3.x return codes.
//! - `wire`: the data representations (integers, variable byte integers, strings, binary data)
//!   and the two-pass [`encode`] machinery.
//! - `decode`, `encode`: the two directions.
//! - `error`: [`DecodeError`] with the reason code each error calls for, [`EncodeError`].

mod decode;
mod encode;
mod error;
mod forward;
mod packet;
mod properties;
mod reason;
mod wire;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;

#[cfg(test)]
mod tests;

pub use decode::{Decoded, decode, decode_into};
pub use encode::{encode, encode_plain_publish, encoded_len};
pub use error::{DecodeError, EncodeError};
pub use packet::{
    Auth, ConnAck, Connect, Disconnect, Packet, PacketType, ProtocolVersion, PubResponse, Publish, QoS,
    RetainHandling, SubAck, Subscribe, SubscriptionOptions, UnsubAck, Unsubscribe, Will,
};
pub use properties::{
    AckProperties, AuthProperties, ConnAckProperties, ConnectProperties, DisconnectProperties,
    PublishProperties, SubscribeProperties, UnsubscribeProperties, WillProperties,
};
pub use reason::{ReasonCode, UnknownReasonCode};
pub use wire::{MAX_VAR_INT, decode_var_int, encode_var_int, var_int_len};
