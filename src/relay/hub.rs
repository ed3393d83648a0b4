//! The relay's shared state, one per server: the directory of registered addresses, the offline
//! queues and alias bindings (durable through the broker's journal), rooms, pipes and
//! matchmaking, the transports for `capabilities`, TURN, and the counters.
//!
//! Who holds an address is decided by the broker's session registry (`Broker::admit` with
//! [`OnConflict::Refuse`](mesgd_core::broker::OnConflict)); the directory maps the addresses of
//! admitted clients to their [`Outbox`], so a direct send is one lookup and one write into the
//! recipient's queue.
//!
//! With `[cluster]`, what crosses nodes goes through the `cluster` seam, and the cluster layer
//! reaches this node's clients through the methods of the submodules: `remote_pipes` (the ends
//! of pipes whose other end is on another node) and `remote_matches` (this node's waiters,
//! paired by the cluster).
//!
//! # Locks
//!
//! Each structure has its own lock, held for the few hundred nanoseconds of a lookup or an
//! update, never across an `.await`. The order is `store` → `directory`, and any of them →
//! an outbox (the outbox lock is a leaf). A registration flushes the backlog and enters the
//! directory under the `store` lock, and a send that finds no recipient looks again under the
//! same lock before it queues: a message is therefore either queued before the flush (and
//! flushed) or delivered live after it, never left in a queue while its address is online.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use bytes::{BufMut, BytesMut};
use mesgd_core::broker::Broker;
use mesgd_core::cluster::relay::{NodeFigures, RelayCluster, RemoteOutcome, RemoteSend};
use mesgd_core::journal::Change;
use mesgd_core::relay::capabilities::{Capabilities, ClientLimits};
use mesgd_core::relay::frame::{MAX_TCP_FRAME, MAX_UDP_DATAGRAM, MAX_WS_FRAME};
use mesgd_core::relay::server::DeliverKind;
use mesgd_core::relay::store::{EnqueueError, Entry};
use mesgd_core::relay::{
    AliasBindings, AliasClaim, Claim, JsonStr, Load, MatchOutcome, Matchmaker, OfflineQueues, Pipes,
    RelayError, Rooms, ServerMessage, TurnConfig, turn,
};
use mesgd_core::sync::lock;

use self::remote_pipes::PipeEnd;
use super::config::Settings;
use super::outbox::{Outbox, PushError};
use super::stats::{RelayStats, Sizes};
use crate::limits::{LimitState, Tripped};

mod remote_matches;
mod remote_pipes;

/// A client in the rooms, pipes and matchmaking tables: its outbox, compared by identity.
#[derive(Clone, Debug)]
pub(crate) struct Link(pub(crate) Arc<Outbox>);

impl PartialEq for Link {
    fn eq(&self, other: &Self) -> bool {
        self.0.id() == other.0.id()
    }
}

impl Eq for Link {}

impl Hash for Link {
    fn hash<S: Hasher>(&self, state: &mut S) {
        self.0.id().hash(state);
    }
}

impl Link {
    fn addr(&self) -> &str {
        self.0.addr().map_or("", |a| a)
    }
}

/// The durable part: offline queues and alias bindings.
#[derive(Debug)]
struct Store {
    queues: OfflineQueues,
    aliases: AliasBindings,
}

/// What became of a message for an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Written into the connected recipient's outbox.
    Live,
    /// Queued for the offline address; under durability `always`, the reply must wait for
    /// journal sequence number `seq`.
    Queued {
        /// The journal sequence number of the queued entry.
        seq: Option<u64>,
    },
    /// Handed to the cluster (the address is not held on this node): the sender is told
    /// `queued` or an error when the cluster knows.
    Remote,
}

/// A successful registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Registration {
    /// Queued messages flushed before `registered`.
    pub(crate) queued: u64,
    /// The journal sequence number of a new alias binding, which `registered` must wait for.
    pub(crate) bound: Option<u64>,
}

/// State restored from `state.db` at start-up.
#[derive(Debug, Default)]
pub struct Restored {
    /// Offline queues, by address, entries oldest first.
    pub queues: Vec<(std::sync::Arc<str>, Vec<Entry>)>,
    /// Alias bindings: alias and the SHA-256 of its key.
    pub aliases: Vec<(std::sync::Arc<str>, [u8; 32])>,
}

/// The relay's shared state.
#[derive(Debug)]
pub struct Hub {
    settings: Settings,
    broker: Arc<Broker>,
    directory: RwLock<HashMap<Arc<str>, Arc<Outbox>>>,
    store: Mutex<Store>,
    rooms: Mutex<Rooms<Link>>,
    /// Pipes with an end here (with `[cluster]`, the other end may be on another node).
    pipes: Mutex<Pipes<PipeEnd>>,
    matches: Mutex<Matchmaker<Link>>,
    transports: RwLock<Vec<(String, u16)>>,
    turn: OnceLock<TurnConfig>,
    /// With `[cluster]`: addresses, direct sends and offline queues across nodes.
    cluster: OnceLock<Arc<dyn RelayCluster>>,
    stats: RelayStats,
    /// The server's limit counters: a refusal by a count cap is counted where the refused
    /// client is, also when the cap was reached on another node.
    limits: Arc<LimitState>,
}

impl Hub {
    pub(crate) fn new(settings: Settings, broker: Arc<Broker>, limits: Arc<LimitState>) -> Hub {
        Hub {
            store: Mutex::new(Store {
                queues: OfflineQueues::new(settings.queue),
                aliases: AliasBindings::new(settings.max_alias_bindings),
            }),
            rooms: Mutex::new(Rooms::new(settings.rooms)),
            pipes: Mutex::new(Pipes::new(settings.pipes)),
            matches: Mutex::new(Matchmaker::new(settings.matches)),
            directory: RwLock::new(HashMap::new()),
            transports: RwLock::new(Vec::new()),
            turn: OnceLock::new(),
            cluster: OnceLock::new(),
            stats: RelayStats::default(),
            settings,
            broker,
            limits,
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The counters.
    pub fn stats(&self) -> &RelayStats {
        &self.stats
    }

    /// Counts a request refused by the count cap `limit`, and logs it at most once per
    /// interval for all relay caps together (a client looping on `join_room` must not fill the
    /// log). `who` is the refused client (its peer address or relay address).
    pub(crate) fn refused_by_cap(&self, limit: mesgd_core::relay::Limit, who: &dyn std::fmt::Display) {
        if let Some(more) = self.limits.trip(Tripped::RelayCap, crate::clock::now()) {
            tracing::info!(
                limit = limit.name(),
                client = %who,
                more_since_last_line = more,
                "relay request refused by a limit"
            );
        }
    }

    /// The sizes of the relay's structures now.
    pub fn sizes(&self) -> Sizes {
        let store = lock(&self.store);
        let drops = store.queues.drops();
        let rooms = lock(&self.rooms);
        let pipes = lock(&self.pipes);
        let matches = lock(&self.matches);
        Sizes {
            addresses: read(&self.directory).len(),
            rooms: rooms.rooms(),
            memberships: rooms.memberships(),
            pipes: pipes.len(),
            waiters: matches.waiters(),
            queues: store.queues.addresses(),
            queued_messages: store.queues.messages(),
            queued_bytes: store.queues.bytes(),
            aliases: store.aliases.len(),
            queue_drops: (drops.cap, drops.bytes, drops.ttl),
            refused: (rooms.refused(), pipes.refused(), matches.refused(), store.aliases.refused_full()),
        }
    }

    /// Lists a bound relay listener in `capabilities` (`tcp`, `tls`, `ws`, `wss`, `udp`).
    pub(crate) fn add_transport(&self, name: &str, port: u16) {
        self.transports.write().unwrap_or_else(|e| e.into_inner()).push((name.to_owned(), port));
    }

    /// Sets the TURN secret and URLs (once, at start).
    pub(crate) fn set_turn(&self, turn: TurnConfig) {
        let _ = self.turn.set(turn);
    }

    /// Takes the relay across nodes (once, at start, with `[cluster]`).
    pub(crate) fn set_cluster(&self, cluster: Arc<dyn RelayCluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// The cluster seam, with `[cluster]`.
    pub(crate) fn cluster(&self) -> Option<&Arc<dyn RelayCluster>> {
        self.cluster.get()
    }

    /// What [`Hub::register`] would refuse for the alias binding, checked before a clustered
    /// registration takes the address's backlog out of the cluster (so that a refusal there
    /// loses nothing). Changes nothing.
    pub(crate) fn check_alias(&self, claim: &Claim) -> Result<(), RelayError> {
        let store = lock(&self.store);
        let bound = store.aliases.get(claim.address());
        match claim {
            Claim::Derived { .. } => Ok(()),
            Claim::Plain { .. } if bound.is_some() => Err(RelayError::AliasBound),
            Claim::Alias { key, .. } if bound.is_some_and(|b| b != key.digest()) => {
                Err(RelayError::AliasBound)
            }
            _ => Ok(()),
        }
    }

    fn record(&self, change: impl FnOnce() -> Change) -> Option<u64> {
        self.broker.journal().map(|j| j.record(change()))
    }

    /// The load now: this node's (relay connections against `max_connections`, offline bytes
    /// against the queues' global budget), or with `[cluster]` the cluster's when it is higher
    /// (the connections of every live node with a cap against the sum of their caps, the
    /// cluster queue's bytes against its budget). The higher of the two is what a client is
    /// told and what refuses a `register`: this node cannot take more than its own cap,
    /// and a client should not be told the relay is idle when it is not.
    pub(crate) fn load(&self) -> Load {
        let node = self.node_load();
        let Some(cluster) = self.cluster.get() else { return node };
        let elsewhere = cluster.elsewhere();
        let mine = if node.max_connections > 0 { node.connections } else { 0 };
        let whole = Load {
            connections: mine + elsewhere.connections,
            max_connections: node.max_connections + elsewhere.max_connections,
            queued_bytes: elsewhere.queued_bytes,
            queue_budget: elsewhere.queue_budget,
        };
        if whole.factor() > node.factor() { whole } else { node }
    }

    fn node_load(&self) -> Load {
        let connections =
            RelayStats::get(&self.stats.connections) + RelayStats::get(&self.stats.udp_registered);
        Load {
            connections,
            max_connections: self.settings.max_connections,
            queued_bytes: lock(&self.store).queues.bytes() as u64,
            queue_budget: self.settings.queue.global_bytes as u64,
        }
    }

    /// This node's figures, which it publishes for the other nodes (`[cluster]`).
    pub(crate) fn figures(&self) -> NodeFigures {
        let load = self.node_load();
        NodeFigures {
            addresses: read(&self.directory).len() as u64,
            connections: load.connections,
            max_connections: load.max_connections,
        }
    }

    /// Encodes the `capabilities` reply.
    pub(crate) fn capabilities(&self, buf: &mut BytesMut) {
        let transports = read(&self.transports);
        let s = &self.settings;
        Capabilities {
            transports: &transports,
            load: self.load(),
            limits: ClientLimits {
                max_frame_tcp: MAX_TCP_FRAME,
                max_frame_ws: MAX_WS_FRAME,
                max_frame_udp: MAX_UDP_DATAGRAM,
                rate: s.rate,
                queue: s.queue,
                key_proof_required: s.key_proof.required,
            },
        }
        .encode(buf);
    }

    /// Encodes a `turn_credentials` reply for `addr`.
    pub(crate) fn turn_credentials(&self, addr: &str, now: Instant, buf: &mut BytesMut) {
        let creds = turn::credentials(self.turn.get(), addr, self.broker.wall_time(now));
        ServerMessage::TurnCredentials(&creds).encode(buf);
    }

    /// Registered addresses relay-wide: with `[cluster]`, this node's and those the other live
    /// nodes last published.
    pub(crate) fn online_count(&self) -> u64 {
        let here = read(&self.directory).len() as u64;
        here + self.cluster.get().map_or(0, |cluster| cluster.elsewhere().addresses)
    }

    /// The outbox of the client holding `addr`.
    pub(crate) fn lookup(&self, addr: &str) -> Option<Arc<Outbox>> {
        read(&self.directory).get(addr).cloned()
    }

    // ------------------------------------------------------------------ addresses

    /// Completes a registration the broker admitted: the alias binding (first key wins), the
    /// backlog flushed as `deliver` frames, `registered{addr, queued}`, and the address in the
    /// directory — all under the store lock (see the module documentation). `backlog` is what
    /// the cluster's queue held for the address (flushed first). Nothing changes on an error.
    pub(crate) fn register(
        &self,
        outbox: &Arc<Outbox>,
        claim: &Claim,
        backlog: Vec<bytes::Bytes>,
        now: Instant,
    ) -> Result<Registration, RelayError> {
        let addr: Arc<str> = Arc::from(claim.address());
        let mut store = lock(&self.store);
        let mut bound = None;
        let bind = match claim {
            Claim::Derived { .. } => Ok(()),
            Claim::Plain { .. } => store.aliases.claim(&addr, None).map(|_| ()),
            Claim::Alias { key, .. } => store.aliases.claim(&addr, Some(key)).map(|claimed| {
                if claimed == AliasClaim::Bound {
                    let key_digest = *key.digest();
                    bound = self.record(|| Change::AliasBound { alias: addr.clone(), key_digest });
                }
            }),
        };
        if let Err(e) = bind {
            drop(store);
            if let Some(cluster) = self.cluster.get() {
                RelayStats::add(&self.stats.dropped_gone, backlog.len() as u64);
                cluster.released(&addr);
            }
            return Err(e);
        }
        let mut queued = 0;
        for body in backlog {
            match outbox.push_uncapped(|b| b.put_slice(&body)) {
                Ok(()) => queued += 1,
                Err(_) => RelayStats::add(&self.stats.queue_flush_too_large, 1),
            }
        }
        let flushed = store.queues.flush(&addr, now);
        for id in flushed.expired {
            self.record(|| Change::RelayDone { addr: addr.clone(), entry: id.0 });
        }
        for entry in flushed.entries {
            self.record(|| Change::RelayDone { addr: addr.clone(), entry: entry.id.0 });
            match outbox.push_uncapped(|b| b.put_slice(&entry.payload)) {
                Ok(()) => queued += 1,
                Err(_) => RelayStats::add(&self.stats.queue_flush_too_large, 1),
            }
        }
        RelayStats::add(&self.stats.queue_flushed, queued);
        let _ = outbox.push_uncapped(|b| ServerMessage::Registered { addr: &addr, queued }.encode(b));
        outbox.set_addr(addr.clone());
        self.directory.write().unwrap_or_else(|e| e.into_inner()).insert(addr.clone(), outbox.clone());
        drop(store);
        if let Some(cluster) = self.cluster.get() {
            cluster.registered(&addr);
        }
        RelayStats::add(&self.stats.registrations, 1);
        Ok(Registration { queued, bound })
    }

    /// Takes a client out of everything: the directory, its rooms, pipes (the other ends are
    /// told `pipe_closed`) and matchmaking waits. What its outbox still held is dropped (and
    /// counted).
    pub(crate) fn unregister(&self, outbox: &Arc<Outbox>) {
        let dropped = outbox.close();
        RelayStats::add(&self.stats.dropped_gone, dropped as u64);
        let Some(addr) = outbox.addr() else { return };
        let removed = {
            let mut directory = self.directory.write().unwrap_or_else(|e| e.into_inner());
            let ours = directory.get(addr).is_some_and(|o| Arc::ptr_eq(o, outbox));
            if ours {
                directory.remove(addr);
            }
            ours
        };
        if let Some(cluster) = self.cluster.get().filter(|_| removed) {
            cluster.released(addr);
        }
        let link = Link(outbox.clone());
        {
            let mut rooms = lock(&self.rooms);
            let mine: Vec<Arc<str>> = match self.cluster.get() {
                Some(_) => rooms.rooms_of(&link).cloned().collect(),
                None => Vec::new(),
            };
            rooms.disconnect(&link);
            if let Some(cluster) = self.cluster.get() {
                for room in mine.iter().filter(|r| rooms.members(r) == 0) {
                    cluster.room_left(room);
                }
            }
        }
        let waited: Vec<Arc<str>> = {
            let mut matches = lock(&self.matches);
            let games = match self.cluster.get() {
                Some(_) => matches.games_of(&link).cloned().collect(),
                None => Vec::new(),
            };
            matches.disconnect(&link);
            games
        };
        self.withdraw_waits(&link, &waited);
        let closed = lock(&self.pipes).disconnect(&PipeEnd::Local(link));
        for (pipe_id, other) in closed {
            self.tell_closed(&other, &pipe_id, addr);
        }
    }

    /// Tells the other end of `pipe_id`, closed by this node's end `me`: `pipe_closed` to a
    /// client here, or to its node.
    fn tell_closed(&self, other: &PipeEnd, pipe_id: &Arc<str>, me: &Arc<str>) {
        match other {
            PipeEnd::Local(link) => self.push(&link.0, &ServerMessage::PipeClosed { pipe_id }),
            PipeEnd::Remote(far) => {
                if let (Some(cluster), Some(route)) = (self.cluster.get(), far.route(pipe_id, me)) {
                    cluster.pipe_closed(&route);
                }
            }
        }
    }

    fn push(&self, to: &Outbox, message: &ServerMessage<'_>) {
        match to.push_with(|b| message.encode(b)) {
            Ok(()) => {}
            Err(PushError::Gone) => RelayStats::add(&self.stats.dropped_gone, 1),
            Err(PushError::TooLarge) => RelayStats::add(&self.stats.too_large_to_forward, 1),
        }
    }

    // ------------------------------------------------------------------ direct messages

    /// Delivers a message to the client holding `to`, or queues it if nobody does. `encode`
    /// writes the frame body, live or queued. `cache` is the sender's last recipient, tried
    /// first (valid while its outbox is open: an address changes hands only after its outbox
    /// closed). With `[cluster]`, a message for an address not held here goes to the cluster
    /// instead of the local queue, and `me` is told later: `queued` (if `tell_queued`) or the
    /// error.
    pub(crate) fn deliver(
        &self,
        me: &Arc<Outbox>,
        cache: &mut Option<Arc<Outbox>>,
        to: &str,
        encode: &dyn Fn(&mut BytesMut, DeliverKind),
        tell_queued: bool,
        now: Instant,
    ) -> Result<Sent, RelayError> {
        let mut gone: Option<Arc<Outbox>> = None;
        if let Some(target) = cache.take_if(|t| t.addr().is_some_and(|a| **a == *to)) {
            match target.push_with(|b| encode(b, DeliverKind::Live)) {
                Ok(()) => {
                    *cache = Some(target);
                    return self.live();
                }
                Err(PushError::TooLarge) => return self.too_large(),
                Err(PushError::Gone) => gone = Some(target),
            }
        }
        if gone.is_none()
            && let Some(target) = self.lookup(to)
        {
            match target.push_with(|b| encode(b, DeliverKind::Live)) {
                Ok(()) => {
                    *cache = Some(target);
                    return self.live();
                }
                Err(PushError::TooLarge) => return self.too_large(),
                Err(PushError::Gone) => gone = Some(target),
            }
        }
        let mut store = lock(&self.store);
        // Registered since the first look (or holding it anew after the gone one): live after
        // all. A gone recipient is about to leave, so what is sent to it now waits in the queue
        // for the address's next registration.
        let current = self.lookup(to).filter(|t| !gone.as_ref().is_some_and(|g| Arc::ptr_eq(g, t)));
        if let Some(target) = current {
            match target.push_with(|b| encode(b, DeliverKind::Live)) {
                Ok(()) => return self.live(),
                Err(PushError::TooLarge) => return self.too_large(),
                Err(PushError::Gone) => {}
            }
        }
        if let Some(cluster) = self.cluster.get() {
            drop(store);
            return self.deliver_remote(cluster, me, to, encode, tell_queued);
        }
        let mut body = BytesMut::new();
        encode(&mut body, DeliverKind::Queued);
        if body.len() > MAX_TCP_FRAME {
            return self.too_large();
        }
        let payload = body.freeze();
        match store.queues.enqueue(to, payload.clone(), now) {
            Ok(enqueued) => {
                let addr: Arc<str> = Arc::from(to);
                for (id, _) in enqueued.dropped {
                    self.record(|| Change::RelayDone { addr: addr.clone(), entry: id.0 });
                }
                let expires_at = self.broker.wall_time(now + self.settings.queue.ttl);
                let seq =
                    self.record(|| Change::RelayQueued { addr, entry: enqueued.id.0, payload, expires_at });
                RelayStats::add(&self.stats.sends_queued, 1);
                Ok(Sent::Queued { seq })
            }
            Err(EnqueueError::TooLarge { .. }) => self.too_large(),
            Err(_) => {
                RelayStats::add(&self.stats.sends_refused, 1);
                Err(RelayError::Overloaded)
            }
        }
    }

    /// Hands a message for an address not held here to the cluster.
    fn deliver_remote(
        &self,
        cluster: &Arc<dyn RelayCluster>,
        me: &Arc<Outbox>,
        to: &str,
        encode: &dyn Fn(&mut BytesMut, DeliverKind),
        tell_queued: bool,
    ) -> Result<Sent, RelayError> {
        let (mut live, mut queued) = (BytesMut::new(), BytesMut::new());
        encode(&mut live, DeliverKind::Live);
        encode(&mut queued, DeliverKind::Queued);
        if queued.len() > MAX_TCP_FRAME {
            return self.too_large();
        }
        let (sender, recipient): (Arc<Outbox>, Arc<str>) = (me.clone(), Arc::from(to));
        let to = recipient.clone();
        let done = Box::new(move |outcome: RemoteOutcome| {
            let reply = match outcome {
                RemoteOutcome::Queued if tell_queued => ServerMessage::Queued { to: &recipient },
                RemoteOutcome::Failed(error) => ServerMessage::Error { error, fatal: false },
                _ => return,
            };
            let _ = sender.push_with(|b| reply.encode(b));
        });
        cluster.send(RemoteSend { to, live: live.freeze(), queued: queued.freeze(), done })?;
        Ok(Sent::Remote)
    }

    fn live(&self) -> Result<Sent, RelayError> {
        RelayStats::add(&self.stats.sends_live, 1);
        Ok(Sent::Live)
    }

    fn too_large(&self) -> Result<Sent, RelayError> {
        RelayStats::add(&self.stats.too_large_to_forward, 1);
        Err(RelayError::FrameTooLarge)
    }

    /// Removes the queued messages whose TTL ran out (run every few seconds).
    pub(crate) fn expire(&self, now: Instant) {
        let expired = lock(&self.store).queues.expire(now);
        for (addr, id) in expired {
            self.record(|| Change::RelayDone { addr, entry: id.0 });
        }
    }

    /// Loads what `state.db` held: queues (the caps in force apply again; entries past them
    /// are dropped, counted and forgotten by the journal) and alias bindings.
    pub(crate) fn restore(&self, restored: Restored) {
        let mut store = lock(&self.store);
        for (alias, digest) in restored.aliases {
            store.aliases.restore(&alias, digest);
        }
        for (addr, entries) in restored.queues {
            for (id, _) in store.queues.restore(&addr, entries) {
                self.record(|| Change::RelayDone { addr: addr.clone(), entry: id.0 });
            }
        }
    }

    // ------------------------------------------------------------------ pipes

    /// Opens a pipe from `me` to the client holding `to`: `pipe_open` to the opener,
    /// `pipe_incoming` to the peer. With `[cluster]`, a peer held on another node is asked
    /// there, and the opener is told when it answers.
    pub(crate) fn open_pipe(&self, me: &Arc<Outbox>, to: &str) -> Result<(), RelayError> {
        let mine = me.addr().cloned().unwrap_or_else(|| Arc::from(""));
        if *mine == *to {
            return Err(RelayError::PipeToSelf);
        }
        let Some(peer) = self.lookup(to) else {
            return match self.cluster.get() {
                Some(cluster) => self.open_remote_pipe(cluster, me, &mine, to),
                None => Err(RelayError::PeerNotConnected),
            };
        };
        let mut pipes = lock(&self.pipes);
        let id = pipes.open(&PipeEnd::Local(Link(me.clone())), &PipeEnd::Local(Link(peer.clone())))?;
        self.push(me, &ServerMessage::PipeOpen { pipe_id: &id, peer: to });
        self.push(&peer, &ServerMessage::PipeIncoming { pipe_id: &id, peer: &mine });
        Ok(())
    }

    /// Forwards a `pipe_data` to the other end of the pipe.
    pub(crate) fn pipe_data(
        &self,
        me: &Arc<Outbox>,
        data: &mesgd_core::relay::client::PipeData<'_>,
    ) -> Result<(), RelayError> {
        let pipes = lock(&self.pipes);
        let other = match pipes.other_end(&PipeEnd::Local(Link(me.clone())), &data.pipe_id)? {
            PipeEnd::Local(other) => other,
            PipeEnd::Remote(far) => {
                let far = far.clone();
                drop(pipes);
                return self.pipe_data_remote(me, &far, data);
            }
        };
        match other.0.push_with(|b| data.forward().encode(b)) {
            Ok(()) => Ok(()),
            Err(PushError::TooLarge) => {
                RelayStats::add(&self.stats.too_large_to_forward, 1);
                Err(RelayError::FrameTooLarge)
            }
            Err(PushError::Gone) => {
                RelayStats::add(&self.stats.dropped_gone, 1);
                Ok(())
            }
        }
    }

    /// Closes a pipe at `me`'s request; the other end is told (nothing happens for a pipe `me`
    /// is not an end of).
    pub(crate) fn close_pipe(&self, me: &Arc<Outbox>, pipe_id: &str) {
        let other = lock(&self.pipes).close(&PipeEnd::Local(Link(me.clone())), pipe_id);
        if let (Some(other), Some(mine)) = (other, me.addr()) {
            self.tell_closed(&other, &Arc::from(pipe_id), mine);
        }
    }

    // ------------------------------------------------------------------ rooms

    /// Adds `me` to `room`; returns the member count.
    pub(crate) fn join_room(&self, me: &Arc<Outbox>, room: &str) -> Result<usize, RelayError> {
        let mut rooms = lock(&self.rooms);
        let members = rooms.join(&Link(me.clone()), room)?;
        if let Some(cluster) = self.cluster.get().filter(|_| members == 1) {
            // Under the rooms lock, so that the cluster sees joins and leaves in their order.
            cluster.room_joined(room);
        }
        Ok(members)
    }

    /// Broadcasts `ct` from `me` to every other member of `room`, encoded once.
    pub(crate) fn room_send(&self, me: &Arc<Outbox>, room: &str, ct: JsonStr<'_>) -> Result<(), RelayError> {
        let link = Link(me.clone());
        let rooms = lock(&self.rooms);
        let recipients = rooms.recipients(&link, room)?;
        let mut body = BytesMut::new();
        ServerMessage::RoomDeliver { room, from: link.addr(), ct }.encode(&mut body);
        let mut too_large = false;
        for member in recipients {
            match member.0.push(&body) {
                Ok(()) => {}
                Err(PushError::TooLarge) => {
                    too_large = true;
                    RelayStats::add(&self.stats.too_large_to_forward, 1);
                }
                Err(PushError::Gone) => RelayStats::add(&self.stats.dropped_gone, 1),
            }
        }
        drop(rooms);
        if let Some(cluster) = self.cluster.get() {
            cluster.room_send(room, body.freeze());
        }
        if too_large { Err(RelayError::FrameTooLarge) } else { Ok(()) }
    }

    /// Writes a `room_deliver` from another node to every member of `room` here; how many.
    pub(crate) fn room_deliver_remote(&self, room: &str, body: &[u8]) -> usize {
        let rooms = lock(&self.rooms);
        let mut reached = 0;
        for member in rooms.all_members(room) {
            match member.0.push(body) {
                Ok(()) => reached += 1,
                Err(PushError::TooLarge) => RelayStats::add(&self.stats.too_large_to_forward, 1),
                Err(PushError::Gone) => RelayStats::add(&self.stats.dropped_gone, 1),
            }
        }
        reached
    }

    /// The members of `room` here.
    pub(crate) fn room_members(&self, room: &str) -> usize {
        lock(&self.rooms).members(room)
    }

    /// The rooms `me` is in.
    pub(crate) fn rooms_of(&self, me: &Arc<Outbox>) -> Vec<Arc<str>> {
        lock(&self.rooms).rooms_of(&Link(me.clone())).cloned().collect()
    }

    /// Takes `me` out of `room` (its rules no longer let it read there).
    pub(crate) fn leave_room(&self, me: &Arc<Outbox>, room: &str) {
        let mut rooms = lock(&self.rooms);
        if rooms.leave(&Link(me.clone()), room) && rooms.members(room) == 0 {
            if let Some(cluster) = self.cluster.get() {
                cluster.room_left(room);
            }
        }
    }

    // ------------------------------------------------------------------ matchmaking

    /// Handles `me`'s `find_match`: `waiting` to it, or `matched` to both. With `[cluster]`,
    /// a caller not waiting in `game` here goes to the cluster, which pairs it with the game's
    /// waiter on any node, or makes it that waiter.
    pub(crate) fn find_match(&self, me: &Arc<Outbox>, game: &str) -> Result<(), RelayError> {
        let link = Link(me.clone());
        let mut matches = lock(&self.matches);
        if let Some(cluster) = self.cluster.get() {
            if matches.games_of(&link).any(|g| **g == *game) {
                self.push(me, &ServerMessage::Waiting { game });
                return Ok(());
            }
            drop(matches);
            return cluster.find_match(game, link.addr(), me.id());
        }
        match matches.find_match(&link, game)? {
            MatchOutcome::Waiting => self.push(me, &ServerMessage::Waiting { game }),
            MatchOutcome::Matched { peer } => {
                self.push(me, &ServerMessage::Matched { game, peer: peer.addr() });
                self.push(&peer.0, &ServerMessage::Matched { game, peer: link.addr() });
            }
        }
        Ok(())
    }

    /// The games `me` waits in.
    pub(crate) fn games_of(&self, me: &Arc<Outbox>) -> Vec<Arc<str>> {
        lock(&self.matches).games_of(&Link(me.clone())).cloned().collect()
    }

    /// Takes `me` out of `game`'s queue.
    pub(crate) fn cancel_match(&self, me: &Arc<Outbox>, game: &str) {
        let link = Link(me.clone());
        if lock(&self.matches).cancel(&link, game) {
            self.withdraw_waits(&link, &[Arc::from(game)]);
        }
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}
