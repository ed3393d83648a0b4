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
//! and match against it. A writer (writers are serialised by a mutex that readers never touch)
//! applies its change to the spare copy, swaps it live, waits until no reader still holds the
//! copy it replaced, then applies the same change to that copy, which becomes the new spare.
//! Every change is O(1) in each copy, so the matcher sustains hundreds of thousands of changes
//! per second while matching at full rate; no copy of the index is ever cloned.
//!
//! Both copies share the listeners' [`Path`] texts, so the second copy costs only its tables
//! (about 70 bytes per listener).
//!
//! # Why a removed listener receives nothing
//!
//! [`Matcher::remove`] returns only after the wait above: by then no match that could still
//! see the listener is running, and every later match uses a copy without it. The same holds
//! for [`Matcher::insert`] replacing a listener's path.
//!
//! The wait is for matches in progress, which is why callbacks must be short and must not
//! block. A callback that itself calls `insert` or `remove` does not deadlock: the writer then
//! clones the index instead of waiting for its own caller (correct, but O(listeners)).

mod index;
mod table;

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;

use self::index::{EVERYTHING, Index, segment_anchor, signature};
use super::hash;
use super::message::Message;
use super::path::{Constraint, Path};
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

fn inside_match() -> bool {
    MATCHING.with(|m| m.get() > 0)
}

/// An estimate of what the allocator uses for a request of `n` bytes (glibc-style chunks:
/// 8 bytes of header, 16-byte granules, 32 bytes at least).
pub(crate) fn malloc_size(n: usize) -> usize {
    (n + 8).next_multiple_of(16).max(32)
}

/// One change, applied to both copies.
enum Change<Id> {
    Insert { slot: u32, id: Id, path: Path, anchor: u64, signature: u64 },
    Remove { slot: u32 },
}

impl<Id: Copy> Change<Id> {
    fn apply(&self, index: &mut Index<Id>) {
        match self {
            Change::Insert { slot, id, path, anchor, signature } => {
                index.insert(*slot, *id, path.clone(), *anchor, *signature);
            }
            Change::Remove { slot } => index.remove(*slot),
        }
    }
}

struct Writer<Id> {
    /// The copy no reader can see; `None` only while a change is being published.
    spare: Option<Arc<Index<Id>>>,
    slots: HashMap<Id, u32, foldhash::fast::RandomState>,
    free: Vec<u32>,
    next_slot: u32,
    text_bytes: usize,
}

impl<Id: Copy> Writer<Id> {
    fn spare(&self) -> &Index<Id> {
        // Always present outside `publish`, which holds the writer lock throughout.
        self.spare.as_deref().unwrap_or_else(|| unreachable!("the spare index is back after every publish"))
    }

    /// The anchor the writer should file `path` under: the value segment with the shortest
    /// list, else the presence segment with the shortest list (values are selective: few
    /// messages carry a given pair, many carry a given key). The first of equals wins.
    fn choose_anchor(&self, path: &Path) -> u64 {
        let mut best: Option<((bool, u32), u64)> = None;
        for seg in path.segments() {
            let anchor = segment_anchor(&seg);
            let rank = (seg.constraint == Constraint::Present, self.spare().list_len(anchor));
            if best.is_none_or(|b| rank < b.0) {
                best = Some((rank, anchor));
            }
        }
        best.map_or(EVERYTHING, |b| b.1)
    }

    fn alloc_slot(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next_slot += 1;
            self.next_slot - 1
        })
    }
}

/// An index of listener paths, matched against messages by many threads at once.
///
/// `Id` names a listener (a connection id, say). Each id has at most one path; inserting an id
/// again replaces its path.
pub struct Matcher<Id> {
    live: ArcSwap<Index<Id>>,
    writer: Mutex<Writer<Id>>,
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
            writer: Mutex::new(Writer {
                spare: Some(Arc::new(Index::new())),
                slots: HashMap::with_hasher(hash::build_hasher()),
                free: Vec::new(),
                next_slot: 0,
                text_bytes: 0,
            }),
            len: AtomicUsize::new(0),
            max: max.min(MAX_LISTENERS),
            refused: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Writer<Id>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `id` on `path`, replacing and returning its previous path if it had one.
    /// Every match that starts after this returns sees the new path, and none sees the old.
    pub fn insert(&self, id: Id, path: Path) -> Result<Option<Path>, MatcherFull> {
        let mut w = self.lock();
        let old = w.slots.get(&id).copied();
        if old.is_none() && w.slots.len() >= self.max {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(MatcherFull { limit: self.max });
        }
        let old_path = old.and_then(|s| w.spare().placed(s)).cloned();
        let mut changes = Vec::with_capacity(2);
        if let Some(slot) = old {
            changes.push(Change::Remove { slot });
        }
        // Choose before the old entry leaves: at worst a slightly longer list, never a wrong one.
        let anchor = w.choose_anchor(&path);
        let slot = w.alloc_slot();
        w.text_bytes += path.heap_bytes();
        if let Some(old) = &old_path {
            w.text_bytes -= old.heap_bytes();
        }
        let signature = signature(&path);
        changes.push(Change::Insert { slot, id, path, anchor, signature });
        self.publish(&mut w, &changes);
        if let Some(old) = old {
            w.free.push(old);
        }
        w.slots.insert(id, slot);
        self.len.store(w.slots.len(), Ordering::Relaxed);
        Ok(old_path)
    }

    /// Unregisters `id`; returns whether it was registered. When this returns, no match in
    /// progress or to come yields `id`.
    pub fn remove(&self, id: Id) -> bool {
        let mut w = self.lock();
        let Some(slot) = w.slots.remove(&id) else { return false };
        if let Some(path) = w.spare().placed(slot) {
            w.text_bytes -= path.heap_bytes();
        }
        self.publish(&mut w, &[Change::Remove { slot }]);
        w.free.push(slot);
        self.len.store(w.slots.len(), Ordering::Relaxed);
        true
    }

    /// Applies `changes` to the spare copy, makes it live, waits for the readers of the copy it
    /// replaced, and brings that copy level.
    fn publish(&self, w: &mut Writer<Id>, changes: &[Change<Id>]) {
        let mut fresh = w.spare.take().unwrap_or_else(|| Arc::new(Index::new()));
        {
            // Unique (the previous publish waited for its readers), so this does not clone.
            let index = Arc::make_mut(&mut fresh);
            for c in changes {
                c.apply(index);
            }
        }
        let mut stale = self.live.swap(fresh);
        if !inside_match() {
            wait_until_unique(&stale);
        }
        // Unique now, except when called from a match callback: then this clones the copy its
        // caller still reads, and that clone becomes the spare.
        let index = Arc::make_mut(&mut stale);
        for c in changes {
            c.apply(index);
        }
        w.spare = Some(stale);
    }

    /// The path `id` is registered on.
    pub fn path(&self, id: Id) -> Option<Path> {
        let w = self.lock();
        let slot = *w.slots.get(&id)?;
        w.spare().placed(slot).cloned()
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

    /// How many inserts were refused because the matcher was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Approximate heap bytes of the index: both copies' tables, the shared path texts and the
    /// writer's id table (for the `mesgd_router_bytes` metric).
    pub fn memory_bytes(&self) -> usize {
        let w = self.lock();
        let live = self.live.load().heap_bytes();
        let slot_entry = std::mem::size_of::<(Id, u32)>() + 1;
        // std's map exposes its usable capacity: 7/8 of its buckets.
        let slots = w.slots.capacity() * 8 / 7 * slot_entry;
        live + w.spare().heap_bytes() + w.text_bytes + slots + w.free.capacity() * 4
    }
}

/// Spins, then yields, until the only reference to `index` is the caller's.
fn wait_until_unique<T>(index: &Arc<T>) {
    let mut spins = 0u32;
    while Arc::strong_count(index) > 1 {
        if spins < 128 {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}
