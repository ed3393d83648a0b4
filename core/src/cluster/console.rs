//! The console's browser sessions on every node: the seams between the REST API, which keeps
//! the sessions ([`LocalConsole`]), and the cluster layer, which keeps them in a JetStream KV
//! bucket that every node follows ([`ConsoleCluster`]), and the bucket's record.
//!
//! One record per open session, under its id (the cookie's first part, 32 lowercase hex
//! digits):
//!
//! ```json
//! {"admin":"root","secret_sha256":"<64 hex>","csrf":"<the session's CSRF token>","seen_ms":1764619200000}
//! ```
//!
//! The cookie's secret never travels: only its SHA-256, against which every node checks a
//! presented cookie in constant time. The CSRF token (the session's synchroniser token) does,
//! since every node must be able to give it (`GET /api/v1/whoami`); it is worth nothing without
//! the cookie. `seen_ms` is the session's last use as the bucket knows it (unix milliseconds,
//! rewritten at most every [`touch_every`] of the idle timeout while the session is used).
//! A field a later version adds is ignored; every field is checked when read
//! ([`ConsoleRecordError`], malformed-input table below; the `cluster_console` fuzz target).
//!
//! Without `[cluster]` neither seam is installed and the sessions stay in the node's memory.
//! `docs/cluster.md` ("Console sessions on every node") describes the design.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The longest record read, in bytes (an administrator's name is at most 1,024 bytes).
pub const MAX_RECORD_LEN: usize = 4096;
/// The longest administrator name a record may carry, in bytes (the store's own limit).
const MAX_ADMIN_LEN: usize = 1024;
/// The longest CSRF token a record may carry (a node makes 43 characters).
const MAX_CSRF_LEN: usize = 128;
/// The longest interval between two writes of a used session's last use.
const MAX_TOUCH_EVERY: Duration = Duration::from_secs(60);

/// How often a session in use has its last use written to the bucket: an eighth of the idle
/// timeout, at most a minute. Another node's view of the session's last use is at most this
/// old, so the idle timeout holds on every node to within this much (and the nodes' clock
/// difference: the last use travels as a wall-clock time).
pub fn touch_every(idle: Duration) -> Duration {
    (idle / 8).clamp(Duration::from_millis(1), MAX_TOUCH_EVERY)
}

/// Whether `id` is a session id as the API makes them: 32 lowercase hex digits (a KV key).
pub fn is_session_id(id: &str) -> bool {
    id.len() == 32 && is_lower_hex(id)
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Why a record of the console bucket could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleRecordError {
    /// Longer than [`MAX_RECORD_LEN`].
    #[error("console session record of {0} bytes, more than {MAX_RECORD_LEN}")]
    TooLong(usize),
    /// Not the JSON object expected.
    #[error("console session record: {0}")]
    Json(#[from] serde_json::Error),
    /// The administrator's name is empty, over 1,024 bytes or holds a control character.
    #[error("console session record: the administrator's name is not one the store could hold")]
    Admin,
    /// The digest is not 64 lowercase hex digits.
    #[error("console session record: secret_sha256 is not 64 lowercase hex digits")]
    Digest,
    /// The CSRF token is empty, over 128 characters, or not base64url.
    #[error("console session record: csrf is not 1 to 128 base64url characters")]
    Csrf,
}

/// A session as the bucket holds it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleRecord {
    /// The administrator it belongs to.
    pub admin: String,
    /// The SHA-256 of the cookie's secret, 64 lowercase hex digits.
    pub secret_sha256: String,
    /// The session's CSRF token.
    pub csrf: String,
    /// Its last use as the bucket knows it, unix milliseconds.
    pub seen_ms: u64,
}

impl fmt::Debug for ConsoleRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The digest and the CSRF token are secrets of the session: never in a log line.
        f.debug_struct("ConsoleRecord")
            .field("admin", &self.admin)
            .field("seen_ms", &self.seen_ms)
            .finish_non_exhaustive()
    }
}

impl ConsoleRecord {
    /// The record for a session whose cookie secret has the SHA-256 `digest`.
    pub fn new(admin: &str, digest: &[u8; 32], csrf: &str, seen_ms: u64) -> ConsoleRecord {
        ConsoleRecord {
            admin: admin.to_owned(),
            secret_sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
            csrf: csrf.to_owned(),
            seen_ms,
        }
    }

    /// The record as the bucket stores it.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|e| unreachable!("a record always serializes: {e}"))
    }

    /// Reads a record, checking every field.
    pub fn decode(bytes: &[u8]) -> Result<ConsoleRecord, ConsoleRecordError> {
        if bytes.len() > MAX_RECORD_LEN {
            return Err(ConsoleRecordError::TooLong(bytes.len()));
        }
        let record: ConsoleRecord = serde_json::from_slice(bytes)?;
        let admin = &record.admin;
        if admin.is_empty() || admin.len() > MAX_ADMIN_LEN || admin.chars().any(char::is_control) {
            return Err(ConsoleRecordError::Admin);
        }
        if record.secret_sha256.len() != 64 || !is_lower_hex(&record.secret_sha256) {
            return Err(ConsoleRecordError::Digest);
        }
        let csrf = &record.csrf;
        let base64url = csrf.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if csrf.is_empty() || csrf.len() > MAX_CSRF_LEN || !base64url {
            return Err(ConsoleRecordError::Csrf);
        }
        Ok(record)
    }

    /// The digest as bytes (checked by [`ConsoleRecord::decode`]).
    pub fn digest(&self) -> Option<[u8; 32]> {
        let text = self.secret_sha256.as_bytes();
        if text.len() != 64 {
            return None;
        }
        let mut digest = [0u8; 32];
        for (i, pair) in text.chunks(2).enumerate() {
            digest[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
        }
        Some(digest)
    }
}

/// The cluster's console sessions cannot be reached (NATS down, or no answer in time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the cluster's console sessions cannot be reached in time")]
pub struct Unreachable;

/// A write the API waits for.
pub type ConsoleFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The REST API's view of the cluster, installed in its session table by the cluster layer.
pub trait ConsoleCluster: Send + Sync + fmt::Debug {
    /// Stores a new session; its revision in the bucket once stored, or [`Unreachable`] (then
    /// the session must not be used: no other node would know it).
    fn create(&self, id: &str, record: &ConsoleRecord) -> ConsoleFuture<Result<u64, Unreachable>>;
    /// Ends a session on every node (a logout): done once the bucket has the delete.
    fn end(&self, id: &str) -> ConsoleFuture<Result<(), Unreachable>>;
    /// The session's last use moved on: its record is written again, if it still is at
    /// `revision` (a session ended or touched elsewhere meanwhile is left as it is). Never
    /// waits; dropped (and counted) when the queue is full.
    fn touch(&self, id: &str, record: &ConsoleRecord, revision: u64);
    /// The session ended here without a logout (idle, ended to make room, its administrator
    /// gone): its record is deleted if it still is at `revision` (any revision when 0), so that
    /// a use on another node meanwhile keeps it. Never waits.
    fn forget(&self, id: &str, revision: u64);
    /// Looks in the bucket for session `id`, which this node does not know, and applies what
    /// it finds to the table as the watcher would: a browser's next request after a login on
    /// another node may reach this node before the watcher brings the session. Bounded in time
    /// and in lookups at once (a cookie naming no session costs at most one lookup, and none
    /// while the bound is reached).
    fn fetch(&self, id: &str) -> ConsoleFuture<()>;
}

/// A change of the bucket, for the API's table.
#[derive(Debug)]
pub enum Change {
    /// The session's record at this revision (new, or written again).
    Put(ConsoleRecord, u64),
    /// The session ended: deleted in the bucket, or no longer there.
    Gone,
}

/// What the API's table made of a [`Change`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Taken in (or removed).
    Kept,
    /// Nothing to do: older than what the table has, or about a session it ended itself.
    Stale,
    /// Not taken: the table is full.
    Full,
}

/// The API's session table, as the cluster layer sees it.
pub trait LocalConsole: Send + Sync + fmt::Debug {
    /// Applies a change of the bucket (other nodes' sessions and this node's own, as they come
    /// back).
    fn apply(&self, id: &str, change: Change) -> Applied;
    /// The sessions the table has with the revision of their record (0: not stored yet), for
    /// the comparison with the bucket that heals what the watch missed.
    fn revisions(&self) -> Vec<(String, u64)>;
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn record(admin: &str, digest: &str, csrf: &str) -> String {
        format!(r#"{{"admin":{admin:?},"secret_sha256":{digest:?},"csrf":{csrf:?},"seen_ms":5}}"#)
    }

    #[test]
    fn a_record_round_trips_and_keeps_its_secrets_out_of_debug() {
        let r = ConsoleRecord::new("root", &[0xab; 32], "c-s_R", 1_764_619_200_000);
        assert_eq!(ConsoleRecord::decode(&r.encode()).unwrap(), r);
        assert_eq!(r.digest(), Some([0xab; 32]));
        let shown = format!("{r:?}");
        assert!(!shown.contains("abab") && !shown.contains("c-s_R"), "{shown}");
        // A later version's field is ignored.
        let later = br#"{"admin":"a","secret_sha256":"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff","csrf":"x","seen_ms":1,"node":"b"}"#;
        assert_eq!(ConsoleRecord::decode(later).unwrap().admin, "a");
    }

    #[test]
    fn malformed_records_are_refused_with_what_is_wrong() {
        let long_name = "n".repeat(1025);
        let long_csrf = "c".repeat(129);
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "console session record: EOF"),
            ("[]".into(), "invalid length 0"),
            ("1".into(), "invalid type"),
            (r#"{"admin":"a"}"#.into(), "missing field"),
            (record("", DIGEST, "x"), "administrator's name"),
            (record(&long_name, DIGEST, "x"), "administrator's name"),
            (record("a\nb", DIGEST, "x"), "administrator's name"),
            (record("a", &DIGEST[..62], "x"), "secret_sha256"),
            (record("a", &DIGEST.to_uppercase(), "x"), "secret_sha256"),
            (record("a", &DIGEST.replace('0', "g"), "x"), "secret_sha256"),
            (record("a", DIGEST, ""), "csrf"),
            (record("a", DIGEST, "a.b"), "csrf"),
            (record("a", DIGEST, &long_csrf), "csrf"),
            (record("a", DIGEST, "x").replace("5}", "-1}"), "invalid value"),
            (record("a", DIGEST, "x").replace("5}", "\"5\"}"), "invalid type"),
            (format!("{:<4097}", record("a", DIGEST, "x")), "more than 4096"),
        ];
        for (input, why) in cases {
            let e = ConsoleRecord::decode(input.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(why), "{input:?}: {e}");
        }
    }

    #[test]
    fn session_ids_and_the_touch_interval() {
        assert!(is_session_id("0123456789abcdef0123456789abcdef"));
        for bad in ["", "0123456789abcdef0123456789abcde", "0123456789ABCDEF0123456789ABCDEF", "a.b"] {
            assert!(!is_session_id(bad), "{bad:?}");
        }
        assert_eq!(touch_every(Duration::from_secs(3600)), Duration::from_secs(60));
        assert_eq!(touch_every(Duration::from_secs(8)), Duration::from_secs(1));
        assert_eq!(touch_every(Duration::from_secs(1)), Duration::from_millis(125));
    }
}
