//! The write side of the matcher: batches of inserts and removes, published with one swap.
//!
//! Writers never block readers: they change the spare copy of the index and swap it live (see
//! `mod.rs`). Three things keep that cheap under a stream of changes.
//!
//! **Removals without a publication.** A removal marks its listener dead (`liveness.rs`), which
//! takes effect at once in every copy and every match in progress, and waits only for a
//! callback of that listener that is running right now. Its record is unlinked from the index
//! later, with the next publication: the next insert's, or once [`PENDING_REMOVALS`] removals
//! have piled up. A replacing insert kills the old record the same way.
//!
//! **Batching.** A caller queues its change, then takes the writer lock. Whoever holds the lock
//! takes every change queued so far, applies them all to the spare copy and publishes it with one
//! swap. Every caller whose change was in that batch finds its result when it gets the lock in
//! turn and returns at once; so a hundred tasks registering listeners at the same moment pay
//! for one publication, not a hundred, and each still returns only once its own change is live
//! (and, for a removal, once no callback for the listener can run).
//!
//! **Catching up late.** The copy that was live until a swap is not brought level at once: the
//! batch is kept and applied to it at the start of the next publication, by which time its
//! last readers are normally long gone. No change waits for a match in progress, and each
//! change is applied to each copy once.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use super::index::{EVERYTHING, EVERYTHING_SEGMENT, Index, Placing, segment_anchor, signature};
use super::liveness::{Chunk, States};
use super::{MatcherFull, inside_match};
use crate::content::hash;
use crate::content::path::{Constraint, Path};

/// One change to an index, applied to both copies in turn.
pub(super) enum Change<Id> {
    Insert { slot: u32, id: Id, path: Path, placing: Placing, chunk: Chunk },
    Remove { slot: u32 },
}

impl<Id: Copy> Change<Id> {
    fn apply(&self, index: &mut Index<Id>) {
        match self {
            Change::Insert { slot, id, path, placing, chunk } => {
                index.insert(*slot, *id, path.clone(), *placing, chunk);
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
    /// The slots' liveness words.
    states: States,
    /// Slots of removed (dead) listeners not yet unlinked from the index.
    pending: Vec<u32>,
}

/// Removals of listeners are unlinked from the index in a publication of their own once this
/// many have piled up without an insert to ride along with (until then their records stay in
/// the index, dead, and cost a skipped candidate when a message reaches them).
pub(super) const PENDING_REMOVALS: usize = 64;

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
            states: States::default(),
            pending: Vec::new(),
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
            + self.pending.capacity() * 4
            + self.states.heap_bytes()
    }

    fn alloc_slot(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next_slot += 1;
            self.next_slot - 1
        })
    }

    /// Applies `batch`: removals at once (see the module documentation), the rest in a
    /// publication when there is something to publish: brings the spare copy level, applies
    /// each change (in order, each seeing the ones before it) and the pending removals, and
    /// makes the copy live through `swap` (which returns the copy it replaces). Nothing here
    /// waits for a match in progress.
    pub(super) fn run<F>(&mut self, batch: Vec<Request<Id>>, max: usize, swap: F) -> Vec<(Ticket, Outcome)>
    where
        F: FnOnce(Arc<Index<Id>>) -> Arc<Index<Id>>,
    {
        let inserts = batch.iter().filter(|r| matches!(r.op, Op::Insert(..))).count();
        let removals = batch.len() - inserts;
        let mut outcomes = Vec::with_capacity(batch.len());
        if inserts == 0 && self.pending.len() + removals < PENDING_REMOVALS {
            for Request { op, ticket } in batch {
                let Op::Remove(id) = op else { unreachable!("the batch holds only removals") };
                outcomes.push((ticket, Outcome::Removed(self.kill(id).is_some())));
            }
            return outcomes;
        }
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
        let mut changes = Vec::with_capacity(inserts + self.pending.len() + removals);
        for Request { op, ticket } in batch {
            let outcome = match op {
                Op::Insert(id, path) => {
                    let old = self.slots.get(&id).copied();
                    if old.is_none() && self.slots.len() >= max {
                        Outcome::Inserted(Err(MatcherFull { limit: max }))
                    } else {
                        let old_path = old.and_then(|s| ix.placed(s)).cloned();
                        self.kill(id);
                        self.text_bytes += path.heap_bytes();
                        let (anchor, anchor_segment) = choose_anchor(ix, &path);
                        let slot = self.alloc_slot();
                        let generation = self.states.revive(slot);
                        let placing =
                            Placing { anchor, anchor_segment, signature: signature(&path), generation };
                        let chunk = self.states.chunk(slot);
                        push(ix, &mut changes, Change::Insert { slot, id, path, placing, chunk });
                        self.slots.insert(id, slot);
                        Outcome::Inserted(Ok(old_path))
                    }
                }
                Op::Remove(id) => Outcome::Removed(self.kill(id).is_some()),
            };
            outcomes.push((ticket, outcome));
        }
        let freed = std::mem::take(&mut self.pending);
        for &slot in &freed {
            if let Some(p) = ix.placed(slot) {
                self.text_bytes -= p.heap_bytes();
            }
            push(ix, &mut changes, Change::Remove { slot });
        }
        if changes.is_empty() {
            self.spare = Some(index);
            return outcomes;
        }
        self.publications += 1;
        self.spare = Some(swap(index));
        self.behind = changes;
        // Slots are reused only once neither copy holds their old record (the spare loses it
        // at the start of the next publication, before any slot is allocated), and a reader
        // still holding an old record sees an older generation.
        self.free.extend(freed);
        outcomes
    }

    /// Unregisters `id` if it is registered: its listener is dead (no callback for it runs
    /// once this returns) and its record waits in `pending` to be unlinked. Returns its slot.
    fn kill(&mut self, id: Id) -> Option<u32> {
        let slot = self.slots.remove(&id)?;
        self.states.kill(slot);
        self.pending.push(slot);
        Some(slot)
    }
}

/// Applies `change` to the copy being built and keeps it for the other copy.
fn push<Id: Copy>(ix: &mut Index<Id>, changes: &mut Vec<Change<Id>>, change: Change<Id>) {
    change.apply(ix);
    changes.push(change);
}

/// The anchor to file `path` under and which segment it is: the value segment with the
/// shortest list, else the presence segment with the shortest list (values are selective: few
/// messages carry a given pair, many carry a given key). The first of equals wins.
fn choose_anchor<Id: Copy>(ix: &Index<Id>, path: &Path) -> (u64, u8) {
    let mut best: Option<((bool, u32), u64, u8)> = None;
    // At most `MAX_SEGMENTS` (64) segments: the position fits in a byte.
    for (n, seg) in path.segments().enumerate() {
        let anchor = segment_anchor(&seg);
        let rank = (seg.constraint == Constraint::Present, ix.list_len(anchor));
        if best.is_none_or(|b| rank < b.0) {
            best = Some((rank, anchor, n as u8));
        }
    }
    best.map_or((EVERYTHING, EVERYTHING_SEGMENT), |b| (b.1, b.2))
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
