//! Pipes whose other end is on another node (with `[cluster]`): the ends this node's table
//! holds for them, and what the cluster layer tells the hub about them.
//!
//! A pipe in the hub's table has two [`PipeEnd`]s. Between two clients of this node both are
//! local, as without a cluster. Across nodes, the table of each node holds the pipe under the
//! same id, with its own client's end local and the other a [`RemoteEnd`]: the other client's
//! address and, once known, its node instance (followed for its death) and its frame limit
//! (so that `frame too large` is answered here, as on one node).
//!
//! On the opener's node the pipe is reserved when `open_pipe` arrives (the caps are checked
//! here, and the opener cannot learn the id before `pipe_open`), and opened when the peer's
//! node answers, or when data or a close from there shows that it did (that answer and the
//! data come on different subscriptions, so either may be read first). Everything is done
//! under the pipes lock, so the opener is told `pipe_open` once and before any data.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use mesgd_core::cluster::relay::{IncomingPipe, PipeDelivery, PipeOpen, PipePeer, PipeRoute, RelayCluster};
use mesgd_core::relay::{RelayError, ServerMessage};
use mesgd_core::sync::lock;

use super::{Hub, Link, Outbox, PushError, RelayStats};

/// One end of a pipe, as this node's table holds it.
#[derive(Clone, Debug)]
pub(crate) enum PipeEnd {
    /// A client of this node.
    Local(Link),
    /// A client of another node.
    Remote(Arc<RemoteEnd>),
}

impl PartialEq for PipeEnd {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PipeEnd::Local(a), PipeEnd::Local(b)) => a == b,
            (PipeEnd::Remote(a), PipeEnd::Remote(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for PipeEnd {}

impl Hash for PipeEnd {
    fn hash<S: Hasher>(&self, state: &mut S) {
        match self {
            PipeEnd::Local(link) => link.hash(state),
            // Each remote end belongs to one pipe: its identity is the allocation.
            PipeEnd::Remote(far) => std::ptr::hash(Arc::as_ptr(far), state),
        }
    }
}

/// The end of a pipe held by a client of another node.
#[derive(Debug)]
pub(crate) struct RemoteEnd {
    addr: Arc<str>,
    state: Mutex<Far>,
}

/// What this node knows of a remote end.
#[derive(Debug, Default)]
struct Far {
    /// Its node; `None` while the open is on its way.
    node: Option<Arc<str>>,
    /// Its node's instance, once the open is answered.
    instance: Option<u64>,
    /// Its transport's frame limit, once the open is answered.
    max_frame: Option<usize>,
    /// Whether this node's end was told the pipe is open.
    open: bool,
}

impl RemoteEnd {
    /// The peer of a pipe this node is opening.
    fn opening(addr: &str) -> RemoteEnd {
        RemoteEnd { addr: Arc::from(addr), state: Mutex::new(Far::default()) }
    }

    /// The opener of a pipe another node opened to a client here.
    fn opener(addr: &str, peer: &PipePeer) -> RemoteEnd {
        let far = Far {
            node: Some(peer.node.clone()),
            instance: Some(peer.instance),
            max_frame: Some(frame_limit(peer.max_frame)),
            open: true,
        };
        RemoteEnd { addr: Arc::from(addr), state: Mutex::new(far) }
    }

    /// Where frames for it go, from this node's end `me`; `None` while the open is on its way.
    pub(crate) fn route(&self, pipe_id: &str, me: &Arc<str>) -> Option<PipeRoute> {
        let node = lock(&self.state).node.clone()?;
        Some(PipeRoute { pipe_id: Arc::from(pipe_id), node, me: me.clone(), peer: self.addr.clone() })
    }

    /// Whether `node` may speak for this end (its node, or any while still unknown).
    fn speaks_for(&self, node: &str) -> bool {
        lock(&self.state).node.as_deref().is_none_or(|n| n == node)
    }

    /// Records that the pipe is open on `node`; true if this node's end must now be told.
    fn open_on(&self, node: &str) -> bool {
        let mut far = lock(&self.state);
        if far.node.is_none() {
            far.node = Some(Arc::from(node));
        }
        !std::mem::replace(&mut far.open, true)
    }

    /// Records the answer of the peer's node; true if this node's end must now be told.
    fn answered(&self, peer: &PipePeer) -> bool {
        let mut far = lock(&self.state);
        far.node = Some(peer.node.clone());
        far.instance = Some(peer.instance);
        far.max_frame = Some(frame_limit(peer.max_frame));
        !std::mem::replace(&mut far.open, true)
    }

    fn is_open(&self) -> bool {
        lock(&self.state).open
    }

    /// Whether its node instance is gone by `gone`; never while its node is unknown (the open
    /// on its way ends either way).
    fn is_gone(&self, gone: &dyn Fn(&str, Option<u64>) -> bool) -> bool {
        let far = lock(&self.state);
        far.node.as_deref().is_some_and(|node| gone(node, far.instance))
    }
}

fn frame_limit(max_frame: u32) -> usize {
    usize::try_from(max_frame).unwrap_or(usize::MAX)
}

/// The local and the remote end of a pipe across nodes (in either order); `None` for a pipe
/// between two clients here.
fn across<'a>(ends: (&'a PipeEnd, &'a PipeEnd)) -> Option<(&'a Link, &'a Arc<RemoteEnd>)> {
    match ends {
        (PipeEnd::Local(link), PipeEnd::Remote(far)) | (PipeEnd::Remote(far), PipeEnd::Local(link)) => {
            Some((link, far))
        }
        _ => None,
    }
}

impl Hub {
    /// Reserves a pipe from `me` to `to`, held on another node (or nowhere), and has the
    /// cluster open it there.
    pub(super) fn open_remote_pipe(
        &self,
        cluster: &Arc<dyn RelayCluster>,
        me: &Arc<Outbox>,
        mine: &Arc<str>,
        to: &str,
    ) -> Result<(), RelayError> {
        let far = PipeEnd::Remote(Arc::new(RemoteEnd::opening(to)));
        let pipe_id = lock(&self.pipes).open(&PipeEnd::Local(Link(me.clone())), &far)?;
        let open = PipeOpen {
            pipe_id: pipe_id.clone(),
            from: mine.clone(),
            to: Arc::from(to),
            max_frame: u32::try_from(me.max_frame()).unwrap_or(u32::MAX),
        };
        if let Err(e) = cluster.open_pipe(open) {
            lock(&self.pipes).remove(&pipe_id);
            return Err(e);
        }
        Ok(())
    }

    /// A `pipe_data` from `me` for the other end `far`, on another node.
    pub(super) fn pipe_data_remote(
        &self,
        me: &Arc<Outbox>,
        far: &RemoteEnd,
        data: &mesgd_core::relay::client::PipeData<'_>,
    ) -> Result<(), RelayError> {
        let (Some(cluster), Some(mine)) = (self.cluster.get(), me.addr()) else {
            return Err(RelayError::UnknownPipe);
        };
        // Still opening: the sender cannot have learnt the id.
        let Some(route) = far.route(&data.pipe_id, mine) else { return Err(RelayError::UnknownPipe) };
        let mut body = BytesMut::new();
        data.forward().encode(&mut body);
        if lock(&far.state).max_frame.is_some_and(|max| body.len() > max) {
            RelayStats::add(&self.stats.too_large_to_forward, 1);
            return Err(RelayError::FrameTooLarge);
        }
        cluster.pipe_data(&route, body.freeze())
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::pipe_opened`].
    pub(crate) fn pipe_opened(&self, pipe_id: &str, peer: &PipePeer) -> bool {
        let pipes = lock(&self.pipes);
        let Some((opener, far)) = pipes.ends(pipe_id).and_then(across) else { return false };
        if far.answered(peer) {
            self.push(&opener.0, &ServerMessage::PipeOpen { pipe_id, peer: &far.addr });
        }
        true
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::pipe_refused`].
    pub(crate) fn pipe_refused(&self, pipe_id: &str, error: RelayError) {
        let mut pipes = lock(&self.pipes);
        let Some((opener, far)) = pipes.ends(pipe_id).and_then(across) else { return };
        let (opener, was_open) = (opener.clone(), far.is_open());
        pipes.remove(pipe_id);
        if was_open {
            self.push(&opener.0, &ServerMessage::PipeClosed { pipe_id });
        } else {
            if let RelayError::LimitReached(limit) = error {
                self.refused_by_cap(limit, &opener.addr());
            }
            self.push(&opener.0, &ServerMessage::Error { error, fatal: false });
        }
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::pipe_incoming`].
    pub(crate) fn pipe_incoming(&self, open: IncomingPipe<'_>) -> Result<u32, RelayError> {
        let peer = self.lookup(open.to).ok_or(RelayError::PeerNotConnected)?;
        let far = PipeEnd::Remote(Arc::new(RemoteEnd::opener(open.from, open.opener)));
        let mut pipes = lock(&self.pipes);
        pipes.accept(Arc::from(open.pipe_id), &far, &PipeEnd::Local(Link(peer.clone())))?;
        self.push(&peer, &ServerMessage::PipeIncoming { pipe_id: open.pipe_id, peer: open.from });
        Ok(u32::try_from(peer.max_frame()).unwrap_or(u32::MAX))
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::pipe_data`].
    pub(crate) fn pipe_data_from(&self, pipe_id: &str, to: &str, node: &str, body: &[u8]) -> PipeDelivery {
        let pipes = lock(&self.pipes);
        let Some((end, far)) = pipes.ends(pipe_id).and_then(across) else { return PipeDelivery::Unknown };
        if end.addr() != to || !far.speaks_for(node) {
            return PipeDelivery::Unknown;
        }
        if far.open_on(node) {
            // Data before the open's answer: the pipe is open there.
            self.push(&end.0, &ServerMessage::PipeOpen { pipe_id, peer: &far.addr });
        }
        match end.0.push(body) {
            Ok(()) => PipeDelivery::Written,
            Err(PushError::TooLarge) => {
                RelayStats::add(&self.stats.too_large_to_forward, 1);
                PipeDelivery::TooLarge
            }
            Err(PushError::Gone) => {
                RelayStats::add(&self.stats.dropped_gone, 1);
                PipeDelivery::Gone
            }
        }
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::pipe_closed`].
    pub(crate) fn pipe_closed_from(&self, pipe_id: &str, from: &str, node: &str) -> bool {
        let mut pipes = lock(&self.pipes);
        let Some((end, far)) = pipes.ends(pipe_id).and_then(across) else { return false };
        if *far.addr != *from || !far.speaks_for(node) {
            return false;
        }
        let (end, far) = (end.clone(), far.clone());
        pipes.remove(pipe_id);
        if far.open_on(node) {
            // Closed there before the open's answer was read here: it did open.
            self.push(&end.0, &ServerMessage::PipeOpen { pipe_id, peer: &far.addr });
        }
        self.push(&end.0, &ServerMessage::PipeClosed { pipe_id });
        true
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::pipes_gone`].
    pub(crate) fn pipes_gone(&self, gone: &dyn Fn(&str, Option<u64>) -> bool) -> usize {
        let mut pipes = lock(&self.pipes);
        let dead: Vec<Arc<str>> = pipes
            .iter()
            .filter(|(_, a, b)| across((*a, *b)).is_some_and(|(_, far)| far.is_gone(gone)))
            .map(|(id, ..)| id.clone())
            .collect();
        for pipe_id in &dead {
            if let Some((a, b)) = pipes.remove(pipe_id)
                && let Some((end, _)) = across((&a, &b))
            {
                self.push(&end.0, &ServerMessage::PipeClosed { pipe_id });
            }
        }
        dead.len()
    }
}
