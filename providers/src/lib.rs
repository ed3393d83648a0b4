//! `mesgd-providers`: the authentication providers that ship with mesgd, and the registry that
//! turns the `[[auth.providers]]` tables of the configuration into an ordered
//! [`Chain`](mesgd_core::auth::Chain).
//!
//! Every provider implements [`mesgd_core::auth::Authenticator`] and answers `Allow`, `Deny` or
//! `Next`. The built-in providers are registered in the [`Registry`] through the same
//! [`ProviderFactory`] interface that a third-party (or dynamically loaded) provider uses, so
//! nothing in chain building knows about them.
//!
//! # Layout
//!
//! - [`registry`]: [`Registry`], [`ProviderFactory`], [`ProviderSpec`], [`BuildContext`] and
//!   [`ConfigError`]: chain-level keys (`type`, `on_error`, `timeout_ms`) are taken out of each
//!   table, the rest is handed to the provider's factory.
//! - [`builtin`] (feature `builtin`): users and ACL rules in SQLite at
//!   `<storage.dir>/config.db` — the [`builtin::Store`] management API, PBKDF2/bcrypt password
//!   hashes, the [`builtin::UserDirectory`] that keeps an in-memory view of the store and
//!   pushes changes to connected clients, the `builtin` provider, and the `mesgd user` /
//!   `mesgd acl` command-line functions.
//! - [`x509`] (feature `x509`): admits a client whose verified certificate Common Name names a
//!   builtin record of `auth_type = x509`.
//! - [`jwt`] (feature `jwt`): an HS256 JSON Web Token in the password field.
//! - [`http`] (feature `http`): a webhook that is asked about every connect.
//! - [`tokens`] (feature `tokens`): mesgd's PKI tokens (claim, grant, anonymous): the wire
//!   format (encrypted claims, a dot, an ECDSA signature), the server's key store under
//!   `<storage.dir>/keys/` with rotation, `forge` / `verify` / `check`, the `mesgd forge`,
//!   `check` and `keys` commands, and the SDK's message signature and encryption helpers.
//! - [`grants`] (features `builtin` and `tokens`): grant tokens for builtin accounts and
//!   anonymous tokens for path prefixes, in the PKI wire format.
//! - [`sessions`] (features `builtin` and `jwt`): login sessions, compact HS256 JWTs for
//!   builtin accounts, and the list of sessions ended by logout.
//! - [`session_provider`] (features `builtin`, `jwt`, `tokens`): the `session` provider, a
//!   login session or grant token in the CONNECT password.
//! - `cache` and `rules` (private): the bounded cache and keyed MAC shared by the providers
//!   that cache answers, and the reading of ACL rule arrays from tokens and webhook answers.

#[cfg(feature = "builtin")]
pub mod builtin;
#[cfg(any(feature = "builtin", feature = "http"))]
mod cache;
#[cfg(all(feature = "builtin", feature = "tokens"))]
pub mod grants;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "jwt")]
pub mod jwt;
pub mod registry;
#[cfg(any(feature = "jwt", feature = "http"))]
mod rules;
#[cfg(all(feature = "builtin", feature = "jwt", feature = "tokens"))]
pub mod session_provider;
#[cfg(all(feature = "builtin", feature = "jwt"))]
pub mod sessions;
#[cfg(any(feature = "jwt", feature = "tokens"))]
mod token_shape;
#[cfg(feature = "tokens")]
pub mod tokens;
#[cfg(feature = "x509")]
pub mod x509;

pub use registry::{BuildContext, ConfigError, ProviderFactory, ProviderSpec, Registry, Services};
