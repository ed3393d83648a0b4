//! The subscription trie and the retained-message topic tree.
//!
//! - [`SubscriptionTrie`] maps topic filters to a payload (the broker keeps, per filter, its
//!   direct subscribers and its shared groups) and answers "which filters match this topic?"
//!   on every publish.
//! - [`TopicTree`] maps concrete topic names to a payload (the retained store) and answers
//!   "which stored topics does this filter match?" on every subscribe.
//!
//! Both follow [`TopicFilter::matches`](crate::topic::TopicFilter::matches) exactly, including
//! `a/#` matching `a` and the rule that a filter starting with a wildcard does not match a topic
//! starting with `$`.
//!
//! # Representation
//!
//! Nodes live in one `Vec` and refer to each other by `u32` index, with a free list for reuse:
//!
//! - a node is smaller than with boxed children and the hot nodes sit close together;
//! - each node knows its parent, so the publish-path match walks the trie with no recursion and
//!   no stack at all (it backtracks through parent links) — it never allocates, and a filter of
//!   thirty thousand levels cannot overflow the thread's stack;
//! - dropping a trie is a flat loop, not a recursion as deep as the deepest filter.
//!
//! Literal children are held in `Children`: inline and then in a short vector scanned
//! linearly while a node has few of them (most nodes have one to a handful of children, and
//! comparing a few short strings, length first, is faster than hashing one), switching to a hash
//! map beyond `SMALL_CHILDREN` (8). The map uses the standard library's keyed SipHash: topic levels
//! come from clients, and an unkeyed hash would let one client degrade every lookup by
//! subscribing to colliding names. In the subscription trie the `+` child and the `#` payload
//! have dedicated slots, so matching never hashes or compares a wildcard.

mod filters;
mod topics;

use std::collections::HashMap;

use smallvec::SmallVec;

pub use filters::SubscriptionTrie;
pub use topics::TopicTree;

/// The index of the root node; the root is never freed.
const ROOT: u32 = 0;

/// "No node", in the `u32` links.
const NIL: u32 = u32::MAX;

/// Above this many literal children a node switches from a linear scan to a hash map.
const SMALL_CHILDREN: usize = 8;

/// A hash map is turned back into a vector when a removal leaves this many children or fewer;
/// below the switch-over point, so that a node at the boundary does not convert on every change.
const SHRINK_CHILDREN: usize = SMALL_CHILDREN / 2;

/// The literal children of a node: level text to node index.
#[derive(Debug)]
enum Children {
    /// Few children, scanned linearly; one lives inline, which saves an allocation and a pointer
    /// chase on the long single-child chains that literal filters form.
    Small(SmallVec<[(Box<str>, u32); 1]>),
    /// Many children.
    Map(HashMap<Box<str>, u32>),
}

impl Default for Children {
    fn default() -> Self {
        Children::Small(SmallVec::new())
    }
}

impl Children {
    fn get(&self, level: &str) -> Option<u32> {
        match self {
            Children::Small(entries) => entries.iter().find(|(key, _)| **key == *level).map(|&(_, i)| i),
            Children::Map(map) => map.get(level).copied(),
        }
    }

    /// Adds a child that is not yet present.
    fn insert(&mut self, level: &str, index: u32) {
        match self {
            Children::Small(entries) if entries.len() < SMALL_CHILDREN => entries.push((level.into(), index)),
            Children::Small(entries) => {
                let mut map: HashMap<Box<str>, u32> = entries.drain(..).collect();
                map.insert(level.into(), index);
                *self = Children::Map(map);
            }
            Children::Map(map) => {
                map.insert(level.into(), index);
            }
        }
    }

    fn remove(&mut self, level: &str) -> Option<u32> {
        match self {
            Children::Small(entries) => {
                let pos = entries.iter().position(|(key, _)| **key == *level)?;
                Some(entries.swap_remove(pos).1)
            }
            Children::Map(map) => {
                let index = map.remove(level)?;
                self.shrink_if_small();
                Some(index)
            }
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        match self {
            Children::Small(entries) => entries.retain(|(_, i)| keep(*i)),
            Children::Map(map) => {
                map.retain(|_, i| keep(*i));
                self.shrink_if_small();
            }
        }
    }

    fn shrink_if_small(&mut self) {
        let Children::Map(map) = self else { return };
        if map.len() <= SHRINK_CHILDREN {
            *self = Children::Small(map.drain().collect());
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Children::Small(entries) => entries.is_empty(),
            Children::Map(map) => map.is_empty(),
        }
    }

    fn iter(&self) -> ChildIter<'_> {
        match self {
            Children::Small(entries) => ChildIter::Small(entries.iter()),
            Children::Map(map) => ChildIter::Map(map.iter()),
        }
    }
}

/// Iterates `(level, index)` over either representation without boxing.
enum ChildIter<'a> {
    Small(std::slice::Iter<'a, (Box<str>, u32)>),
    Map(std::collections::hash_map::Iter<'a, Box<str>, u32>),
}

impl<'a> Iterator for ChildIter<'a> {
    type Item = (&'a str, u32);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            ChildIter::Small(it) => it.next().map(|(k, i)| (&**k, *i)),
            ChildIter::Map(it) => it.next().map(|(k, i)| (&**k, *i)),
        }
    }
}

/// A node kind that an [`Arena`] can hold.
trait Node: Default {
    /// Whether the node holds nothing and has no children, so it can be pruned.
    fn is_vacant(&self) -> bool;
}

/// Nodes by index, with a free list. Slot [`ROOT`] always holds the root.
#[derive(Debug)]
struct Arena<N> {
    nodes: Vec<N>,
    free: Vec<u32>,
}

impl<N: Node> Arena<N> {
    fn new() -> Self {
        Arena { nodes: vec![N::default()], free: Vec::new() }
    }

    fn alloc(&mut self, node: N) -> u32 {
        if let Some(index) = self.free.pop() {
            self.nodes[index as usize] = node;
            return index;
        }
        // Four billion nodes would take hundreds of gigabytes: memory runs out long before.
        let index =
            u32::try_from(self.nodes.len()).ok().filter(|&i| i != NIL).expect("trie node index space");
        self.nodes.push(node);
        index
    }

    /// Releases a slot. Its contents are dropped now, so a freed node keeps no memory.
    fn release(&mut self, index: u32) {
        debug_assert_ne!(index, ROOT);
        self.nodes[index as usize] = N::default();
        self.free.push(index);
    }

    /// Returns the arena to a single root once every entry is gone, so the memory of a past
    /// peak is given back.
    fn reset_if_vacant(&mut self) {
        if self.nodes.len() > 1 && self.nodes[ROOT as usize].is_vacant() {
            *self = Arena::new();
        }
    }
}

impl<N> std::ops::Index<u32> for Arena<N> {
    type Output = N;

    fn index(&self, index: u32) -> &N {
        &self.nodes[index as usize]
    }
}

impl<N> std::ops::IndexMut<u32> for Arena<N> {
    fn index_mut(&mut self, index: u32) -> &mut N {
        &mut self.nodes[index as usize]
    }
}

/// Splits the level that starts at byte `pos` of `text` off, returning it and the position of
/// the next level; `text.len() + 1` when it was the last level.
///
/// Levels are short, so a plain byte loop beats a call into `memchr` here.
fn level_at(text: &str, pos: usize) -> (&str, usize) {
    let rest = &text[pos..];
    match rest.bytes().position(|b| b == b'/') {
        Some(i) => (&rest[..i], pos + i + 1),
        None => (rest, text.len() + 1),
    }
}

/// The inverse of [`level_at`]: given the position after a level, the position where it began.
fn level_start_before(text: &str, next: usize) -> usize {
    text.as_bytes()[..next - 1].iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests;
