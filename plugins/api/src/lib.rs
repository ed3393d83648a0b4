//! `mesgd-plugin-api`: write a mesgd authentication plugin in Rust, as a shared library that
//! mesgd loads at start (`type = "plugin"` in `[[auth.providers]]`) without being rebuilt.
//!
//! A plugin is a type that implements [`Plugin`]; one macro line exports it through mesgd's
//! stable C ABI, and the plugin crate is built as a `cdylib`:
//!
//! ```
//! use mesgd_plugin_api::{AclRule, BoxError, Permission, Plugin, Request, Response};
//!
//! struct OnlyDevices;
//!
//! impl Plugin for OnlyDevices {
//!     const NAME: &'static str = "only-devices";
//!
//!     fn create(_config: serde_json::Value) -> Result<Self, BoxError> {
//!         Ok(OnlyDevices)
//!     }
//!
//!     fn authenticate(&self, request: &Request) -> Result<Response, BoxError> {
//!         if !request.client_id.starts_with("device-") {
//!             return Ok(Response::next());
//!         }
//!         Ok(Response::allow().with_acl(Some(vec![AclRule::new("devices/%c/#", Permission::ReadWrite)])))
//!     }
//! }
//!
//! mesgd_plugin_api::export_plugin!(OnlyDevices);
//! ```
//!
//! The plugin author writes no `unsafe`: the `extern "C"` functions, the buffer hand-over and
//! the panic containment live in this crate. The same ABI can be implemented in C with
//! `include/mesgd_plugin.h`; `docs/plugins.md` in the mesgd repository walks through both.
//!
//! # Layout
//!
//! - [`abi`]: the `#[repr(C)]` function table, the entry symbol, the version constants and the
//!   versioning promise.
//! - the wire types (re-exported at the root): the [`Request`] JSON the host sends and the
//!   [`Response`] JSON the plugin answers, with [`AclRule`], [`Permission`], [`Password`].
//! - [`export_plugin!`] and its hidden runtime support, the only `unsafe` code of the crate.

pub mod abi;
#[allow(unsafe_code)] // the FFI trampolines; every block carries a `// SAFETY:` comment
#[doc(hidden)]
pub mod export;
mod wire;

pub use serde_json;
pub use wire::{AclRule, Decision, DenyCode, Password, Permission, Request, Response, constant_time_eq};

/// Any error a plugin reports; its text reaches the broker's log (never put a secret in it).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An authentication plugin.
///
/// mesgd creates one instance per `[[auth.providers]]` entry at start and calls
/// [`Plugin::authenticate`] for every connect that reaches it in the chain, from several
/// threads at once (hence `Sync`), never on the broker's async workers: a slow answer (a
/// database, a file) holds up only the client it is about. A call that takes longer than the
/// entry's `timeout_ms` denies that client (or moves on, with `on_error = "next"`).
///
/// An `Err` or a panic is a failure of the provider: the client is denied (fail closed) unless
/// the entry says `on_error = "next"`, and the broker logs the message with the plugin's name.
pub trait Plugin: Send + Sync + Sized + 'static {
    /// The plugin's name, as it appears in logs and in `mesgd plugin check`: 1 to 64 bytes of
    /// `A-Z a-z 0-9 _ . -` (checked when the plugin is compiled).
    const NAME: &'static str;

    /// Creates an instance from the entry's `config` table (a JSON object; `{}` when the
    /// entry has none). An error refuses the broker's start with its text.
    fn create(config: serde_json::Value) -> Result<Self, BoxError>;

    /// Decides about one connect: [`Response::allow`], [`Response::deny`] or
    /// [`Response::next`].
    fn authenticate(&self, request: &Request) -> Result<Response, BoxError>;
}

/// Exports a [`Plugin`] type as the plugin of this library: `export_plugin!(MyAuth);` once in
/// a crate built with `crate-type = ["cdylib"]`.
///
/// It generates the `mesgd_plugin_entry` symbol and the static function table. The plugin's
/// own version (shown in logs and by `mesgd plugin check`) is the crate's `version` from its
/// `Cargo.toml`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        const _: () = {
            static NAME: $crate::export::CText =
                $crate::export::plugin_name(<$plugin as $crate::Plugin>::NAME);
            static VERSION: $crate::export::CText = $crate::export::c_text(env!("CARGO_PKG_VERSION"));

            extern "C" fn name() -> *const ::std::ffi::c_char {
                NAME.as_ptr().cast()
            }

            extern "C" fn version() -> *const ::std::ffi::c_char {
                VERSION.as_ptr().cast()
            }

            static TABLE: $crate::abi::MesgdPluginV1 = $crate::export::vtable::<$plugin>(name, version);

            /// The plugin's entry point (see `mesgd_plugin_api::abi`).
            #[unsafe(no_mangle)]
            pub extern "C" fn mesgd_plugin_entry(host_abi_version: u32) -> *const $crate::abi::MesgdPluginV1 {
                $crate::export::entry(host_abi_version, &TABLE)
            }
        };
    };
}
