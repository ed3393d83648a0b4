//! One MQTT connection after CONNACK: a single task that reads, routes, drains its session and
//! writes, all from one poll function.
//!
//! Why one hand-written poll loop instead of `select!` over split halves: the stream is polled
//! for reading and writing in the same call without a lock between halves, the session wakes
//! this very task through the waker it registered, and every read batch is answered with one
//! write. Nothing here awaits while holding state, and every packet handler is synchronous —
//! routing, ACL checks and session updates never wait on I/O.
//!
//! Buffers are allocated when data arrives and released when the connection goes quiet, so an
//! idle connection holds no buffer memory at all.
//!
//! # Layout
//!
//! - this file: the connection's state, how it starts and how it ends (DISCONNECT, will,
//!   session hand-back, lingering close).
//! - [`poll`]: the poll loop — reading with back-pressure, writing, draining the session,
//!   keep-alive and credential expiry, live identity changes.
//! - [`budget`]: publishes paused while the broker-wide queue budget is under pressure.
//! - [`gate`]: output held until the journal has it on disk (durability `always`).
//! - [`output`]: encoding deliveries (topic aliases, expiry, subscription identifiers).
//! - [`park`]: leaving the task while idle, for a shared one (`crate::park`), and coming back.
//! - [`handlers`]: one handler per packet type, over the broker's client operations.

mod budget;
mod gate;
mod handlers;
mod output;
mod park;
mod poll;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mesgd_core::acl::Acl;
use mesgd_core::auth::{Identity, LiveIdentity, Revocation};
use mesgd_core::broker::Stats;
use mesgd_core::journal::Journal;
use mesgd_core::model::{Kick, Will};
use mesgd_core::mqtt::{Disconnect, DisconnectProperties, Packet, PacketType, ProtocolVersion, ReasonCode};
use mesgd_core::session::{Outgoing, Session};
use mesgd_core::topic::TopicName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Sleep;

use self::gate::Held;
use crate::context::ServerContext;

/// How long a closing connection may take to flush its last packets.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);
/// How much unhandled input a connection closed from outside looks through for a DISCONNECT.
const UNHANDLED_READ: usize = 64 * 1024;

/// What the handshake established.
pub(crate) struct Accepted {
    pub(crate) version: ProtocolVersion,
    pub(crate) session: Arc<Session>,
    pub(crate) generation: u64,
    /// The identity's username, shared with the session's client record.
    pub(crate) username: Option<Arc<str>>,
    pub(crate) identity: Identity,
    pub(crate) acl: Acl,
    pub(crate) identity_expires: Option<Instant>,
    pub(crate) keep_alive: Duration,
    /// The will as CONNECT declared it; its ACL is replaced by the connection's current one
    /// when it is handed to the broker.
    pub(crate) will: Option<Will>,
    pub(crate) session_expiry_was_zero: bool,
    pub(crate) client_receive_maximum: u16,
    pub(crate) client_maximum_packet_size: u32,
    pub(crate) client_topic_alias_maximum: u16,
    pub(crate) request_problem_information: bool,
}

/// How a connection ended.
#[derive(Debug)]
enum End {
    /// The client sent DISCONNECT; `with_will` for MQTT 5 reason 0x04.
    ClientDisconnect { with_will: bool },
    /// The client closed the socket without DISCONNECT.
    Closed,
    /// The socket failed.
    Io(io::Error),
    /// Nothing arrived within 1.5 × keep-alive.
    KeepAliveTimeout,
    /// The client broke the protocol.
    Protocol { code: ReasonCode, message: String },
    /// Closed from outside (takeover, shutdown, revocation, an operator).
    Kicked(Kick),
    /// The identity's expiry (a JWT's `exp`) passed.
    IdentityExpired,
    /// The cluster could not store a QoS 1/2 message this connection published (NATS
    /// unreachable past the store timeout): its acknowledgement is never sent.
    StoreFailed,
}

impl End {
    fn protocol(code: ReasonCode, message: impl Into<String>) -> End {
        End::Protocol { code, message: message.into() }
    }

    /// The DISCONNECT reason an MQTT 5 client is told, if the server closes (`None` when the
    /// client ended the connection).
    fn server_reason(&self) -> Option<ReasonCode> {
        match self {
            End::ClientDisconnect { .. } | End::Closed | End::Io(_) => None,
            End::KeepAliveTimeout => Some(ReasonCode::KeepAliveTimeout),
            End::Protocol { code, .. } => Some(*code),
            End::Kicked(kick) => Some(kick_reason(*kick)),
            End::IdentityExpired => Some(ReasonCode::MaximumConnectTime),
            End::StoreFailed => Some(ReasonCode::UnspecifiedError),
        }
    }

    fn publishes_will(&self) -> bool {
        !matches!(self, End::ClientDisconnect { with_will: false })
    }
}

/// The MQTT 5 reason code for a connection closed from outside.
fn kick_reason(kick: Kick) -> ReasonCode {
    match kick {
        Kick::TakenOver => ReasonCode::SessionTakenOver,
        Kick::ShuttingDown => ReasonCode::ServerShuttingDown,
        Kick::Revoked(Revocation::Disabled) => ReasonCode::NotAuthorized,
        Kick::Revoked(Revocation::Deleted) => ReasonCode::AdministrativeAction,
        Kick::ClusterLost => ReasonCode::UseAnotherServer,
        _ => ReasonCode::AdministrativeAction,
    }
}

/// MQTT 5 topic aliases in both directions.
#[derive(Default)]
struct Aliases {
    incoming: HashMap<u16, TopicName>,
    outgoing: HashMap<TopicName, u16>,
}

/// What a connection keeps while it is parked: all it needs to go on where it stopped. An idle
/// client costs this (boxed in its parking lot), not the whole [`Connection`], so what only a
/// busy connection needs (buffers, its timer, scratch space) lives in `Connection`.
pub(crate) struct Core<S> {
    stream: S,
    ctx: Arc<ServerContext>,
    session: Arc<Session>,
    generation: u64,
    username: Option<Arc<str>>,
    acl: Acl,
    /// The provider's live view of the identity, if it keeps one: a change is seen when the
    /// provider wakes the session ([`mesgd_core::broker::Broker::wake_users`]), not awaited.
    live: Option<LiveIdentity>,
    identity_expires: Option<Instant>,
    /// The keep-alive in seconds as negotiated, 0 for none: 2 bytes, where an `Option<Duration>`
    /// would take 16 in every idle connection ([`Core::keep_alive`] is the deadline's span).
    keep_alive_s: u16,
    last_received: Instant,
    /// The listener's slot (connection counts), held until the connection ends.
    slot: Option<crate::listener::ConnectionSlot>,
    /// The connection's span, entered again by a resumed task; `None` when it is disabled (the
    /// log level leaves it out), which is the common case and then costs 8 bytes, not 40.
    span: Option<Box<tracing::Span>>,
    /// Boxed: most clients have no will, and this struct is what an idle connection costs.
    will: Option<Box<Will>>,
    /// Topic aliases, created when the first one is used.
    aliases: Option<Box<Aliases>>,
    client_maximum_packet_size: u32,
    window: u16,
    client_topic_alias_maximum: u16,
    version: ProtocolVersion,
    session_expiry_was_zero: bool,
    request_problem_information: bool,
}

/// A connected MQTT client.
pub(crate) struct Connection<S> {
    core: Core<S>,
    /// When anything was last read or written (for parking).
    last_active: Instant,
    /// Idle this long, the connection parks: set when it holds its listener slot (so that its
    /// task can end), from `mqtt.park_idle_ms`.
    park_idle: Option<Duration>,
    /// The timer found the connection idle for `park_idle`: it parks once this poll is pending.
    park_due: bool,
    /// Parks on its first idle poll after CONNACK, without waiting for `park_idle`.
    just_connected: bool,
    /// Polled by a parking lot: no timer of its own (the lot keeps the deadline).
    parked: bool,
    /// The end a poll in the parking lot found, for the resumed task to finish with.
    ended: Option<Box<End>>,
    /// The time at the start of the current poll: one clock read serves the whole batch.
    now: Instant,
    /// Whether this poll routed a message to someone (see `poll_run`).
    routed: bool,
    /// Messages received by the `handle_input` under way, counted when it ends.
    received: u64,
    timer: Option<Pin<Box<Sleep>>>,
    inbuf: BytesMut,
    /// The topic of the last PUBLISH received, checked: the next PUBLISH to the same topic
    /// shares it (`mqtt::decode_into`) and skips the topic checks.
    last_topic: Option<TopicName>,
    outbuf: BytesMut,
    /// Output held until the journal has it on disk (durability `always`), while there is any.
    held: Option<Box<Held>>,
    /// The journal, when acknowledgements wait for the disk.
    journal: Option<Arc<dyn Journal>>,
    /// The cluster's store of QoS 1/2 messages, on a clustered node.
    store: Option<Arc<dyn mesgd_core::cluster::durable::MessageStore>>,
    scratch: Vec<Outgoing>,
    /// Set while the queue budget keeps this connection from reading its next PUBLISH.
    paused: Option<Box<budget::Paused>>,
}

fn is_v5(v: ProtocolVersion) -> bool {
    v == ProtocolVersion::V5
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    pub(crate) fn new(
        stream: S,
        ctx: Arc<ServerContext>,
        a: Accepted,
        inbuf: BytesMut,
        connack: &Packet,
    ) -> Self {
        let window = a.client_receive_maximum.min(ctx.mqtt.max_inflight);
        if let Some(will) = &a.will {
            // In a cluster, kept where another node finds it should this one die.
            ctx.broker.will_attached(&a.session, a.generation, will, &a.acl);
        }
        let span = tracing::Span::current();
        let core = Core {
            stream,
            version: a.version,
            session: a.session,
            generation: a.generation,
            username: a.username,
            acl: a.acl,
            live: a.identity.live.clone(),
            identity_expires: a.identity_expires,
            keep_alive_s: u16::try_from(a.keep_alive.as_secs()).unwrap_or(u16::MAX),
            last_received: crate::clock::now(),
            slot: None,
            span: (!span.is_disabled()).then(|| Box::new(span)),
            will: a.will.map(Box::new),
            session_expiry_was_zero: a.session_expiry_was_zero,
            window,
            client_maximum_packet_size: a.client_maximum_packet_size,
            client_topic_alias_maximum: a.client_topic_alias_maximum,
            request_problem_information: a.request_problem_information,
            aliases: None,
            ctx,
        };
        let mut c = Connection::from_core(core, inbuf);
        c.write_packet(connack);
        // A resumed session first resends what was in flight, in the original order.
        let mut resent = 0;
        for o in c.core.session.resend_inflight() {
            resent += usize::from(c.write_outgoing(o, crate::clock::now()));
        }
        c.count_sent(resent);
        c.arm_timer();
        c
    }

    /// A connection that goes on from `core`, with nothing buffered beyond `inbuf`.
    fn from_core(core: Core<S>, inbuf: BytesMut) -> Self {
        let now = crate::clock::now();
        Connection {
            last_active: now,
            park_idle: None,
            park_due: false,
            parked: false,
            just_connected: false,
            ended: None,
            now,
            routed: false,
            received: 0,
            timer: None,
            inbuf,
            last_topic: None,
            outbuf: BytesMut::new(),
            held: None,
            journal: core.ctx.broker.journal().filter(|j| j.acks_wait_for_disk()).cloned(),
            store: core.ctx.broker.message_store().cloned(),
            scratch: Vec::new(),
            paused: None,
            core,
        }
    }

    /// The traffic counters of this connection's protocol version.
    fn traffic(&self) -> &mesgd_core::broker::Traffic {
        self.core.ctx.broker.stats().traffic(super::handshake::protocol_of(self.core.version))
    }

    /// Runs the connection to its end (or until it parks), then publishes or schedules the
    /// will and hands the session back to the broker.
    pub(crate) async fn run(mut self: Box<Self>) {
        // CONNECT may have arrived together with further packets.
        if let Err(end) = self.handle_input() {
            self.ended = Some(Box::new(end));
        }
        self.drive().await;
    }

    /// Polls the connection until it ends or parks.
    async fn drive(mut self: Box<Self>) {
        let end = match self.ended.take() {
            Some(end) => *end,
            None => {
                let parked = std::future::poll_fn(|cx| match self.poll_run(cx) {
                    Poll::Ready(end) => Poll::Ready(Some(end)),
                    Poll::Pending if self.park_due && self.should_park(cx) => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                })
                .await;
                match parked {
                    Some(end) => end,
                    None => return (*self).park(),
                }
            }
        };
        Box::pin(self.finish(end)).await;
    }

    async fn finish(mut self: Box<Self>, end: End) {
        // Closed from outside (a takeover, above all): a DISCONNECT the client sent before that
        // still decides about the will, even if this connection had not handled it yet.
        let disconnect_sent = matches!(end, End::Kicked(_)).then(|| self.disconnect_already_sent()).flatten();
        match &end {
            End::Protocol { code, message } => {
                tracing::info!(reason = ?code, %message, "closing connection: protocol error")
            }
            End::Io(e) => tracing::debug!(error = %e, "connection lost"),
            End::KeepAliveTimeout => tracing::info!("closing connection: keep-alive timeout"),
            End::Kicked(k) => tracing::info!(why = ?k, "closing connection"),
            End::IdentityExpired => tracing::info!("closing connection: credential expired"),
            End::StoreFailed => {
                tracing::warn!("closing connection: the cluster could not store a QoS 1/2 message");
                // What waited for the store never goes (the DISCONNECT below must not wait).
                self.held = None;
            }
            End::ClientDisconnect { .. } | End::Closed => tracing::debug!(?end, "disconnected"),
        }
        if let (true, Some(code)) = (is_v5(self.core.version), end.server_reason()) {
            // A decode error may carry a code DISCONNECT cannot (0x84 belongs to CONNACK).
            let code =
                if code.is_allowed_in(PacketType::Disconnect) { code } else { ReasonCode::ProtocolError };
            let reason_string = match &end {
                End::Protocol { message, .. } => Some(message.clone()),
                _ => None,
            };
            self.write_packet(&Packet::Disconnect(Disconnect {
                reason_code: code,
                properties: DisconnectProperties { reason_string, ..Default::default() },
            }));
        }
        if !matches!(end, End::Io(_)) {
            let _ = tokio::time::timeout(CLOSE_FLUSH, self.flush_and_close()).await;
        }
        // The will is checked as any publish is, with the rules in force now, when it goes out.
        let publishes_will = disconnect_sent.map_or(end.publishes_will(), |with_will| with_will);
        let will = if publishes_will { self.core.will.take() } else { None };
        let will = will.map(|w| Will { acl: self.core.acl.clone(), ..*w });
        let broker = &self.core.ctx.broker;
        broker.connection_closed(&self.core.session, self.core.generation, will, crate::clock::now());
        Stats::sub(&broker.stats().clients_connected, 1);
        if end.server_reason().is_some() {
            // The session is already free for a new connection; only this socket waits, so that a
            // client still writing reads our DISCONNECT instead of a reset.
            crate::linger::drain(&mut self.core.stream).await;
        }
    }

    /// Whether the client had sent DISCONNECT before the broker ended its connection, in what
    /// this connection had read but not handled or what its socket holds now (read without
    /// waiting, at most [`UNHANDLED_READ`] bytes); `Some(with_will)` if so (5.0 reason 0x04
    /// keeps the will). A client that disconnects and at once connects again with the same
    /// client id can see its new connection take the session over before the old one has
    /// handled the DISCONNECT, which it sent first: without this its will would go out. The
    /// packets before the DISCONNECT are not handled, and its properties do not apply: the
    /// session belongs to the new connection, whose CONNECT set them anew.
    fn disconnect_already_sent(&mut self) -> Option<bool> {
        let stream = &mut self.core.stream as &mut dyn std::any::Any;
        if let Some(tcp) = stream.downcast_mut::<crate::park::ParkableTcp>() {
            tcp.read_available(&mut self.inbuf, UNHANDLED_READ);
        } else {
            // TLS: what tokio's reactor already knows to be readable.
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            while self.inbuf.len() < UNHANDLED_READ {
                match crate::lean_read::poll_read::<_, 4096>(&mut self.core.stream, &mut cx, &mut self.inbuf)
                {
                    Poll::Ready(Ok(n)) if n > 0 => {}
                    _ => break,
                }
            }
        }
        let max_packet_size = self.core.ctx.mqtt.max_packet_size;
        loop {
            match mesgd_core::mqtt::decode(&mut self.inbuf, Some(self.core.version), max_packet_size) {
                Ok(Some(Packet::Disconnect(d))) => {
                    return Some(d.reason_code == ReasonCode::DisconnectWithWill);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }

    async fn flush_and_close(&mut self) {
        use tokio::io::AsyncWriteExt;
        // Held acknowledgements go out once their messages are on disk, if that happens while
        // the connection is closing.
        if self.held.is_some() {
            std::future::poll_fn(|cx| match self.release_gate(cx) {
                Ok(false) => Poll::Pending,
                Ok(true) | Err(_) => Poll::Ready(()),
            })
            .await;
        }
        if !self.outbuf.is_empty() {
            let out = std::mem::take(&mut self.outbuf);
            let _ = self.core.stream.write_all(&out).await;
        }
        let _ = self.core.stream.shutdown().await;
    }
}
