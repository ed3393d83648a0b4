//! The MQTT front end: the handshake and the per-connection task, over any byte stream — plain
//! TCP, TLS, and WebSocket binary frames seen as a stream.
//!
//! # Layout
//!
//! - [`handshake`]: CONNECT → validation → authenticator chain → session takeover/resume →
//!   CONNACK.
//! - [`connection`]: the connected client's poll loop and packet handlers.
//! - [`checks`]: the rules a client's message meets, as a PUBLISH or as a will.
//! - [`ws`]: MQTT over WebSocket — the HTTP route (subprotocol `mqtt`) and binary frames as a
//!   byte stream.

mod checks;
mod connection;
mod handshake;
pub(crate) mod ws;

use std::net::SocketAddr;
use std::sync::Arc;

use mesgd_core::auth::TlsInfo;
use mesgd_core::mqtt::QoS;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use crate::config::Config;
use crate::context::ServerContext;

/// Protocol settings derived from the configuration, shared by every connection.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) max_packet_size: u32,
    pub(crate) max_inflight: u16,
    pub(crate) max_topic_levels: usize,
    pub(crate) max_topic_alias: u16,
    pub(crate) max_keep_alive: u16,
    pub(crate) max_session_expiry: u32,
    pub(crate) max_topic_length: usize,
    pub(crate) max_subscriptions_per_client: usize,
    pub(crate) retain_available: bool,
    pub(crate) max_qos: QoS,
    pub(crate) wildcard_subscriptions: bool,
    pub(crate) shared_subscriptions: bool,
    pub(crate) subscription_identifiers: bool,
    /// `mqtt.park_idle_ms`, when parking is on.
    pub(crate) park_idle: Option<std::time::Duration>,
}

impl Settings {
    pub(crate) fn from_config(c: &Config) -> Self {
        let l = &c.limits;
        Settings {
            max_packet_size: l.max_packet_size,
            max_inflight: l.max_inflight,
            max_topic_levels: l.max_topic_levels,
            max_topic_alias: l.max_topic_alias,
            max_keep_alive: l.max_keep_alive,
            max_session_expiry: l.max_session_expiry,
            max_topic_length: l.max_topic_length,
            max_subscriptions_per_client: l.max_subscriptions_per_client,
            retain_available: c.mqtt.retain_available,
            max_qos: QoS::try_from(c.mqtt.max_qos).unwrap_or(QoS::ExactlyOnce),
            wildcard_subscriptions: c.mqtt.wildcard_subscriptions,
            shared_subscriptions: c.mqtt.shared_subscriptions,
            subscription_identifiers: c.mqtt.subscription_identifiers,
            park_idle: (c.mqtt.park_idle_ms > 0)
                .then(|| std::time::Duration::from_millis(c.mqtt.park_idle_ms)),
        }
    }
}

/// Serves one MQTT connection on `stream` until it ends (or parks: then its task ends and the
/// connection, with `slot`, lives on in a parking lot; see `crate::park`). CONNECT must have
/// arrived by `deadline` (the connection's accept time plus `limits.connect_timeout_ms`, so
/// that a TLS handshake or an HTTP upgrade before it uses up the same allowance). Without
/// `slot` (the caller holds it) the connection never parks.
///
/// The returned future is what an idle connection costs in memory, so it is built to hold
/// little: the handshake (large, short-lived) is boxed here, before the future exists, and the
/// connection it produces lives in a box of its own.
pub(crate) fn serve<S>(
    stream: S,
    peer: SocketAddr,
    listener: Arc<str>,
    tls: Option<TlsInfo>,
    ctx: Arc<ServerContext>,
    deadline: std::time::Instant,
    slot: Option<crate::listener::ConnectionSlot>,
) -> impl std::future::Future<Output = ()> + Send
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let span = tracing::info_span!("mqtt", %peer, listener = %listener, client_id = tracing::field::Empty);
    let handshake = Box::pin(handshake::handshake(stream, peer, listener, tls, ctx.clone(), deadline));
    async move {
        match handshake.await {
            Ok(mut connection) => {
                if let Some(slot) = slot {
                    connection.hold_slot(slot);
                }
                ctx.broker.stats().clients_connected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                connection.run().await;
            }
            Err(handshake::Refused::Silent(why)) => tracing::debug!(why, "connection closed before CONNECT"),
            Err(handshake::Refused::Malformed(e)) => tracing::info!(error = %e, "malformed CONNECT: closing"),
            Err(handshake::Refused::Answered(code, why)) => {
                tracing::info!(reason = ?code, %why, "connection refused")
            }
        }
    }
    .instrument(span)
}
