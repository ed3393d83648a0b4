//! The C ABI between mesgd and a plugin library: the entry symbol, the version handshake, the
//! function table and the buffer type. `include/mesgd_plugin.h` declares the same items for C;
//! the two must stay identical, field for field.
//!
//! # The handshake
//!
//! The host resolves one symbol, [`ENTRY_SYMBOL`] (`mesgd_plugin_entry`), and calls it with its
//! own [`ABI_VERSION`]. The plugin answers a pointer to its [`MesgdPluginV1`] table, which lives
//! as long as the library, or NULL when it cannot serve a host of that version. The table starts
//! with the plugin's ABI version and the table's size in bytes, so that the host can check both
//! before it reads a single function pointer.
//!
//! # The versioning promise
//!
//! An ABI version is `major << 16 | minor`. Within one major version the table only grows: new
//! members are appended after the existing ones (or take over a `reserved` slot, which plugins
//! of older minor versions leave NULL), and no member changes its type or meaning. A host
//! accepts a plugin whose major version equals its own and whose `struct_size` covers every
//! member the host needs; a member added in minor version N is used only when the plugin's
//! minor version is at least N. A new major version is a new table type
//! (`MesgdPluginV2`) and a plugin of another major version is refused at start.
//!
//! # Memory
//!
//! Whoever allocates frees: the JSON the host passes in is the host's and is only borrowed for
//! the duration of the call; every [`MesgdBuffer`] the plugin hands out is released by the host
//! through the plugin's own `free_buffer`, so the two sides never need to share an allocator.

use std::ffi::{c_char, c_void};

/// The major version of the ABI this crate implements. A host refuses plugins of another one.
pub const ABI_MAJOR: u16 = 1;

/// The minor version of the ABI this crate implements.
pub const ABI_MINOR: u16 = 0;

/// This crate's ABI version, `major << 16 | minor`.
pub const ABI_VERSION: u32 = abi_version(ABI_MAJOR, ABI_MINOR);

/// The name of the one symbol a plugin library exports.
pub const ENTRY_SYMBOL: &str = "mesgd_plugin_entry";

/// A call succeeded: the output buffer holds the result (the answer JSON).
pub const STATUS_OK: i32 = 0;

/// A call failed: the output buffer holds a UTF-8 message that says why (it may be empty).
pub const STATUS_ERROR: i32 = 1;

/// The longest plugin name (and plugin version text), in bytes, without the terminating NUL.
pub const MAX_NAME_LEN: usize = 64;

/// How many reserved function slots close the table.
pub const RESERVED_SLOTS: usize = 8;

/// Packs a major and a minor version into an ABI version number.
pub const fn abi_version(major: u16, minor: u16) -> u32 {
    (major as u32) << 16 | minor as u32
}

/// The major part of an ABI version number.
pub const fn abi_major(version: u32) -> u16 {
    (version >> 16) as u16
}

/// The minor part of an ABI version number.
pub const fn abi_minor(version: u32) -> u16 {
    (version & 0xffff) as u16
}

/// Bytes allocated by the plugin and handed to the host, which returns them through the
/// plugin's `free_buffer` with exactly this pointer and length.
#[repr(C)]
#[derive(Debug)]
pub struct MesgdBuffer {
    /// The first byte, or NULL for no buffer.
    pub ptr: *mut u8,
    /// The number of bytes.
    pub len: usize,
}

impl MesgdBuffer {
    /// No buffer: what the host sets before a call, so that a plugin that writes nothing is
    /// recognised.
    pub const fn empty() -> Self {
        MesgdBuffer { ptr: std::ptr::null_mut(), len: 0 }
    }
}

/// `mesgd_plugin_entry`: the handshake. Returns the plugin's table, or NULL when the plugin
/// cannot serve a host of `host_abi_version`.
pub type EntryFn = unsafe extern "C" fn(host_abi_version: u32) -> *const MesgdPluginV1;

/// Returns a NUL-terminated static string (the plugin's name, or its own version).
pub type TextFn = unsafe extern "C" fn() -> *const c_char;

/// Creates an instance from the `config` table of its `[[auth.providers]]` entry, given as
/// UTF-8 JSON (an object). On [`STATUS_OK`] `*out_instance` is set; on [`STATUS_ERROR`]
/// `*out_error` may hold a message.
pub type CreateFn = unsafe extern "C" fn(
    config_json: *const u8,
    config_len: usize,
    out_instance: *mut *mut c_void,
    out_error: *mut MesgdBuffer,
) -> i32;

/// Decides about one connect. `request_json` is the request object; on [`STATUS_OK`]
/// `*out_response` holds the answer object, on [`STATUS_ERROR`] a message. Called from several
/// threads at once with the same instance.
pub type AuthenticateFn = unsafe extern "C" fn(
    instance: *mut c_void,
    request_json: *const u8,
    request_len: usize,
    out_response: *mut MesgdBuffer,
) -> i32;

/// Releases a buffer the plugin handed out.
pub type FreeBufferFn = unsafe extern "C" fn(ptr: *mut u8, len: usize);

/// Releases an instance. Called once, after every call on it has returned.
pub type DestroyFn = unsafe extern "C" fn(instance: *mut c_void);

/// The function table of ABI major version 1 (`struct mesgd_plugin_v1` in C).
///
/// Function members are `Option`s so that a NULL from a C plugin is a value the host can check
/// rather than undefined behaviour; every member but `reserved` is required in version 1.0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MesgdPluginV1 {
    /// The ABI version the plugin implements ([`ABI_VERSION`] when built with this crate).
    pub abi_version: u32,
    /// `sizeof` the table as the plugin built it.
    pub struct_size: u32,
    /// The plugin's name: 1 to [`MAX_NAME_LEN`] bytes of `A-Z a-z 0-9 _ . -`.
    pub name: Option<TextFn>,
    /// The plugin's own version (free text, at most [`MAX_NAME_LEN`] bytes), for logs.
    pub version: Option<TextFn>,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// See [`AuthenticateFn`].
    pub authenticate: Option<AuthenticateFn>,
    /// See [`FreeBufferFn`].
    pub free_buffer: Option<FreeBufferFn>,
    /// See [`DestroyFn`].
    pub destroy: Option<DestroyFn>,
    /// Room to grow within major version 1: NULL in version 1.0.
    pub reserved: [Option<unsafe extern "C" fn()>; RESERVED_SLOTS],
}

/// The size of a version 1.0 table: the least `struct_size` a host of version 1.0 accepts.
pub const V1_STRUCT_SIZE: usize = std::mem::size_of::<MesgdPluginV1>();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_numbers_pack_and_unpack() {
        assert_eq!(ABI_VERSION, 0x0001_0000);
        assert_eq!(abi_version(2, 7), 0x0002_0007);
        assert_eq!((abi_major(0x0002_0007), abi_minor(0x0002_0007)), (2, 7));
    }

    #[test]
    fn the_table_has_the_layout_the_header_declares() {
        // Two u32, six function pointers, eight reserved pointers: what a C compiler lays out
        // for `struct mesgd_plugin_v1`, with no padding on any platform mesgd builds for.
        let pointer = std::mem::size_of::<usize>();
        assert_eq!(V1_STRUCT_SIZE, 8 + (6 + RESERVED_SLOTS) * pointer);
        assert_eq!(std::mem::size_of::<Option<TextFn>>(), pointer, "NULL is the None niche");
        assert_eq!(std::mem::size_of::<MesgdBuffer>(), 2 * pointer);
    }
}
