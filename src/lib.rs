//! `mesgd`: the broker daemon — configuration, listeners and the protocol front ends over the
//! core in `mesgd-core`.
//!
//! # Layout
//!
//! - [`config`]: the TOML configuration, its defaults and validation.
//! - [`server`]: [`server::Server`] — binds listeners, runs the timer and `$SYS` tasks, shuts
//!   down in order.
//! - `mqtt`: the MQTT front end (handshake, per-connection task), over any byte stream.
//! - [`tls`]: listener TLS — certificates, client-certificate verification, SIGHUP reload.
//! - `ws`: MQTT over WebSocket — the HTTP upgrade and binary frames as a byte stream.
//! - [`persist`]: durable broker state in `state.db` — the journal writer and recovery.
//! - [`login_guard`]: slowing down repeated authentication failures.
//! - `linger`: closing a connection so that the peer reads our last packet.
//! - [`logging`]: `tracing` set-up for the binary.

pub mod config;
mod linger;
pub mod logging;
pub mod login_guard;
mod mqtt;
pub mod persist;
pub mod server;
pub mod tls;
mod ws;

pub use server::Server;
