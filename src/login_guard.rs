//! Failed-login protection: repeated authentication failures for one username or from one
//! address slow further attempts down, exponentially, up to a cap.
//!
//! The delay is applied before the provider chain runs, so a password-guessing client pays it
//! on every attempt and a reconnect storm of bad credentials cannot keep the providers (or a
//! webhook behind them) busy. Memory is bounded: at most `max_tracked` addresses and usernames
//! are remembered; beyond that the stalest entries are forgotten first.
//!
//! With a [`Lockout`] (the administrators' login), repeated failures also refuse further attempts
//! outright for a while: the address, and the username from any address.
//!
//! # Two keys, two strengths
//!
//! A username's failures (from any address) earn the full delay: after `max_failures` free
//! ones, `base_delay_ms` doubling up to `max_delay_ms` (10 s by default). That is what stops a
//! guesser working on one account, from one address or many.
//!
//! An address's failures (over all usernames) earn a softer delay: it starts only after
//! `address_max_failures` (20 by default, four times the username's) and stops at
//! `max_address_delay_ms` (1 s by default). Many clients share an address behind a NAT or a
//! proxy; with one delay for both keys, one misconfigured or hostile client there made every
//! login from the address wait 10 s. Now a well-behaved client behind the same address as a
//! misbehaving one waits at most `max_address_delay_ms` per login (nothing until the address
//! has `address_max_failures` failures within `window_s`), and only its own username's
//! failures can make it wait longer. A guesser that sprays many usernames from one address is
//! still slowed, by the address delay. Addresses in `limits.exempt` (a trusted proxy that
//! every client comes through, a health checker) have no address key at all: only usernames
//! are throttled for them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mesgd_core::sync::lock;
use serde::Deserialize;

use crate::limits::{Exempt, LOG_INTERVAL, LogOnce};

/// `[auth.failed_login]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailedLoginConfig {
    /// Failures within `window_s` that are free; each failure beyond them doubles the delay.
    /// 0 turns the protection off.
    pub max_failures: u32,
    /// How long a failure is remembered, in seconds.
    pub window_s: u64,
    /// The first delay, in milliseconds.
    pub base_delay_ms: u64,
    /// The longest delay, in milliseconds.
    pub max_delay_ms: u64,
    /// How many addresses and usernames are tracked at most.
    pub max_tracked: usize,
    /// Failures from one address (over all usernames) within `window_s` that are free; each
    /// beyond them doubles the address's delay. Softer than `max_failures`, because many
    /// clients can share an address.
    pub address_max_failures: u32,
    /// The longest delay an address's failures impose, in milliseconds (a username's failures
    /// can still impose `max_delay_ms`).
    pub max_address_delay_ms: u64,
}

impl Default for FailedLoginConfig {
    fn default() -> Self {
        FailedLoginConfig {
            max_failures: 5,
            window_s: 300,
            base_delay_ms: 250,
            max_delay_ms: 10_000,
            max_tracked: 100_000,
            address_max_failures: 20,
            max_address_delay_ms: 1_000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Addr(IpAddr),
    User(u64),
}

#[derive(Clone, Copy, Debug)]
struct Record {
    failures: u32,
    last: Instant,
    /// Set once `failures` reaches the lockout's count: attempts are refused until then.
    locked_until: Option<Instant>,
}

/// Refusing attempts outright for a while after repeated failures (the administrators' login;
/// MQTT clients are only slowed down).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lockout {
    /// Failures within the guard's window that lock.
    pub failures: u32,
    /// How long the lock lasts.
    pub duration: Duration,
}

/// Tracks failures and computes delays.
#[derive(Debug)]
pub struct LoginGuard {
    config: FailedLoginConfig,
    records: Mutex<HashMap<Key, Record>>,
    hasher: std::collections::hash_map::RandomState,
    exempt: Exempt,
    /// One line per interval however many keys start being throttled.
    log: LogOnce,
    lockout: Option<Lockout>,
}

impl LoginGuard {
    /// A guard with these settings; addresses in `exempt` are not tracked (their usernames
    /// are).
    pub fn new(config: FailedLoginConfig, exempt: Exempt) -> Self {
        LoginGuard::with_lockout(config, exempt, None)
    }

    /// A guard that also locks an address or a username out after `lockout.failures` failures.
    pub fn with_lockout(config: FailedLoginConfig, exempt: Exempt, lockout: Option<Lockout>) -> Self {
        LoginGuard {
            config,
            records: Mutex::new(HashMap::new()),
            hasher: Default::default(),
            exempt,
            log: LogOnce::new(LOG_INTERVAL),
            lockout: lockout.filter(|l| l.failures > 0),
        }
    }

    /// How much longer attempts from `addr` or for `username` are refused, if they are locked out.
    pub fn locked_for(&self, addr: IpAddr, username: Option<&str>) -> Option<Duration> {
        self.lockout?;
        let now = crate::clock::now();
        let records = lock(&self.records);
        self.keys(addr, username)
            .filter_map(|k| records.get(&k)?.locked_until)
            .filter(|until| *until > now)
            .map(|until| until - now)
            .max()
    }

    /// Usernames are tracked by a keyed hash, so the table never holds the names themselves.
    fn user_key(&self, username: &str) -> Key {
        use std::hash::BuildHasher;
        Key::User(self.hasher.hash_one(username))
    }

    fn keys(&self, addr: IpAddr, username: Option<&str>) -> impl Iterator<Item = Key> {
        let addr = (!self.exempt.contains(addr)).then(|| Key::Addr(addr.to_canonical()));
        addr.into_iter().chain(username.map(|u| self.user_key(u)))
    }

    /// The delay `failures` earn on `key`: the full curve for a username, the softer one for
    /// an address.
    fn delay_of(&self, key: Key, failures: u32) -> u64 {
        let c = &self.config;
        let (free, cap) = match key {
            Key::User(_) => (c.max_failures, c.max_delay_ms),
            Key::Addr(_) => {
                (c.address_max_failures.max(c.max_failures), c.max_address_delay_ms.min(c.max_delay_ms))
            }
        };
        if failures < free {
            return 0;
        }
        let doublings = (failures - free).min(20);
        c.base_delay_ms.saturating_mul(1 << doublings).min(cap)
    }

    fn window(&self) -> Duration {
        Duration::from_secs(self.config.window_s)
    }

    /// How long to wait before authenticating this attempt.
    pub fn delay_for(&self, addr: IpAddr, username: Option<&str>) -> Duration {
        if self.config.max_failures == 0 {
            return Duration::ZERO;
        }
        let now = crate::clock::now();
        let records = lock(&self.records);
        let delay = self
            .keys(addr, username)
            .filter_map(|k| records.get(&k).map(|r| (k, r)))
            .filter(|(_, r)| now.duration_since(r.last) < self.window())
            .map(|(k, r)| self.delay_of(k, r.failures))
            .max()
            .unwrap_or(0);
        Duration::from_millis(delay)
    }

    /// Records a failed attempt.
    pub fn failed(&self, addr: IpAddr, username: Option<&str>) {
        if self.config.max_failures == 0 && self.lockout.is_none() {
            return;
        }
        let now = crate::clock::now();
        let window = self.window();
        let mut records = lock(&self.records);
        for key in self.keys(addr, username) {
            let r = records.entry(key).or_insert(Record { failures: 0, last: now, locked_until: None });
            let lock_over = r.locked_until.is_some_and(|until| until <= now);
            if now.duration_since(r.last) >= window || lock_over {
                r.failures = 0;
                r.locked_until = None;
            }
            r.failures = r.failures.saturating_add(1);
            r.last = now;
            let free = match key {
                Key::User(_) => self.config.max_failures,
                Key::Addr(_) => self.config.address_max_failures.max(self.config.max_failures),
            };
            if r.failures == free {
                if let Some(more) = self.log.tripped(now) {
                    tracing::warn!(
                        %key,
                        more_since_last_line = more,
                        "repeated authentication failures: slowing down further attempts"
                    );
                }
            }
            if let Some(lockout) =
                self.lockout.filter(|l| r.failures >= l.failures && r.locked_until.is_none())
            {
                r.locked_until = Some(now + lockout.duration);
                tracing::warn!(%key, seconds = lockout.duration.as_secs(), "repeated login failures: locked out");
            }
        }
        if records.len() > self.config.max_tracked {
            records.retain(|_, r| {
                now.duration_since(r.last) < window || r.locked_until.is_some_and(|u| u > now)
            });
            while records.len() > self.config.max_tracked {
                let Some(stalest) = records.iter().min_by_key(|(_, r)| r.last).map(|(k, _)| *k) else {
                    break;
                };
                records.remove(&stalest);
            }
        }
    }

    /// Records a successful login: the username's failures are forgiven (the address's are not,
    /// so one valid account does not whitelist an address that guesses others).
    pub fn succeeded(&self, _addr: IpAddr, username: Option<&str>) {
        if let Some(u) = username {
            let key = self.user_key(u);
            lock(&self.records).remove(&key);
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Addr(a) => write!(f, "address {a}"),
            Key::User(_) => write!(f, "a username"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> LoginGuard {
        LoginGuard::new(
            FailedLoginConfig {
                max_failures: 3,
                window_s: 60,
                base_delay_ms: 100,
                max_delay_ms: 1000,
                max_tracked: 4,
                address_max_failures: 4,
                max_address_delay_ms: 300,
            },
            Exempt::default(),
        )
    }

    #[test]
    fn delay_grows_after_the_free_failures_and_is_capped() {
        let g = guard();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..3 {
            assert_eq!(g.delay_for(a, Some("u")), Duration::ZERO);
            g.failed(a, Some("u"));
        }
        assert_eq!(g.delay_for(a, Some("u")), Duration::from_millis(100));
        g.failed(a, Some("u"));
        assert_eq!(g.delay_for(a, Some("u")), Duration::from_millis(200));
        for _ in 0..10 {
            g.failed(a, Some("u"));
        }
        assert_eq!(g.delay_for(a, Some("u")), Duration::from_millis(1000));
        // The same username from another address is slowed too; another user from a fresh one is not.
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(g.delay_for(b, Some("u")), Duration::from_millis(1000));
        assert_eq!(g.delay_for(b, Some("v")), Duration::ZERO);
    }

    #[test]
    fn success_forgives_the_username_not_the_address() {
        let g = guard();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..5 {
            g.failed(a, Some("u"));
        }
        g.succeeded(a, Some("u"));
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(g.delay_for(b, Some("u")), Duration::ZERO);
        assert!(g.delay_for(a, None) > Duration::ZERO);
    }

    #[test]
    fn memory_is_bounded() {
        let g = guard();
        for i in 0..100u8 {
            g.failed(IpAddr::from([10, 0, 1, i]), None);
        }
        assert!(g.records.lock().unwrap().len() <= 4);
    }

    #[test]
    fn zero_max_failures_turns_it_off() {
        let g =
            LoginGuard::new(FailedLoginConfig { max_failures: 0, ..Default::default() }, Exempt::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..100 {
            g.failed(a, None);
        }
        assert_eq!(g.delay_for(a, None), Duration::ZERO);
    }

    #[test]
    fn a_client_behind_the_same_address_as_a_guesser_waits_at_most_the_address_delay() {
        let g = LoginGuard::new(FailedLoginConfig::default(), Exempt::default());
        let nat: IpAddr = "198.51.100.7".parse().unwrap();
        for _ in 0..40 {
            g.failed(nat, Some("mallory"));
        }
        // The guesser's username is slowed the full 10 s, from anywhere.
        assert_eq!(g.delay_for(nat, Some("mallory")), Duration::from_secs(10));
        assert_eq!(g.delay_for("203.0.113.1".parse().unwrap(), Some("mallory")), Duration::from_secs(10));
        // A neighbour behind the NAT waits the address's capped delay, not 10 s.
        assert_eq!(g.delay_for(nat, Some("alice")), Duration::from_secs(1));
        assert_eq!(g.delay_for("203.0.113.1".parse().unwrap(), Some("alice")), Duration::ZERO);
    }

    #[test]
    fn the_address_delay_starts_later_than_the_username_delay() {
        let g = LoginGuard::new(FailedLoginConfig::default(), Exempt::default());
        let addr: IpAddr = "198.51.100.7".parse().unwrap();
        // Five users failing once each (a typo each): nobody is slowed.
        for user in ["a", "b", "c", "d", "e"] {
            g.failed(addr, Some(user));
        }
        assert_eq!(g.delay_for(addr, Some("f")), Duration::ZERO);
        for i in 0..15 {
            g.failed(addr, Some(&format!("spray-{i}")));
        }
        // Twenty failures from the address: the soft delay begins.
        assert_eq!(g.delay_for(addr, Some("f")), Duration::from_millis(250));
    }

    #[test]
    fn exempt_addresses_are_not_tracked_but_their_usernames_are() {
        let exempt = Exempt::parse(&["10.0.0.0/8"]).unwrap();
        let g = LoginGuard::new(FailedLoginConfig::default(), exempt);
        let proxy: IpAddr = "10.1.2.3".parse().unwrap();
        for i in 0..100 {
            g.failed(proxy, Some(&format!("user-{i}")));
        }
        assert_eq!(g.delay_for(proxy, Some("alice")), Duration::ZERO);
        assert_eq!(g.delay_for(proxy, None), Duration::ZERO);
        for _ in 0..10 {
            g.failed(proxy, Some("bob"));
        }
        assert!(g.delay_for(proxy, Some("bob")) > Duration::ZERO);
        assert!(g.delay_for("::ffff:10.1.2.3".parse().unwrap(), None).is_zero());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lockout_refuses_the_address_and_the_name_until_it_ends() {
        let config = FailedLoginConfig { max_failures: 1, window_s: 300, ..Default::default() };
        let g = LoginGuard::with_lockout(
            config,
            Exempt::default(),
            Some(Lockout { failures: 3, duration: Duration::from_secs(600) }),
        );
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..2 {
            g.failed(a, Some("root"));
        }
        assert_eq!(g.locked_for(a, Some("root")), None, "two failures are not enough");
        g.failed(a, Some("root"));
        assert_eq!(g.locked_for(a, Some("root")), Some(Duration::from_secs(600)));
        assert!(g.locked_for(b, Some("root")).is_some(), "the name is locked from anywhere");
        assert!(g.locked_for(a, Some("other")).is_some(), "the address is locked for any name");
        assert_eq!(g.locked_for(b, Some("other")), None);
        tokio::time::advance(Duration::from_secs(601)).await;
        assert_eq!(g.locked_for(a, Some("root")), None, "the lock ends");
        g.failed(a, Some("root"));
        assert_eq!(g.locked_for(a, Some("root")), None, "and the count starts again");
    }
}
