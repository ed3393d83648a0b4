//! [`SubscriptionTrie`]: topic filters to payload, matched against a topic on every publish.

use std::fmt;

use super::{Arena, Children, NIL, Node, ROOT, level_at, level_start_before};
use crate::topic::{TopicFilter, TopicName};

/// How many levels' start positions [`SubscriptionTrie::for_each_match`] keeps on the stack.
const REMEMBERED_LEVELS: usize = 32;

/// One level of the filter trie. The path from the root spells a filter's levels; `payload` is
/// the entry of the filter that ends here, `hash` the entry of the filter that ends here with a
/// further `#` level (a `#` is always last, so it needs no node of its own).
#[derive(Debug)]
pub(super) struct FilterNode<T> {
    parent: u32,
    /// The child reached by a `+` level, or [`NIL`].
    plus: u32,
    payload: Option<T>,
    hash: Option<T>,
    pub(super) children: Children,
}

impl<T> Default for FilterNode<T> {
    fn default() -> Self {
        FilterNode { parent: NIL, plus: NIL, payload: None, hash: None, children: Children::default() }
    }
}

impl<T> Node for FilterNode<T> {
    fn is_vacant(&self) -> bool {
        self.payload.is_none() && self.hash.is_none() && self.plus == NIL && self.children.is_empty()
    }
}

/// Topic filters mapped to a payload of type `T`, answering which filters match a topic.
///
/// The broker keeps one entry per distinct filter (its direct subscribers and shared groups);
/// [`SubscriptionTrie::for_each_match`] runs on every publish, does not allocate, and visits
/// only the branches the topic can reach: the literal child for each level, the `+` child and
/// the `#` entry. See the [module documentation](super) for the representation.
pub struct SubscriptionTrie<T> {
    pub(super) arena: Arena<FilterNode<T>>,
    len: usize,
}

/// Which of a node's two entries a filter names.
#[derive(Clone, Copy)]
enum Slot {
    /// The filter ends at the node.
    Payload,
    /// The filter ends at the node followed by `#`.
    Hash,
}

impl<T> Default for SubscriptionTrie<T> {
    fn default() -> Self {
        SubscriptionTrie::new()
    }
}

impl<T> SubscriptionTrie<T> {
    /// An empty trie.
    pub fn new() -> Self {
        SubscriptionTrie { arena: Arena::new(), len: 0 }
    }

    /// The number of filters that hold a payload.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no filter holds a payload.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload of `filter`, created with `T::default()` (along with the path to it) if the
    /// filter has none yet.
    pub fn entry(&mut self, filter: &TopicFilter) -> &mut T
    where
        T: Default,
    {
        let mut node = ROOT;
        let mut slot = Slot::Payload;
        for level in filter.levels() {
            match level {
                "#" => slot = Slot::Hash,
                "+" => {
                    node = match self.arena[node].plus {
                        NIL => {
                            let child =
                                self.arena.alloc(FilterNode { parent: node, ..FilterNode::default() });
                            self.arena[node].plus = child;
                            child
                        }
                        child => child,
                    }
                }
                literal => {
                    node = match self.arena[node].children.get(literal) {
                        Some(child) => child,
                        None => {
                            let child =
                                self.arena.alloc(FilterNode { parent: node, ..FilterNode::default() });
                            self.arena[node].children.insert(literal, child);
                            child
                        }
                    }
                }
            }
        }
        let node = &mut self.arena[node];
        let entry = match slot {
            Slot::Payload => &mut node.payload,
            Slot::Hash => &mut node.hash,
        };
        if entry.is_none() {
            self.len += 1;
        }
        entry.get_or_insert_with(T::default)
    }

    /// The payload of `filter`, if it has one.
    pub fn get(&self, filter: &TopicFilter) -> Option<&T> {
        let (node, slot) = self.find(filter)?;
        let node = &self.arena[node];
        match slot {
            Slot::Payload => node.payload.as_ref(),
            Slot::Hash => node.hash.as_ref(),
        }
    }

    /// The payload of `filter`, mutably, if it has one.
    pub fn get_mut(&mut self, filter: &TopicFilter) -> Option<&mut T> {
        let (node, slot) = self.find(filter)?;
        let node = &mut self.arena[node];
        match slot {
            Slot::Payload => node.payload.as_mut(),
            Slot::Hash => node.hash.as_mut(),
        }
    }

    /// Calls `is_empty` on the payload of `filter` (which may first remove something from it);
    /// if it answers true, removes the payload and prunes the nodes that no longer lead
    /// anywhere. Returns whether the payload was removed; false, without calling `is_empty`, if
    /// the filter has no payload.
    pub fn remove_if(&mut self, filter: &TopicFilter, is_empty: impl FnOnce(&mut T) -> bool) -> bool {
        let Some((node, slot)) = self.find(filter) else { return false };
        let entry = match slot {
            Slot::Payload => &mut self.arena[node].payload,
            Slot::Hash => &mut self.arena[node].hash,
        };
        let Some(payload) = entry.as_mut() else { return false };
        if !is_empty(payload) {
            return false;
        }
        *entry = None;
        self.len -= 1;
        let mut levels = filter.levels().rev();
        if let Slot::Hash = slot {
            levels.next();
        }
        self.prune_upwards(node, levels);
        true
    }

    /// Visits the payload of every filter that matches `topic`, each once, in no particular
    /// order. Does not allocate and does not recurse.
    pub fn for_each_match(&self, topic: &TopicName, mut f: impl FnMut(&T)) {
        let topic = topic.as_str();
        let exhausted = topic.len() + 1;
        // A topic starting with '$' is not matched by a filter whose first level is a wildcard,
        // i.e. by the root's '+' child or '#' entry.
        let dollar = topic.starts_with('$');
        let wildcards_allowed = |node: u32| node != ROOT || !dollar;
        let arena = &self.arena;

        // Depth-first, with `pos` the byte position of the next topic level to consume. A node is
        // entered once; going back up uses the parent link, and a node's literal child is tried
        // before its `+` child, so coming back from the literal child means "try `+` next".
        // Going up needs the parent's position again: the first levels' positions are kept on
        // the stack, deeper ones are found by scanning back to the previous '/'.
        let mut node = ROOT;
        let mut pos = 0;
        let mut depth = 0;
        let mut starts = [0u32; REMEMBERED_LEVELS];
        'enter: loop {
            if let Some(start) = starts.get_mut(depth) {
                // Lossless: a topic is at most 65,535 bytes long.
                *start = pos as u32;
            }
            let current = &arena[node];
            if pos == exhausted {
                if let Some(payload) = &current.payload {
                    f(payload);
                }
                // "a/#" matches "a" too.
                if let Some(hash) = &current.hash {
                    f(hash);
                }
            } else {
                if let (Some(hash), true) = (&current.hash, wildcards_allowed(node)) {
                    f(hash);
                }
                let (level, next) = level_at(topic, pos);
                if let Some(child) = current.children.get(level) {
                    node = child;
                    pos = next;
                    depth += 1;
                    continue 'enter;
                }
                if current.plus != NIL && wildcards_allowed(node) {
                    node = current.plus;
                    pos = next;
                    depth += 1;
                    continue 'enter;
                }
            }
            // Backtrack until some ancestor still has an untried `+` child.
            loop {
                if node == ROOT {
                    return;
                }
                let parent = arena[node].parent;
                let parent_plus = arena[parent].plus;
                if parent_plus != node && parent_plus != NIL && wildcards_allowed(parent) {
                    // The `+` child consumes the same level the literal child did.
                    node = parent_plus;
                    continue 'enter;
                }
                depth -= 1;
                pos = match starts.get(depth) {
                    Some(&start) => start as usize,
                    None => level_start_before(topic, pos),
                };
                node = parent;
            }
        }
    }

    /// Visits every entry with its filter's text, in no particular order. Allocates the text;
    /// meant for persistence and statistics, not for the message path.
    pub fn for_each(&self, mut f: impl FnMut(&str, &T)) {
        let mut path = String::new();
        // (node, length of the parent's path, the level that leads to the node)
        let mut stack: Vec<(u32, usize, &str)> = Vec::new();
        self.push_children(ROOT, 0, &mut stack);
        emit(&self.arena[ROOT], "", &mut f);
        while let Some((node, parent_len, level)) = stack.pop() {
            path.truncate(parent_len);
            if self.arena[node].parent != ROOT {
                path.push('/');
            }
            path.push_str(level);
            emit(&self.arena[node], &path, &mut f);
            self.push_children(node, path.len(), &mut stack);
        }

        fn emit<T>(node: &FilterNode<T>, path: &str, f: &mut impl FnMut(&str, &T)) {
            if let Some(payload) = &node.payload {
                f(path, payload);
            }
            if let Some(hash) = &node.hash {
                if path.is_empty() && node.parent == NIL {
                    f("#", hash);
                } else {
                    f(&format!("{path}/#"), hash);
                }
            }
        }
    }

    fn push_children<'a>(&'a self, node: u32, path_len: usize, stack: &mut Vec<(u32, usize, &'a str)>) {
        let current = &self.arena[node];
        stack.extend(current.children.iter().map(|(level, child)| (child, path_len, level)));
        if current.plus != NIL {
            stack.push((current.plus, path_len, "+"));
        }
    }

    /// The node and slot of `filter`, without creating anything.
    fn find(&self, filter: &TopicFilter) -> Option<(u32, Slot)> {
        let mut node = ROOT;
        for level in filter.levels() {
            node = match level {
                "#" => return Some((node, Slot::Hash)),
                "+" => Some(self.arena[node].plus).filter(|&p| p != NIL)?,
                literal => self.arena[node].children.get(literal)?,
            };
        }
        Some((node, Slot::Payload))
    }

    /// Frees `node` and then its ancestors for as long as they hold nothing. `levels` yields the
    /// levels that lead to `node`, last first.
    fn prune_upwards<'a>(&mut self, mut node: u32, mut levels: impl Iterator<Item = &'a str>) {
        while node != ROOT && self.arena[node].is_vacant() {
            let Some(level) = levels.next() else { break };
            let parent = self.arena[node].parent;
            if self.arena[parent].plus == node {
                self.arena[parent].plus = NIL;
            } else {
                self.arena[parent].children.remove(level);
            }
            self.arena.release(node);
            node = parent;
        }
        self.arena.reset_if_vacant();
    }
}

impl<T: fmt::Debug> fmt::Debug for SubscriptionTrie<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        self.for_each(|filter, payload| {
            map.entry(&filter, payload);
        });
        map.finish()
    }
}
