//! `mesgd check PATH TOKEN`: does a claim token admit a path?
//!
//! The seed's rule (the original mesgd's): the token's pairs are taken as a JSON object and
//! matched against the path *as a message would be*. `forge sub alice room lobby` gives
//! `{"sub":"alice","room":"lobby"}`, which `/room=lobby` and `/room=*` match and
//! `/room=lobby/from=ann` does not (no `from`).
//!
//! The path language and its matcher belong to `mesgd_core::content`; this module does not
//! have a second one. [`check`] takes the matcher as a [`PathMatcher`]; [`ContentPaths`] is
//! the real one, over `mesgd_core::content::{Path, Message}`. The path is taken as written:
//! a path on the command line is not a URL, so it is not percent-decoded.

use std::time::SystemTime;

use mesgd_core::content::{Message, Path};

use super::{Claims, KeyStore, Kind, TokenError, verify};

/// Matches a content-routing path against a JSON message: `mesgd_core::content` behind a
/// seam, so that the token code depends on the path language only through this one call.
pub trait PathMatcher {
    /// Whether `path` matches the JSON `message`; `Err` with the reason if `path` is not a
    /// valid path.
    fn matches(&self, path: &str, message: &[u8]) -> Result<bool, String>;
}

/// The content-routing matcher: [`Path::parse`] and [`Path::matches`] on the scanned message.
#[derive(Clone, Copy, Debug, Default)]
pub struct ContentPaths;

impl PathMatcher for ContentPaths {
    fn matches(&self, path: &str, message: &[u8]) -> Result<bool, String> {
        let path = Path::parse(path).map_err(|e| e.to_string())?;
        let message = Message::scan(message).map_err(|e| format!("the claims are not a message: {e}"))?;
        Ok(path.matches(&message))
    }
}

/// Why `check` gave no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The token did not verify, or is not a claim token.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The path is not a valid path (or could not be matched).
    #[error("cannot match the path: {0}")]
    Path(String),
}

/// Whether the claim token `token` admits `path` at `now`: verified with `keys`, its pairs
/// matched by `matcher` as a message.
pub fn check(
    keys: &KeyStore,
    path: &str,
    token: &str,
    now: SystemTime,
    matcher: &dyn PathMatcher,
) -> Result<bool, CheckError> {
    let claims = verify(keys, token, now)?;
    claim_admits(&claims, path, matcher)
}

/// Whether verified `claims` admit `path` by the claim rule: they must be a claim token's, and
/// its pairs, as a JSON message, must match `path` (`matcher` decides). [`check`] and the
/// content-routing upgrade (which verifies the token itself, once) share this one rule.
pub fn claim_admits(claims: &Claims, path: &str, matcher: &dyn PathMatcher) -> Result<bool, CheckError> {
    claims.expect_kind(Kind::Claim)?;
    let message = claims.pairs_object().map(|o| o.to_string()).unwrap_or_default();
    matcher.matches(path, message.as_bytes()).map_err(CheckError::Path)
}
