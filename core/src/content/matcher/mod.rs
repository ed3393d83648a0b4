//! The indexed matcher: which listeners does a message reach?
//!
//! # Why it is sub-linear
//!
//! Each listener is filed under one anchor segment (`index.rs`): a message visits only the
//! listeners filed under the keys and `(key, value)` pairs it has, so its cost is one or two
//! hash probes per top-level member plus one check per candidate, whatever the number of
//! listeners. Candidates that fail are listeners sharing an anchor with a match; the writer
//! spreads paths over their least-used segment to keep those few.
//!
//! # Why readers take no lock
//!
//! The matcher keeps two copies of the index, as in a left-right map. Readers load the live
//! copy from an [`ArcSwap`] (a few atomic operations, no lock, no contention with the writer)
//! and match against it. Writers (serialised by a mutex that readers never touch) change the
//! spare copy and swap it live; the copy it replaces catches up with the same changes at the
//! next publication (`writer.rs`). Every change is O(1) in each copy and no copy of the index
//! is ever cloned, so changes do not slow down with size; changes queued by many callers at
//! once are published together with one swap.
//!
//! Both copies share the listeners' [`Path`] texts and liveness words, so the second copy costs
//! only its tables. A reader's only writes are two read-modify-writes of a matching listener's
//! liveness word around its callback; they never wait.
//!
//! # Why a removed listener receives nothing
//!
//! Every listener has a liveness word shared by both copies (`liveness.rs`). A match that finds
//! a listener announces its callback on that word and calls back only if the listener is
//! alive; [`Matcher::remove`] marks it dead and returns once no callback for it is running
//! (other than the caller's own, when a callback removes its own listener). Both are one
//! read-modify-write of the same word, so either the callback was announced first and the
//! removal waits for it to return, or the mark came first and the match skips the listener:
//! after `remove` returns, no match in progress or to come calls back for it. The same holds
//! for [`Matcher::insert`] replacing a listener's path (the old record dies). A removal thus
//! waits for no match, only for a running callback of its own listener; its record is unlinked
//! from the index later, in a batch (`writer.rs`).
//!
//! Callbacks must be short and must not block (a removal of their listener waits for them). A
//! callback may call `insert` or `remove`: the writer then clones the index instead of waiting
//! for its caller's match (correct, but O(listeners) for an insert). It must not do so while
//! another thread's callback removes this callback's listener: each would wait for the other.

mod index;
mod liveness;
mod table;
mod writer;

use std::cell::Cell;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;

use self::index::Index;
use self::writer::{Op, Outcome, Request, Ticket, Writer};
use super::message::Message;
use super::path::Path;
use super::scan::ScanError;

/// The most listeners a matcher can hold (slot numbers are 32-bit, one value is reserved).
pub const MAX_LISTENERS: usize = u32::MAX as usize - 1;

/// The matcher is full: it holds its configured maximum of listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the content router holds its maximum of {limit} listeners")]
pub struct MatcherFull {
    /// The configured maximum.
    pub limit: usize,
}

thread_local! {
    /// How many matches this thread is inside (a callback may start another).
    static MATCHING: Cell<u32> = const { Cell::new(0) };
}

struct MatchScope;

impl MatchScope {
    fn enter() -> MatchScope {
        MATCHING.with(|m| m.set(m.get() + 1));
        MatchScope
    }
}

impl Drop for MatchScope {
    fn drop(&mut self) {
        MATCHING.with(|m| m.set(m.get().saturating_sub(1)));
    }
}

pub(super) fn inside_match() -> bool {
    MATCHING.with(|m| m.get() > 0)
}

/// An estimate of what the allocator uses for a request of `n` bytes (glibc-style chunks:
/// 8 bytes of header, 16-byte granules, 32 bytes at least).
pub(crate) fn malloc_size(n: usize) -> usize {
    (n + 8).next_multiple_of(16).max(32)
}

/// An index of listener paths, matched against messages by many threads at once.
///
/// `Id` names a listener (a connection id, say). Each id has at most one path; inserting an id
/// again replaces its path.
pub struct Matcher<Id> {
    live: ArcSwap<Index<Id>>,
    writer: Mutex<Writer<Id>>,
    /// Changes waiting for the writer lock (see `writer.rs`).
    queue: Mutex<Vec<Request<Id>>>,
    len: AtomicUsize,
    max: usize,
    refused: AtomicU64,
}

impl<Id> std::fmt::Debug for Matcher<Id> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher").field("len", &self.len.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl<Id: Copy + Eq + Hash + Send + Sync> Default for Matcher<Id> {
    fn default() -> Self {
        Matcher::new()
    }
}

impl<Id: Copy + Eq + Hash + Send + Sync> Matcher<Id> {
    /// An empty matcher that accepts up to [`MAX_LISTENERS`] listeners.
    pub fn new() -> Self {
        Matcher::with_max_listeners(MAX_LISTENERS)
    }

    /// An empty matcher that refuses listeners beyond `max` (capped at [`MAX_LISTENERS`]).
    pub fn with_max_listeners(max: usize) -> Self {
        Matcher {
            live: ArcSwap::from_pointee(Index::new()),
            writer: Mutex::new(Writer::new()),
            queue: Mutex::new(Vec::new()),
            len: AtomicUsize::new(0),
            max: max.min(MAX_LISTENERS),
            refused: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Writer<Id>> {
        lock(&self.writer)
    }

    /// Registers `id` on `path`, replacing and returning its previous path if it had one.
    /// Every match that starts after this returns sees the new path, and none sees the old.
    pub fn insert(&self, id: Id, path: Path) -> Result<Option<Path>, MatcherFull> {
        match self.submit(Op::Insert(id, path)) {
            Outcome::Inserted(result) => result,
            Outcome::Removed(_) => unreachable!("an insert's outcome is an insert's"),
        }
    }

    /// Unregisters `id`; returns whether it was registered. When this returns, no match in
    /// progress or to come yields `id`, and no callback for it is running (unless this is
    /// called from that callback).
    pub fn remove(&self, id: Id) -> bool {
        match self.submit(Op::Remove(id)) {
            Outcome::Removed(removed) => removed,
            Outcome::Inserted(_) => unreachable!("a removal's outcome is a removal's"),
        }
    }

    /// Queues `op`, then publishes every queued change unless the writer before has already
    /// published this one (see `writer.rs`).
    fn submit(&self, op: Op<Id>) -> Outcome {
        let ticket: Ticket = Arc::new(Mutex::new(None));
        let request = Request { op, ticket: ticket.clone() };
        let mut w;
        if inside_match() {
            // Alone: a batch could hold another thread's removal of the listener this callback
            // is for, whose wait cannot end while this callback does not.
            w = self.lock();
            self.publish(&mut w, vec![request]);
        } else {
            lock(&self.queue).push(request);
            w = self.lock();
            if lock(&ticket).is_none() {
                let batch = std::mem::take(&mut *lock(&self.queue));
                self.publish(&mut w, batch);
            }
        }
        drop(w);
        take(&ticket).unwrap_or_else(|| unreachable!("the batch that held this change has published it"))
    }

    fn publish(&self, w: &mut Writer<Id>, batch: Vec<Request<Id>>) {
        let outcomes = w.run(batch, self.max, |fresh| self.live.swap(fresh));
        self.len.store(w.slots.len(), Ordering::Relaxed);
        for (ticket, outcome) in outcomes {
            if matches!(outcome, Outcome::Inserted(Err(_))) {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
            *lock(&ticket) = Some(outcome);
        }
    }

    /// The path `id` is registered on.
    pub fn path(&self, id: Id) -> Option<Path> {
        let w = self.lock();
        let slot = *w.slots.get(&id)?;
        // The live copy has every published change (the spare may be one batch behind).
        self.live.load().placed(slot).cloned()
    }

    /// Calls `f` with the id of every listener whose path `message` matches, each exactly once,
    /// in no particular order. `f` runs while the matcher's current index is held: keep it
    /// short and never block in it.
    pub fn for_each_match(&self, message: &Message<'_>, mut f: impl FnMut(Id)) {
        self.for_each_match_with_path(message, |id, _| f(id));
    }

    /// Like [`Matcher::for_each_match`], with each listener's path (for a sender that filters
    /// the listeners it may reach by [`Path::covers`]).
    pub fn for_each_match_with_path(&self, message: &Message<'_>, mut f: impl FnMut(Id, &Path)) {
        let _scope = MatchScope::enter();
        let index = self.live.load();
        index.for_each(message, &mut f);
    }

    /// Scans `json` and calls `f` for every matching listener (see [`Matcher::for_each_match`]).
    pub fn matches(&self, json: &[u8], f: impl FnMut(Id)) -> Result<(), ScanError> {
        let message = Message::scan(json)?;
        self.for_each_match(&message, f);
        Ok(())
    }

    /// How many listeners are registered.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether no listener is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many times a batch of changes was made live: lower than the number of changes when
    /// callers changed the matcher at the same time and shared publications.
    pub fn publications(&self) -> u64 {
        self.lock().publications
    }

    /// How many inserts were refused because the matcher was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Approximate heap bytes of the index: both copies' tables, the shared path texts and the
    /// writer's id table (for the `mesgd_router_bytes` metric).
    pub fn memory_bytes(&self) -> usize {
        let w = self.lock();
        self.live.load().heap_bytes() + w.heap_bytes()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn take(ticket: &Ticket) -> Option<Outcome> {
    lock(ticket).take()
}
