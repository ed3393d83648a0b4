//! One copy of the matcher's index: listeners filed under one anchor segment each.
//!
//! Every listener is filed under exactly one of its segments, its *anchor* (the writer picks
//! it, see `mod.rs`): a `key=value` segment files it under the pair's hash, a presence segment
//! under the key's, and `/` on the list of listeners that match everything. A message then
//! visits only the lists of the pairs and keys it actually has, and checks each listener there
//! against the message; listeners whose anchor the message lacks cost nothing.
//!
//! Matching a message runs in three passes so that its cache misses overlap instead of adding
//! up: first every member's anchors are hashed and tested against the table's filter (which
//! stays in cache and drops nearly all of them), then the few survivors are looked up in the
//! table, and only then are the lists walked. A listener's 64-bit signature (one bit per
//! segment) is tested before its path is read, and its path is checked against the message
//! text, so a hash collision can only add a candidate. Each list is walked at most once per
//! message (survivors with equal hashes are looked up once), and each listener is on exactly
//! one list, so no listener is yielded twice.
//!
//! Lists are doubly linked through the record slots: adding and removing a listener is O(1).
//!
//! A record found to match calls back only if its listener is alive (`liveness.rs`): records
//! of removed listeners stay in a copy until the writer cleans it up with its next batch.

use super::liveness::{CHUNK, Call, Chunk};
use super::table::{Table, anchor_key, presence_key};
use crate::content::hash;
use crate::content::message::Message;
use crate::content::path::{Constraint, Path, Segment};

pub(super) const NONE: u32 = u32::MAX;

/// How many anchors one message looks up in buffered passes (see [`Index::for_each`]).
const PASS: usize = 32;

/// The anchor of a listener filed on the everything list.
pub(super) const EVERYTHING: u64 = 0;

#[derive(Clone, Debug)]
struct Record<Id> {
    path: Path,
    id: Id,
    next: u32,
    prev: u32,
    /// One bit per segment (see [`bit`]): a candidate whose bits the message lacks is skipped
    /// without reading its path.
    signature: u64,
    /// The generation of its slot's state word it was inserted with (see `liveness.rs`).
    generation: u32,
    /// Which of its segments it is filed under, or [`EVERYTHING_SEGMENT`].
    anchor_segment: u8,
}

/// The anchor segment of a listener filed on the everything list.
pub(super) const EVERYTHING_SEGMENT: u8 = u8::MAX;

/// A bit chosen by six bits of an anchor hash (bits the table and filter do not use first).
#[inline(always)]
fn bit(anchor: u64) -> u64 {
    1 << ((anchor >> 32) & 63)
}

/// The anchor a segment files under.
pub(super) fn segment_anchor(seg: &Segment<'_>) -> u64 {
    let key = seg.key_hash();
    match seg.constraint {
        Constraint::Present => presence_key(key),
        Constraint::Equals(v) => anchor_key(hash::pair_hash(key, v.as_bytes())),
    }
}

/// The signature of a path: the bits of its segments' anchors.
pub(super) fn signature(path: &Path) -> u64 {
    path.segments().map(|seg| bit(segment_anchor(&seg))).fold(0, |a, b| a | b)
}

/// Where and how a listener is filed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placing {
    /// The table key of its list, or [`EVERYTHING`].
    pub(super) anchor: u64,
    /// Which segment that is ([`EVERYTHING_SEGMENT`] for the everything list).
    pub(super) anchor_segment: u8,
    /// See [`signature`].
    pub(super) signature: u64,
    /// Its slot's generation.
    pub(super) generation: u32,
}

/// One copy of the index. The writer keeps two in step (see `mod.rs`).
#[derive(Clone, Debug)]
pub(super) struct Index<Id> {
    records: Vec<Option<Record<Id>>>,
    table: Table,
    everything: u32,
    /// The slots' state words (shared with the writer and the other copy).
    states: Vec<Chunk>,
}

impl<Id: Copy> Index<Id> {
    pub(super) fn new() -> Self {
        Index { records: Vec::new(), table: Table::default(), everything: NONE, states: Vec::new() }
    }

    /// How many listeners are filed under `anchor`.
    pub(super) fn list_len(&self, anchor: u64) -> u32 {
        self.table.list_len(anchor)
    }

    /// The path of the listener in `slot`.
    pub(super) fn placed(&self, slot: u32) -> Option<&Path> {
        self.records.get(slot as usize)?.as_ref().map(|r| &r.path)
    }

    pub(super) fn insert(&mut self, slot: u32, id: Id, path: Path, placing: Placing, chunk: &Chunk) {
        let Placing { anchor, anchor_segment, signature, generation } = placing;
        let c = slot as usize / CHUNK;
        if self.states.len() <= c {
            // Slots are numbered in order, so every earlier chunk is here already.
            self.states.resize(c + 1, chunk.clone());
        }
        let head = if anchor == EVERYTHING {
            std::mem::replace(&mut self.everything, slot)
        } else {
            self.table.push(anchor, slot)
        };
        let i = slot as usize;
        if self.records.len() <= i {
            // Grow by an eighth rather than doubling: two copies of a mostly idle tail add up.
            let more = (i + 1 - self.records.len()).max(self.records.len() / 8 + 16);
            if self.records.capacity() <= i {
                self.records.reserve_exact(more);
            }
            self.records.resize_with(i + 1, || None);
        }
        if let Some(Some(next)) = self.records.get_mut(head as usize) {
            next.prev = slot;
        }
        self.records[i] =
            Some(Record { path, id, next: head, prev: NONE, signature, generation, anchor_segment });
    }

    pub(super) fn remove(&mut self, slot: u32) {
        let i = slot as usize;
        let Some(Some(rec)) = self.records.get(i) else { return };
        let (next, prev) = (rec.next, rec.prev);
        let anchor = match rec.path.segments().nth(usize::from(rec.anchor_segment)) {
            Some(seg) if rec.anchor_segment != EVERYTHING_SEGMENT => segment_anchor(&seg),
            _ => EVERYTHING,
        };
        if let Some(Some(n)) = self.records.get_mut(next as usize) {
            n.prev = prev;
        }
        let was_head = match self.records.get_mut(prev as usize) {
            Some(Some(p)) => {
                p.next = next;
                false
            }
            _ => true,
        };
        if anchor == EVERYTHING {
            if was_head {
                self.everything = next;
            }
        } else {
            self.table.pop(anchor, was_head, next);
        }
        self.records[i] = None;
        // Keep the slot vector from holding a long tail of empty slots.
        while matches!(self.records.last(), Some(None)) {
            self.records.pop();
        }
    }

    /// Calls `f` for every listener whose path `msg` matches, each once.
    pub(super) fn for_each(&self, msg: &Message<'_>, f: &mut impl FnMut(Id, &Path)) {
        let mut slot = self.everything;
        while let Some(Some(r)) = self.records.get(slot as usize) {
            self.call(slot, r, f);
            slot = r.next;
        }
        if self.table.is_empty() {
            return;
        }
        // Pass 1: the message's signature, and the anchors the filter lets through.
        let mut signature = 0u64;
        let mut maybe = [0u64; PASS];
        let mut n = 0;
        for member in msg.live_members() {
            let presence = presence_key(member.key_hash);
            signature |= bit(presence);
            if self.table.may_hold(presence) && n < PASS {
                maybe[n] = presence;
                n += 1;
            }
            if let Some(text) = msg.scalar_bytes(member) {
                let pair = anchor_key(hash::pair_hash(member.key_hash, text));
                signature |= bit(pair);
                if self.table.may_hold(pair) && n < PASS {
                    maybe[n] = pair;
                    n += 1;
                }
            }
        }
        if n == PASS {
            // A message with more anchors in the filter than the buffer holds (a large one, or
            // a filter full of stale bits): one pass over all of them instead.
            return self.for_each_unbuffered(msg, signature, f);
        }
        // Pass 2: the lists' heads, each anchor once.
        let mut heads = [NONE; PASS];
        let mut h = 0;
        for (i, &anchor) in maybe[..n].iter().enumerate() {
            if maybe[..i].contains(&anchor) {
                continue;
            }
            if let Some((head, _)) = self.table.get(anchor) {
                heads[h] = head;
                h += 1;
            }
        }
        // Pass 3: the candidates.
        for &head in &heads[..h] {
            self.walk(head, msg, signature, f);
        }
    }

    /// Walks one list, yielding the listeners that match.
    #[inline(always)]
    fn walk(&self, head: u32, msg: &Message<'_>, signature: u64, f: &mut impl FnMut(Id, &Path)) {
        let mut slot = head;
        while let Some(Some(r)) = self.records.get(slot as usize) {
            if r.signature & !signature == 0 && r.path.matches(msg) {
                self.call(slot, r, f);
            }
            slot = r.next;
        }
    }

    /// Calls `f` for the matching record in `slot` if its listener is alive.
    #[inline(always)]
    fn call(&self, slot: u32, r: &Record<Id>, f: &mut impl FnMut(Id, &Path)) {
        let s = slot as usize;
        let Some(state) = self.states.get(s / CHUNK).and_then(|c| c.get(s % CHUNK)) else { return };
        let call = Call::enter(state, r.generation);
        if call.live() {
            f(r.id, &r.path);
        }
    }

    /// Matching for a message with many anchors: every distinct anchor the message has is
    /// looked up (a member's anchors are compared with the earlier members' to skip repeats).
    #[inline(never)]
    fn for_each_unbuffered(&self, msg: &Message<'_>, signature: u64, f: &mut impl FnMut(Id, &Path)) {
        let anchors = |m: &crate::content::message::Member| {
            let pair = msg.scalar_bytes(m).map(|text| anchor_key(hash::pair_hash(m.key_hash, text)));
            [Some(presence_key(m.key_hash)), pair]
        };
        let mut seen: std::collections::HashSet<u64, foldhash::fast::RandomState> =
            std::collections::HashSet::with_hasher(hash::build_hasher());
        for member in msg.live_members() {
            for anchor in anchors(member).into_iter().flatten() {
                if self.table.may_hold(anchor) && seen.insert(anchor) {
                    if let Some((head, _)) = self.table.get(anchor) {
                        self.walk(head, msg, signature, f);
                    }
                }
            }
        }
    }

    /// Heap bytes held by this copy (not the shared path texts nor state words).
    pub(super) fn heap_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<Option<Record<Id>>>()
            + self.table.heap_bytes()
            + self.states.capacity() * std::mem::size_of::<Chunk>()
    }
}
