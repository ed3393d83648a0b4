//! The sans-I/O part of the JSON relay (seed 001): codecs, message catalogue, address rules and
//! the relay's own state, as plain data structures with time passed in.
//!
//! Nothing here opens a socket, reads a clock or talks to the broker. The transport tasks (TCP,
//! WebSocket, UDP) decode frames with [`frame`], parse them with [`parse`], consult the state
//! types below, and encode what the state types say must be sent with [`ServerMessage`]. The
//! state types are generic over the transport's connection handle `H` and return *effects*
//! (who must be told what) rather than sending anything. The protocol decisions are written
//! down in `docs/relay.md`.
//!
//! # Handling a `register`
//!
//! The pieces are meant to be applied in this order, so that a refused registration changes
//! nothing and each refusal has the answer `docs/relay.md` documents:
//!
//! 1. [`parse`] → [`ClientMessage::Register`] (`invalid json`, `invalid field: …`, `invalid
//!    address`); a connection that already holds an address gets `already registered`;
//! 2. [`Load::refuses_register`] → `relay overloaded, retry later`;
//! 3. [`Claim::from_register`] → `invalid address`, `invalid pubkey`;
//! 4. [`KeyProof::check`] with the connection's challenge, taken (single use) →
//!    `key proof required`, `invalid signature`, `invalid pubkey`;
//! 5. the provider chain and the ACL (`not authorized`), then the address registry (`address in
//!    use`) — the broker's part;
//! 6. for [`Claim::Plain`] and [`Claim::Alias`], [`AliasBindings::claim`] (`alias bound to a
//!    different key`, `limit reached: alias bindings`), journalling a new binding;
//! 7. commit, then [`OfflineQueues::flush`]: the entries as `deliver` frames, then
//!    `registered{addr, queued}`.
//!
//! # Layout
//!
//! - [`frame`]: TCP length-prefix framing and the frame-size limits of every transport.
//! - [`error`]: [`RelayError`] and the exact `msg` strings of `error` frames ([`msg`]).
//! - `json` and `scan` (private): writing JSON into a buffer, [`JsonStr`], and the validating
//!   scanner that lists a frame's top-level members without building a tree.
//! - [`client`]: the client → relay catalogue, [`ClientMessage`] and [`parse`].
//! - [`server`]: the relay → client catalogue, [`ServerMessage`] and its encoder.
//! - [`payload`]: `ct` ↔ MQTT payload mapping.
//! - [`address`]: address rules, [`PublicKey`], derived addresses, [`Claim`].
//! - [`keyproof`]: the signed-nonce key proof ([`KeyProof`], [`Challenge`]).
//! - [`aliases`]: [`AliasBindings`], alias → key, first key wins.
//! - [`turn`]: TURN REST API credentials.
//! - [`limits`]: [`RateLimiter`] with the abuse threshold, and the UDP [`Amplification`] budget.
//! - [`store`]: [`OfflineQueues`], the store-and-forward queues.
//! - [`rooms`], [`pipes`], [`matchmaking`]: [`Rooms`], [`Pipes`], [`Matchmaker`].
//! - [`capabilities`]: [`Load`] and the `capabilities` reply.
//! - [`resources`]: the reserved `$relay/…` topics through which ACL rules cover addresses,
//!   rooms and games.

pub mod address;
pub mod aliases;
pub mod capabilities;
pub mod client;
pub mod error;
pub mod frame;
mod json;
pub mod keyproof;
pub mod limits;
pub mod matchmaking;
pub mod payload;
pub mod pipes;
pub mod resources;
pub mod rooms;
mod scan;
pub mod server;
pub mod store;
pub mod turn;

#[cfg(test)]
mod tests;

pub use address::{Claim, PublicKey, derive_address, is_derived_shape, validate_address, validate_alias};
pub use aliases::{AliasBindings, AliasClaim};
pub use capabilities::{Capabilities, ClientLimits, Load, LoadTier};
pub use client::{ClientMessage, ParseError, parse};
pub use error::{Limit, RelayError, msg};
pub use frame::FrameError;
pub use json::JsonStr;
pub use keyproof::{Challenge, KeyProof};
pub use limits::{Amplification, RateLimiter, RateLimits, Verdict};
pub use matchmaking::{MatchLimits, MatchOutcome, Matchmaker};
pub use payload::{CtEncoding, MqttCt, mqtt_payload};
pub use pipes::{PipeLimits, Pipes};
pub use resources::{RELAY_TOPIC_ROOT, Resource, is_relay_topic};
pub use rooms::{RoomLimits, Rooms};
pub use server::{Deliver, DeliverKind, ServerMessage};
pub use store::{EntryId, OfflineQueues, QueueLimits};
pub use turn::{TurnConfig, TurnCredentials};
