//! `mesgd`: the broker daemon — configuration, listeners and the protocol front ends over the
//! core in `mesgd-core`.
//!
//! # Layout
//!
//! - [`accounts`]: login sessions and grant tokens on the `http` listener (`/auth`,
//!   `/account`).
//! - [`config`]: the TOML configuration, its defaults and validation.
//! - [`server`]: [`server::Server`] — binds listeners, runs the timer and `$SYS` tasks, shuts
//!   down in order.
//! - [`context`]: [`context::ServerContext`], what every front end shares (broker, chain, login
//!   guard, the providers' services, per-protocol settings).
//! - `listener`: accepting connections and handing each to its front end by listener kind.
//! - `http`: the HTTP stack (hyper + axum) and the generic WebSocket upgrade.
//! - [`content`]: content routing: WebSocket listeners on URL paths of the `http` listener,
//!   their admission, and the pattern compiler's command and HTTP interface.
//! - `mqtt`: the MQTT front end (handshake, per-connection task, MQTT over WebSocket), over any
//!   byte stream.
//! - [`relay`]: the JSON relay front end (TCP, WebSocket, UDP) and its shared state.
//! - [`tls`]: listener TLS — certificates, client-certificate verification, SIGHUP reload.
//! - [`persist`]: durable broker state in `state.db` — the journal writer and recovery.
//! - [`login_guard`]: slowing down repeated authentication failures (and locking out, for
//!   administrators).
//! - [`metrics`]: the Prometheus registry `/metrics` serves, and how front ends add to it.
//! - [`limits`]: per-address connection counts, exempt networks, limit counters and the
//!   once-per-interval log of a tripped limit, for every front end.
//! - `clock`: the clock the front ends read (Tokio's, so tests can pause it).
//! - `linger`: closing a connection so that the peer reads our last packet.
//! - `park`: idle connections parked together, without a task or a timer of their own.
//! - [`logging`]: `tracing` set-up for the binary.

pub mod accounts;
mod clock;
pub mod config;
pub mod content;
pub mod context;
mod http;
mod interned;
mod lean_read;
pub mod limits;
mod linger;
mod listener;
pub mod logging;
pub mod login_guard;
pub mod metrics;
mod mqtt;
mod park;
pub mod persist;
pub mod relay;
pub mod server;
pub mod tls;

pub use server::Server;
