//! `mesgd-core`: the protocol-agnostic heart of mesgd.
//!
//! Everything here is free of sockets and of a particular async runtime's I/O: front ends
//! (MQTT over TCP/TLS/WebSocket, the JSON relay over TCP/WebSocket/UDP) decode bytes into the
//! types of this crate, ask it who a client is and what it may see, and hand it messages to
//! route.
//!
//! # Layout
//!
//! - [`topic`]: validated [`topic::TopicName`] and [`topic::TopicFilter`] newtypes, shared
//!   subscription names, and filter matching.
//! - [`trie`]: the subscription trie (`+`, `#`, `$`-topics) and the retained-message topic tree.
//! - [`acl`]: ACL rules (`{pattern, permission}`), their compiled per-client form, the
//!   allocation-free read/write check and the exact subscribe-intersection check.
//! - [`auth`]: [`auth::ConnectInfo`], [`auth::Identity`], the dyn-compatible
//!   [`auth::Authenticator`] trait with its three-way [`auth::Outcome`], and the ordered
//!   [`auth::Chain`] of providers.
//! - [`mqtt`]: the sans-I/O MQTT 3.1 / 3.1.1 / 5.0 codec (`decode` / `encode`).
//! - [`message`]: the protocol-neutral [`message::Message`] shared by every subscriber.
//! - [`session`]: [`session::Session`] — subscriptions, the outbound queue and in-flight
//!   window, QoS 2 state, the receiver ACL; woken connections drain it.
//! - [`router`]: the sharded subscription index and the fan-out of one publish.
//! - [`retained`]: the retained-message store.
//! - [`journal`]: the [`journal::Change`]s to durable state the core records for a persistence
//!   layer, and the [`journal::Journal`] trait it records them into.
//! - [`broker`]: [`broker::Broker`] — the session registry, takeover locks, wills, expiry timers
//!   and statistics, over the router and the retained store.
//! - [`relay`]: the sans-I/O JSON relay — framing, the message catalogue, address rules and key
//!   proof, and the relay's own state (offline queues, rooms, pipes, matchmaking, rate limits).

pub mod acl;
pub mod auth;
pub mod broker;
pub mod journal;
pub mod message;
pub mod mqtt;
pub mod relay;
pub mod retained;
pub mod router;
pub mod session;
pub mod topic;
pub mod trie;
