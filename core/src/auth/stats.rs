//! What the provider chain decided, counted per provider: how often each answered allow, deny or
//! next, and how often it failed; how often the chain's fallback admitted an anonymous client or
//! refused one nobody resolved; and how long whole decisions took.
//!
//! Plain relaxed atomics, bumped once per provider asked: they cost a connect nothing measurable
//! and are read by the operator surface (the REST API's provider list, Prometheus `/metrics`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::histogram::LatencyHistogram;

/// One provider's answers since start.
#[derive(Debug, Default)]
pub struct ProviderCounters {
    allow: AtomicU64,
    deny: AtomicU64,
    next: AtomicU64,
    error: AtomicU64,
}

/// A copy of one provider's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProviderCounts {
    /// Answered [`Outcome::Allow`](super::Outcome::Allow).
    pub allow: u64,
    /// Answered [`Outcome::Deny`](super::Outcome::Deny).
    pub deny: u64,
    /// Answered [`Outcome::Next`](super::Outcome::Next).
    pub next: u64,
    /// Failed or timed out (whatever its `on_error` made of it).
    pub error: u64,
}

/// What one provider answered, for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Allow,
    Deny,
    Next,
    Error,
}

impl ProviderCounters {
    pub(super) fn count(&self, answer: Answer) {
        let counter = match answer {
            Answer::Allow => &self.allow,
            Answer::Deny => &self.deny,
            Answer::Next => &self.next,
            Answer::Error => &self.error,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn counts(&self) -> ProviderCounts {
        ProviderCounts {
            allow: self.allow.load(Ordering::Relaxed),
            deny: self.deny.load(Ordering::Relaxed),
            next: self.next.load(Ordering::Relaxed),
            error: self.error.load(Ordering::Relaxed),
        }
    }
}

/// The chain's counters: one [`ProviderCounters`] per entry, in chain order, and the fallback.
#[derive(Debug, Default)]
pub struct ChainStats {
    providers: Box<[ProviderCounters]>,
    anonymous: AtomicU64,
    unresolved: AtomicU64,
    latency: LatencyHistogram,
}

impl ChainStats {
    pub(super) fn new(providers: usize) -> Self {
        ChainStats {
            providers: (0..providers).map(|_| ProviderCounters::default()).collect(),
            ..Default::default()
        }
    }

    /// The counters of the provider at `index` in the chain.
    pub fn provider(&self, index: usize) -> Option<&ProviderCounters> {
        self.providers.get(index)
    }

    pub(super) fn count(&self, index: usize, answer: Answer) {
        if let Some(counters) = self.providers.get(index) {
            counters.count(answer);
        }
    }

    pub(super) fn count_fallback(&self, admitted_anonymous: bool) {
        let counter = if admitted_anonymous { &self.anonymous } else { &self.unresolved };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Clients no provider resolved that the fallback admitted as anonymous.
    pub fn anonymous_admitted(&self) -> u64 {
        self.anonymous.load(Ordering::Relaxed)
    }

    /// Clients no provider resolved that the fallback refused.
    pub fn unresolved_refused(&self) -> u64 {
        self.unresolved.load(Ordering::Relaxed)
    }

    /// How long whole chain decisions took (every provider asked, timeouts included).
    pub fn latency(&self) -> &LatencyHistogram {
        &self.latency
    }
}
