//! The anchor table and its filter: where each anchor's list of listeners starts.
//!
//! An anchor is a 64-bit hash (a `(key, value)` pair's, or a key's for presence) and the table
//! maps it to the head and length of its list. It is an open-addressing table with linear
//! probing and backward-shift deletion, 16 bytes per entry, so a lookup reads one cache line in
//! the common case; zero marks an empty entry (anchor hashes are never zero, see
//! [`anchor_key`]).
//!
//! Most anchors a message has belong to no listener, so a bitmap filter answers those first:
//! a blocked Bloom filter of 10 bits or more per anchor, small enough to stay in the core's
//! cache when the table is not. Each anchor sets two bits in one 64-bit word (the word chosen by
//! the hash's top bits, the two bits by two 6-bit fields below the signature's, see
//! `index.rs`), so a test reads one word and a third as many absent anchors get through as with
//! one bit each (about 3 % rather than 9 % at 10 bits per anchor). A clear bit means no such
//! anchor; both set means look in the table. Bits are set on insert and never cleared on removal; the
//! filter is rebuilt from the table when it has grown stale (as many removals as live anchors)
//! or the table is resized, which amortises to O(1) per change.

/// Makes a hash usable as an anchor: zero is reserved for empty entries.
#[inline(always)]
pub(super) fn anchor_key(hash: u64) -> u64 {
    hash.max(1)
}

/// A presence anchor's key, from the key's hash: a bijection, so distinct keys stay distinct,
/// and a different value from the pair hashes of the same key in all but a 2⁻⁶⁴ chance (a
/// coincidence only costs a shared list; see `index.rs`).
#[inline(always)]
pub(super) fn presence_key(key_hash: u64) -> u64 {
    anchor_key(key_hash.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15)
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// The anchor; 0 when the entry is empty.
    hash: u64,
    head: u32,
    len: u32,
}

/// Anchor → list head and length, with a filter for absent anchors.
#[derive(Clone, Debug, Default)]
pub(super) struct Table {
    entries: Vec<Entry>,
    len: usize,
    filter: Vec<u64>,
    /// `64 - log2(words in the filter)`: the shift that turns a hash into a filter word.
    filter_shift: u32,
    /// Anchors removed since the filter was last built.
    stale: usize,
}

const MIN_ENTRIES: usize = 16;

/// The two bits an anchor sets in its filter word.
#[inline(always)]
fn filter_bits(hash: u64) -> u64 {
    1 << ((hash >> 20) & 63) | 1 << ((hash >> 26) & 63)
}

impl Table {
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `hash` may be an anchor here (false: certainly not).
    #[inline(always)]
    pub(super) fn may_hold(&self, hash: u64) -> bool {
        let bits = filter_bits(hash);
        self.filter.get((hash >> self.filter_shift) as usize).is_some_and(|w| w & bits == bits)
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.entries.len().wrapping_sub(1)
    }

    /// The entry holding `hash`, if any.
    #[inline(always)]
    fn find(&self, hash: u64) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            let e = self.entries.get(i)?;
            if e.hash == hash {
                return Some(i);
            }
            if e.hash == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The head and length of `hash`'s list.
    #[inline(always)]
    pub(super) fn get(&self, hash: u64) -> Option<(u32, u32)> {
        self.find(hash).and_then(|i| self.entries.get(i)).map(|e| (e.head, e.len))
    }

    /// How many listeners are filed under `hash`.
    pub(super) fn list_len(&self, hash: u64) -> u32 {
        self.get(hash).map_or(0, |(_, len)| len)
    }

    /// Adds one listener to `hash`'s list (creating it): returns the previous head.
    pub(super) fn push(&mut self, hash: u64, head: u32) -> u32 {
        if let Some(e) = self.find(hash).and_then(|i| self.entries.get_mut(i)) {
            e.len += 1;
            return std::mem::replace(&mut e.head, head);
        }
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.resize((self.entries.len() * 2).max(MIN_ENTRIES));
        }
        self.place(Entry { hash, head, len: 1 });
        self.len += 1;
        self.set_filter_bit(hash);
        super::index::NONE
    }

    fn place(&mut self, entry: Entry) {
        let mask = self.mask();
        let mut i = entry.hash as usize & mask;
        while self.entries[i].hash != 0 {
            i = (i + 1) & mask;
        }
        self.entries[i] = entry;
    }

    /// Takes one listener off `hash`'s list, whose head becomes `new_head` when it was the
    /// head; the entry goes when its list is empty.
    pub(super) fn pop(&mut self, hash: u64, was_head: bool, new_head: u32) {
        let Some(i) = self.find(hash) else { return };
        let e = &mut self.entries[i];
        if e.len > 1 {
            e.len -= 1;
            if was_head {
                e.head = new_head;
            }
            return;
        }
        self.delete(i);
        self.len -= 1;
        self.stale += 1;
        if self.entries.len() > MIN_ENTRIES && self.len * 8 < self.entries.len() {
            self.resize(self.entries.len() / 2);
        } else if self.stale > self.len.max(64) {
            self.rebuild_filter();
        }
    }

    /// Backward-shift deletion: later entries of the same run move up, so no tombstone.
    fn delete(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let e = self.entries[j];
            if e.hash == 0 {
                break;
            }
            let home = e.hash as usize & mask;
            // `e` may fill the hole when its home is not cyclically within (hole, j].
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.entries[hole] = e;
                hole = j;
            }
        }
        self.entries[hole] = Entry::default();
    }

    fn resize(&mut self, size: usize) {
        let old = std::mem::replace(&mut self.entries, vec![Entry::default(); size]);
        for e in old.into_iter().filter(|e| e.hash != 0) {
            self.place(e);
        }
        self.rebuild_filter();
    }

    fn set_filter_bit(&mut self, hash: u64) {
        let bits = filter_bits(hash);
        if let Some(w) = self.filter.get_mut((hash >> self.filter_shift) as usize) {
            *w |= bits;
        }
    }

    /// Sizes the filter for the entries' capacity (8 bits per entry, so 10 to 64 per anchor)
    /// and sets the bit of every live anchor.
    fn rebuild_filter(&mut self) {
        // Two words at least, so that the shift is below 64.
        let words = (self.entries.len() / 8).max(2).next_power_of_two();
        self.filter_shift = 64 - words.trailing_zeros();
        self.filter.clear();
        self.filter.resize(words, 0);
        for i in 0..self.entries.len() {
            let hash = self.entries[i].hash;
            if hash != 0 {
                self.set_filter_bit(hash);
            }
        }
        self.stale = 0;
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>() + self.filter.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// The filter lets few absent anchors through: at 100,000 anchors (21 filter bits per
    /// anchor at this table size) about 1.1 % of absent ones reach the table; the bound is
    /// 2.5 % (one bit per anchor would let about 4.7 % through).
    #[test]
    fn the_filter_lets_few_absent_anchors_through() {
        let mut table = Table::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            anchor_key(x)
        };
        for n in 0..100_000 {
            table.push(next(), n);
        }
        let through = (0..100_000).filter(|_| table.may_hold(next())).count();
        assert!(through < 2_500, "{through} of 100,000 absent anchors pass the filter");
    }

    proptest! {
        /// The table agrees with a map of list lengths through runs of pushes, then mostly
        /// pops (growth, shrinking, backward shifts over clusters, filter rebuilds), and its
        /// filter never hides a live anchor.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u64..300, 0u8..4), 0..1200), spread in 0u32..3) {
            let mut table = Table::default();
            let mut model: HashMap<u64, u32> = HashMap::new();
            // Few distinct low bits make long clusters; the high bits feed the filter.
            let hash = |n: u64| anchor_key((n << (spread * 20)) ^ (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !0xfff));
            let half = ops.len() / 2;
            for (n, &(key, dice)) in ops.iter().enumerate() {
                let h = hash(key);
                let pop = model.contains_key(&h) && if n < half { dice == 0 } else { dice != 0 };
                if pop {
                    table.pop(h, false, 0);
                    let left = model.get_mut(&h).map(|c| { *c -= 1; *c });
                    if left == Some(0) {
                        model.remove(&h);
                    }
                } else {
                    table.push(h, n as u32);
                    *model.entry(h).or_insert(0) += 1;
                }
                prop_assert_eq!(table.len, model.len());
                prop_assert_eq!(table.list_len(h), model.get(&h).copied().unwrap_or(0));
                if n % 32 == 0 || n + 1 == ops.len() {
                    for key in 0..300u64 {
                        let h = hash(key);
                        let want = model.get(&h).copied().unwrap_or(0);
                        prop_assert_eq!(table.list_len(h), want);
                        prop_assert!(want == 0 || table.may_hold(h));
                    }
                }
            }
        }
    }
}
