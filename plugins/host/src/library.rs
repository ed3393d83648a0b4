//! Talking to a plugin library: loading it, the version handshake, and calls through its
//! function table. This module holds all of the host's `unsafe` code.
//!
//! What the host can and cannot contain: a plugin runs inside the broker's process, so a
//! library that corrupts memory or crashes takes the broker with it, and its initialisers run
//! as soon as it is loaded — only load libraries you trust, from files only trusted users can
//! write (a file writable by every user is refused). Everything the ABI *can* check is checked
//! before a plugin is used: the entry symbol, the major version, the table's size, every
//! required function, the name; answers are bounded in size and copied out before they are
//! parsed. Rust plugins built with `mesgd-plugin-api` also turn panics into error answers.
//!
//! Libraries are never unloaded: a call that hangs may still be running inside the library's
//! code on a blocking thread, and unloading would pull that code out from under it.

use std::ffi::{c_char, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use mesgd_plugin_api::abi::{
    ABI_MAJOR, ABI_VERSION, AuthenticateFn, CreateFn, DestroyFn, ENTRY_SYMBOL, EntryFn, FreeBufferFn,
    MAX_NAME_LEN, MesgdBuffer, MesgdPluginV1, STATUS_ERROR, STATUS_OK, TextFn, V1_STRUCT_SIZE, abi_major,
    abi_minor,
};

/// The largest answer (or error message) accepted from a plugin, in bytes.
pub const MAX_ANSWER_LEN: usize = 64 * 1024;

/// How much of a plugin's error message is kept for logs and start-up errors.
const MAX_MESSAGE_CHARS: usize = 500;

/// An ABI version number (`major << 16 | minor`), shown as `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AbiVersion(pub u32);

impl AbiVersion {
    /// The version this host speaks.
    pub const HOST: AbiVersion = AbiVersion(ABI_VERSION);

    /// The major part.
    pub fn major(self) -> u16 {
        abi_major(self.0)
    }

    /// The minor part.
    pub fn minor(self) -> u16 {
        abi_minor(self.0)
    }
}

impl fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major(), self.minor())
    }
}

/// Why a library cannot be used as a plugin. Every message names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file is missing or unreadable.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The path names a directory or something else that is not a file.
    #[error("{} is not a regular file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// Every user of the machine may write the file, so anyone could change the code mesgd runs.
    #[error(
        "{} is writable by every user of this machine, so anyone could replace the code mesgd runs; \
         remove that permission (chmod o-w)",
        path.display()
    )]
    WorldWritable {
        /// The file.
        path: PathBuf,
    },
    /// The dynamic loader refused the file (not a shared library, wrong architecture, missing
    /// dependencies).
    #[error("cannot load {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The loader's error.
        source: libloading::Error,
    },
    /// The library does not export the entry symbol.
    #[error(
        "{} is not a mesgd plugin: it does not export `{ENTRY_SYMBOL}` (Rust: add \
         `mesgd_plugin_api::export_plugin!(YourType);` and build with crate-type = [\"cdylib\"])",
        path.display()
    )]
    NoEntry {
        /// The file.
        path: PathBuf,
    },
    /// The plugin's entry answered NULL: it cannot serve a host of this ABI version.
    #[error(
        "{}: the plugin declined to work with a host of ABI {} (its `{ENTRY_SYMBOL}` returned NULL); \
         rebuild it against mesgd-plugin-api / mesgd_plugin.h of ABI {}.x",
        path.display(), AbiVersion::HOST, ABI_MAJOR
    )]
    Declined {
        /// The file.
        path: PathBuf,
    },
    /// The plugin implements another major version of the ABI.
    #[error(
        "{}: the plugin was built for plugin ABI {plugin}, but this mesgd speaks ABI {}; rebuild it \
         against mesgd-plugin-api / mesgd_plugin.h of ABI {}.x",
        path.display(), AbiVersion::HOST, ABI_MAJOR
    )]
    VersionMismatch {
        /// The file.
        path: PathBuf,
        /// The version the plugin declares.
        plugin: AbiVersion,
    },
    /// The function table is smaller than ABI major version 1 requires.
    #[error(
        "{}: the plugin's function table is {size} bytes, but ABI {} needs at least {need}; the \
         library was built from a damaged header",
        path.display(), AbiVersion::HOST
    )]
    TableTooSmall {
        /// The file.
        path: PathBuf,
        /// The `struct_size` the plugin declares.
        size: u32,
        /// The size the host needs.
        need: usize,
    },
    /// The table pointer is not aligned for a function table.
    #[error("{}: the plugin's function table is misaligned; the library is damaged", path.display())]
    Misaligned {
        /// The file.
        path: PathBuf,
    },
    /// A required function of the table is NULL.
    #[error("{}: the plugin's function table has no `{member}` function", path.display())]
    MissingFunction {
        /// The file.
        path: PathBuf,
        /// The member of `struct mesgd_plugin_v1`.
        member: &'static str,
    },
    /// The plugin's name or version text is unusable.
    #[error("{}: the plugin's {what} {problem}", path.display())]
    BadText {
        /// The file.
        path: PathBuf,
        /// `name` or `version`.
        what: &'static str,
        /// What is wrong.
        problem: String,
    },
}

/// A loaded plugin library whose handshake succeeded.
pub struct PluginLibrary {
    path: PathBuf,
    name: String,
    version: String,
    abi_version: AbiVersion,
    create: CreateFn,
    authenticate: AuthenticateFn,
    free_buffer: FreeBufferFn,
    destroy: DestroyFn,
}

impl fmt::Debug for PluginLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginLibrary")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("version", &self.version)
            .field("abi_version", &self.abi_version)
            .finish_non_exhaustive()
    }
}

impl PluginLibrary {
    /// Loads the library at `path` and checks the handshake and the function table.
    pub fn open(path: &Path) -> Result<PluginLibrary, LoadError> {
        check_file(path)?;
        // SAFETY: loading a library runs its initialisers, which can do anything; that is the
        // trust an operator places in a plugin by naming it in the configuration, and the file
        // is not writable by every user (checked above). No other requirement applies.
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|source| LoadError::Open { path: path.to_owned(), source })?;
        // Never unloaded (see the module doc): the function pointers below stay valid for the
        // rest of the process.
        let library: &'static libloading::Library = Box::leak(Box::new(library));
        // SAFETY: `EntryFn` is the signature the ABI gives `mesgd_plugin_entry`; a library that
        // exports the name with another one breaks the contract, which no loader can check.
        let entry: EntryFn = match unsafe { library.get::<EntryFn>(ENTRY_SYMBOL.as_bytes()) } {
            Ok(symbol) => *symbol,
            Err(_) => return Err(LoadError::NoEntry { path: path.to_owned() }),
        };
        // SAFETY: the entry takes the host's version and returns a pointer; it has no
        // precondition.
        let table = unsafe { entry(ABI_VERSION) };
        let table =
            NonNull::new(table.cast_mut()).ok_or_else(|| LoadError::Declined { path: path.to_owned() })?;
        // SAFETY: the ABI promises a pointer to a static table that starts with two `u32`.
        let table = unsafe { read_table(table, path) }?;
        Self::from_table(path, &table)
    }

    fn from_table(path: &Path, table: &MesgdPluginV1) -> Result<PluginLibrary, LoadError> {
        let missing = |member| LoadError::MissingFunction { path: path.to_owned(), member };
        let name_fn = table.name.ok_or_else(|| missing("name"))?;
        let version_fn = table.version.ok_or_else(|| missing("version"))?;
        let create = table.create.ok_or_else(|| missing("create"))?;
        let authenticate = table.authenticate.ok_or_else(|| missing("authenticate"))?;
        let free_buffer = table.free_buffer.ok_or_else(|| missing("free_buffer"))?;
        let destroy = table.destroy.ok_or_else(|| missing("destroy"))?;
        let bad = |what, problem: String| LoadError::BadText { path: path.to_owned(), what, problem };
        // SAFETY: a non-NULL `name` of the table (checked), which takes no arguments.
        let name = unsafe { static_text(name_fn) }.map_err(|p| bad("name", p))?;
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            || name.is_empty()
        {
            return Err(bad("name", format!("{name:?} is not 1 to 64 characters of A-Z a-z 0-9 _ . -")));
        }
        // SAFETY: as for `name`.
        let version = unsafe { static_text(version_fn) }.map_err(|p| bad("version", p))?;
        if version.chars().any(char::is_control) {
            return Err(bad("version", "contains control characters".to_owned()));
        }
        Ok(PluginLibrary {
            path: path.to_owned(),
            name,
            version,
            abi_version: AbiVersion(table.abi_version),
            create,
            authenticate,
            free_buffer,
            destroy,
        })
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's own version text.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The ABI version the plugin implements.
    pub fn abi_version(&self) -> AbiVersion {
        self.abi_version
    }

    /// Creates an instance from `config_json`; `Err` holds the plugin's message.
    pub fn create(self: &Arc<Self>, config_json: &[u8]) -> Result<Instance, String> {
        let mut instance: *mut c_void = std::ptr::null_mut();
        let mut error = MesgdBuffer::empty();
        // SAFETY: `create` is the plugin's own function (checked non-NULL at load); the input
        // buffer and both out-pointers are valid for the duration of the call.
        let status =
            unsafe { (self.create)(config_json.as_ptr(), config_json.len(), &mut instance, &mut error) };
        let message = self.take(error);
        match (status, NonNull::new(instance)) {
            (STATUS_OK, Some(ptr)) => Ok(Instance { library: Arc::clone(self), ptr }),
            (STATUS_OK, None) => Err("create reported success but returned no instance".to_owned()),
            (status, _) => Err(failure_text(status, message)),
        }
    }

    /// Copies a buffer the plugin handed out (at most [`MAX_ANSWER_LEN`] bytes) and gives it
    /// back to the plugin. `Err(len)` when it was larger.
    #[allow(clippy::needless_pass_by_value)] // by value: the buffer is given back here, once
    fn take(&self, buffer: MesgdBuffer) -> Result<Vec<u8>, usize> {
        if buffer.ptr.is_null() {
            return Ok(Vec::new());
        }
        let copied = if buffer.len > MAX_ANSWER_LEN {
            Err(buffer.len)
        } else {
            // SAFETY: the plugin handed out `len` readable bytes at `ptr` (the ABI's promise),
            // which stay valid until they are freed below.
            Ok(unsafe { std::slice::from_raw_parts(buffer.ptr, buffer.len) }.to_vec())
        };
        // SAFETY: exactly the pointer and length the plugin handed out, freed once.
        unsafe { (self.free_buffer)(buffer.ptr, buffer.len) };
        copied
    }
}

/// A plugin instance (one per `[[auth.providers]]` entry). Destroyed when the last handle is
/// dropped, which is after every call on it has returned.
pub struct Instance {
    library: Arc<PluginLibrary>,
    ptr: NonNull<c_void>,
}

// SAFETY: the ABI requires `authenticate` to be callable from any thread, concurrently, and
// `destroy` from any thread once the calls are over; `Instance` adds no state of its own.
unsafe impl Send for Instance {}
// SAFETY: as above — shared use is concurrent `authenticate` calls, which the ABI allows.
unsafe impl Sync for Instance {}

/// Why a call did not produce an answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The plugin reported a failure (its message, if it gave one).
    #[error("{0}")]
    Failed(String),
    /// The answer is larger than the host accepts.
    #[error("the plugin's answer is {0} bytes, more than the {MAX_ANSWER_LEN} accepted")]
    TooLarge(usize),
}

impl Instance {
    /// The library this instance belongs to.
    pub fn library(&self) -> &PluginLibrary {
        &self.library
    }

    /// Runs one `authenticate` call and returns the answer's bytes. Blocks for as long as the
    /// plugin takes.
    pub fn authenticate(&self, request_json: &[u8]) -> Result<Vec<u8>, CallError> {
        let mut out = MesgdBuffer::empty();
        // SAFETY: a live instance of this library, a request buffer valid for the call, and
        // an out-pointer to a local.
        let status = unsafe {
            (self.library.authenticate)(
                self.ptr.as_ptr(),
                request_json.as_ptr(),
                request_json.len(),
                &mut out,
            )
        };
        let bytes = self.library.take(out);
        match status {
            STATUS_OK => bytes.map_err(CallError::TooLarge),
            status => Err(CallError::Failed(failure_text(status, bytes))),
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: the instance came from this library's `create`; this is the last handle, so
        // no call is running, and `drop` runs once.
        unsafe { (self.library.destroy)(self.ptr.as_ptr()) };
    }
}

/// The message for a failed call: the plugin's text, made safe for a log line.
fn failure_text(status: i32, message: Result<Vec<u8>, usize>) -> String {
    let text = match message {
        Ok(bytes) if bytes.is_empty() => "the plugin gave no message".to_owned(),
        Ok(bytes) => sanitize(&String::from_utf8_lossy(&bytes)),
        Err(len) => format!("the plugin's message is {len} bytes, more than the {MAX_ANSWER_LEN} accepted"),
    };
    if status == STATUS_ERROR { text } else { format!("unknown status {status} ({text})") }
}

/// Plugin-supplied text for a log line: one line, control characters replaced, bounded.
pub(crate) fn sanitize(text: &str) -> String {
    let mut out: String =
        text.chars().take(MAX_MESSAGE_CHARS).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().nth(MAX_MESSAGE_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// Refuses what is not a regular file, and files every user may write.
fn check_file(path: &Path) -> Result<(), LoadError> {
    let metadata =
        std::fs::metadata(path).map_err(|source| LoadError::Unreadable { path: path.to_owned(), source })?;
    if !metadata.is_file() {
        return Err(LoadError::NotAFile { path: path.to_owned() });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o002 != 0 {
            return Err(LoadError::WorldWritable { path: path.to_owned() });
        }
    }
    Ok(())
}

/// Reads the table behind `table` after checking its version and size.
///
/// # Safety
///
/// `table` points to memory of at least two `u32` that stays valid for the process (the
/// plugin's static table; the library is never unloaded).
unsafe fn read_table(table: NonNull<MesgdPluginV1>, path: &Path) -> Result<MesgdPluginV1, LoadError> {
    if !table.as_ptr().is_aligned() {
        return Err(LoadError::Misaligned { path: path.to_owned() });
    }
    // SAFETY: the caller guarantees the two leading `u32`; alignment was checked.
    let [abi_version, struct_size] = unsafe { table.cast::<[u32; 2]>().read() };
    let plugin = AbiVersion(abi_version);
    if plugin.major() != ABI_MAJOR {
        return Err(LoadError::VersionMismatch { path: path.to_owned(), plugin });
    }
    if (struct_size as usize) < V1_STRUCT_SIZE {
        return Err(LoadError::TableTooSmall {
            path: path.to_owned(),
            size: struct_size,
            need: V1_STRUCT_SIZE,
        });
    }
    // SAFETY: the plugin declares a table of major version 1 at least as large as
    // `MesgdPluginV1`; every bit pattern is a valid `MesgdPluginV1` (integers and nullable
    // function pointers).
    Ok(unsafe { table.read() })
}

/// Calls a text function of the table and reads its NUL-terminated answer, never more than
/// [`MAX_NAME_LEN`] bytes plus the NUL.
///
/// # Safety
///
/// `text` is a function of a plugin's table (it takes no arguments and returns a pointer to a
/// static NUL-terminated string, or NULL).
unsafe fn static_text(text: TextFn) -> Result<String, String> {
    // SAFETY: the caller's promise.
    let ptr: *const c_char = unsafe { text() };
    if ptr.is_null() {
        return Err("is NULL".to_owned());
    }
    let mut bytes = Vec::with_capacity(MAX_NAME_LEN);
    for offset in 0..=MAX_NAME_LEN {
        // SAFETY: the string is NUL-terminated, and reading stops at the NUL, so every byte
        // read belongs to it.
        let byte = unsafe { ptr.add(offset).read() } as u8;
        if byte == 0 {
            return String::from_utf8(bytes).map_err(|_| "is not UTF-8".to_owned());
        }
        bytes.push(byte);
    }
    Err(format!("is longer than {MAX_NAME_LEN} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_text_becomes_one_bounded_line() {
        assert_eq!(sanitize("db down\nretry\tlater"), "db down retry later");
        let long = "x".repeat(MAX_MESSAGE_CHARS + 10);
        let shown = sanitize(&long);
        assert_eq!(shown.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(failure_text(STATUS_ERROR, Ok(Vec::new())), "the plugin gave no message");
        assert_eq!(failure_text(7, Ok(b"odd".to_vec())), "unknown status 7 (odd)");
        assert!(failure_text(STATUS_ERROR, Err(1 << 20)).contains("1048576 bytes"));
    }

    #[test]
    fn abi_versions_display_as_major_dot_minor() {
        assert_eq!(AbiVersion::HOST.to_string(), "1.0");
        assert_eq!(AbiVersion(0x0002_0003).to_string(), "2.3");
    }
}
