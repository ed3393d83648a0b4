//! The relay's seams to the cluster: what the relay front end asks of the cluster layer
//! ([`RelayCluster`]: claim an address cluster-wide, send to an address held on another node
//! or offline, open and use pipes whose other end is on another node, find a match anywhere)
//! and what the cluster layer asks of the relay ([`LocalRelay`]: write a frame to a client of
//! this node, the ends of pipes here, its waiters), and how an address names its records and
//! subjects in NATS.
//!
//! Without `[cluster]` neither is installed and the relay keeps everything on its node.
//! `docs/cluster.md` ("The relay across nodes") describes the design.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

use super::client_key;
use crate::relay::{RelayError, ServerMessage};

/// A count the cluster is asked for (the members of a room on the other nodes).
pub type CountFuture = Pin<Box<dyn Future<Output = u64> + Send>>;

/// Ends when what this node asked of its NATS server is confirmed there, or after a bound
/// (see [`RelayCluster::rooms_confirmed`]).
pub type ConfirmFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The future of [`RelayCluster::claim`]: the backlog queued in the cluster for the address,
/// oldest first, already taken out of the cluster's queue.
pub type RelayClaimFuture = Pin<Box<dyn Future<Output = Result<Vec<Bytes>, RelayError>> + Send>>;

/// What became of a message sent through the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteOutcome {
    /// Written into the outbox of the recipient on another node.
    Live,
    /// Stored in the cluster's store-and-forward queue of the address.
    Queued,
    /// Refused: the sender is told this error.
    Failed(RelayError),
}

/// A message for an address this node does not hold.
pub struct RemoteSend {
    /// The recipient address.
    pub to: Arc<str>,
    /// The frame body for a live delivery (`kind: "live"`).
    pub live: Bytes,
    /// The frame body for the offline queue (`kind: "queued"`).
    pub queued: Bytes,
    /// Called once with the outcome, from the cluster's task (it tells the sender).
    pub done: Box<dyn FnOnce(RemoteOutcome) + Send>,
}

impl fmt::Debug for RemoteSend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Bodies are client content: lengths only.
        f.debug_struct("RemoteSend")
            .field("to", &self.to)
            .field("live_len", &self.live.len())
            .field("queued_len", &self.queued.len())
            .finish_non_exhaustive()
    }
}

/// The relay's view of the cluster, installed in the relay hub by the cluster layer.
pub trait RelayCluster: Send + Sync + fmt::Debug {
    /// Claims `addr` for this node cluster-wide, after the broker admitted it here. `address
    /// in use` while a live client holds it on another node; then the alias binding `alias`
    /// cluster-wide (`alias bound to a different key`; nothing is held after a refusal);
    /// `relay overloaded, retry later` when the cluster cannot be reached in time. On success
    /// the address's backlog from the cluster's queue is returned (and removed from it), to be
    /// flushed before `registered`.
    fn claim(&self, addr: Arc<str>, alias: AliasRule) -> RelayClaimFuture;
    /// `addr` is now in this node's directory (`registered` was sent): messages queued while
    /// it was being registered are flushed now.
    fn registered(&self, addr: &str);
    /// `addr` left this node (or its registration failed after [`RelayClaimFuture`]
    /// succeeded): its record goes, if it still names this node.
    fn released(&self, addr: &str);
    /// Sends a message to an address this node does not hold. Never waits: `relay overloaded,
    /// retry later` when the queue to the cluster is full; otherwise `done` is called later.
    fn send(&self, send: RemoteSend) -> Result<(), RelayError>;
    /// This node now has a member of `room`, and had none: it receives the room's messages
    /// from other nodes once its subscription is at its NATS server
    /// ([`RelayCluster::rooms_confirmed`]).
    fn room_joined(&self, room: &str);
    /// This node's last member of `room` left.
    fn room_left(&self, room: &str);
    /// Waits until this node's room subscriptions, as of every [`RelayCluster::room_joined`]
    /// and [`RelayCluster::room_left`] so far, are confirmed at its NATS server, so that a room
    /// message published on another node from then on reaches this node's members: what a
    /// `joined_room` waits for. `None` when there is nothing to wait for (already confirmed,
    /// or the NATS connection is down: the room is local until NATS is back); the future
    /// ends after a bound all the same (`registry_timeout_ms`, counted).
    fn rooms_confirmed(&self) -> Option<ConfirmFuture>;
    /// A `room_deliver` (`body`, encoded once) from a member of this node, after local
    /// delivery: to the room's members on other nodes. Never waits.
    fn room_send(&self, room: &str, body: Bytes);
    /// Opens the pipe `open.pipe_id`, reserved here for a client of this node, to `open.to`,
    /// which no client of this node holds. Never waits: `relay overloaded, retry later` when
    /// the queue to the cluster is full; the outcome comes back through
    /// [`LocalRelay::pipe_opened`] or [`LocalRelay::pipe_refused`].
    fn open_pipe(&self, open: PipeOpen) -> Result<(), RelayError>;
    /// A `pipe_data` frame body for the other end of `route`, on another node, sent after the
    /// earlier ones of this node. Never waits: `relay overloaded, retry later` when the queue
    /// to the cluster is full.
    fn pipe_data(&self, route: &PipeRoute, body: Bytes) -> Result<(), RelayError>;
    /// This end of `route` closed (`close_pipe` or a disconnect): the other node is told, after
    /// the data sent before.
    fn pipe_closed(&self, route: &PipeRoute);
    /// `find_match{game}` of `who` (its connection's `ticket`), which does not wait in `game`
    /// here: paired with the game's waiter anywhere in the cluster, or made that waiter.
    /// Never waits: `relay overloaded, retry later` when the queue to the cluster is full;
    /// what follows reaches `who` through [`LocalRelay::tell`].
    fn find_match(&self, game: &str, who: &str, ticket: u64) -> Result<(), RelayError>;
    /// `who` (connection `ticket`) no longer waits in `game` here (it disconnected, or its
    /// rules no longer allow the game): its record as the game's waiter goes.
    fn match_withdrawn(&self, game: &str, who: &str, ticket: u64);
    /// The other live nodes' figures as last published, summed, and the cluster queue's bytes
    /// against its budget. Never waits (`docs/cluster.md` says how stale they may be).
    fn elsewhere(&self) -> Elsewhere;
    /// The members of `room` on the other live nodes, asked of each (a node that does not
    /// answer in time counts none).
    fn room_members(&self, room: &str) -> CountFuture;
}

/// The other live nodes' relay figures, summed, and the cluster's store-and-forward queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Elsewhere {
    /// Addresses registered on them.
    pub addresses: u64,
    /// Relay connections of those with a connection cap.
    pub connections: u64,
    /// The sum of those caps.
    pub max_connections: u64,
    /// Bytes in the cluster's store-and-forward queue.
    pub queued_bytes: u64,
    /// The queue's byte budget (0: unknown yet).
    pub queue_budget: u64,
}

/// This node's relay figures, which it publishes for the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeFigures {
    /// Addresses registered here.
    pub addresses: u64,
    /// Relay connections here (TCP, WebSocket and registered UDP sources).
    pub connections: u64,
    /// `[relay] max_connections` (0: no cap).
    pub max_connections: u64,
}

/// A pipe a client of this node opens to an address that no client of this node holds:
/// reserved here under `pipe_id`, to be opened on the node that holds `to`.
#[derive(Clone, Debug)]
pub struct PipeOpen {
    /// The pipe's id (128 random bits as 32 lowercase hex digits).
    pub pipe_id: Arc<str>,
    /// The opener's address.
    pub from: Arc<str>,
    /// The peer's address.
    pub to: Arc<str>,
    /// The largest frame body the opener's transport carries.
    pub max_frame: u32,
}

/// Where the other end of a pipe is: `peer`, on `node`; `me` is this node's end.
#[derive(Clone, Debug)]
pub struct PipeRoute {
    /// The pipe.
    pub pipe_id: Arc<str>,
    /// The other end's node.
    pub node: Arc<str>,
    /// The address of this node's end.
    pub me: Arc<str>,
    /// The address of the other end.
    pub peer: Arc<str>,
}

/// The other node's end of a pipe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipePeer {
    /// Its node.
    pub node: Arc<str>,
    /// Its node's process instance (that of its lease): when that instance is gone, so is the
    /// end.
    pub instance: u64,
    /// The largest frame body its transport carries.
    pub max_frame: u32,
}

/// A pipe another node opens to a client of this node.
#[derive(Clone, Copy, Debug)]
pub struct IncomingPipe<'a> {
    /// The pipe's id, chosen by the opener's node.
    pub pipe_id: &'a str,
    /// The peer, which a client here should hold.
    pub to: &'a str,
    /// The opener's address.
    pub from: &'a str,
    /// The opener's node, instance and frame limit.
    pub opener: &'a PipePeer,
}

/// What became of a `pipe_data` frame from another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PipeDelivery {
    /// Written to this node's end.
    Written,
    /// No such pipe here, between that node and that address: the sender's end is told it is
    /// closed.
    Unknown,
    /// Over this end's transport limit: dropped.
    TooLarge,
    /// This end is closing, or past its output cap: dropped.
    Gone,
}

/// What a registration claims about its address's alias binding, checked cluster-wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AliasRule {
    /// A derived address: no binding applies.
    Derived,
    /// An alias without a key: it must not be bound to one.
    Unkeyed,
    /// An alias with the key of this SHA-256: bound to it if unbound (first key wins), else
    /// it must be bound to it.
    Keyed([u8; 32]),
}

/// The KV key of `alias`'s binding in the relay bucket: `b.` and its address token.
pub fn binding_key(alias: &str) -> String {
    format!("b.{}", address_token(alias))
}

/// A binding's value: the key's SHA-256 as 64 lowercase hex digits.
pub fn encode_binding(digest: &[u8; 32]) -> Vec<u8> {
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out.into_bytes()
}

/// Why a binding's value could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BindingError {
    /// Not 64 bytes long.
    #[error("an alias binding is 64 hex digits, not {0} bytes")]
    Length(usize),
    /// A byte that is not a lowercase hex digit.
    #[error("byte {at} of an alias binding is not a lowercase hex digit")]
    NotHex {
        /// Its position.
        at: usize,
    },
}

/// Reads a binding's value written by [`encode_binding`].
pub fn decode_binding(value: &[u8]) -> Result<[u8; 32], BindingError> {
    if value.len() != 64 {
        return Err(BindingError::Length(value.len()));
    }
    let digit = |at: usize| match value[at] {
        b @ b'0'..=b'9' => Ok(b - b'0'),
        b @ b'a'..=b'f' => Ok(b - b'a' + 10),
        _ => Err(BindingError::NotHex { at }),
    };
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = digit(2 * i)? << 4 | digit(2 * i + 1)?;
    }
    Ok(digest)
}

/// What became of a frame written to a client of this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LocalDelivery {
    /// Written into the client's outbox.
    Written,
    /// No client of this node holds the address (or it is closing).
    NotHere,
    /// The frame is over the client's transport limit.
    TooLarge,
}

/// The cluster's view of this node's relay, installed by the relay front end.
pub trait LocalRelay: Send + Sync + fmt::Debug {
    /// Writes `body` (a complete frame body) to the client holding `addr` on this node.
    fn deliver(&self, addr: &str, body: &[u8]) -> LocalDelivery;
    /// Whether a client of this node holds `addr`.
    fn holds(&self, addr: &str) -> bool;
    /// Writes a `room_deliver` from another node to every member of `room` here; returns
    /// how many got it.
    fn room_deliver(&self, room: &str, body: &[u8]) -> usize;
    /// The pipe `pipe_id` that this node asked `peer.node` to open is open there: its opener
    /// here is told `pipe_open`, unless data from there told it already. False when the pipe
    /// is no longer here (its opener left): it must be closed there.
    fn pipe_opened(&self, pipe_id: &str, peer: PipePeer) -> bool;
    /// The pipe `pipe_id` could not be opened (`error`), or its open was not answered: its
    /// opener is told `error`, or `pipe_closed` if data from the other node had already told
    /// it `pipe_open`. Nothing of it remains here.
    fn pipe_refused(&self, pipe_id: &str, error: RelayError);
    /// Another node opens a pipe to a client of this node: it is told `pipe_incoming`, and the
    /// largest frame body its transport carries is returned. `peer not connected` when no
    /// client here holds the address, `limit reached: …` when a pipe cap refuses it.
    fn pipe_incoming(&self, open: IncomingPipe<'_>) -> Result<u32, RelayError>;
    /// A `pipe_data` frame from the other end of `pipe_id`, on `node`, for this node's end
    /// `to`.
    fn pipe_data(&self, pipe_id: &str, to: &str, node: &str, body: &[u8]) -> PipeDelivery;
    /// The other end of `pipe_id`, `from` on `node`, closed: this node's end is told
    /// `pipe_closed`. False when there was no such pipe here.
    fn pipe_closed(&self, pipe_id: &str, from: &str, node: &str) -> bool;
    /// Closes every pipe whose other end is on a node instance for which `gone(node,
    /// instance)` holds (the instance is `None` while not yet known), telling this node's end
    /// `pipe_closed`; returns how many.
    fn pipes_gone(&self, gone: &dyn Fn(&str, Option<u64>) -> bool) -> usize;
    /// Makes `who` (connection `ticket`) wait in `game` here, within this node's caps
    /// (`limit reached: …`); `peer not connected` when that connection is gone.
    fn wait_here(&self, game: &str, who: &str, ticket: u64) -> Result<(), RelayError>;
    /// Takes `who` (connection `ticket`) out of `game`'s waiters here; whether it waited there.
    fn take_waiter(&self, game: &str, who: &str, ticket: u64) -> bool;
    /// Pairs `who` (connection `ticket`), waiting in `game` here, with `peer`: takes it out of
    /// the game's waiters and tells it `matched{game, peer}`, at once (so that it is never told
    /// `waiting` after). Whether it waited there.
    fn pair_waiter(&self, game: &str, who: &str, ticket: u64, peer: &str) -> bool;
    /// Tells `who` (connection `ticket`) `waiting{game}` if it still waits in `game` here (a
    /// caller may have paired it already, which told it `matched`).
    fn tell_waiting(&self, game: &str, who: &str, ticket: u64);
    /// Writes `message` to `who`'s connection `ticket`; false when it is gone.
    fn tell(&self, who: &str, ticket: u64, message: &ServerMessage<'_>) -> bool;
    /// This node's figures now.
    fn figures(&self) -> NodeFigures;
    /// How many members `room` has here.
    fn room_members(&self, room: &str) -> usize;
}

/// The one-token name of an address in NATS: its [`client_key`] escaping (`bob` → `bob`,
/// `a.b` → `a=2Eb`), prefixed `a.`; an address whose escaping would be too long for a subject
/// (a 256-character address of 4-byte characters) is `h.` and the lowercase hex of the
/// SHA-256 of its UTF-8. Two tokens either way, injective in practice (a collision needs one of
/// SHA-256).
pub fn address_token(addr: &str) -> String {
    match client_key::encode(addr) {
        Ok(key) => format!("a.{key}"),
        Err(_) => {
            let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, addr.as_bytes());
            let mut out = String::with_capacity(66);
            out.push_str("h.");
            for b in digest.as_ref() {
                out.push_str(&format!("{b:02x}"));
            }
            out
        }
    }
}

/// The subject a node receives relay requests on: `mesgd.relay.<node>`.
pub fn node_subject(node: &str) -> String {
    format!("mesgd.relay.{node}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_tokens() {
        assert_eq!(address_token("bob"), "a.bob");
        assert_eq!(address_token("a.b"), "a.a=2Eb");
        assert_eq!(address_token(""), "a.=");
        let long = "😀".repeat(256);
        let token = address_token(&long);
        assert!(token.starts_with("h.") && token.len() == 66, "{token}");
        assert_ne!(address_token(&"😀".repeat(255)), token);
        assert_eq!(node_subject("b"), "mesgd.relay.b");
        assert_eq!(binding_key("a.b"), "b.a.a=2Eb");
    }

    #[test]
    fn bindings_round_trip_and_malformed_ones_are_refused() {
        let digest: [u8; 32] = std::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(decode_binding(&encode_binding(&digest)), Ok(digest));
        let good = encode_binding(&digest);
        let mut upper = good.clone();
        upper[3] = b'A';
        let mut space = good.clone();
        space[63] = b' ';
        let cases: &[(&[u8], BindingError)] = &[
            (b"", BindingError::Length(0)),
            (&good[..63], BindingError::Length(63)),
            (&[b'0'; 65], BindingError::Length(65)),
            (&upper, BindingError::NotHex { at: 3 }),
            (&space, BindingError::NotHex { at: 63 }),
            (&[b'g'; 64], BindingError::NotHex { at: 0 }),
        ];
        for (input, error) in cases {
            assert_eq!(decode_binding(input).as_ref(), Err(error), "{input:?}");
        }
    }
}
