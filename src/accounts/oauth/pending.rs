//! The OAuth logins under way: for each `state` handed out by `/auth/oauth/start`, the PKCE
//! code verifier, the nonce and the redirect URI, until `/auth/oauth/complete` takes it (once)
//! or it expires. Bounded: when full, new logins are refused (and counted) rather than old
//! ones evicted, so a flood cannot cancel people's logins under way.
//!
//! A state is `ID.SECRET`: the table is keyed by the id, and the secret is compared in
//! constant time, so the lookup's timing says nothing about the secret.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use subtle::ConstantTimeEq;

/// The most logins under way at once.
pub const MAX_PENDING: usize = 4096;
/// How long a started login may take to complete.
pub const PENDING_TTL: Duration = Duration::from_secs(600);

/// What a started login keeps until it completes.
pub(crate) struct Started {
    /// The index of its provider.
    pub(crate) provider: usize,
    pub(crate) verifier: String,
    pub(crate) nonce: String,
    pub(crate) redirect_uri: String,
    secret: [u8; 32],
    expires: Instant,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started").field("provider", &self.provider).finish_non_exhaustive()
    }
}

/// The table of logins under way.
#[derive(Debug)]
pub struct Pending {
    entries: Mutex<HashMap<String, Started>>,
    cap: usize,
    ttl: Duration,
    refused: AtomicU64,
}

/// Why a state is not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// Not of the `ID.SECRET` shape, unknown, already used, tampered with or expired.
    #[error("the state is unknown, expired, already used or altered; start the login again")]
    Unknown,
}

/// A random URL-safe string of `n` bytes.
pub(crate) fn random_text<const N: usize>() -> String {
    let bytes: [u8; N] = rand::random();
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Pending {
    /// An empty table of at most `cap` logins, each lasting `ttl`.
    pub fn new(cap: usize, ttl: Duration) -> Pending {
        Pending { entries: Mutex::new(HashMap::new()), cap, ttl, refused: AtomicU64::new(0) }
    }

    /// How many starts were refused because the table was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Keeps a new login and answers its state, or `None` when the table is full.
    pub(crate) fn start(
        &self,
        provider: usize,
        verifier: String,
        nonce: String,
        redirect_uri: String,
        now: Instant,
    ) -> Option<String> {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.retain(|_, s| s.expires > now);
        if entries.len() >= self.cap {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let id = random_text::<12>();
        let secret: [u8; 32] = rand::random();
        let state = format!("{id}.{}", URL_SAFE_NO_PAD.encode(secret));
        entries
            .insert(id, Started { provider, verifier, nonce, redirect_uri, secret, expires: now + self.ttl });
        Some(state)
    }

    /// Takes the login of `state` (once). A state whose id is known but whose secret is wrong
    /// leaves the login in place: only its holder may complete it.
    pub(crate) fn take(&self, state: &str, now: Instant) -> Result<Started, StateError> {
        let (id, secret) = state.split_once('.').ok_or(StateError::Unknown)?;
        let secret = URL_SAFE_NO_PAD.decode(secret).map_err(|_| StateError::Unknown)?;
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = entries.get(id).ok_or(StateError::Unknown)?;
        if !bool::from(entry.secret.as_slice().ct_eq(&secret)) {
            return Err(StateError::Unknown);
        }
        let entry = entries.remove(id).ok_or(StateError::Unknown)?;
        if entry.expires <= now {
            return Err(StateError::Unknown);
        }
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_taken_once_before_it_expires_and_only_with_its_secret() {
        let t0 = Instant::now();
        let table = Pending::new(2, Duration::from_secs(10));
        let s = table.start(0, "v".into(), "n".into(), "r".into(), t0).unwrap();
        let (id, _) = s.split_once('.').unwrap();
        let tampered = format!("{id}.{}", URL_SAFE_NO_PAD.encode([0u8; 32]));
        for bad in ["", "x", "x.y", &tampered, &format!("{s}x"), &format!("zz{s}")] {
            assert_eq!(table.take(bad, t0).unwrap_err(), StateError::Unknown, "{bad:?}");
        }
        assert_eq!(table.take(&s, t0).unwrap().verifier, "v");
        assert_eq!(table.take(&s, t0).unwrap_err(), StateError::Unknown, "used twice");

        let late = table.start(0, "v".into(), "n".into(), "r".into(), t0).unwrap();
        assert!(table.take(&late, t0 + Duration::from_secs(10)).is_err(), "expired");
    }

    #[test]
    fn a_full_table_refuses_and_counts_and_expired_entries_make_room() {
        let t0 = Instant::now();
        let table = Pending::new(2, Duration::from_secs(10));
        for _ in 0..2 {
            assert!(table.start(0, "v".into(), "n".into(), "r".into(), t0).is_some());
        }
        assert!(table.start(0, "v".into(), "n".into(), "r".into(), t0).is_none());
        assert_eq!(table.refused(), 1);
        let later = t0 + Duration::from_secs(11);
        assert!(table.start(0, "v".into(), "n".into(), "r".into(), later).is_some());
    }
}
