//! The closed loop: a sender may be at most a window of deliveries ahead of its receivers.
//!
//! Each sender has a [`Window`] of credits, one per delivery it may have outstanding. Sending a
//! message takes as many credits as the deliveries it causes (1 for a pair, S for a fan-out to
//! S subscribers); each delivery gives one back. Nothing piles up in the broker, so the rate
//! measured is the rate the broker sustains, not the rate at which it buffers.
//!
//! A broker may drop a message (a full queue, a datagram lost) and then its credits never come
//! back. If nothing comes back for the stall timeout, the credits in flight are written off —
//! counted, so the row shows it — and the sender carries on: a run never hangs on a lost
//! message.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Notify;

/// A window of delivery credits shared by one sender (the only one that takes) and its
/// receivers (which give back).
#[derive(Debug)]
pub(crate) struct Window {
    limit: u64,
    in_flight: AtomicU64,
    written_off: AtomicU64,
    returned: Notify,
}

impl Window {
    /// A window of `limit` credits.
    pub(crate) fn new(limit: u64) -> Window {
        Window {
            limit,
            in_flight: AtomicU64::new(0),
            written_off: AtomicU64::new(0),
            returned: Notify::new(),
        }
    }

    /// Waits until one message of `cost` credits fits, then takes credits for as many messages
    /// as fit, at most `max`, and returns that number (≥ 1). A cost above the limit is treated
    /// as the limit. After `stall` without any credit coming back, the credits in flight are
    /// written off.
    pub(crate) async fn take(&self, cost: u64, max: u64, stall: Duration) -> u64 {
        let cost = cost.clamp(1, self.limit.max(1));
        loop {
            let in_flight = self.in_flight.load(Relaxed);
            let free = self.limit.saturating_sub(in_flight);
            if free >= cost {
                let n = (free / cost).min(max.max(1));
                self.in_flight.fetch_add(n * cost, Relaxed);
                return n;
            }
            // `notify_one` keeps a permit when nobody waits, so a credit given back between the
            // load above and this wait is not missed.
            if tokio::time::timeout(stall, self.returned.notified()).await.is_err() {
                let lost = self.in_flight.swap(0, Relaxed);
                self.written_off.fetch_add(lost, Relaxed);
            }
        }
    }

    /// Gives `n` credits back (more than are in flight is clamped: a delivery arriving after its
    /// credits were written off must not widen the window).
    pub(crate) fn give_back(&self, n: u64) {
        let _ = self.in_flight.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_sub(n)));
        self.returned.notify_one();
    }

    /// Credits written off so far.
    pub(crate) fn written_off(&self) -> u64 {
        self.written_off.load(Relaxed)
    }

    /// Credits taken and not yet given back.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const STALL: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn takes_what_fits_and_waits_for_credits() {
        let w = Arc::new(Window::new(16));
        assert_eq!(w.take(1, 64, STALL).await, 16);
        let w2 = w.clone();
        let waiter = tokio::spawn(async move { w2.take(1, 64, STALL).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        w.give_back(3);
        assert_eq!(waiter.await.unwrap(), 3);
        assert_eq!(w.in_flight(), 16);
        assert_eq!(w.written_off(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn fan_out_cost_takes_whole_messages() {
        let w = Window::new(16 * 100);
        assert_eq!(w.take(100, 4, STALL).await, 4);
        assert_eq!(w.take(100, 64, STALL).await, 12);
        w.give_back(150);
        assert_eq!(w.take(100, 64, STALL).await, 1);
        assert_eq!(w.in_flight(), 1550);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_writes_off_the_credits_in_flight() {
        let w = Window::new(8);
        assert_eq!(w.take(1, 64, STALL).await, 8);
        let start = tokio::time::Instant::now();
        assert_eq!(w.take(1, 64, STALL).await, 8);
        assert!(start.elapsed() >= STALL);
        assert_eq!(w.written_off(), 8);
        // a late delivery of a written-off message does not widen the window
        w.give_back(100);
        assert_eq!(w.in_flight(), 0);
        assert_eq!(w.take(1, 64, STALL).await, 8);
    }

    #[tokio::test(start_paused = true)]
    async fn cost_above_the_limit_still_sends() {
        let w = Window::new(4);
        assert_eq!(w.take(10, 64, STALL).await, 1);
        assert_eq!(w.in_flight(), 4);
    }
}
