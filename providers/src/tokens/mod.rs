//! mesgd's PKI tokens: claim tokens (`mesgd forge`), and the grant and anonymous tokens that
//! share their wire format. A token is encrypted claims, a dot, and a signature:
//! AES-256-GCM over the claims JSON, its key wrapped with RSA-OAEP (SHA-256, MGF1-SHA-256) to
//! the server's RSA-3072 key, the whole signed with the server's ECDSA P-256 key (DER), each
//! part base64url without padding. `docs/tokens.md` describes every byte and every choice.
//!
//! All crypto comes from aws-lc-rs, which rustls already brings; the `rsa` crate is avoided
//! because its decryption is not constant-time (RUSTSEC-2023-0071).
//!
//! # Layout
//!
//! - `wire`: the layout, the size checks made before any crypto, and the recognition of a
//!   JWT or an SDK signature given in a token's place ([`parse`], [`Envelope`]).
//! - `claims`: [`Claims`], [`Kind`], [`Payload`], [`Pairs`]: the typed claims and their strict
//!   JSON form.
//! - `keys` and `keyfiles`: the [`KeyStore`] under `<storage.dir>/keys/`: generation on first
//!   use, atomic owner-only files, the `flock` that makes creation and rotation race-safe, and
//!   rotation with a grace period.
//! - `shared`: [`SharedKeys`], the whole store as the nodes of a cluster exchange it, and its
//!   import into a node's own store.
//! - `ops`: [`issue`], [`forge_claim`] and [`verify`], the one implementation every caller uses.
//! - [`check`]: `mesgd check`'s rule (the pairs, as a JSON message, against a path), with
//!   [`ContentPaths`], the `mesgd_core::content` matcher, behind the [`PathMatcher`] seam.
//! - [`sdk`]: the SDK's `{"r","s"}` message signatures and RSA-OAEP message encryption.
//! - [`cli`]: the `forge`, `check` and `keys` commands.
//! - `error`: [`TokenError`] and [`KeyError`].

pub mod check;
mod claims;
pub mod cli;
mod error;
mod keyfiles;
mod keys;
mod ops;
pub mod sdk;
pub mod shared;
mod wire;

#[cfg(test)]
mod shared_tests;
#[cfg(test)]
mod tests;

pub use check::{CheckError, ContentPaths, PathMatcher, claim_admits};
pub use claims::{
    Claims, Kind, MAX_FIELD_LEN, MAX_PAIRS, MAX_PATTERNS, MAX_PREFIXES, PairValue, Pairs, Payload,
};
pub use error::{KeyError, TokenError};
pub use keys::{KeyId, KeyInfo, KeyStore, MAX_RETIRED, RSA_BITS, keys_dir};
pub use ops::{forge_claim, issue, verify};
pub use shared::{KeysVersion, MAX_SHARED_KEYS_LEN, SharedKeys, SharedKeysError};
pub use wire::{Envelope, VERSION, parse};

/// The longest token accepted, in bytes of text: refused before any decoding or crypto.
/// An issued token with a few pairs is about 700 bytes.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
