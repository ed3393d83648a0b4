//! The live checks of a connection that speaks for a builtin account: a grant connection
//! (its reach) and a login session's connection (its account's standing).
//!
//! A grant token carries the patterns its account held when it was issued. Before each
//! message, [`Bound::reach`] keeps only the token's patterns that the account *still* holds,
//! read from the broker's current copy of the store after
//! [`UserDirectory::catch_up`] has applied every change committed before the message, by any
//! process. The kept list is remembered only together with the record it was computed from
//! (the same `Arc`, held, so the pointer cannot be reused): a change installs a new record and
//! the next message recomputes, so nothing remembered outlives a change. A disabled or deleted
//! account, or an expired token, reaches nothing, and [`Bound::ended`] resolves so the
//! connection is closed even if it never sends again.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mesgd_core::content::Path;
use mesgd_providers::builtin::{UserDirectory, UserRecord};

/// What a bound connection's checks found wrong: the close reason.
pub(crate) type Ended = &'static str;

/// A connection tied to an account (and, for a grant, to its token's patterns).
pub(crate) struct Bound {
    directory: Arc<UserDirectory>,
    account: String,
    /// Unix seconds at which the credential expires.
    exp: u64,
    /// A grant token's patterns; `None` for a login session (which reaches every listener).
    token_patterns: Option<Arc<[Path]>>,
    /// The record the kept patterns were computed from, and those patterns.
    kept: Option<(Arc<UserRecord>, Vec<Path>)>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("account", &self.account)
            .field("exp", &self.exp)
            .finish_non_exhaustive()
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The account's standing in `record`: `Err` with the reason if it may do nothing.
pub(crate) fn standing(record: Option<&UserRecord>) -> Result<&UserRecord, Ended> {
    match record {
        None => Err("the account was deleted"),
        Some(r) if r.disabled => Err("the account is disabled"),
        Some(r) => Ok(r),
    }
}

/// The patterns of `token` that `record` still holds.
pub(crate) fn still_assigned(token: &[Path], record: &UserRecord) -> Vec<Path> {
    token.iter().filter(|p| record.patterns.binary_search(&p.to_string()).is_ok()).cloned().collect()
}

impl Bound {
    /// A grant connection of `account` whose token carries `patterns` and expires at `exp`.
    pub(crate) fn grant(
        directory: Arc<UserDirectory>,
        account: String,
        exp: u64,
        patterns: Arc<[Path]>,
    ) -> Bound {
        Bound { directory, account, exp, token_patterns: Some(patterns), kept: None }
    }

    /// A login session's connection of `account`, expiring at `exp`.
    pub(crate) fn session(directory: Arc<UserDirectory>, account: String, exp: u64) -> Bound {
        Bound { directory, account, exp, token_patterns: None, kept: None }
    }

    /// A copy of the checks for watching the account while the reader keeps its own.
    pub(crate) fn watcher(&self) -> Bound {
        Bound {
            directory: self.directory.clone(),
            account: self.account.clone(),
            exp: self.exp,
            token_patterns: None,
            kept: None,
        }
    }

    /// The patterns the next message may reach through (empty for a login session, which is
    /// not filtered), after every change committed so far is applied; `Err` when the
    /// connection must end.
    pub(crate) async fn reach(&mut self) -> Result<&[Path], Ended> {
        if unix_now() >= self.exp {
            return Err("the token expired");
        }
        self.directory.catch_up().await;
        let record = self.directory.user(&self.account);
        standing(record.as_deref())?;
        let (Some(token), Some(record)) = (&self.token_patterns, record) else { return Ok(&[]) };
        if !self.kept.as_ref().is_some_and(|(r, _)| Arc::ptr_eq(r, &record)) {
            let kept = still_assigned(token, &record);
            self.kept = Some((record, kept));
        }
        Ok(self.kept.as_ref().map_or(&[], |(_, k)| k.as_slice()))
    }

    /// Resolves when the connection must end without a message: the credential expires, or a
    /// change to the store disables or deletes the account.
    pub(crate) async fn ended(&self) -> Ended {
        let left = Duration::from_secs(self.exp.saturating_sub(unix_now()));
        let expiry = tokio::time::sleep(left);
        tokio::pin!(expiry);
        let mut changes = self.directory.changes();
        loop {
            if let Err(reason) = standing(self.directory.user(&self.account).as_deref()) {
                return reason;
            }
            tokio::select! {
                () = &mut expiry => return "the token expired",
                changed = changes.changed() => if changed.is_err() {
                    // The directory is gone: the server is stopping, which closes every connection.
                    std::future::pending::<()>().await;
                },
            }
        }
    }
}
