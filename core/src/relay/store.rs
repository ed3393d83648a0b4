//! Store-and-forward: per-address queues of messages for addresses that are offline.
//!
//! A `send` to an address nobody holds is queued (the sender gets `queued`) and flushed, in
//! order, when the address registers again: as `deliver` frames with `kind: "queued"`, strictly
//! before `registered{queued: N}`. The queue stores each message already encoded (the bytes of
//! its frame body), so a flush is a copy-free hand-over and byte caps count what will be sent.
//!
//! Bounds, each counted when it bites ([`DropCounts`]):
//! - per address, at most `max_messages` (100) and `max_bytes` (1 MiB): a new message pushes out
//!   the oldest ones until it fits (reason `cap` or `bytes`);
//! - every message lives at most `ttl` (24 h): expired ones are skipped by a flush and removed
//!   by [`OfflineQueues::expire`] (reason `ttl`);
//! - at most `max_addresses` addresses have a queue, and all queues together hold at most
//!   `global_bytes`: a message that would break either is refused (the sender gets `relay
//!   overloaded, retry later`). Queued bytes over the global budget also feed the relay's
//!   `load_factor`.
//!
//! Durability: every entry has an [`EntryId`], unique and increasing within the store. A
//! persistence layer journals each change the methods report — an enqueue (with its id and
//! payload), and the ids that left the queue (dropped, expired, flushed) — and rebuilds the
//! store after a restart with [`OfflineQueues::restore`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// The store's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Messages per address (`max_queued_messages`).
    pub max_messages: usize,
    /// Bytes per address (`max_queued_bytes`).
    pub max_bytes: usize,
    /// How long a message waits at most.
    pub ttl: Duration,
    /// Addresses with a queue.
    pub max_addresses: usize,
    /// Bytes in all queues together.
    pub global_bytes: usize,
}

impl Default for QueueLimits {
    /// 100 messages, 1 MiB and 24 hours per address (the seed's figures), 100,000 addresses and
    /// 1 GiB in all.
    fn default() -> Self {
        QueueLimits {
            max_messages: 100,
            max_bytes: 1 << 20,
            ttl: Duration::from_secs(24 * 3600),
            max_addresses: 100_000,
            global_bytes: 1 << 30,
        }
    }
}

/// A queued message's identity, for journalling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub u64);

/// One queued message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its id.
    pub id: EntryId,
    /// The encoded frame body to send.
    pub payload: Bytes,
    /// When it expires.
    pub expires_at: Instant,
}

/// Why a message left a queue without being delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Pushed out by the message-count cap.
    Cap,
    /// Pushed out by the byte cap.
    Bytes,
    /// Its TTL ran out.
    Ttl,
}

/// Messages dropped and refused, by reason, since the store was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Pushed out by `max_messages`.
    pub cap: u64,
    /// Pushed out by `max_bytes`.
    pub bytes: u64,
    /// Expired.
    pub ttl: u64,
    /// Refused: larger than `max_bytes` on its own.
    pub refused_too_large: u64,
    /// Refused: `max_addresses` queues exist.
    pub refused_addresses: u64,
    /// Refused: `global_bytes` would be exceeded.
    pub refused_global: u64,
}

/// A message that was accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// Its id.
    pub id: EntryId,
    /// Older entries of the same address pushed out to make room, oldest first.
    pub dropped: Vec<(EntryId, DropReason)>,
}

/// Why a message was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueError {
    /// The message alone is over the per-address byte cap.
    #[error("message of {len} bytes is over the per-address queue limit of {max} bytes")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The number of addresses with a queue is at its cap.
    #[error("offline queues exist for the maximum of {0} addresses")]
    TooManyAddresses(usize),
    /// All queues together would exceed the global byte budget.
    #[error("the offline queues' global budget of {0} bytes is used up")]
    GlobalBudget(usize),
}

/// A flushed backlog.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    /// The live entries, oldest first: send them, in order, before `registered`.
    pub entries: Vec<Entry>,
    /// Entries that had expired (counted as `ttl` drops).
    pub expired: Vec<EntryId>,
}

#[derive(Debug, Default)]
struct AddressQueue {
    entries: VecDeque<Entry>,
    bytes: usize,
}

/// Every offline queue.
#[derive(Debug)]
pub struct OfflineQueues {
    queues: HashMap<Arc<str>, AddressQueue>,
    limits: QueueLimits,
    total_bytes: usize,
    total_messages: usize,
    next_id: u64,
    drops: DropCounts,
}

impl OfflineQueues {
    /// An empty store. A `max_messages` of 0 is taken as 1: a queue that can hold nothing
    /// would answer `queued` for messages it drops at once.
    pub fn new(mut limits: QueueLimits) -> Self {
        limits.max_messages = limits.max_messages.max(1);
        OfflineQueues {
            queues: HashMap::new(),
            limits,
            total_bytes: 0,
            total_messages: 0,
            next_id: 1,
            drops: DropCounts::default(),
        }
    }

    /// Queues `payload` for `addr` at `now`, pushing out the address's oldest entries if the
    /// per-address caps require it. Nothing changes on an error.
    pub fn enqueue(&mut self, addr: &str, payload: Bytes, now: Instant) -> Result<Enqueued, EnqueueError> {
        let len = payload.len();
        if len > self.limits.max_bytes {
            self.drops.refused_too_large += 1;
            return Err(EnqueueError::TooLarge { len, max: self.limits.max_bytes });
        }
        let existing = self.queues.get(addr);
        if existing.is_none() && self.queues.len() >= self.limits.max_addresses {
            self.drops.refused_addresses += 1;
            return Err(EnqueueError::TooManyAddresses(self.limits.max_addresses));
        }
        // The bytes this address's queue would give up to fit the new message.
        let freed = existing.map_or(0, |q| self.bytes_to_evict(q, len));
        if self.total_bytes - freed + len > self.limits.global_bytes {
            self.drops.refused_global += 1;
            return Err(EnqueueError::GlobalBudget(self.limits.global_bytes));
        }

        let limits = self.limits;
        let queue = self.queues.entry(Arc::from(addr)).or_default();
        let mut dropped = Vec::new();
        while let Some(front) = queue.entries.front() {
            let reason = if queue.entries.len() >= limits.max_messages {
                DropReason::Cap
            } else if queue.bytes + len > limits.max_bytes {
                DropReason::Bytes
            } else {
                break;
            };
            let id = front.id;
            let removed = queue.entries.pop_front().map_or(0, |e| e.payload.len());
            queue.bytes -= removed;
            self.total_bytes -= removed;
            self.total_messages -= 1;
            match reason {
                DropReason::Cap => self.drops.cap += 1,
                DropReason::Bytes => self.drops.bytes += 1,
                DropReason::Ttl => {}
            }
            dropped.push((id, reason));
        }
        let id = EntryId(self.next_id);
        self.next_id += 1;
        queue.bytes += len;
        queue.entries.push_back(Entry { id, payload, expires_at: now + limits.ttl });
        self.total_bytes += len;
        self.total_messages += 1;
        Ok(Enqueued { id, dropped })
    }

    /// The bytes `queue` must give up (oldest first) before a message of `len` bytes fits.
    fn bytes_to_evict(&self, queue: &AddressQueue, len: usize) -> usize {
        let (mut count, mut bytes, mut freed) = (queue.entries.len(), queue.bytes, 0);
        for entry in &queue.entries {
            if count < self.limits.max_messages && bytes + len <= self.limits.max_bytes {
                break;
            }
            count -= 1;
            bytes -= entry.payload.len();
            freed += entry.payload.len();
        }
        freed
    }

    /// Takes `addr`'s whole backlog at `now`: the live entries in order, and the ids of those
    /// that expired.
    pub fn flush(&mut self, addr: &str, now: Instant) -> Flushed {
        let Some(queue) = self.queues.remove(addr) else {
            return Flushed::default();
        };
        self.total_bytes -= queue.bytes;
        self.total_messages -= queue.entries.len();
        let mut flushed = Flushed::default();
        for entry in queue.entries {
            if entry.expires_at <= now {
                self.drops.ttl += 1;
                flushed.expired.push(entry.id);
            } else {
                flushed.entries.push(entry);
            }
        }
        flushed
    }

    /// Removes every entry that has expired at `now` and returns the ids, by address. Queues are
    /// in expiry order (one TTL for all), so each is read from the front only; run it every few
    /// seconds.
    pub fn expire(&mut self, now: Instant) -> Vec<(Arc<str>, EntryId)> {
        let mut expired = Vec::new();
        self.queues.retain(|addr, queue| {
            while queue.entries.front().is_some_and(|e| e.expires_at <= now) {
                if let Some(entry) = queue.entries.pop_front() {
                    queue.bytes -= entry.payload.len();
                    self.total_bytes -= entry.payload.len();
                    self.total_messages -= 1;
                    self.drops.ttl += 1;
                    expired.push((Arc::clone(addr), entry.id));
                }
            }
            !queue.entries.is_empty()
        });
        expired
    }

    /// Loads stored entries of `addr` after a restart, oldest first, keeping their ids.
    ///
    /// The caps apply as on enqueue (entries past them are dropped from the front and
    /// returned, with the reason, so the journal can forget them). The global bounds are not:
    /// what was promised before the restart is kept, and new messages are refused until the
    /// store is back under them.
    pub fn restore(
        &mut self,
        addr: &str,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Vec<(EntryId, DropReason)> {
        let queue = self.queues.entry(Arc::from(addr)).or_default();
        for entry in entries {
            self.next_id = self.next_id.max(entry.id.0 + 1);
            queue.bytes += entry.payload.len();
            self.total_bytes += entry.payload.len();
            self.total_messages += 1;
            queue.entries.push_back(entry);
        }
        let mut dropped = Vec::new();
        while queue.entries.len() > self.limits.max_messages || queue.bytes > self.limits.max_bytes {
            let reason = if queue.entries.len() > self.limits.max_messages {
                self.drops.cap += 1;
                DropReason::Cap
            } else {
                self.drops.bytes += 1;
                DropReason::Bytes
            };
            let Some(entry) = queue.entries.pop_front() else { break };
            queue.bytes -= entry.payload.len();
            self.total_bytes -= entry.payload.len();
            self.total_messages -= 1;
            dropped.push((entry.id, reason));
        }
        if queue.entries.is_empty() {
            self.queues.remove(addr);
        }
        dropped
    }

    /// The number of messages queued for `addr`.
    pub fn queued_for(&self, addr: &str) -> usize {
        self.queues.get(addr).map_or(0, |q| q.entries.len())
    }

    /// Addresses with a queue.
    pub fn addresses(&self) -> usize {
        self.queues.len()
    }

    /// Messages in all queues.
    pub fn messages(&self) -> usize {
        self.total_messages
    }

    /// Bytes in all queues (for `load_factor`).
    pub fn bytes(&self) -> usize {
        self.total_bytes
    }

    /// The bounds in force.
    pub fn limits(&self) -> &QueueLimits {
        &self.limits
    }

    /// Drops and refusals so far.
    pub fn drops(&self) -> DropCounts {
        self.drops
    }
}

#[cfg(test)]
mod tests;
