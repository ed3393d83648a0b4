//! Matchmaking with `[cluster]`: a game's waiter may be on any node, so a `find_match` that
//! does not find its caller waiting here goes to the cluster, which pairs it or makes it the
//! game's waiter (`mesgd_cluster`'s `relay::matches`), through what this file offers it: the
//! caller's connection, found by address and checked by its outbox id (its ticket), so that a
//! later connection of the same address is never taken for it.

use std::sync::Arc;

use mesgd_core::relay::{RelayError, ServerMessage};
use mesgd_core::sync::lock;

use super::{Hub, Link, Outbox};

impl Hub {
    /// The connection holding `who` here, if it is connection `ticket`.
    fn connection(&self, who: &str, ticket: u64) -> Option<Arc<Outbox>> {
        self.lookup(who).filter(|outbox| outbox.id() == ticket)
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::wait_here`].
    pub(crate) fn wait_here(&self, game: &str, who: &str, ticket: u64) -> Result<(), RelayError> {
        let outbox = self.connection(who, ticket).ok_or(RelayError::PeerNotConnected)?;
        lock(&self.matches).wait(&Link(outbox), game)
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::take_waiter`].
    pub(crate) fn take_waiter(&self, game: &str, who: &str, ticket: u64) -> bool {
        self.connection(who, ticket).is_some_and(|outbox| lock(&self.matches).cancel(&Link(outbox), game))
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::pair_waiter`].
    pub(crate) fn pair_waiter(&self, game: &str, who: &str, ticket: u64, peer: &str) -> bool {
        let Some(outbox) = self.connection(who, ticket) else { return false };
        // Under the matchmaker's lock, as `tell_waiting`: `waiting` never follows `matched`.
        let mut matches = lock(&self.matches);
        if !matches.cancel(&Link(outbox.clone()), game) {
            return false;
        }
        self.push(&outbox, &ServerMessage::Matched { game, peer });
        true
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::tell_waiting`].
    pub(crate) fn tell_waiting(&self, game: &str, who: &str, ticket: u64) {
        let Some(outbox) = self.connection(who, ticket) else { return };
        let matches = lock(&self.matches);
        if matches.games_of(&Link(outbox.clone())).any(|g| **g == *game) {
            self.push(&outbox, &ServerMessage::Waiting { game });
        }
    }

    /// See [`mesgd_core::cluster::relay::LocalRelay::tell`].
    pub(crate) fn tell(&self, who: &str, ticket: u64, message: &ServerMessage<'_>) -> bool {
        let Some(outbox) = self.connection(who, ticket) else { return false };
        self.push(&outbox, message);
        true
    }

    /// Tells the cluster that `link` no longer waits in `games` here.
    pub(super) fn withdraw_waits(&self, link: &Link, games: &[Arc<str>]) {
        if let (Some(cluster), Some(addr)) = (self.cluster.get(), link.0.addr()) {
            for game in games {
                cluster.match_withdrawn(game, addr, link.0.id());
            }
        }
    }
}
