//! One copy of the matcher's index: listeners anchored on one condition each.
//!
//! Every listener is filed under exactly one of its segments, its *anchor*: preferably a
//! `key=value` segment (values are selective), otherwise a presence segment, and for `/` the
//! list of listeners that match everything. A message then only visits the listeners filed
//! under the `(key, value)` pairs and keys it actually has, and checks each of those against
//! the message; listeners whose anchor the message lacks cost nothing. The writer picks, among
//! a path's eligible segments, the one with the fewest listeners filed under it so far, which
//! keeps lists short when many paths share a common value.
//!
//! Anchors are found by 64-bit hash alone (see `hash.rs`): the key table maps a key hash to the
//! head of its presence list and a count of its value anchors, the pair table maps a
//! `(key, value)` hash to the head of its list. Two different anchors with one hash would share
//! a list, which stays correct: every candidate is verified against the message text, and a
//! listener is emitted only when the member that reached it is the one its anchor names, so no
//! listener is emitted twice. Lists are doubly linked through the record slots, so adding and
//! removing a listener is O(1) and an entry costs 16 bytes.

use hashbrown::HashTable;
use smallvec::SmallVec;

use crate::content::hash;
use crate::content::message::{Member, Message};
use crate::content::path::{Constraint, Path, Segment};

pub(super) const NONE: u32 = u32::MAX;

/// Where a listener is filed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Anchor {
    /// The path has no segment.
    Everything,
    /// Filed under segment `n` of the canonical path.
    Segment(u8),
}

#[derive(Clone, Debug)]
struct Record<Id> {
    path: Path,
    id: Id,
    next: u32,
    prev: u32,
    /// One bit per segment (see [`bit`]): a candidate whose bits the message lacks is skipped
    /// without reading its path.
    signature: u64,
    anchor: Anchor,
}

/// A bit chosen by the top six bits of a hash.
fn bit(hash: u64) -> u64 {
    1 << (hash >> 58)
}

/// The bits of a path's segments: a key's hash for presence, the pair's hash for a value.
fn signature(path: &Path) -> u64 {
    path.segments()
        .map(|seg| match list_of(&seg) {
            List::Presence(key) => bit(key),
            List::Pair { pair, .. } => bit(pair),
        })
        .fold(0, |a, b| a | b)
}

#[derive(Clone, Copy, Debug)]
struct KeyEntry {
    hash: u64,
    /// Head of the list of listeners anchored on this key's presence.
    presence: u32,
    presence_len: u32,
    /// How many listeners are anchored on a value of this key.
    values: u32,
}

#[derive(Clone, Copy, Debug)]
struct PairEntry {
    hash: u64,
    head: u32,
    len: u32,
}

/// Which list a segment files under.
enum List {
    Presence(u64),
    Pair { key: u64, pair: u64 },
}

fn list_of(seg: &Segment<'_>) -> List {
    let key = seg.key_hash();
    match seg.constraint {
        Constraint::Present => List::Presence(key),
        Constraint::Equals(v) => List::Pair { key, pair: hash::pair_hash(key, v.as_bytes()) },
    }
}

/// One copy of the index. The writer keeps two in step (see `mod.rs`).
#[derive(Clone, Debug)]
pub(super) struct Index<Id> {
    records: Vec<Option<Record<Id>>>,
    keys: HashTable<KeyEntry>,
    pairs: HashTable<PairEntry>,
    everything: u32,
}

impl<Id: Copy> Index<Id> {
    pub(super) fn new() -> Self {
        Index { records: Vec::new(), keys: HashTable::new(), pairs: HashTable::new(), everything: NONE }
    }

    fn key(&self, hash: u64) -> Option<&KeyEntry> {
        self.keys.find(hash, |e| e.hash == hash)
    }

    fn pair(&self, hash: u64) -> Option<&PairEntry> {
        self.pairs.find(hash, |e| e.hash == hash)
    }

    /// The anchor the writer should file `path` under: the value segment with the shortest
    /// list, else the presence segment with the shortest list; between equals, the one whose
    /// key has fewer listeners filed under it (a key few paths use is usually one few
    /// messages carry, so it brings fewer candidates).
    pub(super) fn choose_anchor(&self, path: &Path) -> Anchor {
        let mut best: Option<((bool, u32, u32), usize)> = None;
        for (n, seg) in path.segments().enumerate() {
            let rank = match list_of(&seg) {
                List::Pair { key, pair } => {
                    (false, self.pair(pair).map_or(0, |e| e.len), self.key(key).map_or(0, |e| e.values))
                }
                List::Presence(key) => {
                    let len = self.key(key).map_or(0, |e| e.presence_len);
                    (true, len, len)
                }
            };
            if best.is_none_or(|b| rank < b.0) {
                best = Some((rank, n));
            }
        }
        match best {
            // Paths have at most 64 segments.
            Some((_, n)) => Anchor::Segment(n as u8),
            None => Anchor::Everything,
        }
    }

    /// The path and anchor of the listener in `slot`.
    pub(super) fn placed(&self, slot: u32) -> Option<(&Path, Anchor)> {
        self.records.get(slot as usize)?.as_ref().map(|r| (&r.path, r.anchor))
    }

    pub(super) fn insert(&mut self, slot: u32, id: Id, path: Path, anchor: Anchor) {
        let head = match anchor {
            Anchor::Everything => self.everything,
            Anchor::Segment(n) => match path.segment(n.into()).map(|s| list_of(&s)) {
                Some(List::Presence(key)) => {
                    let e = self.key_entry(key);
                    e.presence_len += 1;
                    e.presence
                }
                Some(List::Pair { key, pair }) => {
                    self.key_entry(key).values += 1;
                    let e = match self.pairs.find_mut(pair, |e| e.hash == pair) {
                        Some(e) => e,
                        None => self
                            .pairs
                            .insert_unique(pair, PairEntry { hash: pair, head: NONE, len: 0 }, |e| e.hash)
                            .into_mut(),
                    };
                    e.len += 1;
                    e.head
                }
                None => NONE,
            },
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
        let signature = signature(&path);
        self.records[i] = Some(Record { path, id, next: head, prev: NONE, signature, anchor });
        self.set_head(anchor, slot, i);
    }

    fn key_entry(&mut self, key: u64) -> &mut KeyEntry {
        match self.keys.find_entry(key, |e| e.hash == key) {
            Ok(e) => e.into_mut(),
            Err(absent) => absent
                .into_table()
                .insert_unique(key, KeyEntry { hash: key, presence: NONE, presence_len: 0, values: 0 }, |e| {
                    e.hash
                })
                .into_mut(),
        }
    }

    /// Makes `slot` the head of the list `anchor` names (record `i` holds the path).
    fn set_head(&mut self, anchor: Anchor, head: u32, i: usize) {
        let Anchor::Segment(n) = anchor else {
            self.everything = head;
            return;
        };
        let Some(list) = self.records[i].as_ref().and_then(|r| r.path.segment(n.into())).map(|s| list_of(&s))
        else {
            return;
        };
        match list {
            List::Presence(key) => {
                if let Some(e) = self.keys.find_mut(key, |e| e.hash == key) {
                    e.presence = head;
                }
            }
            List::Pair { pair, .. } => {
                if let Some(e) = self.pairs.find_mut(pair, |e| e.hash == pair) {
                    e.head = head;
                }
            }
        }
    }

    pub(super) fn remove(&mut self, slot: u32) {
        let i = slot as usize;
        let Some(Some(rec)) = self.records.get(i) else { return };
        let (next, prev, anchor) = (rec.next, rec.prev, rec.anchor);
        if let Some(Some(n)) = self.records.get_mut(next as usize) {
            n.prev = prev;
        }
        match self.records.get_mut(prev as usize) {
            Some(Some(p)) => p.next = next,
            _ => self.set_head(anchor, next, i),
        }
        if let Anchor::Segment(n) = anchor {
            let list = self.records[i].as_ref().and_then(|r| r.path.segment(n.into())).map(|s| list_of(&s));
            match list {
                Some(List::Presence(key)) => self.release_key(key, true),
                Some(List::Pair { key, pair }) => {
                    if let Ok(e) = self.pairs.find_entry(pair, |e| e.hash == pair) {
                        if e.get().len <= 1 {
                            e.remove();
                        } else {
                            e.into_mut().len -= 1;
                        }
                    }
                    self.release_key(key, false);
                }
                None => {}
            }
        }
        self.records[i] = None;
        // Keep the slot vector from holding a long tail of empty slots.
        while matches!(self.records.last(), Some(None)) {
            self.records.pop();
        }
    }

    fn release_key(&mut self, key: u64, presence: bool) {
        if let Ok(mut e) = self.keys.find_entry(key, |e| e.hash == key) {
            let entry = e.get_mut();
            if presence {
                entry.presence_len = entry.presence_len.saturating_sub(1);
            } else {
                entry.values = entry.values.saturating_sub(1);
            }
            if entry.presence_len == 0 && entry.values == 0 {
                e.remove();
            }
        }
    }

    /// Calls `f` for every listener whose path `msg` matches, each once.
    pub(super) fn for_each(&self, msg: &Message<'_>, f: &mut impl FnMut(Id, &Path)) {
        let mut slot = self.everything;
        while let Some(Some(r)) = self.records.get(slot as usize) {
            f(r.id, &r.path);
            slot = r.next;
        }
        if self.keys.is_empty() {
            return;
        }
        // First the message's signature and the members whose key anchors anything, then the
        // lists: a candidate's signature is checked before its path is read.
        let mut signature = 0u64;
        let mut anchored: SmallVec<[(&Member, &KeyEntry, Option<u64>); 32]> = SmallVec::new();
        for member in msg.live_members() {
            let pair = msg.scalar_bytes(member).map(|text| hash::pair_hash(member.key_hash, text));
            signature |= bit(member.key_hash) | pair.map_or(0, bit);
            if let Some(key) = self.key(member.key_hash) {
                anchored.push((member, key, pair));
            }
        }
        for (member, key, pair) in anchored {
            if key.presence != NONE {
                self.walk(key.presence, msg, member, signature, f);
            }
            if let (true, Some(pair)) = (key.values != 0, pair) {
                if let Some(pair) = self.pair(pair) {
                    self.walk(pair.head, msg, member, signature, f);
                }
            }
        }
    }

    fn walk(
        &self,
        head: u32,
        msg: &Message<'_>,
        member: &Member,
        signature: u64,
        f: &mut impl FnMut(Id, &Path),
    ) {
        let key = msg.key_of(member);
        let mut slot = head;
        while let Some(Some(r)) = self.records.get(slot as usize) {
            if r.signature & !signature != 0 {
                slot = r.next;
                continue;
            }
            let reached_by_anchor = match r.anchor {
                Anchor::Segment(n) => r.path.segment(n.into()).is_some_and(|s| s.addresses(key)),
                Anchor::Everything => false,
            };
            if reached_by_anchor && r.path.matches(msg) {
                f(r.id, &r.path);
            }
            slot = r.next;
        }
    }

    /// Heap bytes held by this copy (not the shared path texts).
    pub(super) fn heap_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<Option<Record<Id>>>()
            + self.keys.allocation_size()
            + self.pairs.allocation_size()
    }
}
