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
//! - [`model`]: the leaf model every layer shares — [`model::Message`], [`model::QoS`],
//!   subscribe options, [`model::Delivery`], [`model::Will`], [`model::SessionKey`],
//!   [`model::SessionExpiry`], [`model::Kick`].
//! - [`session`]: [`session::Session`] — subscriptions, the receiver ACL, the protocol-neutral
//!   mailbox, and MQTT's delivery state (in-flight window, inbound QoS 2); woken connections
//!   drain it.
//! - [`router`]: the sharded subscription index and the fan-out of one publish.
//! - [`retained`]: the retained-message store.
//! - [`journal`]: the [`journal::Change`]s to durable state the core records for a persistence
//!   layer, and the [`journal::Journal`] trait it records them into.
//! - [`content`]: content-based routing — listener paths on JSON messages, the validating
//!   top-level scanner, the lock-free indexed [`content::Matcher`], coverage for grants, and
//!   the pattern compiler.
//! - [`broker`]: [`broker::Broker`] — the client operations every front end calls (admit,
//!   publish and subscribe as an identity, refresh a live identity), the session registry,
//!   wills, expiry timers and statistics, over the router and the retained store.
//! - [`sync`]: the poison-recovering lock helpers.
//! - [`log_text`]: client-chosen text (client ids, usernames) in log lines, bounded.
//! - [`histogram`]: the lock-free fixed-bucket latency histogram (authentication, journal
//!   commits) that the metrics exporter reads.
//! - [`cluster`]: the sans-I/O parts of a cluster over NATS — the topic → subject mapping, the
//!   duplicate filter for overlapping subscriptions, the router's [`cluster::Interest`] seam,
//!   and the session registry's seam and formats ([`cluster::registry`], [`cluster::client_key`]).
//! - [`relay`]: the sans-I/O JSON relay — framing, the message catalogue, address rules and key
//!   proof, and the relay's own state (offline queues, rooms, pipes, matchmaking, rate limits).
//! - [`websocket`]: the server side of WebSocket framing (RFC 6455) — a decoder that holds no
//!   buffer of its own, and the server's frames — for connections that read onto the stack
//!   while idle.

pub mod acl;
pub mod auth;
pub mod broker;
pub mod cluster;
pub mod content;
pub mod histogram;
pub mod journal;
pub mod log_text;
pub mod model;
pub mod mqtt;
pub mod relay;
pub mod retained;
pub mod router;
pub mod session;
pub mod sync;
pub mod topic;
pub mod trie;
pub mod websocket;

#[cfg(test)]
mod fuzz_replay;
