//! Matchmaking: pairs callers who wait under the same game tag, first come first served.
//!
//! `find_match{game}` with nobody waiting under `game` puts the caller in that game's queue and
//! answers `waiting{game}`; with someone waiting, the longest waiter is taken out and both get
//! `matched{game, peer}` with the other's address. Asking again while waiting changes nothing
//! (`waiting` again). A connection waits in at most `games_per_connection` games at once, each
//! independent: a match in one leaves its other waits in place. A disconnect removes every wait
//! of the connection.
//!
//! Generic over the connection handle `H`, no I/O: methods return who must be told what.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

use smallvec::SmallVec;

use super::error::{Limit, RelayError};

/// The caps of the matchmaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchLimits {
    /// Games one connection may wait in at once.
    pub games_per_connection: usize,
    /// Waiting callers relay-wide (counting each game a connection waits in).
    pub waiters: usize,
}

impl Default for MatchLimits {
    /// 4 games per connection, 100,000 waits in all.
    fn default() -> Self {
        MatchLimits { games_per_connection: 4, waiters: 100_000 }
    }
}

/// What a `find_match` came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchOutcome<H> {
    /// Queued: answer `waiting{game}`.
    Waiting,
    /// Paired with `peer`, who is no longer waiting in this game: send `matched{game, peer}` to
    /// both, each naming the other.
    Matched {
        /// The longest waiter of the game.
        peer: H,
    },
}

/// Every game's queue of waiters.
#[derive(Debug)]
pub struct Matchmaker<H> {
    games: HashMap<Arc<str>, VecDeque<H>>,
    waiting: HashMap<H, SmallVec<[Arc<str>; 4]>>,
    limits: MatchLimits,
    waiters: usize,
    matched: u64,
    refused: u64,
}

impl<H: Clone + Eq + Hash> Matchmaker<H> {
    /// Nobody waiting.
    pub fn new(limits: MatchLimits) -> Self {
        Matchmaker {
            games: HashMap::new(),
            waiting: HashMap::new(),
            limits,
            waiters: 0,
            matched: 0,
            refused: 0,
        }
    }

    /// Handles `who`'s `find_match` for `game`.
    pub fn find_match(&mut self, who: &H, game: &str) -> Result<MatchOutcome<H>, RelayError> {
        let mine = self.waiting.get(who);
        if mine.is_some_and(|games| games.iter().any(|g| &**g == game)) {
            return Ok(MatchOutcome::Waiting);
        }
        if let Some(queue) = self.games.get_mut(game)
            && let Some(peer) = queue.pop_front()
        {
            if queue.is_empty() {
                self.games.remove(game);
            }
            self.waiters -= 1;
            self.forget(&peer, game);
            self.matched += 1;
            return Ok(MatchOutcome::Matched { peer });
        }
        self.wait(who, game)?;
        Ok(MatchOutcome::Waiting)
    }

    /// Puts `who` at the end of `game`'s queue without pairing it (with a cluster, the pairing
    /// is decided cluster-wide), within the caps; waiting there already changes nothing.
    pub fn wait(&mut self, who: &H, game: &str) -> Result<(), RelayError> {
        let mine = self.waiting.get(who);
        if mine.is_some_and(|games| games.iter().any(|g| &**g == game)) {
            return Ok(());
        }
        let refusal = if mine.is_some_and(|games| games.len() >= self.limits.games_per_connection) {
            Some(Limit::GamesPerConnection)
        } else if self.waiters >= self.limits.waiters {
            Some(Limit::MatchWaiters)
        } else {
            None
        };
        if let Some(limit) = refusal {
            self.refused += 1;
            return Err(RelayError::LimitReached(limit));
        }
        let name: Arc<str> = Arc::from(game);
        self.games.entry(Arc::clone(&name)).or_default().push_back(who.clone());
        self.waiting.entry(who.clone()).or_default().push(name);
        self.waiters += 1;
        Ok(())
    }

    /// Takes `who` out of `game`'s queue; returns whether it was waiting there.
    pub fn cancel(&mut self, who: &H, game: &str) -> bool {
        let waited = self.waiting.get(who).is_some_and(|games| games.iter().any(|g| &**g == game));
        if waited {
            self.remove_from_queue(who, game);
            self.forget(who, game);
        }
        waited
    }

    /// Takes `who` out of every queue; returns how many games it waited in.
    pub fn disconnect(&mut self, who: &H) -> usize {
        let Some(games) = self.waiting.remove(who) else {
            return 0;
        };
        for game in &games {
            self.remove_from_queue(who, game);
        }
        games.len()
    }

    fn remove_from_queue(&mut self, who: &H, game: &str) {
        if let Some(queue) = self.games.get_mut(game) {
            if let Some(at) = queue.iter().position(|w| w == who) {
                queue.remove(at);
                self.waiters -= 1;
            }
            if queue.is_empty() {
                self.games.remove(game);
            }
        }
    }

    fn forget(&mut self, who: &H, game: &str) {
        if let Some(games) = self.waiting.get_mut(who) {
            games.retain(|g| &**g != game);
            if games.is_empty() {
                self.waiting.remove(who);
            }
        }
    }

    /// The games `who` waits in (to re-check them when its rules change).
    pub fn games_of<'s>(&'s self, who: &H) -> impl Iterator<Item = &'s Arc<str>> + 's {
        self.waiting.get(who).into_iter().flatten()
    }

    /// Waits over all games.
    pub fn waiters(&self) -> usize {
        self.waiters
    }

    /// Games with someone waiting.
    pub fn games(&self) -> usize {
        self.games.len()
    }

    /// Pairs made so far.
    pub fn matched(&self) -> u64 {
        self.matched
    }

    /// Waits refused by a cap so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn pairs_in_arrival_order() {
        let mut mm = Matchmaker::new(MatchLimits::default());
        assert_eq!(mm.find_match(&1u32, "chess"), Ok(MatchOutcome::Waiting));
        assert_eq!(mm.find_match(&1, "chess"), Ok(MatchOutcome::Waiting), "asking again changes nothing");
        assert_eq!(mm.waiters(), 1);
        assert_eq!(mm.find_match(&2, "go"), Ok(MatchOutcome::Waiting));
        assert_eq!(mm.find_match(&3, "chess"), Ok(MatchOutcome::Matched { peer: 1 }));
        assert_eq!(mm.find_match(&4, "chess"), Ok(MatchOutcome::Waiting));
        assert_eq!(mm.find_match(&5, "chess"), Ok(MatchOutcome::Matched { peer: 4 }));
        assert_eq!((mm.waiters(), mm.games(), mm.matched()), (1, 1, 2));
    }

    #[test]
    fn a_waiter_that_leaves_is_removed() {
        let mut mm = Matchmaker::new(MatchLimits::default());
        mm.find_match(&1u32, "chess").unwrap();
        mm.find_match(&1, "go").unwrap();
        assert_eq!(mm.games_of(&1).map(|g| &**g).collect::<Vec<_>>(), ["chess", "go"]);
        mm.find_match(&2, "chess").ok();
        mm.find_match(&3, "go").ok();
        mm.find_match(&4, "go").unwrap();
        assert_eq!(mm.disconnect(&4), 1);
        assert_eq!(mm.find_match(&5, "go"), Ok(MatchOutcome::Waiting));
        assert!(mm.cancel(&5, "go"));
        assert!(!mm.cancel(&5, "go"));
        assert_eq!((mm.waiters(), mm.games()), (0, 0));
    }

    #[test]
    fn a_match_leaves_other_waits_in_place() {
        let mut mm = Matchmaker::new(MatchLimits::default());
        mm.find_match(&1u32, "chess").unwrap();
        mm.find_match(&1, "go").unwrap();
        assert_eq!(mm.find_match(&2, "chess"), Ok(MatchOutcome::Matched { peer: 1 }));
        assert_eq!(mm.find_match(&3, "go"), Ok(MatchOutcome::Matched { peer: 1 }));
    }

    #[test]
    fn waiting_without_pairing_keeps_the_caps() {
        let mut mm = Matchmaker::new(MatchLimits { games_per_connection: 1, waiters: 2 });
        mm.wait(&1u32, "chess").unwrap();
        mm.wait(&2, "chess").unwrap();
        assert_eq!(mm.wait(&1, "chess"), Ok(()), "waiting again changes nothing");
        assert_eq!(mm.wait(&1, "go"), Err(RelayError::LimitReached(Limit::GamesPerConnection)));
        assert_eq!(mm.wait(&3, "go"), Err(RelayError::LimitReached(Limit::MatchWaiters)));
        assert_eq!(mm.waiters(), 2);
        assert!(mm.cancel(&1, "chess"));
        assert_eq!(mm.find_match(&4, "chess"), Ok(MatchOutcome::Matched { peer: 2 }));
    }

    #[test]
    fn caps() {
        let mut mm = Matchmaker::new(MatchLimits { games_per_connection: 2, waiters: 3 });
        mm.find_match(&1u32, "a").unwrap();
        mm.find_match(&1, "b").unwrap();
        assert_eq!(mm.find_match(&1, "c"), Err(RelayError::LimitReached(Limit::GamesPerConnection)));
        mm.find_match(&2, "c").unwrap();
        assert_eq!(mm.find_match(&3, "d"), Err(RelayError::LimitReached(Limit::MatchWaiters)));
        // A full matchmaker still pairs: that takes a waiter out.
        assert_eq!(mm.find_match(&3, "a"), Ok(MatchOutcome::Matched { peer: 1 }));
        assert_eq!(mm.refused(), 2);
    }

    proptest! {
        /// Against a model (game → FIFO of waiters): every outcome agrees, pairs are made in
        /// arrival order and never with oneself, and disconnecting everyone empties it.
        #[test]
        fn fifo_per_game(ops in proptest::collection::vec((0u8..4, 0u32..6, 0usize..3), 1..200)) {
            const GAMES: [&str; 3] = ["a", "b", "c"];
            let limits = MatchLimits { games_per_connection: 2, waiters: 5 };
            let mut mm = Matchmaker::new(limits);
            let mut model: BTreeMap<&str, VecDeque<u32>> = BTreeMap::new();
            for (kind, who, game) in ops {
                let game = GAMES[game];
                match kind {
                    0 | 1 => {
                        let queue = model.entry(game).or_default();
                        let want = if queue.contains(&who) {
                            Ok(MatchOutcome::Waiting)
                        } else if let Some(peer) = queue.pop_front() {
                            Ok(MatchOutcome::Matched { peer })
                        } else {
                            let mine = model.values().filter(|q| q.contains(&who)).count();
                            let total: usize = model.values().map(VecDeque::len).sum();
                            if mine >= limits.games_per_connection {
                                Err(RelayError::LimitReached(Limit::GamesPerConnection))
                            } else if total >= limits.waiters {
                                Err(RelayError::LimitReached(Limit::MatchWaiters))
                            } else {
                                model.entry(game).or_default().push_back(who);
                                Ok(MatchOutcome::Waiting)
                            }
                        };
                        let got = mm.find_match(&who, game);
                        if let Ok(MatchOutcome::Matched { peer }) = &got {
                            prop_assert_ne!(*peer, who);
                        }
                        prop_assert_eq!(got, want);
                    }
                    2 => {
                        let queue = model.entry(game).or_default();
                        let was = queue.iter().position(|w| *w == who).map(|at| queue.remove(at)).is_some();
                        prop_assert_eq!(mm.cancel(&who, game), was);
                    }
                    _ => {
                        let mut was = 0;
                        for queue in model.values_mut() {
                            if let Some(at) = queue.iter().position(|w| *w == who) {
                                queue.remove(at);
                                was += 1;
                            }
                        }
                        prop_assert_eq!(mm.disconnect(&who), was);
                    }
                }
                model.retain(|_, q| !q.is_empty());
                prop_assert_eq!(mm.waiters(), model.values().map(VecDeque::len).sum::<usize>());
                prop_assert_eq!(mm.games(), model.len());
            }
            for who in 0..6 {
                mm.disconnect(&who);
            }
            prop_assert_eq!((mm.waiters(), mm.games(), mm.waiting.len()), (0, 0, 0));
        }
    }
}
