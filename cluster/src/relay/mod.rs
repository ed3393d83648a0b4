//! The relay across nodes: which node holds each relay address, direct sends to a client on
//! another node, and the cluster-wide store-and-forward queues of offline addresses.
//!
//! - **Addresses** (`claims`): one JetStream KV bucket (`relay_bucket`) with one record per
//!   address held somewhere, naming the node (the session registry's record format). A
//!   `register` claims it by compare-and-swap after the broker admitted it locally; a record
//!   naming another node is checked with that node (`H` request): held there → `address in
//!   use` (first come, first served, as on one node); not held or the node gone → overwritten.
//! - **Direct sends** (`send`): a `send` or `ack` to an address nobody holds on this node goes
//!   to one task, in order: the record is read, the message goes to the holder's subject
//!   `mesgd.relay.<node>` (`D` request, bounded wait), and the holder writes it to its client.
//! - **Store-and-forward** (`queue`): an address nobody holds gets the message in one stream
//!   (`relay_queue_stream`), one subject per address, bounded per address and in total by the
//!   relay's queue limits, `max_age` = the TTL. The node the address registers on next takes
//!   its messages out (read, then delete each: only one deleter wins) before `registered`.
//! - **Rooms** (`rooms`): one subject per room, subscribed while this node has a member; a
//!   `room_send` is published there once and each node hands it to its members once.
//! - **Pipes** (`pipes`): a pipe whose ends are on two nodes is opened by a request to the
//!   peer's node (`P`), then its data (`W`) and close (`C`) are published there in order,
//!   without a reply; the ends of a node that died are closed when its lease is taken over.
//! - **Matchmaking** (`matches`): one record per game in the bucket, naming the game's one
//!   waiter; a caller becomes it by compare-and-swap, or takes it by deleting it at the
//!   revision read (one delete wins) and has its node tell it (`M`).
//! - **Counts** (`figures`): each node's figures under its own key (`n.<node>`), followed by
//!   every node, counted while their node's lease holds; a room's members asked of each node
//!   (`R`) when a client joins it.
//! - `serve`: the requests other nodes send here.
//!
//! JetStream assets: one bucket and one stream whatever the number of clients, no consumer.

mod claims;
mod figures;
mod matches;
mod pipes;
mod queue;
mod rooms;
mod send;
mod serve;
pub(crate) mod stats;

use std::sync::Arc;
use std::time::Duration;

use async_nats::Client;
use async_nats::jetstream::{self, kv};
use mesgd_core::cluster::relay::{
    AliasRule, CountFuture, Elsewhere, LocalRelay, PipeOpen, PipeRoute, RelayClaimFuture, RelayCluster,
    RemoteSend,
};
use mesgd_core::relay::{QueueLimits, RelayError};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use self::stats::RelayClusterStats;
use crate::liveness::Liveness;
use crate::stats::ClusterStats;

/// How many flush locks addresses are spread over (a flush of one address at a time here).
const FLUSH_STRIPES: usize = 64;

/// Where the relay's cluster state lives and how long to wait for it.
#[derive(Clone, Debug)]
pub(crate) struct RelaySetup {
    pub(crate) bucket: String,
    pub(crate) stream: String,
    pub(crate) replicas: usize,
    pub(crate) timeout: Duration,
    pub(crate) capacity: usize,
    /// How long creating the bucket and the stream waits for JetStream
    /// ([`crate::streams::get_or_create`]).
    pub(crate) patience: Duration,
}

/// The relay's [`RelayCluster`] seam; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct RelayNode {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    js: jetstream::Context,
    kv: kv::Store,
    queue: jetstream::stream::Stream,
    node: Arc<str>,
    /// This node's process instance, as records name it (hex).
    instance: String,
    /// The same, as its lease names it.
    instance_id: u64,
    local: Arc<dyn LocalRelay>,
    /// Which other node instances are alive.
    liveness: Arc<Liveness>,
    limits: QueueLimits,
    timeout: Duration,
    stats: Arc<ClusterStats>,
    claims: claims::Claims,
    sends: mpsc::Sender<RemoteSend>,
    flush_locks: Vec<tokio::sync::Mutex<()>>,
    rooms: RoomState,
    /// Pipe data and closes to other nodes, in order.
    pipe_frames: mpsc::Sender<pipes::PipeFrame>,
    /// This node's `find_match`es and withdrawals, in order.
    matches: mpsc::Sender<matches::MatchJob>,
    /// The games' records this node wrote for its waiters.
    waiters: matches::OwnWaiters,
    /// The other nodes' figures.
    figures: figures::OtherFigures,
}

/// Which rooms this node wants to receive, and how far its subscriptions have caught up.
#[derive(Debug)]
struct RoomState {
    /// The latest wanted state per room, not yet applied.
    wanted: std::sync::Mutex<std::collections::HashMap<String, bool>>,
    changed: tokio::sync::Notify,
    /// Membership changes made so far.
    generation: std::sync::atomic::AtomicU64,
    /// Membership changes applied (subscriptions at the server).
    synced: tokio::sync::watch::Sender<u64>,
    /// Room messages to publish.
    out: mpsc::Sender<(String, bytes::Bytes)>,
}

impl RelayNode {
    /// Creates (or finds) the bucket and the stream, subscribes to this node's relay subject
    /// and starts the sending task. Returns the seam and the tasks.
    pub(crate) async fn start(
        client: Client,
        me: &crate::live::Identity,
        liveness: Arc<Liveness>,
        setup: &RelaySetup,
        local: Arc<dyn LocalRelay>,
        limits: QueueLimits,
        stats: Arc<ClusterStats>,
    ) -> Result<(RelayNode, Vec<JoinHandle<()>>), crate::StartError> {
        let js = jetstream::new(client.clone());
        let kv = claims::bucket(&js, &setup.bucket, setup.replicas, setup.patience).await?;
        let queue = queue::stream(&js, &setup.stream, setup.replicas, &limits, setup.patience).await?;
        let (sends, sends_rx) = mpsc::channel(setup.capacity);
        let (room_out, room_rx) = mpsc::channel(setup.capacity);
        let (pipe_frames, pipe_rx) = mpsc::channel(setup.capacity);
        let (match_jobs, match_rx) = mpsc::channel(setup.capacity);
        let node = RelayNode {
            inner: Arc::new(Inner {
                client,
                js,
                kv,
                queue,
                node: me.node.clone(),
                instance: format!("{:016x}", me.instance),
                instance_id: me.instance,
                local,
                liveness,
                limits,
                timeout: setup.timeout,
                stats,
                claims: claims::Claims::default(),
                sends,
                flush_locks: (0..FLUSH_STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
                rooms: RoomState {
                    wanted: std::sync::Mutex::new(std::collections::HashMap::new()),
                    changed: tokio::sync::Notify::new(),
                    generation: std::sync::atomic::AtomicU64::new(0),
                    synced: tokio::sync::watch::channel(0).0,
                    out: room_out,
                },
                pipe_frames,
                matches: match_jobs,
                waiters: matches::OwnWaiters::default(),
                figures: figures::OtherFigures::default(),
            }),
        };
        let serving = node.serve().await?;
        let sending = tokio::spawn(node.clone().send_loop(sends_rx));
        let rooms = tokio::spawn(node.clone().follow_rooms());
        let room_sending = tokio::spawn(node.clone().publish_rooms(room_rx));
        let pipe_sending = tokio::spawn(node.clone().publish_pipe_frames(pipe_rx));
        let dead_pipes = tokio::spawn(node.clone().follow_liveness());
        let matching = tokio::spawn(node.clone().match_loop(match_rx));
        let publishing = tokio::spawn(node.clone().publish_figures());
        let following = tokio::spawn(node.clone().follow_figures());
        Ok((
            node,
            vec![
                serving,
                sending,
                rooms,
                room_sending,
                pipe_sending,
                dead_pipes,
                matching,
                publishing,
                following,
            ],
        ))
    }

    fn stats(&self) -> &RelayClusterStats {
        &self.inner.stats.relay
    }

    /// The lock under which `addr`'s cluster queue is flushed on this node.
    fn flush_lock(&self, addr: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(addr);
        &self.inner.flush_locks[(hash % FLUSH_STRIPES as u64) as usize]
    }

    /// Flushes `addr`'s cluster queue to its client here, if one holds it: messages queued
    /// while the address was being registered, or while a sender raced its registration.
    async fn flush_late(&self, addr: &str) {
        let _flushing = self.flush_lock(addr).lock().await;
        if !self.inner.local.holds(addr) {
            return;
        }
        let backlog = self.take_backlog(addr).await;
        let mut rest = backlog.into_iter();
        for body in rest.by_ref() {
            match self.inner.local.deliver(addr, &body) {
                mesgd_core::cluster::relay::LocalDelivery::Written => {
                    RelayClusterStats::add(&self.stats().flushed, 1);
                }
                mesgd_core::cluster::relay::LocalDelivery::TooLarge => {
                    RelayClusterStats::add(&self.stats().queue_refused, 1);
                }
                _ => {
                    // The client left during the flush: what is left waits for the next one.
                    let mut left = vec![body];
                    left.extend(rest);
                    self.requeue(addr, left).await;
                    return;
                }
            }
        }
    }
}

impl RelayCluster for RelayNode {
    fn claim(&self, addr: Arc<str>, alias: AliasRule) -> RelayClaimFuture {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let node = self.clone();
        tokio::spawn(async move {
            let claiming = async {
                node.claim_now(&addr).await?;
                if let Err(e) = node.check_binding(&addr, alias).await {
                    node.release_now(&addr).await;
                    return Err(e);
                }
                Ok(())
            };
            let claimed = match tokio::time::timeout(node.inner.timeout, claiming).await {
                Ok(claimed) => claimed,
                Err(_) => {
                    node.inner.claims.failed(&addr);
                    RelayClusterStats::add(&node.stats().claims_unavailable, 1);
                    Err(RelayError::Overloaded)
                }
            };
            let result = match claimed {
                Ok(()) => {
                    let _flushing = node.flush_lock(&addr).lock().await;
                    let backlog = node.take_backlog(&addr).await;
                    RelayClusterStats::add(&node.stats().flushed, backlog.len() as u64);
                    Ok(backlog)
                }
                Err(e) => Err(e),
            };
            // The client went away while it was being registered: its backlog goes back and
            // the record with it.
            if let Err(Ok(backlog)) = tx.send(result) {
                node.requeue(&addr, backlog).await;
                node.release_now(&addr).await;
            }
        });
        Box::pin(async move { rx.await.unwrap_or(Err(RelayError::Overloaded)) })
    }

    fn registered(&self, addr: &str) {
        self.inner.claims.registered(addr);
        let (node, addr) = (self.clone(), addr.to_owned());
        tokio::spawn(async move { node.flush_late(&addr).await });
    }

    fn released(&self, addr: &str) {
        let (node, addr) = (self.clone(), addr.to_owned());
        tokio::spawn(async move { node.release_now(&addr).await });
    }

    fn send(&self, send: RemoteSend) -> Result<(), RelayError> {
        self.inner.sends.try_send(send).map_err(|_| {
            RelayClusterStats::add(&self.stats().send_queue_full, 1);
            RelayError::Overloaded
        })
    }

    fn room_joined(&self, room: &str) {
        self.want_room(room, true);
    }

    fn room_left(&self, room: &str) {
        self.want_room(room, false);
    }

    fn rooms_confirmed(&self) -> Option<mesgd_core::cluster::relay::ConfirmFuture> {
        RelayNode::rooms_confirmed(self)
    }

    fn room_send(&self, room: &str, body: bytes::Bytes) {
        if self.inner.rooms.out.try_send((room.to_owned(), body)).is_err() {
            RelayClusterStats::add(&self.stats().room_queue_full, 1);
        }
    }

    fn open_pipe(&self, open: PipeOpen) -> Result<(), RelayError> {
        self.open_remote(open)
    }

    fn pipe_data(&self, route: &PipeRoute, body: bytes::Bytes) -> Result<(), RelayError> {
        self.send_pipe_data(route, body)
    }

    fn pipe_closed(&self, route: &PipeRoute) {
        self.close_remote(&route.pipe_id, &route.node, &route.me);
    }

    fn find_match(&self, game: &str, who: &str, ticket: u64) -> Result<(), RelayError> {
        self.queue_match(matches::MatchJob::Find { game: game.to_owned(), who: who.to_owned(), ticket })
    }

    fn match_withdrawn(&self, game: &str, who: &str, ticket: u64) {
        // A full queue leaves the record: the next caller finds the waiter gone.
        let job = matches::MatchJob::Withdraw { game: game.to_owned(), who: who.to_owned(), ticket };
        let _ = self.queue_match(job);
    }

    fn elsewhere(&self) -> Elsewhere {
        RelayNode::elsewhere(self)
    }

    fn room_members(&self, room: &str) -> CountFuture {
        self.room_members_elsewhere(room)
    }
}
