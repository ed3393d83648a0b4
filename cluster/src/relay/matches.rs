//! Matchmaking across nodes: one record per game in the relay bucket (`g.<game token>`),
//! naming the game's waiter: its node, instance, address and connection (`Waiter`).
//!
//! A caller who finds a waiter is paired with it, so a game never has more than one waiter in
//! the whole cluster, and first come first served is simply "whoever holds the record":
//!
//! - **Waiting.** No record (or a deleted one): the caller waits in the game on its node (the
//!   node's caps apply, as on one node), its record is written by compare-and-swap at the
//!   revision read (0 creates), and then it is told `waiting{game}`, so a caller told
//!   `waiting` is the one the next caller anywhere finds. Of two callers racing on two nodes
//!   one write wins; the other reads again and finds the winner. A caller that pairs the new
//!   waiter before it was told `waiting` has it told `matched` alone (the two are decided
//!   under the node's matchmaker lock).
//! - **Pairing.** A record: the caller takes it by deleting it at the revision read. Only one
//!   delete of a revision succeeds, so a waiter is matched at most once however many nodes
//!   race for it; a loser reads again. The winner then tells the waiter's node (`M`, request
//!   and reply) to take the waiter out of its queue and tell it `matched{game, peer}`; a waiter
//!   of this node is taken out here. The caller is told `matched` once the waiter was.
//! - **A waiter that is gone** (it left and its withdrawal has not landed yet, its node died,
//!   or a later connection holds its address): its node answers `N`, or nobody answers; the
//!   caller reads again (the record is already deleted) and usually becomes the waiter.
//! - **Withdrawal.** A waiter that disconnects, or whose rules no longer allow the game, has
//!   its record deleted at the revision this node wrote (a record taken meanwhile by a caller
//!   stays taken: its `M` finds the waiter gone).
//!
//! One task handles this node's `find_match`es and withdrawals in order, through a bounded
//! queue (`queue_capacity`): a request costs one or two KV round trips, plus the `M` request
//! when the waiter is on another node. An `M` that is not answered in time puts the record back
//! (whatever happened there, a later `M` for it checks the waiter again) and the caller gets
//! `relay overloaded, retry later`.

use std::collections::HashMap;
use std::sync::Mutex;

use async_nats::RequestErrorKind;
use async_nats::jetstream::kv::{Operation, UpdateErrorKind};
use bytes::Bytes;
use mesgd_core::cluster::relay::node_subject;
use mesgd_core::cluster::relay_kv::{Waiter, game_key};
use mesgd_core::cluster::relay_wire::{RelayReply, RelayRequest};
use mesgd_core::relay::{RelayError, ServerMessage};
use mesgd_core::sync::lock;
use tokio::sync::mpsc;

use super::{RelayClusterStats, RelayNode};

/// Reads of a game's record one request tries before giving up (contention).
const MAX_ATTEMPTS: usize = 16;

/// A request of this node's clients.
#[derive(Debug)]
pub(super) enum MatchJob {
    /// `find_match` of `who` (connection `ticket`).
    Find { game: String, who: String, ticket: u64 },
    /// `who` (connection `ticket`) no longer waits in `game` here.
    Withdraw { game: String, who: String, ticket: u64 },
}

/// The records this node wrote as games' waiters: game → (address, connection, revision).
#[derive(Debug, Default)]
pub(super) struct OwnWaiters(Mutex<HashMap<String, (String, u64, u64)>>);

impl OwnWaiters {
    fn insert(&self, game: &str, who: &str, ticket: u64, revision: u64) {
        lock(&self.0).insert(game.to_owned(), (who.to_owned(), ticket, revision));
    }

    /// Forgets the record of `who` (connection `ticket`) in `game`; the revision it was
    /// written at.
    fn take(&self, game: &str, who: &str, ticket: u64) -> Option<u64> {
        let mut own = lock(&self.0);
        match own.get(game) {
            Some((w, t, revision)) if w == who && *t == ticket => {
                let revision = *revision;
                own.remove(game);
                Some(revision)
            }
            _ => None,
        }
    }
}

/// What one read of the record came to.
enum Step {
    /// The caller was told.
    Done,
    /// Read the record again.
    Again,
    /// The cluster could not be reached in time.
    Failed,
}

impl RelayNode {
    /// Queues a request for the matching task.
    pub(super) fn queue_match(&self, job: MatchJob) -> Result<(), RelayError> {
        self.inner.matches.try_send(job).map_err(|_| {
            RelayClusterStats::add(&self.stats().match_queue_full, 1);
            RelayError::Overloaded
        })
    }

    /// Handles this node's requests, one at a time.
    pub(super) async fn match_loop(self, mut jobs: mpsc::Receiver<MatchJob>) {
        while let Some(job) = jobs.recv().await {
            match job {
                MatchJob::Find { game, who, ticket } => self.find(&game, &who, ticket).await,
                MatchJob::Withdraw { game, who, ticket } => self.withdraw(&game, &who, ticket).await,
            }
        }
    }

    async fn find(&self, game: &str, who: &str, ticket: u64) {
        let me = &self.inner;
        let key = game_key(game);
        for _ in 0..MAX_ATTEMPTS {
            let entry = match tokio::time::timeout(me.timeout, me.kv.entry(&key)).await {
                Ok(Ok(entry)) => entry,
                _ => break,
            };
            let (revision, waiter) = match entry {
                None => (0, None),
                Some(e) if e.operation == Operation::Put => match Waiter::decode(&e.value) {
                    Ok(waiter) => (e.revision, Some(waiter)),
                    Err(_) => {
                        // Unreadable: replaced, as a record of nobody.
                        RelayClusterStats::add(&self.stats().decode_errors, 1);
                        (e.revision, None)
                    }
                },
                // Deleted: the marker's revision is the one to replace.
                Some(e) => (e.revision, None),
            };
            let step = match waiter {
                Some(w) if *w.node == *me.node && w.addr == who && w.ticket == ticket => {
                    // It asked again before its first request was done: it is the waiter,
                    // and asking again changes nothing.
                    me.local.tell(who, ticket, &ServerMessage::Waiting { game });
                    Step::Done
                }
                Some(w) => self.pair(&key, revision, &w, game, who, ticket).await,
                None => self.wait(&key, revision, game, who, ticket).await,
            };
            match step {
                Step::Done => return,
                Step::Again => {}
                Step::Failed => break,
            }
        }
        RelayClusterStats::add(&self.stats().match_errors, 1);
        me.local.tell(who, ticket, &ServerMessage::Error { error: RelayError::Overloaded, fatal: false });
    }

    /// Makes the caller the game's waiter, its record written at `revision`.
    async fn wait(&self, key: &str, revision: u64, game: &str, who: &str, ticket: u64) -> Step {
        let me = &self.inner;
        match me.local.wait_here(game, who, ticket) {
            Ok(()) => {}
            // It left meanwhile.
            Err(RelayError::PeerNotConnected) => return Step::Done,
            Err(error) => {
                me.local.tell(who, ticket, &ServerMessage::Error { error, fatal: false });
                return Step::Done;
            }
        }
        let record =
            Waiter { node: me.node.to_string(), instance: me.instance.clone(), addr: who.to_owned(), ticket };
        match tokio::time::timeout(me.timeout, me.kv.update(key, Bytes::from(record.encode()), revision))
            .await
        {
            Ok(Ok(written)) => {
                me.waiters.insert(game, who, ticket, written);
                RelayClusterStats::add(&self.stats().match_waiting, 1);
                me.local.tell_waiting(game, who, ticket);
                Step::Done
            }
            Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                me.local.take_waiter(game, who, ticket);
                RelayClusterStats::add(&self.stats().match_conflicts, 1);
                Step::Again
            }
            _ => {
                me.local.take_waiter(game, who, ticket);
                Step::Failed
            }
        }
    }

    /// Pairs the caller with `waiter`, whose record is at `revision`.
    async fn pair(
        &self,
        key: &str,
        revision: u64,
        waiter: &Waiter,
        game: &str,
        who: &str,
        ticket: u64,
    ) -> Step {
        let me = &self.inner;
        match tokio::time::timeout(me.timeout, me.kv.delete_expect_revision(key, Some(revision))).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                RelayClusterStats::add(&self.stats().match_conflicts, 1);
                return Step::Again;
            }
            _ => return Step::Failed,
        }
        let told = if *waiter.node == *me.node {
            me.waiters.take(game, &waiter.addr, waiter.ticket);
            let here = waiter.instance_id() == Some(me.instance_id)
                && me.local.pair_waiter(game, &waiter.addr, waiter.ticket, who);
            if here {
                RelayClusterStats::add(&self.stats().matched_here, 1);
            }
            here
        } else {
            match self.tell_waiter(waiter, game, who).await {
                Some(told) => {
                    if told {
                        RelayClusterStats::add(&self.stats().matched_remote, 1);
                    }
                    told
                }
                None => {
                    // Not answered: the record goes back, for whoever reads it next.
                    let _ = tokio::time::timeout(me.timeout, me.kv.create(key, Bytes::from(waiter.encode())))
                        .await;
                    return Step::Failed;
                }
            }
        };
        if !told {
            RelayClusterStats::add(&self.stats().match_stale, 1);
            return Step::Again;
        }
        me.local.tell(who, ticket, &ServerMessage::Matched { game, peer: &waiter.addr });
        Step::Done
    }

    /// Asks `waiter`'s node to pair it with `peer`: whether it was told, `None` when its node
    /// did not answer in time.
    async fn tell_waiter(&self, waiter: &Waiter, game: &str, peer: &str) -> Option<bool> {
        let me = &self.inner;
        let request = RelayRequest::Matched {
            waiter: waiter.addr.clone(),
            instance: waiter.instance_id()?,
            ticket: waiter.ticket,
            game: game.to_owned(),
            peer: peer.to_owned(),
        };
        let asked = me.client.request(node_subject(&waiter.node), request.encode());
        match tokio::time::timeout(me.timeout, asked).await {
            Ok(Ok(reply)) => match RelayReply::decode(&reply.payload) {
                Ok(RelayReply::Written) => Some(true),
                Ok(_) => Some(false),
                Err(_) => {
                    RelayClusterStats::add(&self.stats().decode_errors, 1);
                    None
                }
            },
            // Its node is gone, and the waiter with it.
            Ok(Err(e)) if e.kind() == RequestErrorKind::NoResponders => Some(false),
            _ => None,
        }
    }

    /// `M` from another node: the waiter here is paired with `peer`.
    pub(super) fn matched_here(
        &self,
        waiter: &str,
        instance: u64,
        ticket: u64,
        game: &str,
        peer: &str,
    ) -> RelayReply {
        let me = &self.inner;
        if instance != me.instance_id || !me.local.pair_waiter(game, waiter, ticket, peer) {
            return RelayReply::NotHere;
        }
        me.waiters.take(game, waiter, ticket);
        RelayClusterStats::add(&self.stats().match_told, 1);
        RelayReply::Written
    }

    /// Deletes the record of `who` (connection `ticket`) as `game`'s waiter, if this node
    /// wrote it and nobody took it since.
    async fn withdraw(&self, game: &str, who: &str, ticket: u64) {
        let me = &self.inner;
        let Some(revision) = me.waiters.take(game, who, ticket) else { return };
        let deleted = me.kv.delete_expect_revision(game_key(game), Some(revision));
        match tokio::time::timeout(me.timeout, deleted).await {
            Ok(Ok(())) => RelayClusterStats::add(&self.stats().match_withdrawn, 1),
            // Taken by a caller meanwhile: its `M` finds the waiter gone.
            Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => {}
            _ => RelayClusterStats::add(&self.stats().match_errors, 1),
        }
    }
}
