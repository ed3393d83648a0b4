//! Reading one user from the store when the in-memory copy does not have it, so that a user
//! added while the broker runs can log in at once rather than after the next poll — without
//! letting a flood of unknown names become a flood of database reads.
//!
//! A miss in the copy is answered, in order:
//!
//! 1. from the **negative cache**: a name the store was asked about and did not have is not
//!    asked about again until the store next changes (as the poll sees it). Entries belong to a
//!    *generation* of the copy, and installing a new copy starts a new generation, so a name
//!    added since is never refused from a stale entry for longer than the poll takes;
//! 2. by a **store read**, one at a time (single flight: a connect that waited for the read
//!    before it looks at both caches again, so a burst for one name costs one read), within a
//!    **budget**: a token bucket of [`LOOKUP_BURST`] reads refilled at [`LOOKUPS_PER_SECOND`].
//!    With the budget spent, a miss is answered as before this existed: unknown, until the
//!    poll brings the user in.
//!
//! A user found this way is kept beside the copy until the next copy is installed (which holds
//! it, or no longer does if it was removed meanwhile). A read whose generation ended while it
//! ran is discarded: the new copy is at least as fresh. Both caches are bounded; their counts
//! are in [`LookupStats`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::store::UserRecord;
use crate::cache::BoundedCache;

/// Store reads allowed at once after a quiet spell.
pub const LOOKUP_BURST: u32 = 32;

/// Store reads allowed per second, on average, once the burst is spent.
pub const LOOKUPS_PER_SECOND: u32 = 32;

/// Names remembered as missing at most.
const MISSING_CAPACITY: usize = 10_000;

/// Users found by a read, kept until the next copy, at most.
const FOUND_CAPACITY: usize = 1_000;

/// How misses of the in-memory copy were answered, since the directory was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LookupStats {
    /// Reads of one user from the store.
    pub store_reads: u64,
    /// Reads that found the user.
    pub found: u64,
    /// Misses answered by the negative cache, without a read.
    pub known_missing: u64,
    /// Misses answered as unknown without a read because the read budget was spent.
    pub over_budget: u64,
    /// Reads that failed (answered as unknown).
    pub failed: u64,
}

/// The counters behind [`LookupStats`].
#[derive(Debug, Default)]
pub(crate) struct LookupCounts {
    pub(crate) store_reads: AtomicU64,
    pub(crate) found: AtomicU64,
    pub(crate) known_missing: AtomicU64,
    pub(crate) over_budget: AtomicU64,
    pub(crate) failed: AtomicU64,
}

impl LookupCounts {
    pub(crate) fn stats(&self) -> LookupStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LookupStats {
            store_reads: load(&self.store_reads),
            found: load(&self.found),
            known_missing: load(&self.known_missing),
            over_budget: load(&self.over_budget),
            failed: load(&self.failed),
        }
    }
}

/// Adds one to `counter`.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A token bucket, with time passed in.
#[derive(Debug)]
pub(crate) struct ReadBudget {
    burst: u32,
    per_second: u32,
    /// Tokens, in millionths, so refills need no floating point.
    micro_tokens: u64,
    last: Instant,
}

impl ReadBudget {
    /// A full bucket of `burst` tokens, refilled at `per_second`.
    pub(crate) fn new(burst: u32, per_second: u32, now: Instant) -> Self {
        ReadBudget { burst, per_second, micro_tokens: u64::from(burst) * 1_000_000, last: now }
    }

    /// Takes one token if there is one.
    pub(crate) fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        self.last = self.last.max(now);
        let refill = (elapsed.as_micros().min(u128::from(u64::MAX))) as u64;
        let cap = u64::from(self.burst) * 1_000_000;
        self.micro_tokens =
            self.micro_tokens.saturating_add(refill.saturating_mul(u64::from(self.per_second))).min(cap);
        match self.micro_tokens.checked_sub(1_000_000) {
            Some(left) => {
                self.micro_tokens = left;
                true
            }
            None => false,
        }
    }
}

/// The negative cache, the users found by reads, and the generation they belong to.
pub(crate) struct MissState {
    generation: u64,
    missing: BoundedCache<String, ()>,
    found: BoundedCache<String, Arc<UserRecord>>,
    budget: ReadBudget,
}

impl MissState {
    pub(crate) fn new(now: Instant) -> Self {
        MissState {
            generation: 0,
            missing: BoundedCache::new(MISSING_CAPACITY),
            found: BoundedCache::new(FOUND_CAPACITY),
            budget: ReadBudget::new(LOOKUP_BURST, LOOKUPS_PER_SECOND, now),
        }
    }

    /// A new copy of the store was installed: what this generation learnt is stale.
    pub(crate) fn new_generation(&mut self) {
        self.generation += 1;
        self.missing = BoundedCache::new(MISSING_CAPACITY);
        self.found = BoundedCache::new(FOUND_CAPACITY);
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn found(&mut self, username: &str) -> Option<Arc<UserRecord>> {
        self.found.get(&username.to_owned()).cloned()
    }

    pub(crate) fn is_missing(&mut self, username: &str) -> bool {
        self.missing.get(&username.to_owned()).is_some()
    }

    /// Takes a read from the budget, if one is left.
    pub(crate) fn take_read(&mut self, now: Instant) -> bool {
        self.budget.try_take(now)
    }

    /// Records what a read started in `generation` found, unless that generation is over.
    /// Returns whether it was recorded.
    pub(crate) fn record(
        &mut self,
        generation: u64,
        username: &str,
        record: Option<Arc<UserRecord>>,
    ) -> bool {
        if generation != self.generation {
            return false;
        }
        match record {
            Some(record) => self.found.insert(username.to_owned(), record),
            None => self.missing.insert(username.to_owned(), ()),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_budget_allows_a_burst_then_its_rate() {
        let start = Instant::now();
        let mut budget = ReadBudget::new(3, 10, start);
        assert!((0..3).all(|_| budget.try_take(start)), "the burst");
        assert!(!budget.try_take(start), "then nothing at the same instant");
        assert!(!budget.try_take(start + Duration::from_millis(99)), "not before a tenth of a second");
        assert!(budget.try_take(start + Duration::from_millis(100)), "one per tenth of a second");
        assert!(!budget.try_take(start + Duration::from_millis(150)));
        let later = start + Duration::from_secs(3600);
        assert!((0..3).all(|_| budget.try_take(later)), "a long pause refills the burst");
        assert!(!budget.try_take(later), "and no more than the burst");
        assert!(!budget.try_take(start), "time going backwards refills nothing");
    }

    #[test]
    fn a_read_from_an_ended_generation_is_discarded() {
        let mut state = MissState::new(Instant::now());
        let generation = state.generation();
        assert!(state.record(generation, "ghost", None));
        assert!(state.is_missing("ghost"));
        state.new_generation();
        assert!(!state.is_missing("ghost"), "a new copy forgets the negative entries");
        assert!(!state.record(generation, "late", None), "a read that straddled a new copy is dropped");
        assert!(!state.is_missing("late"));
        assert_eq!(state.found("late"), None);
    }

    #[test]
    fn the_negative_cache_is_bounded() {
        let mut state = MissState::new(Instant::now());
        for i in 0..3 * MISSING_CAPACITY {
            state.record(0, &format!("user-{i}"), None);
        }
        assert!(state.missing.len() <= MISSING_CAPACITY);
        assert!(state.is_missing(&format!("user-{}", 3 * MISSING_CAPACITY - 1)));
    }
}
