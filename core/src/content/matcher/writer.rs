//! The write side of the matcher: batches of inserts and removes, published with one swap.
//!
//! Writers never block readers: they change the spare copy of the index and swap it live (see
//! `mod.rs`). Two things keep that cheap under a stream of changes.
//!
//! **Batching.** A caller queues its change, then takes the writer lock. Whoever holds the lock
//! takes every change queued so far, applies them all to the spare copy, publishes it with one
//! swap and, if any of them removed or replaced a listener, waits once for the readers of the
//! copy it replaced. Every caller whose change was in that batch finds its result when it gets
//! the lock in turn and returns at once; so a hundred tasks registering listeners at the same
//! moment pay for one publication, not a hundred, and each still returns only once its own
//! change is live (and, for a removal, once no match in progress can yield the listener).
//!
//! **Catching up late.** The copy that was live until a swap is not brought level at once: the
//! batch is kept and applied to it at the start of the next publication, by which time its
//! last readers are normally long gone. An insert of a new listener therefore never waits for
//! readers at all, and each change is applied to each copy once.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use super::index::{EVERYTHING, Index, segment_anchor, signature};
use super::{MatcherFull, inside_match};
use crate::content::hash;
use crate::content::path::{Constraint, Path};

/// One change to an index, applied to both copies in turn.
pub(super) enum Change<Id> {
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

/// What a caller asked for.
pub(super) enum Op<Id> {
    Insert(Id, Path),
    Remove(Id),
}

/// What it got.
pub(super) enum Outcome {
    Inserted(Result<Option<Path>, MatcherFull>),
    Removed(bool),
}

/// Where a queued change's outcome is left for its caller.
pub(super) type Ticket = Arc<Mutex<Option<Outcome>>>;

/// A change waiting for the writer lock.
pub(super) struct Request<Id> {
    pub(super) op: Op<Id>,
    pub(super) ticket: Ticket,
}

/// The writer's state, behind the writer lock.
pub(super) struct Writer<Id> {
    /// The copy no new reader can see; `None` only while a batch is being published.
    spare: Option<Arc<Index<Id>>>,
    /// Changes already live that `spare` has not had yet.
    behind: Vec<Change<Id>>,
    pub(super) slots: HashMap<Id, u32, foldhash::fast::RandomState>,
    free: Vec<u32>,
    next_slot: u32,
    pub(super) text_bytes: usize,
    /// How many batches were made live.
    pub(super) publications: u64,
}

impl<Id: Copy + Eq + Hash> Writer<Id> {
    pub(super) fn new() -> Self {
        Writer {
            spare: Some(Arc::new(Index::new())),
            behind: Vec::new(),
            slots: HashMap::with_hasher(hash::build_hasher()),
            free: Vec::new(),
            next_slot: 0,
            text_bytes: 0,
            publications: 0,
        }
    }

    /// Heap bytes of the spare copy and the writer's own tables.
    pub(super) fn heap_bytes(&self) -> usize {
        let slot_entry = std::mem::size_of::<(Id, u32)>() + 1;
        // std's map exposes its usable capacity: 7/8 of its buckets.
        let slots = self.slots.capacity() * 8 / 7 * slot_entry;
        self.spare.as_deref().map_or(0, Index::heap_bytes)
            + self.text_bytes
            + slots
            + self.free.capacity() * 4
    }

    fn alloc_slot(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next_slot += 1;
            self.next_slot - 1
        })
    }

    /// Applies `batch` and publishes it: brings the spare copy level, applies each change
    /// (in order, each seeing the ones before it), swaps the copy live, and waits for the
    /// readers of the replaced copy if any change removed or replaced a listener. Returns the
    /// copy to make live through `swap`, which returns the copy it replaces.
    pub(super) fn run<F>(&mut self, batch: Vec<Request<Id>>, max: usize, swap: F) -> Vec<(Ticket, Outcome)>
    where
        F: FnOnce(Arc<Index<Id>>) -> Arc<Index<Id>>,
    {
        let mut index = self.spare.take().unwrap_or_else(|| Arc::new(Index::new()));
        if !inside_match() {
            // Its readers are those of the copy before the last swap: normally long gone.
            wait_until_unique(&index);
        }
        // Unique now, except when called from a match callback: then this clones the copy the
        // callback's match may still read.
        let ix = Arc::make_mut(&mut index);
        for change in self.behind.drain(..) {
            change.apply(ix);
        }
        let mut changes = Vec::with_capacity(batch.len() + 1);
        let mut freed = Vec::new();
        let mut strict = false;
        let mut outcomes = Vec::with_capacity(batch.len());
        for Request { op, ticket } in batch {
            let outcome = match op {
                Op::Insert(id, path) => {
                    let old = self.slots.get(&id).copied();
                    if old.is_none() && self.slots.len() >= max {
                        Outcome::Inserted(Err(MatcherFull { limit: max }))
                    } else {
                        let old_path = old.and_then(|s| ix.placed(s)).cloned();
                        if let Some(slot) = old {
                            strict = true;
                            push(ix, &mut changes, Change::Remove { slot });
                            freed.push(slot);
                        }
                        if let Some(p) = &old_path {
                            self.text_bytes -= p.heap_bytes();
                        }
                        self.text_bytes += path.heap_bytes();
                        let anchor = choose_anchor(ix, &path);
                        let slot = self.alloc_slot();
                        let signature = signature(&path);
                        push(ix, &mut changes, Change::Insert { slot, id, path, anchor, signature });
                        self.slots.insert(id, slot);
                        Outcome::Inserted(Ok(old_path))
                    }
                }
                Op::Remove(id) => match self.slots.remove(&id) {
                    Some(slot) => {
                        if let Some(p) = ix.placed(slot) {
                            self.text_bytes -= p.heap_bytes();
                        }
                        strict = true;
                        push(ix, &mut changes, Change::Remove { slot });
                        freed.push(slot);
                        Outcome::Removed(true)
                    }
                    None => Outcome::Removed(false),
                },
            };
            outcomes.push((ticket, outcome));
        }
        if changes.is_empty() {
            self.spare = Some(index);
            return outcomes;
        }
        self.publications += 1;
        let replaced = swap(index);
        if strict && !inside_match() {
            // A removed listener must not reach anyone once its removal returns.
            wait_until_unique(&replaced);
        }
        self.spare = Some(replaced);
        self.behind = changes;
        // Slots are reused only once neither copy holds their old record.
        self.free.extend(freed);
        outcomes
    }
}

/// Applies `change` to the copy being built and keeps it for the other copy.
fn push<Id: Copy>(ix: &mut Index<Id>, changes: &mut Vec<Change<Id>>, change: Change<Id>) {
    change.apply(ix);
    changes.push(change);
}

/// The anchor to file `path` under: the value segment with the shortest list, else the
/// presence segment with the shortest list (values are selective: few messages carry a given
/// pair, many carry a given key). The first of equals wins.
fn choose_anchor<Id: Copy>(ix: &Index<Id>, path: &Path) -> u64 {
    let mut best: Option<((bool, u32), u64)> = None;
    for seg in path.segments() {
        let anchor = segment_anchor(&seg);
        let rank = (seg.constraint == Constraint::Present, ix.list_len(anchor));
        if best.is_none_or(|b| rank < b.0) {
            best = Some((rank, anchor));
        }
    }
    best.map_or(EVERYTHING, |b| b.1)
}

/// Spins, then yields, until the only reference to `index` is the caller's.
fn wait_until_unique<T>(index: &Arc<T>) {
    let mut spins = 0u32;
    while Arc::strong_count(index) > 1 {
        if spins < 64 {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}
