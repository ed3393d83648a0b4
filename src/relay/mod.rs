//! The JSON relay front end (`relay-tcp`, `relay-ws` and `relay-udp` listeners) over the
//! sans-I/O relay in `mesgd_core::relay` and the broker's client operations.
//!
//! A relay client is admitted by the provider chain like an MQTT client, under a session whose
//! key is its address (`SessionKey::relay`), so the broker's session registry is the address
//! registry and the client's pub/sub uses the same router, retained store and ACL checks as
//! MQTT. Direct messages, rooms, pipes, matchmaking and the offline queues are the relay's own,
//! in the [`Hub`].
//!
//! # Layout
//!
//! - [`config`]: the `[relay]` and `[relay.turn]` tables and the settings derived from them.
//! - [`hub`]: [`Hub`], the relay's shared state (directory, offline queues and alias bindings,
//!   rooms, pipes, matchmaking), and [`Restored`], what `state.db` gives back at start; its
//!   `remote_pipes` holds, with `[cluster]`, the ends of pipes whose other end is on another
//!   node.
//! - `outbox`: a client's bounded outbound frame queue, written by any task, emptied by the
//!   client's own.
//! - `client`: one client's protocol state whatever the transport: frames in, registration,
//!   deliveries from its session, identity changes, the durability gate.
//! - `register`: the asynchronous part of `register` — the provider chain and admission.
//! - `cluster`: with `[cluster]`, the relay's side of the cluster seams (writing frames that
//!   other nodes send to this node's clients).
//! - `handlers`: what each message of a registered client does.
//! - `stream`: the poll loop of a TCP or WebSocket connection; `tcp` and `ws` are their
//!   framings (and the WebSocket route); `udp` is the one socket task of a UDP listener.
//! - [`stats`]: the counters; `sys`: them and the structures' sizes as `$SYS/broker/relay/…`.

pub mod config;
pub mod hub;
pub mod stats;

mod client;
pub(crate) mod cluster;
mod handlers;
mod outbox;
mod register;
mod stream;
pub(crate) mod sys;
pub(crate) mod tcp;
pub(crate) mod udp;
pub(crate) mod ws;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use self::config::RelayConfig;
pub use self::hub::{Hub, Restored};
pub use self::stats::{RelayStats, Sizes};
use crate::context::ServerContext;

/// How often expired offline messages are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Removes expired offline messages every [`SWEEP_EVERY`] until `stop` changes.
pub(crate) async fn sweep_loop(ctx: Arc<ServerContext>, mut stop: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(SWEEP_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = ticker.tick() => ctx.relay.expire(crate::clock::now()),
        }
    }
}

/// The transport name a relay listener has in `capabilities`, or `None` for other kinds.
pub(crate) fn transport_name(kind: crate::config::ListenerKind, tls: bool) -> Option<&'static str> {
    use crate::config::ListenerKind;
    match (kind, tls) {
        (ListenerKind::RelayTcp, false) => Some("tcp"),
        (ListenerKind::RelayTcp, true) => Some("tls"),
        (ListenerKind::RelayWs, false) => Some("ws"),
        (ListenerKind::RelayWs, true) => Some("wss"),
        (ListenerKind::RelayUdp, _) => Some("udp"),
        _ => None,
    }
}
