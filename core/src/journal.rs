//! The journal: every change to durable broker state, as it happens, for a persistence layer to
//! write down.
//!
//! The core stays free of storage: sessions, the broker and the retained store call
//! [`Journal::record`] with a [`Change`] while they change their state (with their own lock
//! held, so the order of changes is the order of events), and get back a sequence number. A
//! front end that must not acknowledge before the change is on disk (durability `always`) asks
//! [`Journal::poll_durable`] for that number before it writes the acknowledgement.
//!
//! Only what a client was promised is journalled: persistent sessions (they outlive their
//! connection) with their subscriptions, QoS 1 and 2 messages queued or in flight for them,
//! incoming QoS 2 packet ids awaiting release, retained messages, and delayed wills. QoS 0
//! messages and sessions that end with their connection are never written.

use std::fmt;
use std::sync::Arc;
use std::task::Waker;
use std::time::SystemTime;

use bytes::Bytes;

use crate::model::{Delivery, Message, SessionExpiry, SubscribeOptions, Will};
use crate::topic::TopicName;

/// One change to durable state.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Change {
    /// A new persistent session (replacing anything stored under that client id).
    SessionOpened {
        /// The client id.
        client_id: Arc<str>,
        /// Its expiry.
        expiry: SessionExpiry,
    },
    /// A stored session got a connection again.
    SessionResumed {
        /// The client id.
        client_id: Arc<str>,
        /// Its expiry from now on.
        expiry: SessionExpiry,
    },
    /// The session's connection ended; its expiry counts from `at`.
    SessionDisconnected {
        /// The client id.
        client_id: Arc<str>,
        /// When, on the wall clock (expiry keeps counting across restarts).
        at: SystemTime,
        /// Its expiry (a 5.0 DISCONNECT may have changed it).
        expiry: SessionExpiry,
    },
    /// The session ended (expired, cleaned, or taken over with clean start).
    SessionEnded {
        /// The client id.
        client_id: Arc<str>,
    },
    /// A subscription was added or replaced.
    Subscribed {
        /// The client id.
        client_id: Arc<str>,
        /// The subscription as the client sent it (`$share/...` included).
        filter: Arc<str>,
        /// Its options.
        options: SubscribeOptions,
    },
    /// A subscription was removed.
    Unsubscribed {
        /// The client id.
        client_id: Arc<str>,
        /// The subscription text.
        filter: Arc<str>,
    },
    /// A QoS 1/2 message was queued for the session as entry `entry`.
    Queued {
        /// The client id.
        client_id: Arc<str>,
        /// The session-local entry number.
        entry: u64,
        /// The delivery (message, QoS, retain flag, subscription ids, shared route).
        delivery: Delivery,
    },
    /// Entry `entry` was sent with `packet_id` and awaits PUBACK / PUBREC.
    InFlight {
        /// The client id.
        client_id: Arc<str>,
        /// The entry.
        entry: u64,
        /// The packet id it was sent with.
        packet_id: u16,
    },
    /// PUBREC arrived for entry `entry`: the message is delivered, PUBREL awaits PUBCOMP.
    Released {
        /// The client id.
        client_id: Arc<str>,
        /// The entry.
        entry: u64,
    },
    /// Entry `entry` is finished (acknowledged, expired, dropped, or handed to another member of
    /// a shared group).
    Done {
        /// The client id.
        client_id: Arc<str>,
        /// The entry.
        entry: u64,
    },
    /// An incoming QoS 2 packet id was recorded with the digest of its message (`Some`), or
    /// released by PUBREL (`None`).
    IncomingQos2 {
        /// The client id.
        client_id: Arc<str>,
        /// The packet id.
        packet_id: u16,
        /// The message's [`crate::model::digest`] while the id awaits PUBREL.
        digest: Option<u64>,
    },
    /// The retained message of `topic` was set (`Some`) or deleted (`None`).
    Retained {
        /// The topic.
        topic: TopicName,
        /// The message, compacted.
        message: Option<Arc<Message>>,
    },
    /// A will was scheduled to be published at `at`.
    WillScheduled {
        /// The client id.
        client_id: Arc<str>,
        /// The will (boxed: a will holds a whole message, the other changes are small).
        will: Box<Will>,
        /// When, on the wall clock.
        at: SystemTime,
    },
    /// A scheduled will was cancelled or published.
    WillCancelled {
        /// The client id.
        client_id: Arc<str>,
    },
    /// A relay message was queued for the offline address `addr` (store-and-forward).
    RelayQueued {
        /// The recipient's address.
        addr: Arc<str>,
        /// The entry's id, unique and increasing across all relay queues.
        entry: u64,
        /// The encoded `deliver` frame body that will be sent.
        payload: Bytes,
        /// When it expires, on the wall clock.
        expires_at: SystemTime,
    },
    /// A relay queue entry is gone: flushed to its recipient, pushed out by a cap, or expired.
    RelayDone {
        /// The recipient's address.
        addr: Arc<str>,
        /// The entry's id.
        entry: u64,
    },
    /// A relay alias was bound to a key (the first key wins, for good).
    AliasBound {
        /// The alias.
        alias: Arc<str>,
        /// The SHA-256 of the key's raw bytes.
        key_digest: [u8; 32],
    },
}

/// Where changes go.
pub trait Journal: Send + Sync + fmt::Debug {
    /// Records a change and returns its sequence number (increasing). Must not block on I/O: it
    /// is called with session locks held.
    fn record(&self, change: Change) -> u64;

    /// Whether acknowledgements must wait until their changes are durable (`always`).
    fn acks_wait_for_disk(&self) -> bool;

    /// Whether every change up to `seq` is durable; if not, `waker` is woken when it is.
    fn poll_durable(&self, seq: u64, waker: &Waker) -> bool;

    /// Opens an atomic group: the changes recorded from now until [`Journal::end_atomic`] with
    /// the returned token reach the disk in one commit, or not at all. Changes recorded by
    /// others meanwhile wait with them. A group must be short (one packet's handling).
    fn begin_atomic(&self) -> u64 {
        0
    }

    /// Closes the group [`Journal::begin_atomic`] opened.
    fn end_atomic(&self, token: u64) {
        let _ = token;
    }

    /// Whether the journal can take more changes now. When the changes waiting for the disk
    /// pass a bound (a slow or failing disk), front ends stop reading from clients — the
    /// changes themselves can never be dropped, they are promises — and `waker` is woken once
    /// the backlog is below the bound again.
    fn poll_room(&self, waker: &Waker) -> bool {
        let _ = waker;
        true
    }
}

/// A consumer of the change feed other than the journal that makes it durable: a cluster
/// layer replicating sessions, a metrics exporter.
pub trait Feed: Send + Sync + fmt::Debug {
    /// Called with every change, in order, right after the primary journal recorded it as
    /// `seq`. Must not block: it runs with session locks held.
    fn changed(&self, seq: u64, change: &Change);
}

/// A journal that records into a primary journal (whose sequence numbers and durability count)
/// and hands every change to further feeds.
#[derive(Debug)]
pub struct Tee {
    primary: Arc<dyn Journal>,
    feeds: Vec<Arc<dyn Feed>>,
}

impl Tee {
    /// A tee over `primary` with no feed yet.
    pub fn new(primary: Arc<dyn Journal>) -> Self {
        Tee { primary, feeds: Vec::new() }
    }

    /// Adds a feed.
    pub fn with_feed(mut self, feed: Arc<dyn Feed>) -> Self {
        self.feeds.push(feed);
        self
    }
}

impl Journal for Tee {
    fn record(&self, change: Change) -> u64 {
        if self.feeds.is_empty() {
            return self.primary.record(change);
        }
        let copy = change.clone();
        let seq = self.primary.record(change);
        for feed in &self.feeds {
            feed.changed(seq, &copy);
        }
        seq
    }

    fn acks_wait_for_disk(&self) -> bool {
        self.primary.acks_wait_for_disk()
    }

    fn poll_durable(&self, seq: u64, waker: &Waker) -> bool {
        self.primary.poll_durable(seq, waker)
    }

    fn begin_atomic(&self) -> u64 {
        self.primary.begin_atomic()
    }

    fn end_atomic(&self, token: u64) {
        self.primary.end_atomic(token);
    }

    fn poll_room(&self, waker: &Waker) -> bool {
        self.primary.poll_room(waker)
    }
}

/// An open atomic group of changes (see [`Journal::begin_atomic`]), closed when dropped.
///
/// Why: accepting an incoming QoS 2 message records its packet id and then, while routing, the
/// copies queued for persistent sessions. Were the id durable without the copies, a crash in
/// between would make the client's retransmission look like a duplicate, and the message would
/// be lost; the other way round it would be delivered twice.
#[must_use = "the group closes when this is dropped"]
#[derive(Debug)]
pub struct Atomic<'a> {
    open: Option<(&'a dyn Journal, u64)>,
}

impl<'a> Atomic<'a> {
    /// Opens a group on `journal`, if there is one.
    pub fn begin(journal: Option<&'a Arc<dyn Journal>>) -> Self {
        Atomic { open: journal.map(|j| (&**j, j.begin_atomic())) }
    }
}

impl Drop for Atomic<'_> {
    fn drop(&mut self) {
        if let Some((journal, token)) = self.open.take() {
            journal.end_atomic(token);
        }
    }
}
