//! Pipes: tunnels between two connected addresses.
//!
//! `open_pipe{to}` makes a pipe with a fresh `pipe_id` (128 random bits as 32 hex digits, so
//! that no third party can guess one and inject data): the opener gets `pipe_open{pipe_id,
//! peer}`, the peer `pipe_incoming{pipe_id, peer}` with the same id. `pipe_data` from either end
//! goes verbatim to the other; `close_pipe` from either end, or a disconnect, tells the other end
//! `pipe_closed{pipe_id}`. A `pipe_data` for a pipe the sender is not an end of is `unknown
//! pipe`; a `close_pipe` for one gets no reply (teardown is idempotent: the pipe may just have
//! been closed from the other side).
//!
//! A pipe whose ends are on two nodes of a cluster is in the table of each: opened with
//! [`Pipes::open`] on the opener's node and taken in under the same id with [`Pipes::accept`]
//! on the peer's, each table holding its own client's end and a handle for the other.
//!
//! Generic over the connection handle `H`, no I/O: methods return who must be told what.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::Hash;
use std::sync::Arc;

use smallvec::SmallVec;

use super::error::{Limit, RelayError};

/// The caps of the pipe table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipeLimits {
    /// Pipes one connection may be an end of.
    pub per_connection: usize,
    /// Pipes relay-wide.
    pub total: usize,
}

impl Default for PipeLimits {
    /// 16 per connection, 100,000 in all.
    fn default() -> Self {
        PipeLimits { per_connection: 16, total: 100_000 }
    }
}

/// A pipe's two ends.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ends<H> {
    opener: H,
    peer: H,
}

/// Every open pipe.
#[derive(Debug)]
pub struct Pipes<H> {
    pipes: HashMap<Arc<str>, Ends<H>>,
    by_connection: HashMap<H, SmallVec<[Arc<str>; 2]>>,
    limits: PipeLimits,
    refused: u64,
}

impl<H: Clone + Eq + Hash> Pipes<H> {
    /// No pipes.
    pub fn new(limits: PipeLimits) -> Self {
        Pipes { pipes: HashMap::new(), by_connection: HashMap::new(), limits, refused: 0 }
    }

    /// Opens a pipe from `opener` to `peer` (the caller has checked that `peer` is connected)
    /// and returns its id: send `pipe_open` to the opener and `pipe_incoming` to the peer.
    pub fn open(&mut self, opener: &H, peer: &H) -> Result<Arc<str>, RelayError> {
        if opener == peer {
            return Err(RelayError::PipeToSelf);
        }
        self.check_caps(opener, peer)?;
        let id = loop {
            let id = new_pipe_id();
            if !self.pipes.contains_key(&*id) {
                break id;
            }
        };
        self.insert(Arc::clone(&id), opener, peer);
        Ok(id)
    }

    /// Opens a pipe whose id another table chose (the opener's, on another node), within the
    /// same caps as [`Pipes::open`]. An id already in use here is refused with `relay
    /// overloaded, retry later` rather than overwritten (with random 128-bit ids it does not
    /// happen).
    pub fn accept(&mut self, pipe_id: Arc<str>, opener: &H, peer: &H) -> Result<(), RelayError> {
        if opener == peer {
            return Err(RelayError::PipeToSelf);
        }
        self.check_caps(opener, peer)?;
        if self.pipes.contains_key(&*pipe_id) {
            return Err(RelayError::Overloaded);
        }
        self.insert(pipe_id, opener, peer);
        Ok(())
    }

    fn check_caps(&mut self, opener: &H, peer: &H) -> Result<(), RelayError> {
        let full = |h: &H| self.by_connection.get(h).is_some_and(|p| p.len() >= self.limits.per_connection);
        let refusal = if full(opener) || full(peer) {
            Some(Limit::PipesPerConnection)
        } else if self.pipes.len() >= self.limits.total {
            Some(Limit::Pipes)
        } else {
            None
        };
        match refusal {
            Some(limit) => {
                self.refused += 1;
                Err(RelayError::LimitReached(limit))
            }
            None => Ok(()),
        }
    }

    fn insert(&mut self, id: Arc<str>, opener: &H, peer: &H) {
        for end in [opener, peer] {
            self.by_connection.entry(end.clone()).or_default().push(Arc::clone(&id));
        }
        self.pipes.insert(id, Ends { opener: opener.clone(), peer: peer.clone() });
    }

    /// The opener and the peer of `pipe_id`.
    pub fn ends(&self, pipe_id: &str) -> Option<(&H, &H)> {
        self.pipes.get(pipe_id).map(|e| (&e.opener, &e.peer))
    }

    /// Every pipe: its id, opener and peer.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &H, &H)> {
        self.pipes.iter().map(|(id, e)| (id, &e.opener, &e.peer))
    }

    /// Removes `pipe_id` whoever asks (its other end is on another node, which closed it or is
    /// gone); returns its opener and peer.
    pub fn remove(&mut self, pipe_id: &str) -> Option<(H, H)> {
        let ends = self.pipes.remove(pipe_id)?;
        for end in [&ends.opener, &ends.peer] {
            self.forget(end, pipe_id);
        }
        Some((ends.opener, ends.peer))
    }

    /// The other end of `pipe_id`, where a `pipe_data` from `who` goes; `unknown pipe` unless
    /// `who` is an end of it.
    pub fn other_end(&self, who: &H, pipe_id: &str) -> Result<&H, RelayError> {
        match self.pipes.get(pipe_id) {
            Some(Ends { opener, peer }) if opener == who => Ok(peer),
            Some(Ends { opener, peer }) if peer == who => Ok(opener),
            _ => Err(RelayError::UnknownPipe),
        }
    }

    /// Closes `pipe_id` at `who`'s request; returns the other end, to be sent `pipe_closed`, or
    /// `None` (no reply) if `who` is not an end of such a pipe.
    pub fn close(&mut self, who: &H, pipe_id: &str) -> Option<H> {
        let other = self.other_end(who, pipe_id).ok()?.clone();
        self.pipes.remove(pipe_id);
        for end in [who, &other] {
            self.forget(end, pipe_id);
        }
        Some(other)
    }

    /// Closes every pipe `who` is an end of; returns each pipe's id with its other end, to be
    /// sent `pipe_closed`.
    pub fn disconnect(&mut self, who: &H) -> Vec<(Arc<str>, H)> {
        let Some(ids) = self.by_connection.remove(who) else {
            return Vec::new();
        };
        let mut closed = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(ends) = self.pipes.remove(&id) {
                let other = if ends.opener == *who { ends.peer } else { ends.opener };
                self.forget(&other, &id);
                closed.push((id, other));
            }
        }
        closed
    }

    fn forget(&mut self, end: &H, pipe_id: &str) {
        if let Some(ids) = self.by_connection.get_mut(end) {
            ids.retain(|id| &**id != pipe_id);
            if ids.is_empty() {
                self.by_connection.remove(end);
            }
        }
    }

    /// Open pipes.
    pub fn len(&self) -> usize {
        self.pipes.len()
    }

    /// Whether no pipe is open.
    pub fn is_empty(&self) -> bool {
        self.pipes.is_empty()
    }

    /// Pipes `who` is an end of.
    pub fn of(&self, who: &H) -> usize {
        self.by_connection.get(who).map_or(0, SmallVec::len)
    }

    /// Opens refused by a cap so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

/// 128 bits from the thread-local CSPRNG, as 32 lowercase hex digits.
fn new_pipe_id() -> Arc<str> {
    let bytes: [u8; 16] = rand::random();
    let mut id = String::with_capacity(32);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(id, "{b:02x}");
    }
    Arc::from(id)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn open_data_close() {
        let mut pipes = Pipes::new(PipeLimits::default());
        let id = pipes.open(&1u32, &2).unwrap();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(pipes.other_end(&1, &id), Ok(&2));
        assert_eq!(pipes.other_end(&2, &id), Ok(&1));
        assert_eq!(pipes.other_end(&3, &id), Err(RelayError::UnknownPipe), "a third party cannot use it");
        assert_eq!(pipes.other_end(&1, "0000"), Err(RelayError::UnknownPipe));
        assert_eq!(pipes.close(&3, &id), None);
        assert_eq!(pipes.close(&2, &id), Some(1));
        assert_eq!(pipes.close(&1, &id), None, "closing twice has no effect");
        assert!(pipes.is_empty());
        assert_eq!((pipes.of(&1), pipes.of(&2)), (0, 0));
        assert_eq!(pipes.open(&1, &1), Err(RelayError::PipeToSelf));
    }

    #[test]
    fn a_pipe_from_another_table_keeps_its_id_and_caps() {
        let mut pipes = Pipes::new(PipeLimits { per_connection: 1, total: 2 });
        let id: Arc<str> = Arc::from("0123456789abcdef0123456789abcdef");
        pipes.accept(Arc::clone(&id), &10u32, &1).unwrap();
        assert_eq!(pipes.ends(&id), Some((&10, &1)));
        assert_eq!(pipes.accept(Arc::clone(&id), &11, &2), Err(RelayError::Overloaded), "an id in use");
        assert_eq!(
            pipes.accept(Arc::from("x"), &12, &1),
            Err(RelayError::LimitReached(Limit::PipesPerConnection))
        );
        assert_eq!(pipes.accept(Arc::from("y"), &3, &3), Err(RelayError::PipeToSelf));
        pipes.open(&4, &5).unwrap();
        assert_eq!(pipes.accept(Arc::from("z"), &6, &7), Err(RelayError::LimitReached(Limit::Pipes)));
        assert_eq!(pipes.iter().count(), 2);
        assert_eq!(pipes.remove(&id), Some((10, 1)));
        assert_eq!(pipes.remove(&id), None);
        assert_eq!((pipes.of(&10), pipes.of(&1), pipes.len()), (0, 0, 1));
    }

    #[test]
    fn ids_are_fresh() {
        let mut pipes = Pipes::new(PipeLimits { per_connection: 100, total: 100 });
        let ids: std::collections::HashSet<_> = (0..50).map(|_| pipes.open(&1u32, &2).unwrap()).collect();
        assert_eq!(ids.len(), 50);
    }

    #[test]
    fn disconnect_tells_every_other_end() {
        let mut pipes = Pipes::new(PipeLimits::default());
        let a = pipes.open(&1u32, &2).unwrap();
        let b = pipes.open(&3, &1).unwrap();
        let c = pipes.open(&2, &3).unwrap();
        let mut closed = pipes.disconnect(&1);
        closed.sort();
        let mut want = vec![(a, 2), (b, 3)];
        want.sort();
        assert_eq!(closed, want);
        assert_eq!(pipes.len(), 1);
        assert_eq!(pipes.other_end(&2, &c), Ok(&3));
        assert!(pipes.disconnect(&1).is_empty());
    }

    #[test]
    fn caps() {
        let mut pipes = Pipes::new(PipeLimits { per_connection: 2, total: 3 });
        pipes.open(&1u32, &2).unwrap();
        pipes.open(&1, &3).unwrap();
        assert_eq!(pipes.open(&1, &4), Err(RelayError::LimitReached(Limit::PipesPerConnection)));
        assert_eq!(pipes.open(&4, &1), Err(RelayError::LimitReached(Limit::PipesPerConnection)));
        pipes.open(&4, &5).unwrap();
        assert_eq!(pipes.open(&6, &7), Err(RelayError::LimitReached(Limit::Pipes)));
        assert_eq!(pipes.refused(), 3);
    }

    proptest! {
        /// Against a model (pipe → ends): every open, close and disconnect agrees, the per-end
        /// counts match, and once every connection has disconnected nothing is left behind.
        #[test]
        fn nothing_is_left_behind(ops in proptest::collection::vec((0u8..3, 0u32..5, 0u32..5, 0usize..8), 1..150)) {
            let limits = PipeLimits { per_connection: 3, total: 6 };
            let mut pipes = Pipes::new(limits);
            let mut model: BTreeMap<Arc<str>, (u32, u32)> = BTreeMap::new();
            for (kind, a, b, pick) in ops {
                match kind {
                    0 => {
                        let count = |h: u32| model.values().filter(|(x, y)| *x == h || *y == h).count();
                        let fits = a != b
                            && count(a) < limits.per_connection
                            && count(b) < limits.per_connection
                            && model.len() < limits.total;
                        match pipes.open(&a, &b) {
                            Ok(id) => {
                                prop_assert!(fits);
                                model.insert(id, (a, b));
                            }
                            Err(_) => prop_assert!(!fits),
                        }
                    }
                    1 => {
                        let Some((id, &(x, y))) = model.iter().nth(pick % model.len().max(1)) else { continue };
                        let id = Arc::clone(id);
                        let want = if a == x { Some(y) } else if a == y { Some(x) } else { None };
                        prop_assert_eq!(pipes.close(&a, &id), want);
                        if want.is_some() {
                            model.remove(&id);
                        }
                    }
                    _ => {
                        let mut got = pipes.disconnect(&a);
                        got.sort();
                        let mut want: Vec<(Arc<str>, u32)> = model
                            .iter()
                            .filter(|&(_, &(x, y))| x == a || y == a)
                            .map(|(id, &(x, y))| (Arc::clone(id), if x == a { y } else { x }))
                            .collect();
                        want.sort();
                        model.retain(|_, (x, y)| *x != a && *y != a);
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(pipes.len(), model.len());
                for h in 0..5 {
                    prop_assert_eq!(pipes.of(&h), model.values().filter(|(x, y)| *x == h || *y == h).count());
                }
            }
            for h in 0..5 {
                pipes.disconnect(&h);
            }
            prop_assert!(pipes.is_empty());
            prop_assert!(pipes.by_connection.is_empty());
        }
    }
}
