//! Grant and anonymous tokens (issue #16): the claims mesgd puts in them, in the PKI wire
//! format of [`crate::tokens`] (encrypted claims, a dot, a signature), and the rules for what
//! they may name.
//!
//! - A **grant token** speaks for a builtin account (`sub`) and carries the patterns the
//!   account held when it was issued ([`issue_grant`]); it lasts [`GRANT_TTL`]. Holding it is
//!   not enough: a grant connection reaches a listener only through a pattern that is in the
//!   token *and* still assigned, checked against the broker's current copy of the store at
//!   every message (`src/content/grant.rs`).
//! - An **anonymous token** carries 1 to [`MAX_PREFIXES`] path prefixes and no user
//!   ([`mint_anonymous`]); it lasts [`ANONYMOUS_TTL`] and admits an upgrade on a path one of its
//!   prefixes covers. `/` and a pattern that is only stars (which is `/`) are refused.

use std::time::{Duration, SystemTime};

use mesgd_core::content::Path;

use crate::builtin::UserRecord;
use crate::tokens::{Claims, KeyStore, MAX_PREFIXES, Payload, TokenError, issue};

/// How long a grant token lasts.
pub const GRANT_TTL: Duration = Duration::from_secs(3600);
/// How long an anonymous token lasts.
pub const ANONYMOUS_TTL: Duration = Duration::from_secs(3600);

/// Why a grant or anonymous token was not made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// The account is disabled.
    #[error("user {0:?} is disabled")]
    Disabled(String),
    /// The account holds no pattern, so the token would reach nothing.
    #[error("user {0:?} has no pattern assigned: assign one first (mesgd grant assign USER PATH)")]
    NoPatterns(String),
    /// No prefix was given.
    #[error("give at least one path prefix")]
    NoPrefixes,
    /// More than [`MAX_PREFIXES`] prefixes.
    #[error("{0} prefixes, at most {MAX_PREFIXES} allowed")]
    TooManyPrefixes(usize),
    /// A prefix is not a valid path.
    #[error("invalid prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix as given (cut to 64 characters).
        prefix: String,
        /// What is wrong.
        reason: String,
    },
    /// A prefix that covers every path: `/`, or one made only of stars.
    #[error("the prefix {0:?} covers every path (`/` and star-only patterns are refused)")]
    Everything(String),
    /// The token could not be sealed.
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// A grant token for `account` at `now`, carrying its current patterns; with its expiry
/// (unix seconds).
pub fn issue_grant(
    keys: &KeyStore,
    account: &UserRecord,
    now: SystemTime,
) -> Result<(String, u64), GrantError> {
    if account.disabled {
        return Err(GrantError::Disabled(account.username.clone()));
    }
    if account.patterns.is_empty() {
        return Err(GrantError::NoPatterns(account.username.clone()));
    }
    let claims = Claims::new(
        Payload::Grant(account.patterns.clone()),
        Some(account.username.clone()),
        now,
        Some(GRANT_TTL),
    )?;
    let token = issue(keys, &claims)?;
    Ok((token, claims.exp.unwrap_or_default()))
}

/// A prefix of an anonymous token, parsed, or why it is refused.
pub fn anonymous_prefix(text: &str) -> Result<Path, GrantError> {
    let path = Path::parse(text).map_err(|e| GrantError::InvalidPrefix {
        prefix: text.chars().take(64).collect(),
        reason: e.to_string(),
    })?;
    // `/`, `*`, `/*/*` and `/*/x` (a star ends a path) all parse to `/`, which covers everything.
    if path.segments().next().is_none() {
        return Err(GrantError::Everything(text.chars().take(64).collect()));
    }
    Ok(path)
}

/// An anonymous token for `prefixes` at `now`; with its expiry (unix seconds).
pub fn mint_anonymous<S: AsRef<str>>(
    keys: &KeyStore,
    prefixes: &[S],
    now: SystemTime,
) -> Result<(String, u64), GrantError> {
    if prefixes.is_empty() {
        return Err(GrantError::NoPrefixes);
    }
    if prefixes.len() > MAX_PREFIXES {
        return Err(GrantError::TooManyPrefixes(prefixes.len()));
    }
    let canonical = prefixes
        .iter()
        .map(|p| anonymous_prefix(p.as_ref()).map(|p| p.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let claims = Claims::new(Payload::Anonymous(canonical), None, now, Some(ANONYMOUS_TTL))?;
    let token = issue(keys, &claims)?;
    Ok((token, claims.exp.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_that_cover_everything_or_are_not_paths_are_refused() {
        let table: [(&str, &str); 8] = [
            ("/", "covers every path"),
            ("*", "covers every path"),
            ("/*", "covers every path"),
            ("/*/*", "covers every path"),
            ("/*/room=lobby", "covers every path"),
            ("/k=v*", "invalid prefix"),
            ("/a=1/a=2", "invalid prefix"),
            ("", "covers every path"),
        ];
        for (text, words) in table {
            let e = anonymous_prefix(text).expect_err(text);
            assert!(e.to_string().contains(words), "{text:?}: {e} should say {words:?}");
        }
        assert_eq!(anonymous_prefix("/room=lobby").unwrap().to_string(), "/room=lobby");
        assert_eq!(anonymous_prefix("room").unwrap().to_string(), "/room=*");
    }
}
