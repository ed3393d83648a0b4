//! Per-connection rate limits, the abuse threshold, and the UDP anti-amplification budget.
//!
//! [`RateLimiter`] holds two token buckets, one counting messages and one counting bytes. A
//! message that finds either bucket short is refused with `rate limit exceeded` and the
//! connection stays open. Behind them sit two abuse buckets, [`ABUSE_MULTIPLE`] times larger
//! and faster, charged by every message, refused or not: a client that drains one of those is
//! sending at a sustained multiple of its budget (Ably disconnects at about 20× too) and is
//! disconnected. Teardown messages (`close_pipe`, `unsubscribe`) are never refused and do not
//! spend the budget — refusing them would keep load in place — but they count towards abuse.
//!
//! Buckets use integer arithmetic in nano-tokens (a token is 10⁹ of them), so refills are exact
//! and nothing allocates. Time is passed in.
//!
//! [`Amplification`] is QUIC's rule (RFC 9000 §8.1) for UDP sources that have not registered:
//! the relay never sends one more than three times the bytes it received from it, so a forged
//! source address cannot turn the relay into an amplifier.

use std::time::{Duration, Instant};

/// Nano-tokens per token.
const SCALE: u128 = 1_000_000_000;

/// How many times the budget a client must sustain to be disconnected.
pub const ABUSE_MULTIPLE: u64 = 20;

/// The most bytes the relay sends an unregistered UDP source per byte received from it.
pub const AMPLIFICATION_FACTOR: u64 = 3;

/// The budget of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    /// Messages per second, sustained.
    pub messages_per_s: u64,
    /// Messages that may arrive at once (the bucket's size).
    pub message_burst: u64,
    /// Bytes per second, sustained (frame bodies).
    pub bytes_per_s: u64,
    /// Bytes that may arrive at once.
    pub byte_burst: u64,
}

impl Default for RateLimits {
    /// 500 messages/s with bursts of 1,000, and 1 MiB/s with bursts of 2 MiB: room for chat,
    /// signalling and game state at tens of updates a second, while a burst of 2,000 messages
    /// within one second is over budget (at most 1,000 + 500 pass).
    fn default() -> Self {
        RateLimits { messages_per_s: 500, message_burst: 1_000, bytes_per_s: 1 << 20, byte_burst: 2 << 20 }
    }
}

/// What to do with one incoming message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within budget: handle it.
    Allow,
    /// Over budget: answer `rate limit exceeded`, keep the connection.
    Limit,
    /// Far over budget for long: disconnect.
    Disconnect,
}

/// A token bucket with integer refill.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Nano-tokens available.
    level: u128,
    /// Nano-tokens the bucket holds when full.
    capacity: u128,
    /// Tokens added per second.
    rate: u128,
    /// When `level` was last brought up to date.
    at: Instant,
}

impl Bucket {
    fn full(tokens: u64, rate: u64, now: Instant) -> Self {
        let capacity = u128::from(tokens) * SCALE;
        Bucket { level: capacity, capacity, rate: u128::from(rate), at: now }
    }

    fn refill(&mut self, now: Instant) {
        // An `Instant` earlier than the last one (impossible from a monotonic clock) refills
        // nothing rather than wrapping.
        let elapsed = now.saturating_duration_since(self.at);
        if elapsed.is_zero() {
            return;
        }
        self.at = now;
        self.level = (self.level + elapsed.as_nanos().saturating_mul(self.rate)).min(self.capacity);
    }

    fn has(&self, tokens: u64) -> bool {
        self.level >= u128::from(tokens) * SCALE
    }

    /// Takes up to `tokens`; the level stops at zero.
    fn spend(&mut self, tokens: u64) {
        self.level = self.level.saturating_sub(u128::from(tokens) * SCALE);
    }

    /// How long until `tokens` are available (zero if they are; `None` if never: over the
    /// capacity or no refill).
    fn wait_for(&self, tokens: u64) -> Option<Duration> {
        let need = u128::from(tokens) * SCALE;
        if need > self.capacity {
            return None;
        }
        let missing = need.saturating_sub(self.level);
        if missing == 0 {
            return Some(Duration::ZERO);
        }
        if self.rate == 0 {
            return None;
        }
        let nanos = missing.div_ceil(self.rate);
        Some(Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)))
    }
}

/// The rate limiter of one connection.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    messages: Bucket,
    bytes: Bucket,
    abuse_messages: Bucket,
    abuse_bytes: Bucket,
    limited: u64,
}

impl RateLimiter {
    /// A limiter with full buckets at `now`.
    pub fn new(limits: RateLimits, now: Instant) -> Self {
        let m = ABUSE_MULTIPLE;
        RateLimiter {
            messages: Bucket::full(limits.message_burst, limits.messages_per_s, now),
            bytes: Bucket::full(limits.byte_burst, limits.bytes_per_s, now),
            abuse_messages: Bucket::full(
                limits.message_burst.saturating_mul(m),
                limits.messages_per_s.saturating_mul(m),
                now,
            ),
            abuse_bytes: Bucket::full(
                limits.byte_burst.saturating_mul(m),
                limits.bytes_per_s.saturating_mul(m),
                now,
            ),
            limited: 0,
        }
    }

    /// Judges one message of `bytes` bytes arriving at `now`; `teardown` for `close_pipe` and
    /// `unsubscribe`.
    pub fn check(&mut self, now: Instant, bytes: usize, teardown: bool) -> Verdict {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        for bucket in [&mut self.messages, &mut self.bytes, &mut self.abuse_messages, &mut self.abuse_bytes] {
            bucket.refill(now);
        }
        let abusive = !self.abuse_messages.has(1) || !self.abuse_bytes.has(bytes);
        self.abuse_messages.spend(1);
        self.abuse_bytes.spend(bytes);
        if abusive {
            return Verdict::Disconnect;
        }
        if teardown {
            return Verdict::Allow;
        }
        if self.messages.has(1) && self.bytes.has(bytes) {
            self.messages.spend(1);
            self.bytes.spend(bytes);
            Verdict::Allow
        } else {
            self.limited += 1;
            Verdict::Limit
        }
    }

    /// How long until a message of `bytes` bytes would be allowed (for a `retry_after_ms`
    /// hint); `None` if it never fits the byte bucket.
    pub fn retry_after(&self, bytes: usize) -> Option<Duration> {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        Some(self.messages.wait_for(1)?.max(self.bytes.wait_for(bytes)?))
    }

    /// Messages refused so far.
    pub fn limited(&self) -> u64 {
        self.limited
    }
}

/// The anti-amplification budget of one unregistered UDP source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amplification {
    received: u64,
    sent: u64,
}

impl Amplification {
    /// Counts a datagram received from the source.
    pub fn on_receive(&mut self, bytes: usize) {
        self.received = self.received.saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// Whether a datagram of `bytes` may be sent; if so, it is counted as sent. A refused reply
    /// is dropped (and should be counted by the caller).
    pub fn try_send(&mut self, bytes: usize) -> bool {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let allowed = self.received.saturating_mul(AMPLIFICATION_FACTOR);
        match self.sent.checked_add(bytes) {
            Some(total) if total <= allowed => {
                self.sent = total;
                true
            }
            _ => false,
        }
    }

    /// Bytes that may still be sent.
    pub fn remaining(&self) -> u64 {
        self.received.saturating_mul(AMPLIFICATION_FACTOR).saturating_sub(self.sent)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn small() -> RateLimits {
        RateLimits { messages_per_s: 10, message_burst: 5, bytes_per_s: 1_000, byte_burst: 2_000 }
    }

    #[test]
    fn burst_then_refill() {
        let t0 = Instant::now();
        let mut limiter = RateLimiter::new(small(), t0);
        for _ in 0..5 {
            assert_eq!(limiter.check(t0, 10, false), Verdict::Allow);
        }
        assert_eq!(limiter.check(t0, 10, false), Verdict::Limit);
        assert_eq!(limiter.retry_after(10), Some(Duration::from_millis(100)));
        // 10 messages/s: one token every 100 ms, exactly.
        assert_eq!(limiter.check(t0 + Duration::from_millis(99), 10, false), Verdict::Limit);
        assert_eq!(limiter.check(t0 + Duration::from_millis(100), 10, false), Verdict::Allow);
        assert_eq!(limiter.check(t0 + Duration::from_millis(100), 10, false), Verdict::Limit);
        assert_eq!(limiter.limited(), 3);
        // Refill stops at the burst size.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..5 {
            assert_eq!(limiter.check(later, 10, false), Verdict::Allow);
        }
        assert_eq!(limiter.check(later, 10, false), Verdict::Limit);
    }

    #[test]
    fn bytes_are_limited_too() {
        let t0 = Instant::now();
        let mut limiter = RateLimiter::new(small(), t0);
        assert_eq!(limiter.check(t0, 1_500, false), Verdict::Allow);
        assert_eq!(limiter.check(t0, 600, false), Verdict::Limit);
        assert_eq!(limiter.check(t0, 500, false), Verdict::Allow);
        assert_eq!(limiter.retry_after(2_001), None, "over the byte burst never fits");
    }

    #[test]
    fn teardown_is_never_limited_and_costs_nothing() {
        let t0 = Instant::now();
        let mut limiter = RateLimiter::new(small(), t0);
        for _ in 0..5 {
            assert_eq!(limiter.check(t0, 10, false), Verdict::Allow);
        }
        assert_eq!(limiter.check(t0, 10, false), Verdict::Limit);
        for _ in 0..50 {
            assert_eq!(limiter.check(t0, 10, true), Verdict::Allow);
        }
        assert_eq!(limiter.check(t0 + Duration::from_millis(100), 10, false), Verdict::Allow);
    }

    #[test]
    fn a_flood_far_over_budget_disconnects() {
        let t0 = Instant::now();
        let mut limiter = RateLimiter::new(small(), t0);
        // The abuse bucket holds 20 × 5 = 100 messages and refills at 200/s: a flood at 1,000/s
        // (100× the budget) drains it after 100 / (1,000 − 200) s = 125 ms, well within a second.
        let mut verdicts = Vec::new();
        for i in 0..1_000u64 {
            let now = t0 + Duration::from_millis(i);
            let v = limiter.check(now, 1, i % 2 == 0);
            verdicts.push(v);
            if v == Verdict::Disconnect {
                break;
            }
        }
        assert_eq!(verdicts.last(), Some(&Verdict::Disconnect));
        assert!((100..200).contains(&verdicts.len()), "{}", verdicts.len());
        assert!(verdicts.contains(&Verdict::Limit));
    }

    #[test]
    fn the_defaults_refuse_a_burst_of_two_thousand_in_a_second() {
        let t0 = Instant::now();
        let mut limiter = RateLimiter::new(RateLimits::default(), t0);
        let mut allowed = 0;
        let mut limited = 0;
        for i in 0..2_000u32 {
            match limiter.check(t0 + Duration::from_micros(u64::from(i) * 500), 100, false) {
                Verdict::Allow => allowed += 1,
                Verdict::Limit => limited += 1,
                Verdict::Disconnect => panic!("2,000 messages in a second is not abuse"),
            }
        }
        assert!(limited > 0);
        assert!(allowed <= 1_500, "{allowed}");
    }

    #[test]
    fn amplification_budget() {
        let mut budget = Amplification::default();
        assert!(!budget.try_send(1), "nothing before anything is received");
        budget.on_receive(20);
        assert_eq!(budget.remaining(), 60);
        assert!(budget.try_send(50));
        assert!(!budget.try_send(11));
        assert!(budget.try_send(10));
        assert_eq!(budget.remaining(), 0);
        budget.on_receive(usize::MAX);
        assert!(budget.try_send(1 << 40), "counters saturate instead of wrapping");
        assert!(!budget.try_send(usize::MAX));
    }

    proptest! {
        /// Over any interval, allowed messages never exceed burst + rate × elapsed, and allowed
        /// bytes likewise.
        #[test]
        fn never_more_than_the_budget(steps in proptest::collection::vec((0u64..50, 0usize..400, any::<bool>()), 1..300)) {
            let limits = small();
            let t0 = Instant::now();
            let mut limiter = RateLimiter::new(limits, t0);
            let (mut now_ms, mut messages, mut bytes) = (0u64, 0u64, 0u64);
            for (advance_ms, size, teardown) in steps {
                now_ms += advance_ms;
                let v = limiter.check(t0 + Duration::from_millis(now_ms), size, teardown);
                if v == Verdict::Allow && !teardown {
                    messages += 1;
                    bytes += size as u64;
                }
                prop_assert!(messages <= limits.message_burst + limits.messages_per_s * now_ms / 1000);
                prop_assert!(bytes <= limits.byte_burst + limits.bytes_per_s * now_ms / 1000);
            }
        }

        /// The relay never sends more than three times what it received.
        #[test]
        fn amplification_is_bounded(events in proptest::collection::vec((any::<bool>(), 0usize..2_000), 0..100)) {
            let mut budget = Amplification::default();
            let (mut received, mut sent) = (0u64, 0u64);
            for (is_receive, n) in events {
                if is_receive {
                    budget.on_receive(n);
                    received += n as u64;
                } else if budget.try_send(n) {
                    sent += n as u64;
                }
                prop_assert!(sent <= 3 * received);
            }
        }
    }
}
