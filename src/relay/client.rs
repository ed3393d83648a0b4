//! One relay client, whatever carries its frames: the protocol state between frames (the rate
//! limiter, the key-proof challenge, the registration and its session), what each frame does,
//! and what the connection owes the client between frames (a registration completing, pub/sub
//! deliveries from the session's mailbox, live identity changes, and the gates that hold its
//! output: the journal's durability, and on a clustered node the NATS subscriptions that
//! `subscribed` and `joined_room` wait for).
//!
//! The TCP and WebSocket connection tasks (`super::stream`) and the UDP socket task
//! (`super::udp`) feed it frames and poll it; all it produces goes into its [`Outbox`]. Frame
//! handlers are synchronous; the one asynchronous step, the admission of a `register`, runs as
//! a future the owner polls, and while it runs the owner feeds no further frames, so frames
//! are handled in order.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use mesgd_core::acl::{Access, Acl};
use mesgd_core::auth::{ConnectInfo, LiveIdentity, Protocol, Secret, TlsInfo};
use mesgd_core::broker::{IdentityUpdate, Stats};
use mesgd_core::cluster::relay::ConfirmFuture;
use mesgd_core::journal::Journal;
use mesgd_core::model::Kick;
use mesgd_core::relay::client::Register;
use mesgd_core::relay::{
    Challenge, Claim, ClientMessage, RateLimiter, RelayError, Resource, ServerMessage, Verdict,
};
use mesgd_core::session::{Outgoing, Session};

use super::outbox::Outbox;
use super::register::{self, Admitted};
use super::stats::RelayStats;
use crate::context::ServerContext;

/// Pub/sub deliveries are taken from the session only while less than this waits in the
/// outbox: the mailbox has its own bounds, and a burst of publishes should not by itself push
/// a client past its output cap.
const DRAIN_HIGH_WATER: usize = 256 * 1024;
/// Messages taken from the session per drain call.
const DRAIN_BATCH: usize = 256;
/// Send targets whose ACL decision a connection remembers (cleared when its rules change).
const ACL_CACHE: usize = 64;

/// Which transport carries a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Length-prefixed frames over TCP (or TLS).
    Tcp,
    /// Text messages over WebSocket.
    Ws,
    /// Datagrams.
    Udp,
}

/// Where a client comes from: what the provider chain is told about it.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub(crate) listener: Arc<str>,
    pub(crate) peer: SocketAddr,
    pub(crate) tls: Option<TlsInfo>,
    /// A bearer token from the WebSocket upgrade (`Authorization: Bearer`, `?token=`), used as
    /// the password of a `register` that carries none.
    pub(crate) bearer: Option<Secret>,
    pub(crate) transport: Transport,
}

/// Why a client's connection ends.
#[derive(Debug)]
pub(crate) enum End {
    /// The client closed it.
    Closed,
    /// The socket failed.
    Io(io::Error),
    /// Nothing arrived within the idle bound (TCP idle timeout, WebSocket without pong, UDP
    /// idle).
    Idle,
    /// A TCP frame over the limit: the stream cannot be resynchronised.
    FrameTooLarge,
    /// A WebSocket message over the limit.
    WsTooLarge,
    /// A WebSocket protocol violation (invalid UTF-8 in a text frame and the like).
    WsProtocol(mesgd_core::websocket::WsError),
    /// Far over the rate budget.
    Abuse,
    /// The output passed `max_output_bytes`.
    SlowConsumer,
    /// Closed from outside: shutdown, an operator, a revoked identity.
    Kicked(Kick),
    /// The identity expired, or its new rules no longer allow the address.
    NotAuthorized,
}

impl End {
    /// The `error` sent before closing, if the client is told.
    pub(crate) fn fatal_error(&self) -> Option<RelayError> {
        match self {
            End::FrameTooLarge => Some(RelayError::FrameTooLarge),
            End::Abuse => Some(RelayError::RateLimited),
            End::SlowConsumer => Some(RelayError::OutputLimit),
            End::NotAuthorized | End::Kicked(Kick::Revoked(_)) => Some(RelayError::NotAuthorized),
            _ => None,
        }
    }
}

type Pending = Pin<Box<dyn Future<Output = Result<Admitted, RelayError>> + Send>>;
/// A `join_room` on a clustered node: the room, and the count of its members on other nodes.
type Joining = Pin<Box<dyn Future<Output = (String, u64)> + Send>>;
/// A registered client's state.
pub(crate) struct Registered {
    pub(crate) addr: Arc<str>,
    pub(crate) session: Arc<Session>,
    pub(crate) generation: u64,
    pub(crate) acl: Acl,
    username: Option<Arc<str>>,
    /// The provider's live view of the identity, if it keeps one: a change is seen when the
    /// provider wakes the session, not awaited.
    live: Option<LiveIdentity>,
    pub(crate) identity_expires: Option<Instant>,
    /// Write decisions on `$relay/addr/<to>` for recent send targets.
    allowed: Vec<(Box<str>, bool)>,
}

impl Registered {
    /// Whether the client's rules allow `access` to `resource`.
    pub(crate) fn may(&mut self, access: Access, resource: Resource<'_>) -> bool {
        if self.acl.is_unrestricted() {
            return true;
        }
        let cached = matches!((access, resource), (Access::Write, Resource::Address(_)));
        if let (true, Resource::Address(to)) = (cached, resource)
            && let Some((_, allowed)) = self.allowed.iter().find(|(a, _)| **a == *to)
        {
            return *allowed;
        }
        let allowed = self.acl.allows(access, &resource.topic());
        if let (true, Resource::Address(to)) = (cached, resource) {
            if self.allowed.len() >= ACL_CACHE {
                self.allowed.clear();
            }
            self.allowed.push((Box::from(to), allowed));
        }
        allowed
    }
}

enum Phase {
    /// Not registered.
    New,
    /// A `register` is being admitted.
    Registering(Pending),
    /// Registered.
    Registered(Box<Registered>),
}

/// One relay client.
pub(crate) struct Client {
    pub(crate) ctx: Arc<ServerContext>,
    pub(crate) outbox: Arc<Outbox>,
    origin: Box<Origin>,
    limiter: RateLimiter,
    challenge: Option<Box<Challenge>>,
    phase: Phase,
    /// A `join_room` waiting for the other nodes' member counts (with `[cluster]`); frames
    /// wait meanwhile, as during a `register`.
    joining: Option<Joining>,
    /// Output waits until this journal sequence number is durable (`queued`, a new binding).
    gate: Option<u64>,
    /// Output waits until the cluster has confirmed the node's subscriptions as of this
    /// interest generation (`subscribed` on a clustered node); 0: nothing to wait for.
    interest_gate: u64,
    /// Output waits until the cluster has confirmed the node's room subscriptions as of the
    /// last `join_room` (`joined_room` on a clustered node; bounded by the cluster).
    room_gate: Option<ConfirmFuture>,
    /// The journal, when replies wait for the disk.
    journal: Option<Arc<dyn Journal>>,
    /// The last direct-send recipient (see `Hub::deliver`).
    pub(crate) target: Option<Arc<Outbox>>,
    scratch: Vec<Outgoing>,
    /// Frames and bytes received and not yet added to the shared counters (they are added once
    /// per turn, not per frame: the counters are shared by every connection).
    received: (u64, u64),
}

impl Client {
    pub(crate) fn new(ctx: Arc<ServerContext>, origin: Origin, max_frame: usize, now: Instant) -> Client {
        let settings = ctx.relay.settings();
        let outbox = Outbox::new(max_frame, settings.max_output_bytes);
        Client {
            limiter: RateLimiter::new(settings.rate, now),
            journal: ctx.broker.journal().filter(|j| j.acks_wait_for_disk()).cloned(),
            outbox,
            origin: Box::new(origin),
            challenge: None,
            phase: Phase::New,
            joining: None,
            gate: None,
            interest_gate: 0,
            room_gate: None,
            target: None,
            scratch: Vec::new(),
            received: (0, 0),
            ctx,
        }
    }

    /// Whether a `register` is being admitted, or a `join_room` counted: feed no frames until
    /// it is done.
    pub(crate) fn is_busy(&self) -> bool {
        matches!(self.phase, Phase::Registering(_)) || self.joining.is_some()
    }

    /// Joins `room` once `elsewhere` (its members on the other nodes) is known: the join, and
    /// `joined_room{members}` with every node's members, come together, so that no room
    /// message reaches the client before `joined_room`, and frames after `join_room` wait.
    pub(crate) fn join_later(&mut self, room: String, elsewhere: mesgd_core::cluster::relay::CountFuture) {
        self.joining = Some(Box::pin(async move { (room, elsewhere.await) }));
    }

    fn poll_join(&mut self, cx: &mut Context<'_>) {
        let Some(joining) = self.joining.as_mut() else { return };
        let Poll::Ready((room, elsewhere)) = joining.as_mut().poll(cx) else { return };
        self.joining = None;
        match self.ctx.relay.join_room(&self.outbox, &room) {
            Ok(here) => {
                // `joined_room` leaves once the node receives the room's messages from the
                // other nodes, so that a member elsewhere who sends right after it reaches
                // this client. A newer wait covers the older one's changes.
                self.room_gate = self.ctx.relay.cluster().and_then(|c| c.rooms_confirmed());
                self.reply(&ServerMessage::JoinedRoom { room: &room, members: here as u64 + elsewhere })
            }
            Err(e) => self.error(e),
        }
    }

    /// Whether the client holds an address.
    pub(crate) fn is_registered(&self) -> bool {
        matches!(self.phase, Phase::Registered(_))
    }

    pub(crate) fn registered(&mut self) -> Option<&mut Registered> {
        match &mut self.phase {
            Phase::Registered(r) => Some(r),
            _ => None,
        }
    }

    /// When the identity expires, if it does.
    pub(crate) fn identity_expires(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Registered(r) => r.identity_expires,
            _ => None,
        }
    }

    /// Queues a reply (nothing happens if the client is gone: its owner ends it).
    pub(crate) fn reply(&self, message: &ServerMessage<'_>) {
        let _ = self.outbox.push_with(|b| message.encode(b));
    }

    /// Queues an `error{msg}`; a refusal by a count cap is also counted and logged
    /// ([`Hub::refused_by_cap`](super::hub::Hub::refused_by_cap)).
    pub(crate) fn error(&self, error: RelayError) {
        if let RelayError::LimitReached(limit) = error {
            self.ctx.relay.refused_by_cap(limit, &self.origin.peer);
        }
        self.reply(&ServerMessage::Error { error, fatal: false });
    }

    /// Queues the last `error{msg, fatal: true}`, past the output cap.
    pub(crate) fn fatal(&self, error: RelayError) {
        let _ = self.outbox.push_uncapped(|b| ServerMessage::Error { error, fatal: true }.encode(b));
    }

    /// Holds the output until `seq` is durable (only when replies wait for the disk).
    pub(crate) fn gate_on(&mut self, seq: Option<u64>) {
        if let (Some(seq), Some(_)) = (seq, &self.journal) {
            self.gate = Some(self.gate.map_or(seq, |g| g.max(seq)));
        }
    }

    /// Holds the output until the cluster has the node's subscriptions as they stand now (a
    /// clustered node; else nothing), so that a message published on another node after the
    /// client read `subscribed` reaches it, as an MQTT SUBACK waits.
    pub(crate) fn gate_on_interest(&mut self) {
        if let Some(interest) = self.ctx.broker.router().interest() {
            self.interest_gate = self.interest_gate.max(interest.generation());
        }
    }

    /// Whether the output may be written now; if not, `cx` is woken when it may.
    pub(crate) fn poll_gate(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(confirming) = self.room_gate.as_mut() {
            if confirming.as_mut().poll(cx).is_pending() {
                return false;
            }
            self.room_gate = None;
        }
        if self.interest_gate != 0 {
            let interest = self.ctx.broker.router().interest();
            if interest.is_some_and(|i| !i.poll_synced(self.interest_gate, cx.waker())) {
                return false;
            }
            self.interest_gate = 0;
        }
        let (Some(seq), Some(journal)) = (self.gate, &self.journal) else { return true };
        if journal.poll_durable(seq, cx.waker()) {
            self.gate = None;
            true
        } else {
            false
        }
    }

    /// Whether the journal can take more changes (a slow disk holds clients back).
    pub(crate) fn poll_journal_room(&self, cx: &mut Context<'_>) -> bool {
        self.ctx.broker.journal().is_none_or(|j| j.poll_room(cx.waker()))
    }

    // ------------------------------------------------------------------ frames

    /// Handles one frame: parse, rate limit, registration check, then the message.
    pub(crate) fn handle_frame(&mut self, frame: &Bytes, now: Instant) -> Result<(), End> {
        let stats = self.ctx.relay.stats();
        self.received.0 += 1;
        self.received.1 += frame.len() as u64;
        let parsed = mesgd_core::relay::parse(frame);
        let teardown = parsed.as_ref().is_ok_and(ClientMessage::is_teardown);
        match self.limiter.check(now, frame.len(), teardown) {
            Verdict::Allow => {}
            Verdict::Limit => {
                RelayStats::add(&stats.rate_limited, 1);
                self.error(RelayError::RateLimited);
                return Ok(());
            }
            Verdict::Disconnect => {
                RelayStats::add(&stats.abuse_disconnects, 1);
                return Err(End::Abuse);
            }
        }
        let message = match parsed {
            Ok(message) => message,
            Err(e) => {
                self.error(e.relay_error());
                return Ok(());
            }
        };
        if message.needs_registration() && !self.is_registered() {
            self.error(RelayError::RegisterFirst);
            return Ok(());
        }
        match message {
            ClientMessage::Register(register) => self.on_register(&register, now),
            ClientMessage::Challenge => {
                let challenge = Box::new(Challenge::new());
                self.reply(&ServerMessage::Challenge { nonce: &challenge.nonce_base64() });
                self.challenge = Some(challenge);
            }
            ClientMessage::Capabilities => {
                let hub = &self.ctx.relay;
                let _ = self.outbox.push_with(|b| hub.capabilities(b));
            }
            ClientMessage::ListOnline => {
                self.reply(&ServerMessage::OnlineCount { count: self.ctx.relay.online_count() })
            }
            other => self.on_message(other, frame, now),
        }
        Ok(())
    }

    /// The synchronous checks of a `register`, in the documented order, then its admission.
    fn on_register(&mut self, r: &Register<'_>, now: Instant) {
        let _ = now;
        if self.is_registered() {
            self.error(RelayError::AlreadyRegistered);
            return;
        }
        let hub = &self.ctx.relay;
        if hub.load().refuses_register() {
            RelayStats::add(&hub.stats().registers_overloaded, 1);
            self.error(RelayError::Overloaded);
            return;
        }
        let claim = match Claim::from_register(r.addr.as_deref(), r.pubkey.as_deref()) {
            Ok(claim) => claim,
            Err(e) => return self.error(e),
        };
        let challenge = self.challenge.take();
        if let Err(e) = hub.settings().key_proof.check(&claim, r.sig.as_deref(), challenge.as_deref()) {
            return self.error(e);
        }
        if r.password.is_some() && r.token.is_some() {
            return self.error(RelayError::InvalidField("token"));
        }
        let password = r
            .password
            .as_deref()
            .or(r.token.as_deref())
            .map(|p| Secret::new(p.as_bytes().to_vec()))
            .or_else(|| self.origin.bearer.clone());
        let info = ConnectInfo::new(Protocol::Relay, claim.address(), self.origin.listener.clone())
            .with_username(r.username.as_deref().map(str::to_owned))
            .with_password(password)
            .with_peer_addr(Some(self.origin.peer))
            .with_tls(self.origin.tls.clone());
        self.phase = Phase::Registering(Box::pin(register::admit(self.ctx.clone(), info, claim)));
    }

    // ------------------------------------------------------------------ between frames

    /// Does what is due between frames: a registration completing, a kick, a live identity
    /// change, pub/sub deliveries. Returns whether more deliveries are ready right away.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>, now: Instant) -> Result<bool, End> {
        self.count_received();
        if let Phase::Registering(pending) = &mut self.phase {
            let Poll::Ready(result) = pending.as_mut().poll(cx) else { return Ok(false) };
            self.phase = Phase::New;
            match result {
                Ok(admitted) => self.complete_register(admitted, now),
                Err(e) => self.error(e),
            }
        }
        self.poll_join(cx);
        let Phase::Registered(reg) = &mut self.phase else { return Ok(false) };
        if let Some(kick) = reg.session.poll_kick(reg.generation, cx.waker()) {
            return Err(End::Kicked(kick));
        }
        // After poll_kick registered this task with the session: a change published after
        // this check wakes it through the session.
        self.poll_identity()?;
        if self.outbox.pending() >= DRAIN_HIGH_WATER {
            return Ok(false);
        }
        Ok(self.drain(cx, now))
    }

    fn count_received(&mut self) {
        let (frames, bytes) = std::mem::take(&mut self.received);
        if frames > 0 {
            let stats = self.ctx.relay.stats();
            RelayStats::add(&stats.frames_received, frames);
            RelayStats::add(&stats.bytes_received, bytes);
        }
    }

    fn complete_register(&mut self, admitted: Admitted, now: Instant) {
        let Admitted { claim, session, generation, identity, acl, identity_expires, backlog } = admitted;
        let ctx = self.ctx.clone();
        match ctx.relay.register(&self.outbox, &claim, backlog, now) {
            Ok(registration) => {
                self.gate_on(registration.bound);
                Stats::add(&ctx.broker.stats().clients_connected, 1);
                if self.origin.transport == Transport::Udp {
                    RelayStats::add(&ctx.relay.stats().udp_registered, 1);
                }
                tracing::debug!(addr = claim.address(), provider = %identity.provider, "relay client registered");
                self.phase = Phase::Registered(Box::new(Registered {
                    addr: Arc::from(claim.address()),
                    session,
                    generation,
                    acl,
                    username: identity.username.as_deref().map(Arc::from),
                    live: identity.live,
                    identity_expires,
                    allowed: Vec::new(),
                }));
            }
            Err(e) => {
                ctx.broker.connection_closed(&session, generation, None, now);
                self.error(e);
            }
        }
    }

    /// Applies a live change the identity's provider made, through the broker; rooms and
    /// matchmaking waits the new rules no longer allow are left, and an address they no longer
    /// allow ends the connection.
    fn poll_identity(&mut self) -> Result<(), End> {
        let Phase::Registered(reg) = &mut self.phase else { return Ok(()) };
        let Some(live) = reg.live.as_mut().filter(|live| live.has_changed()) else { return Ok(()) };
        match self.ctx.broker.refresh_identity(&reg.session, live.current(), reg.username.as_deref()) {
            IdentityUpdate::Rules(acl) => {
                reg.acl = acl;
                reg.allowed.clear();
                tracing::info!(addr = %reg.addr, "relay client's rules changed: new ACL applies from now on");
                if !reg.may(Access::Read, Resource::Address(&reg.addr.clone())) {
                    return Err(End::NotAuthorized);
                }
                let hub = &self.ctx.relay;
                for room in hub.rooms_of(&self.outbox) {
                    if !reg.may(Access::Read, Resource::Room(&room)) {
                        hub.leave_room(&self.outbox, &room);
                    }
                }
                for game in hub.games_of(&self.outbox) {
                    if !reg.may(Access::Write, Resource::Game(&game)) {
                        hub.cancel_match(&self.outbox, &game);
                    }
                }
                Ok(())
            }
            IdentityUpdate::Revoked(kick) => Err(End::Kicked(kick)),
        }
    }

    /// Moves pub/sub deliveries from the session into the outbox as `message` frames. Returns
    /// whether more are ready.
    fn drain(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let Phase::Registered(reg) = &self.phase else { return false };
        let mut batch = std::mem::take(&mut self.scratch);
        let stats = reg.session.drain(reg.generation, 0, DRAIN_BATCH, now, cx.waker(), &mut batch);
        let relay = self.ctx.relay.stats();
        for outgoing in batch.drain(..) {
            let Outgoing::Publish { delivery, .. } = outgoing else { continue };
            let message = &delivery.message;
            let ct = mesgd_core::relay::MqttCt::from_payload(&message.payload);
            let encoded = ServerMessage::Message {
                topic: message.topic.as_str(),
                from: if delivery.retain { None } else { message.origin.client_id.as_deref() },
                ct: ct.ct(),
                retained: delivery.retain,
                encoding: ct.encoding(),
            };
            match self.outbox.push_with(|b| encoded.encode(b)) {
                Ok(()) => Stats::add(&self.ctx.broker.stats().messages_sent, 1),
                Err(super::outbox::PushError::TooLarge) => {
                    RelayStats::add(&relay.too_large_to_forward, 1);
                    Stats::add(&self.ctx.broker.stats().messages_dropped, 1);
                }
                Err(super::outbox::PushError::Gone) => {
                    RelayStats::add(&relay.dropped_gone, 1);
                    Stats::add(&self.ctx.broker.stats().messages_dropped, 1);
                }
            }
        }
        if stats.expired > 0 {
            Stats::add(&self.ctx.broker.stats().messages_dropped, stats.expired as u64);
        }
        self.scratch = batch;
        stats.more
    }

    /// Ends the client: the hub forgets it (its rooms, pipes and waits), the broker releases its
    /// address and session.
    pub(crate) fn finish(&mut self, now: Instant) {
        self.count_received();
        let hub = &self.ctx.relay;
        hub.unregister(&self.outbox);
        if let Phase::Registered(reg) = std::mem::replace(&mut self.phase, Phase::New) {
            self.ctx.broker.connection_closed(&reg.session, reg.generation, None, now);
            Stats::sub(&self.ctx.broker.stats().clients_connected, 1);
            if self.origin.transport == Transport::Udp {
                RelayStats::sub(&hub.stats().udp_registered, 1);
            }
        }
    }
}
