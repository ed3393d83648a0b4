//! `mesgd-plugin-host`: loads authentication plugins — shared libraries that implement the C
//! ABI of `mesgd-plugin-api` — and puts them into the provider chain as `type = "plugin"`.
//!
//! [`register`] adds the `plugin` type to a [`Registry`]; from then on an `[[auth.providers]]`
//! entry with `type = "plugin"`, a `path` and a `config` table loads the library at start,
//! creates one instance with the config and asks it about every connect that reaches it.
//! [`check()`] is `mesgd plugin check`: it loads a library the same way and reports what it
//! found.
//!
//! # Layout
//!
//! - [`library`]: loading a library, the version handshake, the checks on its function table,
//!   and the calls into it ([`library::PluginLibrary`], [`library::Instance`]). The crate's
//!   only `unsafe` code.
//! - [`provider`]: the [`PluginFactory`] (settings, the config table as JSON) and the
//!   authenticator that runs calls on the blocking pool, bounded per entry, and checks every
//!   answer.
//! - [`check`](mod@check): [`check()`] and its [`CheckReport`].

pub mod check;
#[allow(unsafe_code)] // loading libraries and calling into them; each block has a `// SAFETY:` comment
pub mod library;
pub mod provider;

use std::sync::Arc;

use mesgd_providers::Registry;

pub use check::{CheckReport, PluginInfo, check};
pub use library::{AbiVersion, LoadError};
pub use provider::{PluginFactory, TYPE_NAME};

/// Registers the `plugin` provider type.
pub fn register(registry: &mut Registry) {
    registry.register(TYPE_NAME, Arc::new(PluginFactory));
}
