//! The global budget for queued messages: the bytes every session holds together, in its queue
//! and in its in-flight window, against one cap for the whole broker.
//!
//! Each session's queue has its own caps (`limits.max_queued_messages`, `max_queued_bytes`), but
//! 100,000 persistent offline sessions at 16 MiB each would still hold 1.6 TB. The budget counts
//! the same bytes the per-session cap counts (a delivery's topic and payload, see
//! [`crate::model::Delivery::weight`]), for every session of every namespace, from the moment
//! a delivery is queued until it leaves the session (written at QoS 0, acknowledged at QoS 1/2,
//! expired, dropped, or the session ended). A message fanned out to many sessions is counted
//! once per session, as the per-session caps count it: an upper bound of what it costs.
//!
//! Two thresholds act on it:
//!
//! - **back-pressure** from the pause threshold on: [`QueueBudget::under_pressure`] turns true,
//!   and front ends stop reading publishes (the MQTT connection pauses at its next PUBLISH)
//!   until the total falls below the resume threshold, 10 % lower, when
//!   [`QueueBudget::resumed`] fires. The gap keeps a reader from flipping per message.
//! - **the hard cap**: a delivery that would take the total past it is not queued; the receiving
//!   session first gives up its own oldest QoS 0 messages to make room, as its per-session cap
//!   does (see [`Session::enqueue`](super::Session::enqueue)). Counted in
//!   [`QueueBudget::dropped`].
//!
//! Sessions settle their share when they release their lock: each keeps what it has charged,
//! compares it with what it holds, and moves the difference in one atomic add. Nothing else is
//! on the hot path: a delivery that is queued and drained in the same lock costs nothing here,
//! and moving a message from the queue into the in-flight window costs nothing either.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

/// The thresholds of a [`QueueBudget`], in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetLimits {
    /// The hard cap: deliveries beyond it are dropped.
    pub max_bytes: u64,
    /// Back-pressure starts when the total reaches this.
    pub pause_at: u64,
    /// Back-pressure ends when the total falls below this.
    pub resume_below: u64,
}

impl BudgetLimits {
    /// A budget of `max_bytes` whose back-pressure starts at `pause_percent` % of it and ends
    /// 10 % below that (so 90 % pauses and 81 % resumes).
    pub fn new(max_bytes: u64, pause_percent: u8) -> Self {
        let pause_at = u64::try_from(u128::from(max_bytes) * u128::from(pause_percent.min(100)) / 100)
            .unwrap_or(max_bytes);
        BudgetLimits { max_bytes, pause_at, resume_below: pause_at - pause_at / 10 }
    }

    /// No budget: nothing pauses, nothing is dropped for it.
    pub const UNLIMITED: BudgetLimits =
        BudgetLimits { max_bytes: u64::MAX, pause_at: u64::MAX, resume_below: u64::MAX };
}

/// The bytes queued in every session together, with the back-pressure state and its counters.
#[derive(Debug)]
pub struct QueueBudget {
    limits: BudgetLimits,
    /// Apart from `pressure`: every queue change writes `used`, every PUBLISH reads `pressure`.
    used: CacheLine<AtomicU64>,
    pressure: AtomicBool,
    resumed: Arc<Notify>,
    paused_readers: AtomicU64,
    pauses: AtomicU64,
    dropped: AtomicU64,
}

/// A value alone in its cache line (128 bytes: adjacent-line prefetching pairs 64-byte lines).
#[derive(Debug, Default)]
#[repr(align(128))]
struct CacheLine<T>(T);

impl<T> std::ops::Deref for CacheLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

static UNLIMITED: LazyLock<Arc<QueueBudget>> =
    LazyLock::new(|| Arc::new(QueueBudget::new(BudgetLimits::UNLIMITED)));

impl QueueBudget {
    /// An empty budget with these limits.
    pub fn new(limits: BudgetLimits) -> Self {
        QueueBudget {
            limits,
            used: CacheLine(AtomicU64::new(0)),
            pressure: AtomicBool::new(false),
            resumed: Arc::new(Notify::new()),
            paused_readers: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// The budget shared by sessions created without one: it never pauses or drops.
    pub fn unlimited() -> Arc<QueueBudget> {
        UNLIMITED.clone()
    }

    /// Its limits.
    pub fn limits(&self) -> BudgetLimits {
        self.limits
    }

    /// The bytes queued or in flight in every session now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether back-pressure is on: the total reached the pause threshold and has not yet
    /// fallen below the resume threshold.
    pub fn under_pressure(&self) -> bool {
        self.pressure.load(Ordering::SeqCst)
    }

    /// A future that completes at the next end of back-pressure. Enable it (or poll it once)
    /// before checking [`QueueBudget::under_pressure`], so an end between the two is not missed.
    pub fn resumed(&self) -> OwnedNotified {
        self.resumed.clone().notified_owned()
    }

    /// Whether `bytes` more fit under the hard cap, with `releasing` bytes about to be given
    /// back by the caller.
    pub(super) fn fits(&self, bytes: usize, releasing: u64) -> bool {
        let after = self.used().saturating_sub(releasing).saturating_add(bytes as u64);
        after <= self.limits.max_bytes
    }

    /// Moves a session's share from `charged` to `held` bytes.
    pub(super) fn settle(&self, charged: u64, held: u64) {
        if held > charged {
            let now = self.used.fetch_add(held - charged, Ordering::SeqCst) + (held - charged);
            if now >= self.limits.pause_at && !self.pressure.load(Ordering::SeqCst) {
                self.pressure.store(true, Ordering::SeqCst);
                // A release may have brought the total down between the add and the store,
                // and seen no pressure to lift: look again, or readers would wait for a release
                // that may never come.
                self.lift_if_below();
            }
        } else if charged > held {
            self.used.fetch_sub(charged - held, Ordering::SeqCst);
            if self.pressure.load(Ordering::SeqCst) {
                self.lift_if_below();
            }
        }
    }

    fn lift_if_below(&self) {
        if self.used.load(Ordering::SeqCst) < self.limits.resume_below
            && self.pressure.swap(false, Ordering::SeqCst)
        {
            self.resumed.notify_waiters();
        }
    }

    /// Counts `n` deliveries dropped by the hard cap.
    pub(super) fn count_dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Deliveries dropped by the hard cap since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// A reader stopped for back-pressure: counted in [`QueueBudget::pauses`] and in the
    /// [`QueueBudget::paused_readers`] gauge until [`QueueBudget::reader_resumed`].
    pub fn reader_paused(&self) {
        self.pauses.fetch_add(1, Ordering::Relaxed);
        self.paused_readers.fetch_add(1, Ordering::SeqCst);
    }

    /// A paused reader reads again (or its connection ended).
    pub fn reader_resumed(&self) {
        self.paused_readers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Readers paused now.
    pub fn paused_readers(&self) -> u64 {
        self.paused_readers.load(Ordering::SeqCst)
    }

    /// Times a reader was paused since start.
    pub fn pauses(&self) -> u64 {
        self.pauses.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_from_a_percentage() {
        let l = BudgetLimits::new(1000, 90);
        assert_eq!((l.max_bytes, l.pause_at, l.resume_below), (1000, 900, 810));
        let huge = BudgetLimits::new(u64::MAX, 100);
        assert_eq!(huge.pause_at, u64::MAX);
    }

    #[test]
    fn pressure_starts_at_the_pause_threshold_and_ends_below_the_resume_one() {
        let b = QueueBudget::new(BudgetLimits::new(1000, 90));
        b.settle(0, 899);
        assert!(!b.under_pressure());
        b.settle(899, 900);
        assert!(b.under_pressure());
        let mut resumed = Box::pin(b.resumed());
        resumed.as_mut().enable();
        b.settle(900, 810);
        assert!(b.under_pressure(), "810 is not below the resume threshold");
        assert!(futures_not_ready(resumed.as_mut()));
        b.settle(810, 809);
        assert!(!b.under_pressure());
        assert!(!futures_not_ready(resumed.as_mut()), "the end of pressure wakes the waiters");
        assert_eq!(b.used(), 809);
    }

    #[test]
    fn fits_counts_what_the_caller_is_releasing() {
        let b = QueueBudget::new(BudgetLimits::new(100, 90));
        b.settle(0, 90);
        assert!(b.fits(10, 0));
        assert!(!b.fits(11, 0));
        assert!(b.fits(11, 1));
    }

    fn futures_not_ready(f: std::pin::Pin<&mut OwnedNotified>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        std::future::Future::poll(f, &mut cx).is_pending()
    }
}
