//! [`TopicTree`]: topic names to payload, searched with a filter (the retained store).

use std::fmt;

use smallvec::SmallVec;

use super::{Arena, Children, NIL, Node, ROOT, level_at};
use crate::topic::{TopicFilter, TopicName};

/// One level of the topic tree; `value` is the entry of the topic that ends here.
#[derive(Debug)]
pub(super) struct TopicNode<T> {
    parent: u32,
    value: Option<T>,
    children: Children,
}

impl<T> Default for TopicNode<T> {
    fn default() -> Self {
        TopicNode { parent: NIL, value: None, children: Children::default() }
    }
}

impl<T> Node for TopicNode<T> {
    fn is_vacant(&self) -> bool {
        self.value.is_none() && self.children.is_empty()
    }
}

/// Concrete topic names mapped to a value of type `T` (the retained messages), answering which
/// stored topics a filter matches.
///
/// [`TopicTree::for_each_match`] follows only the branches the filter can reach: one child per
/// literal level, every child for `+`, the whole subtree for `#`. A filter made of literal levels
/// costs one lookup per level, whatever the size of the tree.
pub struct TopicTree<T> {
    pub(super) arena: Arena<TopicNode<T>>,
    len: usize,
}

/// A pending step of [`TopicTree::for_each_match`].
#[derive(Clone, Copy)]
enum Step {
    /// Match the filter level at byte `pos` (or, past the end, the node's own value).
    Match { node: u32, pos: usize },
    /// Visit every value in the subtree (below a `#`).
    All { node: u32 },
}

impl<T> Default for TopicTree<T> {
    fn default() -> Self {
        TopicTree::new()
    }
}

impl<T> TopicTree<T> {
    /// An empty tree.
    pub fn new() -> Self {
        TopicTree { arena: Arena::new(), len: 0 }
    }

    /// The number of stored topics.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no topic is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stores `value` under `topic`, returning the value it replaces.
    pub fn insert(&mut self, topic: &TopicName, value: T) -> Option<T> {
        let mut node = ROOT;
        for level in topic.levels() {
            node = match self.arena[node].children.get(level) {
                Some(child) => child,
                None => {
                    let child = self.arena.alloc(TopicNode { parent: node, ..TopicNode::default() });
                    self.arena[node].children.insert(level, child);
                    child
                }
            };
        }
        let old = self.arena[node].value.replace(value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes and returns the value of `topic`, pruning the nodes that no longer lead anywhere.
    pub fn remove(&mut self, topic: &TopicName) -> Option<T> {
        let node = self.find(topic)?;
        let value = self.arena[node].value.take()?;
        self.len -= 1;
        let mut levels = topic.levels().rev();
        let mut node = node;
        while node != ROOT && self.arena[node].is_vacant() {
            let Some(level) = levels.next() else { break };
            let parent = self.arena[node].parent;
            self.arena[parent].children.remove(level);
            self.arena.release(node);
            node = parent;
        }
        self.arena.reset_if_vacant();
        Some(value)
    }

    /// The value of `topic`.
    pub fn get(&self, topic: &TopicName) -> Option<&T> {
        self.arena[self.find(topic)?].value.as_ref()
    }

    /// The value of `topic`, mutably.
    pub fn get_mut(&mut self, topic: &TopicName) -> Option<&mut T> {
        let node = self.find(topic)?;
        self.arena[node].value.as_mut()
    }

    /// Visits every value whose topic `filter` matches, each once, in no particular order.
    /// Allocates only for filters whose wildcards open more than a few branches at once.
    pub fn for_each_match(&self, filter: &TopicFilter, mut f: impl FnMut(&T)) {
        let text = filter.as_str();
        let exhausted = text.len() + 1;
        let mut stack: SmallVec<[Step; 16]> = SmallVec::new();
        stack.push(Step::Match { node: ROOT, pos: 0 });
        while let Some(step) = stack.pop() {
            match step {
                Step::All { node } => {
                    let current = &self.arena[node];
                    if let Some(value) = &current.value {
                        f(value);
                    }
                    stack.extend(current.children.iter().map(|(_, child)| Step::All { node: child }));
                }
                Step::Match { node, pos } if pos == exhausted => {
                    if let Some(value) = &self.arena[node].value {
                        f(value);
                    }
                }
                Step::Match { node, pos } => {
                    let current = &self.arena[node];
                    // Below the root, every level may be matched by a wildcard; at the root, a
                    // wildcard skips the topics that start with '$'.
                    let reachable_by_wildcard = |level: &str| node != ROOT || !level.starts_with('$');
                    let (level, next) = level_at(text, pos);
                    match level {
                        "#" => {
                            // "a/#" matches "a" itself (the root holds no value).
                            if let Some(value) = &current.value {
                                f(value);
                            }
                            stack.extend(
                                current
                                    .children
                                    .iter()
                                    .filter(|(level, _)| reachable_by_wildcard(level))
                                    .map(|(_, child)| Step::All { node: child }),
                            );
                        }
                        "+" => stack.extend(
                            current
                                .children
                                .iter()
                                .filter(|(level, _)| reachable_by_wildcard(level))
                                .map(|(_, child)| Step::Match { node: child, pos: next }),
                        ),
                        literal => {
                            if let Some(child) = current.children.get(literal) {
                                stack.push(Step::Match { node: child, pos: next });
                            }
                        }
                    }
                }
            }
        }
    }

    /// Keeps only the values for which `keep` answers true (an expiry sweep), pruning the nodes
    /// that no longer lead anywhere.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut removed = false;
        for node in &mut self.arena.nodes {
            if node.value.as_ref().is_some_and(|value| !keep(value)) {
                node.value = None;
                self.len -= 1;
                removed = true;
            }
        }
        if !removed {
            return;
        }
        // Children come after their parent in a pre-order listing; pruning in reverse order
        // therefore sees a node only after all of its children have been pruned.
        let mut order = Vec::new();
        let mut pending = vec![ROOT];
        while let Some(node) = pending.pop() {
            order.push(node);
            pending.extend(self.arena[node].children.iter().map(|(_, child)| child));
        }
        for &node in order.iter().rev() {
            let mut children = std::mem::take(&mut self.arena[node].children);
            children.retain(|child| {
                let vacant = self.arena[child].is_vacant();
                if vacant {
                    self.arena.release(child);
                }
                !vacant
            });
            self.arena[node].children = children;
        }
        self.arena.reset_if_vacant();
    }

    /// Visits every entry with its topic, in no particular order. Allocates the text; meant for
    /// persistence and statistics.
    pub fn for_each(&self, mut f: impl FnMut(&str, &T)) {
        let mut path = String::new();
        // (node, length of the parent's path, the level that leads to the node)
        let mut stack: Vec<(u32, usize, &str)> =
            self.arena[ROOT].children.iter().map(|(level, child)| (child, 0, level)).collect();
        while let Some((node, parent_len, level)) = stack.pop() {
            path.truncate(parent_len);
            let current = &self.arena[node];
            if current.parent != ROOT {
                path.push('/');
            }
            path.push_str(level);
            if let Some(value) = &current.value {
                f(&path, value);
            }
            stack.extend(current.children.iter().map(|(level, child)| (child, path.len(), level)));
        }
    }

    fn find(&self, topic: &TopicName) -> Option<u32> {
        topic.levels().try_fold(ROOT, |node, level| self.arena[node].children.get(level))
    }
}

impl<T: fmt::Debug> fmt::Debug for TopicTree<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        self.for_each(|topic, value| {
            map.entry(&topic, value);
        });
        map.finish()
    }
}
