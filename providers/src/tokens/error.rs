//! Why a token, a key store or an SDK operation was refused.
//!
//! Messages name what is wrong and, where it helps, what to do; they never quote a claim value,
//! a key or token bytes. Claims are encrypted so that the bearer cannot read them, and an error
//! answer must not undo that. Only structural facts (lengths, the version byte, the key id,
//! times) and the names of fields appear.

use std::path::PathBuf;

use super::keys::KeyId;

/// Why a token was not issued or did not verify.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token is longer than any token mesgd issues; refused before any decoding.
    #[error("the token is {len} bytes long, more than the {max} a mesgd token may have")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit ([`super::MAX_TOKEN_LEN`]).
        max: usize,
    },
    /// A JSON Web Token (a login session) was given where a PKI token was expected.
    #[error(
        "this is a JWT (a login session, alg {alg}), not a claim token: claim, grant and anonymous \
         tokens are two base64url parts, encrypted claims and a signature"
    )]
    Jwt {
        /// The header's `alg`, cut short.
        alg: String,
    },
    /// An SDK message signature (`{"r","s"}` JSON) was given, or stands in the signature part.
    #[error(
        "this is an SDK message signature (JSON {{\"r\",\"s\"}}), not a mesgd token: mesgd tokens are \
         signed in DER, and an SDK verify cannot check them (nor mesgd an SDK signature)"
    )]
    SdkSignature,
    /// The signature part is 64 raw bytes (r || s), the SDK's encoding, not DER.
    #[error("the signature part is 64 raw bytes (r || s, the SDK encoding); mesgd token signatures are DER")]
    RawSignature,
    /// The input has none of the shapes mesgd knows.
    #[error("not a mesgd token: {why}")]
    NotMesgdToken {
        /// Which expectation failed first.
        why: &'static str,
    },
    /// A token of a format version this build does not know.
    #[error("token format version {version} is not supported (this mesgd reads version {supported})")]
    UnsupportedVersion {
        /// The version byte found.
        version: u8,
        /// The version this build reads.
        supported: u8,
    },
    /// The encrypted part does not have the layout of its version (lengths do not add up).
    #[error("malformed token: {what}")]
    Malformed {
        /// Which field is out of shape.
        what: &'static str,
    },
    /// The key id names no key this server has: another server's token, or a key pruned after
    /// its grace period.
    #[error(
        "the token is signed with key {key_id}, which this server does not have (another server's \
         key, or one retired and past its grace period)"
    )]
    UnknownKey {
        /// The key id in the token.
        key_id: KeyId,
    },
    /// The key was rotated out and its grace period has ended.
    #[error("the token is signed with key {key_id}, whose grace period ended at {until} (unix seconds)")]
    KeyRetired {
        /// The key id in the token.
        key_id: KeyId,
        /// When verification with it ended, unix seconds.
        until: u64,
    },
    /// The signature does not verify: the token was altered, or not issued by this server.
    #[error("the signature does not verify with key {key_id}: the token was altered or not issued here")]
    BadSignature {
        /// The key id in the token.
        key_id: KeyId,
    },
    /// The signature verified but the claims could not be decrypted (a key store whose files
    /// do not belong together, or a bug).
    #[error("the token's claims cannot be decrypted with key {key_id}")]
    Decrypt {
        /// The key id in the token.
        key_id: KeyId,
    },
    /// The decrypted claims are not valid mesgd claims.
    #[error("the token's claims are invalid: {reason}")]
    Claims {
        /// What is wrong (field names only, never values).
        reason: String,
    },
    /// The token's `exp` has passed.
    #[error("the token expired at {exp} (unix seconds); it is now {now}")]
    Expired {
        /// The token's `exp`.
        exp: u64,
        /// The time it was checked at.
        now: u64,
    },
    /// A token of another kind than the operation takes.
    #[error("this is a {found} token; a {expected} token is needed here")]
    WrongKind {
        /// What the operation takes.
        expected: super::Kind,
        /// What the token is.
        found: super::Kind,
    },
    /// The claims to issue do not fit in a token.
    #[error("the claims make a token of {len} bytes, more than the {max} a token may have")]
    TooLarge {
        /// The token's length.
        len: usize,
        /// The limit ([`super::MAX_TOKEN_LEN`]).
        max: usize,
    },
    /// The pairs (or patterns, or prefixes) to put in a token are not acceptable.
    #[error("invalid claims: {0}")]
    InvalidClaims(String),
    /// The crypto library failed (random numbers, key use); nothing was issued.
    #[error("the crypto library failed to {0}")]
    Crypto(&'static str),
}

/// Why the key store could not be opened, created or rotated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A file or directory could not be read, written or created.
    #[error("key store: cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A key file or the metadata exists but does not hold what it should. Nothing is
    /// overwritten: an operator decides.
    #[error(
        "key store: {path} is corrupt ({why}); restore it from a backup, or move the whole keys \
         directory away to start over with new keys (every token issued so far then stops verifying)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Key files exist but no metadata names them.
    #[error(
        "key store: {dir} holds key files ({files}) but no {meta}; restore {meta} from a backup, or, \
         if these keys were never used (an interrupted first start), delete them"
    )]
    Orphans {
        /// The keys directory.
        dir: PathBuf,
        /// The metadata file's name.
        meta: &'static str,
        /// The key files found, comma separated.
        files: String,
    },
    /// There is no key store yet (for operations that never create one).
    #[error("key store: no server keys in {dir} yet (they are made by `mesgd forge` or the first start)")]
    Missing {
        /// The keys directory.
        dir: PathBuf,
    },
    /// Rotation refused: too many retired keys still in their grace period.
    #[error(
        "key store: {count} retired keys are still in their grace period (at most {max}); wait for \
         one to end or rotate with a shorter --grace"
    )]
    TooManyRetired {
        /// Retired keys still verifying.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// Key generation or serialisation failed in the crypto library.
    #[error("key store: the crypto library failed to {0}")]
    Crypto(&'static str),
}
