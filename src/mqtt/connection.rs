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

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use mesgd_core::acl::{Access, Acl};
use mesgd_core::auth::{Identity, IdentityState, LiveIdentity, Revocation};
use mesgd_core::broker::{Stats, Will};
use mesgd_core::journal::{Atomic, Journal};
use mesgd_core::message::{Message, MessageProperties, Origin, digest};
use mesgd_core::mqtt::{
    self, AckProperties, Disconnect, DisconnectProperties, Packet, PacketType, ProtocolVersion, PubResponse,
    Publish, PublishProperties, QoS, ReasonCode, SubAck, Subscribe, UnsubAck, Unsubscribe,
};
use mesgd_core::session::{
    Delivery, IncomingQos2, Kick, Outgoing, PubRecOutcome, Session, SessionExpiry, SubscribeOptions,
};
use mesgd_core::topic::{SubscriptionFilter, TopicName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::context::ServerContext;

/// Stop reading and draining while this much output waits for the socket: a client that does
/// not read cannot make the broker buffer without bound.
const OUT_HIGH_WATER: usize = 256 * 1024;
/// Read buffer growth step.
const READ_CHUNK: usize = 8 * 1024;
/// Messages taken from the session per drain call.
const DRAIN_BATCH: usize = 256;
/// How long a closing connection may take to flush its last packets.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);

/// A will as CONNECT declared it, before it is known whether and when it is published.
#[derive(Debug)]
pub(crate) struct PendingWill {
    pub(crate) message: Message,
    pub(crate) expiry_interval: Option<u32>,
    pub(crate) delay: Duration,
}

/// What the handshake established.
pub(crate) struct Accepted {
    pub(crate) version: ProtocolVersion,
    pub(crate) session: Arc<Session>,
    pub(crate) generation: u64,
    pub(crate) client_id: Arc<str>,
    pub(crate) identity: Identity,
    pub(crate) acl: Acl,
    pub(crate) identity_expires: Option<Instant>,
    pub(crate) keep_alive: Duration,
    pub(crate) will: Option<PendingWill>,
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
    /// Closed from outside (takeover, shutdown, revocation).
    Kicked(Kick),
    /// The identity's expiry (a JWT's `exp`) passed.
    IdentityExpired,
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
            End::Kicked(Kick::TakenOver) => Some(ReasonCode::SessionTakenOver),
            End::Kicked(Kick::ShuttingDown) => Some(ReasonCode::ServerShuttingDown),
            End::Kicked(Kick::Administrative(code)) => Some(*code),
            End::IdentityExpired => Some(ReasonCode::MaximumConnectTime),
        }
    }

    fn publishes_will(&self) -> bool {
        !matches!(self, End::ClientDisconnect { with_will: false })
    }
}

type IdentityChange = Pin<Box<dyn Future<Output = LiveIdentity> + Send>>;

/// MQTT 5 topic aliases in both directions.
#[derive(Default)]
struct Aliases {
    incoming: HashMap<u16, TopicName>,
    outgoing: HashMap<TopicName, u16>,
}

/// Output that must wait until journal sequence number `until` is on disk: acknowledgements of
/// messages queued for persistent sessions, QoS 2 messages whose packet id is being stored.
/// Everything after a held packet is held too, so the order of packets is kept.
struct Held {
    until: u64,
    bytes: BytesMut,
}

/// A connected MQTT client.
pub(crate) struct Connection<S> {
    stream: S,
    ctx: Arc<ServerContext>,
    version: ProtocolVersion,
    session: Arc<Session>,
    generation: u64,
    client_id: Arc<str>,
    username: Option<Arc<str>>,
    acl: Acl,
    identity_change: Option<IdentityChange>,
    identity_expires: Option<Instant>,
    keep_alive: Option<Duration>,
    last_received: Instant,
    /// The time at the start of the current poll: one clock read serves the whole batch.
    now: Instant,
    /// Whether this poll routed a message to someone (see `poll_run`).
    routed: bool,
    timer: Option<Pin<Box<Sleep>>>,
    /// Boxed: most clients have no will, and this struct is what an idle connection costs.
    will: Option<Box<PendingWill>>,
    session_expiry_was_zero: bool,
    window: usize,
    client_maximum_packet_size: u32,
    client_topic_alias_maximum: u16,
    request_problem_information: bool,
    /// Topic aliases, created when the first one is used.
    aliases: Option<Box<Aliases>>,
    inbuf: BytesMut,
    outbuf: BytesMut,
    /// Output held until the journal has it on disk (durability `always`), while there is any.
    held: Option<Box<Held>>,
    /// The journal, when acknowledgements wait for the disk.
    journal: Option<Arc<dyn Journal>>,
    scratch: Vec<Outgoing>,
}

fn is_v5(v: ProtocolVersion) -> bool {
    v == ProtocolVersion::V5
}

/// Topics only the broker publishes to (`$SYS/...`): refused to every client publish and will.
fn is_broker_topic(topic: &TopicName) -> bool {
    topic.as_str().starts_with("$SYS")
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Connection<S> {
    pub(crate) fn new(
        stream: S,
        ctx: Arc<ServerContext>,
        a: Accepted,
        inbuf: BytesMut,
        connack: &Packet,
    ) -> Self {
        let identity_change = a.identity.live.clone().map(|mut live| -> IdentityChange {
            Box::pin(async move {
                live.changed().await;
                live
            })
        });
        let window = usize::from(a.client_receive_maximum.min(ctx.mqtt.max_inflight));
        let mut c = Connection {
            stream,
            version: a.version,
            session: a.session,
            generation: a.generation,
            client_id: a.client_id,
            username: a.identity.username.as_deref().map(Arc::from),
            acl: a.acl,
            identity_change,
            identity_expires: a.identity_expires,
            keep_alive: (!a.keep_alive.is_zero()).then(|| a.keep_alive + a.keep_alive / 2),
            last_received: Instant::now(),
            now: Instant::now(),
            routed: false,
            timer: None,
            will: a.will.map(Box::new),
            session_expiry_was_zero: a.session_expiry_was_zero,
            window,
            client_maximum_packet_size: a.client_maximum_packet_size,
            client_topic_alias_maximum: a.client_topic_alias_maximum,
            request_problem_information: a.request_problem_information,
            aliases: None,
            inbuf,
            outbuf: BytesMut::new(),
            held: None,
            journal: ctx.broker.journal().filter(|j| j.acks_wait_for_disk()).cloned(),
            scratch: Vec::new(),
            ctx,
        };
        c.write_packet(connack);
        // A resumed session first resends what was in flight, in the original order.
        for o in c.session.resend_inflight() {
            c.write_outgoing(o, Instant::now());
        }
        c.arm_timer();
        c
    }

    /// Runs the connection to its end, then publishes or schedules the will and hands the
    /// session back to the broker.
    pub(crate) async fn run(mut self: Box<Self>) {
        // CONNECT may have arrived together with further packets.
        let mut end = self.handle_input().err();
        if end.is_none() {
            end = Some(std::future::poll_fn(|cx| self.poll_run(cx)).await);
        }
        let end = end.unwrap_or(End::Closed);
        Box::pin(self.finish(end)).await;
    }

    async fn finish(mut self: Box<Self>, end: End) {
        match &end {
            End::Protocol { code, message } => {
                tracing::info!(reason = ?code, %message, "closing connection: protocol error")
            }
            End::Io(e) => tracing::debug!(error = %e, "connection lost"),
            End::KeepAliveTimeout => tracing::info!("closing connection: keep-alive timeout"),
            End::Kicked(k) => tracing::info!(why = ?k, "closing connection"),
            End::IdentityExpired => tracing::info!("closing connection: credential expired"),
            End::ClientDisconnect { .. } | End::Closed => tracing::debug!(?end, "disconnected"),
        }
        if let (true, Some(code)) = (is_v5(self.version), end.server_reason()) {
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
        let will = if end.publishes_will() { self.will.take() } else { None };
        // A will is a publish: like any other it may not write the broker's own topics, which no
        // ACL can grant (an unrestricted client would otherwise forge `$SYS` values).
        let will = will.filter(|w| {
            let reserved = is_broker_topic(&w.message.topic);
            if reserved {
                Stats::add(&self.ctx.broker.stats().publishes_denied, 1);
                tracing::info!(topic = w.message.topic.as_str(), "will not published: $SYS is the broker's");
            }
            !reserved
        });
        let will = will.map(|w| Will {
            message: w.message,
            expiry_interval: w.expiry_interval,
            delay: w.delay,
            acl: self.acl.clone(),
        });
        let broker = &self.ctx.broker;
        broker.connection_closed(&self.session, self.generation, will, Instant::now());
        broker.stats().clients_connected.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if end.server_reason().is_some() {
            // The session is already free for a new connection; only this socket waits, so that a
            // client still writing reads our DISCONNECT instead of a reset.
            crate::linger::drain(&mut self.stream).await;
        }
    }

    async fn flush_and_close(&mut self) {
        use tokio::io::AsyncWriteExt;
        // Held acknowledgements go out once their messages are on disk, if that happens while
        // the connection is closing.
        if self.held.is_some() {
            std::future::poll_fn(|cx| if self.release_gate(cx) { Poll::Ready(()) } else { Poll::Pending })
                .await;
        }
        if !self.outbuf.is_empty() {
            let out = std::mem::take(&mut self.outbuf);
            let _ = self.stream.write_all(&out).await;
        }
        let _ = self.stream.shutdown().await;
    }

    // ------------------------------------------------------------------ the poll loop

    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        loop {
            self.now = Instant::now();
            if let Some(kick) = self.session.take_kick(self.generation) {
                return Poll::Ready(End::Kicked(kick));
            }
            if let Some(end) = self.poll_identity(cx) {
                return Poll::Ready(end);
            }
            // Output first: a connection woken because messages were queued for it writes them
            // before it spends a system call finding that its socket has nothing to read.
            let mut again = false;
            if self.pending_output() < OUT_HIGH_WATER {
                again |= self.drain_session(cx);
            }
            self.release_gate(cx);
            if let Err(e) = self.poll_write(cx) {
                return Poll::Ready(End::Io(e));
            }
            match self.poll_read(cx) {
                Ok(progress) => again |= progress,
                Err(end) => return Poll::Ready(end),
            }
            if self.routed {
                // Let the subscribers this read woke write their deliveries before this
                // connection reads again or writes its acknowledgements, as a single-threaded
                // broker would: at low load that takes two system calls off every message's
                // path. This task runs again right after them.
                self.routed = false;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if let Some(end) = self.poll_timer(cx) {
                return Poll::Ready(end);
            }
            if !again {
                if self.inbuf.is_empty() && self.inbuf.capacity() > 0 {
                    self.inbuf = BytesMut::new();
                }
                return Poll::Pending;
            }
        }
    }

    /// Reads and handles packets until the socket has nothing more (or output backs up).
    /// Returns whether anything was read.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Result<bool, End> {
        let mut progress = false;
        while self.pending_output() < OUT_HIGH_WATER {
            let polled = if self.inbuf.is_empty() {
                // Nothing buffered: read onto the stack first, so that a wake-up with nothing to
                // read (and every idle connection) allocates nothing.
                let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); READ_CHUNK];
                let mut read = ReadBuf::uninit(&mut stack);
                match Pin::new(&mut self.stream).poll_read(cx, &mut read) {
                    Poll::Ready(Ok(())) => {
                        self.inbuf.extend_from_slice(read.filled());
                        Poll::Ready(Ok(read.filled().len()))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            } else {
                if self.inbuf.capacity() - self.inbuf.len() < READ_CHUNK / 4 {
                    self.inbuf.reserve(READ_CHUNK);
                }
                tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.inbuf)
            };
            match polled {
                Poll::Pending => break,
                Poll::Ready(Ok(0)) => return Err(End::Closed),
                Poll::Ready(Ok(n)) => {
                    Stats::add(&self.ctx.broker.stats().bytes_received, n as u64);
                    self.last_received = self.now;
                    progress = true;
                    self.handle_input()?;
                    if self.routed {
                        break;
                    }
                }
                Poll::Ready(Err(e)) => return Err(End::Io(e)),
            }
        }
        Ok(progress)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        while !self.outbuf.is_empty() {
            match Pin::new(&mut self.stream).poll_write(cx, &self.outbuf) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => {
                    Stats::add(&self.ctx.broker.stats().bytes_sent, n as u64);
                    self.outbuf.advance(n);
                }
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            }
        }
        // TLS and WebSocket streams buffer internally; a plain TCP flush is a no-op.
        match Pin::new(&mut self.stream).poll_flush(cx) {
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Ready(Ok(())) | Poll::Pending => {}
        }
        if self.outbuf.capacity() > 0 {
            self.outbuf = BytesMut::new();
        }
        Ok(())
    }

    /// Moves queued deliveries into the output. Returns whether more are ready right away.
    fn drain_session(&mut self, cx: &mut Context<'_>) -> bool {
        let now = self.now;
        let mut batch = std::mem::take(&mut self.scratch);
        let stats =
            self.session.drain(self.generation, self.window, DRAIN_BATCH, now, cx.waker(), &mut batch);
        self.hold_until(stats.gate);
        if stats.expired > 0 {
            Stats::add(&self.ctx.broker.stats().messages_dropped, stats.expired as u64);
        }
        for o in batch.drain(..) {
            self.write_outgoing(o, now);
        }
        self.scratch = batch;
        stats.more
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Option<End> {
        loop {
            let timer = self.timer.as_mut()?;
            if timer.as_mut().poll(cx).is_pending() {
                return None;
            }
            let now = Instant::now();
            if self.identity_expires.is_some_and(|at| at <= now) {
                return Some(End::IdentityExpired);
            }
            if self.keep_alive.is_some_and(|ka| self.last_received + ka <= now) {
                return Some(End::KeepAliveTimeout);
            }
            self.arm_timer();
        }
    }

    /// Sets the timer to the next keep-alive or identity-expiry deadline. Reads do not move
    /// the timer (that would touch the timer wheel per packet); it fires at the old deadline and
    /// re-arms from the last read.
    fn arm_timer(&mut self) {
        let keep_alive = self.keep_alive.map(|ka| self.last_received + ka);
        let Some(deadline) = [keep_alive, self.identity_expires].into_iter().flatten().min() else {
            self.timer = None;
            return;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        match &mut self.timer {
            Some(t) => t.as_mut().reset(deadline),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    fn poll_identity(&mut self, cx: &mut Context<'_>) -> Option<End> {
        let change = self.identity_change.as_mut()?;
        let Poll::Ready(mut live) = change.as_mut().poll(cx) else { return None };
        match live.current() {
            IdentityState::Active(rules) => {
                self.acl = Acl::compile(rules.as_deref(), self.username.as_deref(), &self.client_id);
                self.session.set_acl(self.acl.clone());
                tracing::info!("rules changed: new ACL applies from now on");
                self.identity_change = Some(Box::pin(async move {
                    live.changed().await;
                    live
                }));
                // Poll the new future once so it registers the waker.
                self.poll_identity(cx)
            }
            IdentityState::Revoked(why) => {
                let code = match why {
                    Revocation::Disabled => ReasonCode::NotAuthorized,
                    Revocation::Deleted => ReasonCode::AdministrativeAction,
                };
                Some(End::Kicked(Kick::Administrative(code)))
            }
        }
    }

    // ------------------------------------------------------------------ output

    /// Where output goes now: the socket buffer, or the held buffer while a gate is closed.
    fn out(&mut self) -> &mut BytesMut {
        match &mut self.held {
            Some(held) => &mut held.bytes,
            None => &mut self.outbuf,
        }
    }

    /// Output not yet written, held or not (for backpressure).
    fn pending_output(&self) -> usize {
        self.outbuf.len() + self.held.as_ref().map_or(0, |h| h.bytes.len())
    }

    /// Holds all further output until journal sequence number `seq` is durable (only when
    /// acknowledgements wait for the disk).
    fn hold_until(&mut self, seq: Option<u64>) {
        let (Some(seq), Some(_)) = (seq, &self.journal) else { return };
        match &mut self.held {
            Some(held) => held.until = held.until.max(seq),
            None => self.held = Some(Box::new(Held { until: seq, bytes: BytesMut::new() })),
        }
    }

    /// Releases held output once it may go; returns whether nothing is held any more.
    fn release_gate(&mut self, cx: &mut Context<'_>) -> bool {
        let (Some(held), Some(journal)) = (&self.held, &self.journal) else { return true };
        if !journal.poll_durable(held.until, cx.waker()) {
            return false;
        }
        if let Some(held) = self.held.take() {
            self.outbuf.extend_from_slice(&held.bytes);
        }
        true
    }

    fn write_packet(&mut self, packet: &Packet) {
        let version = self.version;
        if let Err(e) = mqtt::encode(packet, version, self.out()) {
            tracing::error!(error = %e, "could not encode a packet");
        }
    }

    fn write_outgoing(&mut self, outgoing: Outgoing, now: Instant) {
        match outgoing {
            Outgoing::PubRel { packet_id } => {
                self.write_packet(&Packet::PubRel(ack(packet_id, ReasonCode::Success)))
            }
            Outgoing::Publish { delivery, packet_id, dup } => {
                self.write_delivery(&delivery, packet_id, dup, now)
            }
        }
    }

    fn write_delivery(&mut self, delivery: &Delivery, packet_id: Option<u16>, dup: bool, now: Instant) {
        let message = &delivery.message;
        let v5 = is_v5(self.version);
        let plain = !v5
            || (message.properties.is_empty()
                && message.expires_at.is_none()
                && delivery.subscription_ids.is_empty()
                && self.client_topic_alias_maximum == 0);
        if plain {
            // Nothing per-subscriber but the header: written straight from the message.
            let before = self.out().len();
            let version = self.version;
            let written = mqtt::encode_plain_publish(
                version,
                dup,
                delivery.qos,
                delivery.retain,
                message.topic.as_str(),
                packet_id,
                &message.payload,
                self.out(),
            );
            if let Err(e) = written {
                tracing::error!(error = %e, "could not encode a PUBLISH");
            }
            self.check_delivered_size(before, packet_id);
            return;
        }
        let mut properties = PublishProperties::default();
        let mut topic: Arc<str> = message.topic.as_arc().clone();
        let mut new_alias = None;
        if v5 {
            let p = &message.properties;
            properties.payload_format_indicator = p.payload_format_indicator;
            properties.content_type = p.content_type.clone();
            properties.response_topic = p.response_topic.clone();
            properties.correlation_data = p.correlation_data.clone();
            properties.user_properties = p.user_properties.clone();
            properties.message_expiry_interval = message.remaining_expiry(now);
            properties.subscription_identifiers = delivery.subscription_ids.to_vec();
            if self.client_topic_alias_maximum > 0 {
                let aliases = self.aliases.get_or_insert_with(Box::default);
                match aliases.outgoing.get(&message.topic) {
                    Some(&alias) => {
                        properties.topic_alias = Some(alias);
                        topic = Arc::from("");
                    }
                    None if aliases.outgoing.len() < usize::from(self.client_topic_alias_maximum) => {
                        let alias = aliases.outgoing.len() as u16 + 1;
                        new_alias = Some(alias);
                        properties.topic_alias = Some(alias);
                    }
                    None => {}
                }
            }
        }
        let publish = Packet::Publish(Publish {
            dup,
            qos: delivery.qos,
            retain: delivery.retain,
            topic,
            packet_id,
            properties,
            payload: message.payload.clone(),
        });
        let before = self.out().len();
        self.write_packet(&publish);
        // The mapping exists only once the client has received the packet that sets it: a
        // dropped packet must not leave later ones referring to an alias the client never saw.
        if self.check_delivered_size(before, packet_id) {
            if let Some(alias) = new_alias {
                self.aliases.get_or_insert_with(Box::default).outgoing.insert(message.topic.clone(), alias);
            }
        }
    }

    /// After a PUBLISH was written from `before` on: takes it back if it is larger than the
    /// client accepts ([MQTT-3.1.2-25]: dropped as if delivered), and counts it. Returns whether
    /// it stays.
    fn check_delivered_size(&mut self, before: usize, packet_id: Option<u16>) -> bool {
        let size = self.out().len() - before;
        if size > self.client_maximum_packet_size as usize {
            self.out().truncate(before);
            if let Some(id) = packet_id {
                self.session.discard_inflight(id);
            }
            Stats::add(&self.ctx.broker.stats().messages_dropped, 1);
            tracing::debug!(
                size,
                max = self.client_maximum_packet_size,
                "message dropped: larger than the client's maximum packet size"
            );
            return false;
        }
        Stats::add(&self.ctx.broker.stats().messages_sent, 1);
        true
    }

    // ------------------------------------------------------------------ input

    fn handle_input(&mut self) -> Result<(), End> {
        loop {
            let packet =
                match mqtt::decode(&mut self.inbuf, Some(self.version), self.ctx.mqtt.max_packet_size) {
                    Ok(Some(p)) => p,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(End::protocol(e.reason_code(), e.to_string())),
                };
            self.handle_packet(packet)?;
        }
    }

    fn handle_packet(&mut self, packet: Packet) -> Result<(), End> {
        match packet {
            Packet::Publish(p) => self.on_publish(p),
            Packet::PubAck(a) => {
                if !self.session.puback(a.packet_id) {
                    tracing::debug!(packet_id = a.packet_id, "PUBACK for an unknown packet id");
                }
                Ok(())
            }
            Packet::PubRec(a) => {
                let reason = match self.session.pubrec(a.packet_id, a.reason_code) {
                    PubRecOutcome::SendPubRel => ReasonCode::Success,
                    PubRecOutcome::Ended => return Ok(()),
                    PubRecOutcome::Unknown => ReasonCode::PacketIdentifierNotFound,
                };
                self.write_packet(&Packet::PubRel(ack(a.packet_id, reason)));
                Ok(())
            }
            Packet::PubComp(a) => {
                if !self.session.pubcomp(a.packet_id) {
                    tracing::debug!(packet_id = a.packet_id, "PUBCOMP for an unknown packet id");
                }
                Ok(())
            }
            Packet::PubRel(a) => {
                let (known, seq) = self.session.pubrel(a.packet_id);
                self.hold_until(seq);
                let reason = if known { ReasonCode::Success } else { ReasonCode::PacketIdentifierNotFound };
                self.write_packet(&Packet::PubComp(ack(a.packet_id, reason)));
                Ok(())
            }
            Packet::Subscribe(s) => self.on_subscribe(s),
            Packet::Unsubscribe(u) => {
                self.on_unsubscribe(&u);
                Ok(())
            }
            Packet::PingReq => {
                self.write_packet(&Packet::PingResp);
                Ok(())
            }
            Packet::Disconnect(d) => self.on_disconnect(&d),
            Packet::Connect(_) => Err(End::protocol(ReasonCode::ProtocolError, "second CONNECT")),
            // 0x8C is a CONNACK code only; mid-connection, an AUTH without an authentication
            // method at CONNECT is a protocol error ([MQTT-4.12.0-1] / DISCONNECT codes).
            Packet::Auth(_) => {
                Err(End::protocol(ReasonCode::ProtocolError, "AUTH without an authentication method"))
            }
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => Err(
                End::protocol(ReasonCode::ProtocolError, "a server-to-client packet was sent by the client"),
            ),
        }
    }

    fn on_disconnect(&mut self, d: &Disconnect) -> Result<(), End> {
        if let Some(interval) = d.properties.session_expiry_interval {
            if self.session_expiry_was_zero && interval != 0 {
                // [MQTT-3.14.2-2]
                return Err(End::protocol(
                    ReasonCode::ProtocolError,
                    "session expiry set on DISCONNECT after 0 at CONNECT",
                ));
            }
            let granted = interval.min(self.ctx.mqtt.max_session_expiry);
            self.session.set_expiry(match granted {
                0 => SessionExpiry::OnDisconnect,
                u32::MAX => SessionExpiry::Never,
                s => SessionExpiry::After(Duration::from_secs(u64::from(s))),
            });
        }
        Err(End::ClientDisconnect { with_will: d.reason_code == ReasonCode::DisconnectWithWill })
    }

    /// Resolves an MQTT 5 topic alias and validates the topic name.
    fn resolve_topic(&mut self, topic: &Arc<str>, alias: Option<u16>) -> Result<TopicName, End> {
        let settings = &self.ctx.mqtt;
        let name = match alias {
            Some(0) => return Err(End::protocol(ReasonCode::TopicAliasInvalid, "topic alias 0")),
            Some(a) if a > settings.max_topic_alias => {
                return Err(End::protocol(
                    ReasonCode::TopicAliasInvalid,
                    format!("topic alias {a} exceeds the maximum"),
                ));
            }
            Some(a) if topic.is_empty() => match self.aliases.as_ref().and_then(|al| al.incoming.get(&a)) {
                Some(t) => return Ok(t.clone()),
                None => {
                    return Err(End::protocol(
                        ReasonCode::ProtocolError,
                        format!("topic alias {a} is not set"),
                    ));
                }
            },
            _ => TopicName::try_from(topic.clone()).map_err(|e| {
                End::protocol(ReasonCode::TopicNameInvalid, format!("invalid topic name: {e}"))
            })?,
        };
        if name.level_count() > settings.max_topic_levels {
            return Err(End::protocol(ReasonCode::TopicNameInvalid, "topic name has too many levels"));
        }
        if let Some(a) = alias {
            self.aliases.get_or_insert_with(Box::default).incoming.insert(a, name.clone());
        }
        Ok(name)
    }

    fn on_publish(&mut self, p: Publish) -> Result<(), End> {
        let settings = &self.ctx.mqtt;
        let v5 = is_v5(self.version);
        if p.qos > settings.max_qos {
            return Err(End::protocol(
                ReasonCode::QoSNotSupported,
                format!("QoS {:?} exceeds the maximum QoS", p.qos),
            ));
        }
        if p.retain && !settings.retain_available {
            return Err(End::protocol(ReasonCode::RetainNotSupported, "retained messages are not supported"));
        }
        if !p.properties.subscription_identifiers.is_empty() {
            // [MQTT-3.3.4-6]: only the server sends subscription identifiers.
            return Err(End::protocol(
                ReasonCode::ProtocolError,
                "a PUBLISH from a client carries a subscription identifier",
            ));
        }
        if let Some(response_topic) = &p.properties.response_topic {
            if let Err(e) = TopicName::try_from(response_topic.clone()) {
                // [MQTT-3.3.2-14]: a response topic is a topic name, without wildcards.
                return Err(End::protocol(ReasonCode::ProtocolError, format!("invalid response topic: {e}")));
            }
        }
        let topic = self.resolve_topic(&p.topic, p.properties.topic_alias)?;
        let packet_id = p.packet_id.unwrap_or(0);
        let mut reason = ReasonCode::Success;
        if v5 && p.properties.payload_format_indicator == Some(1) && std::str::from_utf8(&p.payload).is_err()
        {
            if p.qos == QoS::AtMostOnce {
                return Err(End::protocol(
                    ReasonCode::PayloadFormatInvalid,
                    "payload is not UTF-8 as its format indicator says",
                ));
            }
            reason = ReasonCode::PayloadFormatInvalid;
        } else if is_broker_topic(&topic) || !self.acl.allows(Access::Write, &topic) {
            Stats::add(&self.ctx.broker.stats().publishes_denied, 1);
            tracing::debug!(topic = topic.as_str(), "publish denied by ACL");
            // MQTT 5 is told; 3.x is silently dropped, but the flow completes so it is not stuck.
            reason = if v5 { ReasonCode::NotAuthorized } else { ReasonCode::Success };
            if p.qos == QoS::ExactlyOnce && !v5 {
                self.accept_qos2(packet_id, digest(topic.as_str(), &p.payload), p.dup)?;
            }
            return {
                self.ack_publish(p.qos, packet_id, reason);
                Ok(())
            };
        }
        if reason == ReasonCode::Success {
            // The packet id and the copies routing queues go to disk together (see `Atomic`).
            let broker = self.ctx.broker.clone();
            let _atomic = (p.qos == QoS::ExactlyOnce).then(|| Atomic::begin(broker.journal()));
            let first_time = p.qos != QoS::ExactlyOnce
                || self.accept_qos2(packet_id, digest(topic.as_str(), &p.payload), p.dup)?;
            if first_time {
                Stats::add(&self.ctx.broker.stats().messages_received, 1);
                let mut message = Message::new(
                    topic,
                    p.payload,
                    p.qos,
                    p.retain,
                    Origin { session: Some(self.session.id()), client_id: Some(self.client_id.clone()) },
                );
                if v5 {
                    message.properties = MessageProperties::from_publish(&p.properties);
                    message = message.with_expiry_interval(p.properties.message_expiry_interval, self.now);
                }
                let routed = self.ctx.broker.publish(message);
                self.hold_until(routed.durable_seq);
                self.routed |= routed.delivered > 0;
                if v5 && routed.delivered == 0 && p.qos != QoS::AtMostOnce {
                    reason = ReasonCode::NoMatchingSubscribers;
                }
            }
        }
        self.ack_publish(p.qos, packet_id, reason);
        Ok(())
    }

    /// Records an incoming QoS 2 message; returns whether it is new (to be routed) rather than
    /// a retransmission. MQTT 5 clients must keep within the Receive Maximum we advertised
    /// ([MQTT-3.3.4-8]: 0x93 otherwise); MQTT 3.x has no such limit, so a 3.x client is never
    /// disconnected for it — only its packet ids, at most 65,535, are kept per message.
    fn accept_qos2(&mut self, packet_id: u16, digest: u64, dup: bool) -> Result<bool, End> {
        let window = usize::from(self.ctx.mqtt.max_inflight);
        let enforced = is_v5(self.version).then_some(window);
        match self.session.incoming_qos2(packet_id, digest, dup, enforced) {
            IncomingQos2::Duplicate => Ok(false),
            IncomingQos2::WindowFull => Err(End::protocol(
                ReasonCode::ReceiveMaximumExceeded,
                "more QoS 2 messages in flight than the receive maximum",
            )),
            IncomingQos2::New { seq, reused, others } => {
                self.hold_until(seq);
                if reused {
                    tracing::debug!(packet_id, "packet id reused without DUP: a new message");
                }
                if others == window && !is_v5(self.version) {
                    tracing::info!(
                        window,
                        "an MQTT 3.x client has more QoS 2 messages awaiting release than max_inflight; \
                         accepted, as 3.x has no receive maximum"
                    );
                }
                Ok(true)
            }
        }
    }

    fn ack_publish(&mut self, qos: QoS, packet_id: u16, reason: ReasonCode) {
        let mut response = ack(packet_id, reason);
        // Reason strings only when the client did not turn problem information off
        // ([MQTT-3.1.2-29]) and only for errors: successes need no explanation.
        if reason.is_error() && self.request_problem_information {
            response.properties.reason_string = Some(
                match reason {
                    ReasonCode::NotAuthorized => "not authorized to publish to this topic",
                    ReasonCode::PayloadFormatInvalid => {
                        "payload is not valid UTF-8 as its format indicator says"
                    }
                    _ => "publish refused",
                }
                .to_owned(),
            );
        }
        match qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.write_packet(&Packet::PubAck(response)),
            QoS::ExactlyOnce => self.write_packet(&Packet::PubRec(response)),
        }
    }

    fn on_subscribe(&mut self, s: Subscribe) -> Result<(), End> {
        let v5 = is_v5(self.version);
        let settings = self.ctx.mqtt.clone();
        if s.properties.subscription_identifier.is_some() && !settings.subscription_identifiers {
            return Err(End::protocol(
                ReasonCode::SubscriptionIdentifiersNotSupported,
                "subscription identifiers are not supported",
            ));
        }
        let now = Instant::now();
        let mut codes = Vec::with_capacity(s.filters.len());
        for (text, options) in s.filters {
            let filter = match SubscriptionFilter::parse(&text) {
                Ok(f) => f,
                Err(e) => {
                    tracing::debug!(filter = %text, error = %e, "invalid topic filter");
                    codes.push(ReasonCode::TopicFilterInvalid);
                    continue;
                }
            };
            let shared = matches!(filter, SubscriptionFilter::Shared { .. });
            if shared && options.no_local && v5 {
                // [MQTT-3.8.3-4]
                return Err(End::protocol(ReasonCode::ProtocolError, "no-local on a shared subscription"));
            }
            let code = if shared && !settings.shared_subscriptions {
                ReasonCode::SharedSubscriptionsNotSupported
            } else if filter.filter().has_wildcards() && !settings.wildcard_subscriptions {
                ReasonCode::WildcardSubscriptionsNotSupported
            } else if filter.filter().level_count() > settings.max_topic_levels {
                ReasonCode::TopicFilterInvalid
            } else if !self.acl.allows_subscribe(filter.filter()) {
                tracing::debug!(filter = %text, "subscription refused by ACL");
                ReasonCode::NotAuthorized
            } else {
                let qos = options.qos.min(settings.max_qos);
                let subscribe_options = SubscribeOptions {
                    qos,
                    no_local: options.no_local,
                    retain_as_published: options.retain_as_published,
                    retain_handling: options.retain_handling,
                    subscription_id: s.properties.subscription_identifier,
                };
                self.ctx.broker.subscribe(&self.session, filter, subscribe_options, now);
                granted_code(qos)
            };
            codes.push(code);
        }
        self.write_packet(&Packet::SubAck(SubAck {
            packet_id: s.packet_id,
            reason_codes: codes,
            properties: AckProperties::default(),
        }));
        Ok(())
    }

    fn on_unsubscribe(&mut self, u: &Unsubscribe) {
        let codes = u
            .filters
            .iter()
            .map(|text| {
                if self.ctx.broker.unsubscribe(&self.session, text) {
                    ReasonCode::Success
                } else {
                    ReasonCode::NoSubscriptionExisted
                }
            })
            .collect();
        let reason_codes = if is_v5(self.version) { codes } else { Vec::new() };
        self.write_packet(&Packet::UnsubAck(UnsubAck {
            packet_id: u.packet_id,
            reason_codes,
            properties: AckProperties::default(),
        }));
    }
}

fn granted_code(qos: QoS) -> ReasonCode {
    match qos {
        QoS::AtMostOnce => ReasonCode::Success,
        QoS::AtLeastOnce => ReasonCode::GrantedQoS1,
        QoS::ExactlyOnce => ReasonCode::GrantedQoS2,
    }
}

fn ack(packet_id: u16, reason_code: ReasonCode) -> PubResponse {
    PubResponse { packet_id, reason_code, properties: AckProperties::default() }
}
