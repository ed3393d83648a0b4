//! Per-listener liveness: what makes a removal strict without waiting for whole matches.
//!
//! Every listener slot has one 64-bit state word, shared by both copies of the index: the
//! slot's *generation* (bumped each time the slot is given to a new listener) in the top 32
//! bits, a *dead* bit, and in the low 31 bits the number of callbacks for the slot that are
//! running right now.
//!
//! A reader that has found a matching record announces its callback with one `fetch_add` on
//! the state and calls back only if the value it replaced has the record's generation and no
//! dead bit; it takes the announcement back (`fetch_sub`) when the callback returns. A removal
//! sets the dead bit with one `fetch_or`, then waits until the count is down to this thread's
//! own callbacks for the slot (a callback may remove its own listener). All of these are
//! read-modify-writes of one word, so they are totally ordered: either the reader's
//! announcement comes first, and the removal waits for that callback to return, or the dead
//! bit comes first, and the reader sees it and skips the listener. Either way no callback for
//! the listener runs after the removal returns, and the removal waits for nothing else: not
//! for the match in progress, only for a callback of this very listener, which is short.
//!
//! Readers never wait on anything here. A record left in an index copy after its listener was
//! removed (the copies are cleaned up in batches, see `writer.rs`) is dead, and a record whose
//! slot has since been given to another listener has an older generation: both are skipped.
//!
//! Slots are grouped in chunks of [`CHUNK`] words, allocated as slots are first used and never
//! freed or moved while the matcher lives, so a reader can hold a word while the writer adds
//! chunks.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots per chunk of state words.
pub(super) const CHUNK: usize = 1024;

const DEAD: u64 = 1 << 31;
const COUNT: u64 = DEAD - 1;

/// One chunk of state words, shared by the writer and both index copies.
pub(super) type Chunk = Arc<[AtomicU64]>;

thread_local! {
    /// The state words of the callbacks this thread is running, innermost last (a callback
    /// may start another match).
    static CALLING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn address(state: &AtomicU64) -> usize {
    std::ptr::from_ref(state).addr()
}

/// A callback announced on a state word; taken back when dropped (also when the callback
/// panics).
pub(super) struct Call<'a> {
    state: &'a AtomicU64,
    live: bool,
}

impl<'a> Call<'a> {
    /// Announces a callback for the record of generation `generation` whose slot has `state`.
    #[inline(always)]
    pub(super) fn enter(state: &'a AtomicU64, generation: u32) -> Call<'a> {
        let before = state.fetch_add(1, Ordering::AcqRel);
        let live = before & DEAD == 0 && (before >> 32) as u32 == generation;
        if live {
            CALLING.with(|c| c.borrow_mut().push(address(state)));
        }
        Call { state, live }
    }

    /// Whether the listener is alive: the callback may run.
    #[inline(always)]
    pub(super) fn live(&self) -> bool {
        self.live
    }
}

impl Drop for Call<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.live {
            CALLING.with(|c| c.borrow_mut().pop());
        }
        self.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The writer's list of chunks (the index copies hold clones of the same chunks).
#[derive(Default)]
pub(super) struct States {
    chunks: Vec<Chunk>,
}

impl States {
    /// The chunk holding `slot`'s word, allocated if it is the first slot there.
    pub(super) fn chunk(&mut self, slot: u32) -> Chunk {
        let c = slot as usize / CHUNK;
        while self.chunks.len() <= c {
            self.chunks.push((0..CHUNK).map(|_| AtomicU64::new(0)).collect());
        }
        self.chunks[c].clone()
    }

    fn word(&self, slot: u32) -> Option<&AtomicU64> {
        self.chunks.get(slot as usize / CHUNK)?.get(slot as usize % CHUNK)
    }

    /// Gives `slot` to a new listener: a new generation, alive. Callbacks still counted on
    /// it are those of readers holding the slot's previous record, which see the old
    /// generation and skip it; their count is kept so that it goes back to zero.
    pub(super) fn revive(&mut self, slot: u32) -> u32 {
        let word = match self.word(slot) {
            Some(w) => w,
            None => {
                self.chunk(slot);
                self.word(slot).unwrap_or_else(|| unreachable!("the chunk was just allocated"))
            }
        };
        let mut generation = 0;
        let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
            generation = ((old >> 32) as u32).wrapping_add(1);
            Some(u64::from(generation) << 32 | (old & COUNT))
        });
        generation
    }

    /// Marks the listener in `slot` dead, then waits until no callback for it is running
    /// except this thread's own: when this returns, no match calls back for it any more.
    pub(super) fn kill(&self, slot: u32) {
        let Some(word) = self.word(slot) else { return };
        word.fetch_or(DEAD, Ordering::AcqRel);
        let at = address(word);
        let own = CALLING.with(|c| c.borrow().iter().filter(|&&a| a == at).count()) as u64;
        let mut spins = 0u32;
        while word.load(Ordering::Acquire) & COUNT > own {
            if spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Heap bytes of the state words.
    pub(super) fn heap_bytes(&self) -> usize {
        self.chunks.len() * (CHUNK * 8 + 16) + self.chunks.capacity() * std::mem::size_of::<Chunk>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_live_only_for_its_generation_until_killed() {
        let mut states = States::default();
        let chunk = states.chunk(3);
        let word = &chunk[3];
        let first = states.revive(3);
        assert!(Call::enter(word, first).live());
        let second = states.revive(3);
        assert_ne!(first, second);
        assert!(!Call::enter(word, first).live(), "an older record of the slot is skipped");
        assert!(Call::enter(word, second).live());
        states.kill(3);
        assert!(!Call::enter(word, second).live());
        // Every announcement was taken back.
        assert_eq!(word.load(Ordering::Acquire) & COUNT, 0);
    }

    #[test]
    fn a_callback_may_kill_its_own_listener() {
        let mut states = States::default();
        let chunk = states.chunk(0);
        let generation = states.revive(0);
        let call = Call::enter(&chunk[0], generation);
        assert!(call.live());
        // Would wait for itself if its own callback were counted.
        states.kill(0);
        drop(call);
        assert!(!Call::enter(&chunk[0], generation).live());
    }
}
