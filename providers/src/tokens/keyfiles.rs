//! The file side of the key store: owner-only files written atomically, bounded reads, the
//! directory lock, and the `keys.json` metadata.
//!
//! Every write goes to a fresh temporary file in the same directory (`create_new`, mode 0600),
//! is synced, and is renamed over its final name; the directory is then synced. A reader sees
//! the old file or the new one, never a part. The metadata is written last, so a key file is
//! complete before anything names it.
//!
//! Writers (first creation, rotation) hold an exclusive `flock(2)` on `keys/lock` for the whole
//! read-modify-write: two processes creating the store at once end up with one set of keys (the
//! second waits, re-reads, and finds the first's), and two rotations cannot lose each other's
//! update. The kernel drops the lock when its holder dies, so a crash leaves no stale lock.
//! Readers take no lock: the renames make every state they can see a consistent one.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::KeyError;

/// The metadata file's name.
pub(crate) const META_FILE: &str = "keys.json";
/// The lock file's name.
const LOCK_FILE: &str = "lock";
/// The metadata format this build writes and reads.
const META_FORMAT: u32 = 1;
/// No key or metadata file is anywhere near this; a larger one is not ours.
const MAX_FILE_LEN: u64 = 64 * 1024;

/// `keys.json`: which key set signs, and which retired ones still verify until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Meta {
    /// Always [`META_FORMAT`].
    pub(crate) format: u32,
    /// The key set that signs and encrypts new tokens.
    pub(crate) current: MetaKey,
    /// Earlier key sets, newest first, each verifying until its `until`.
    #[serde(default)]
    pub(crate) retired: Vec<MetaKey>,
}

/// One key set in `keys.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetaKey {
    /// The key id, 16 hex digits; also the stem of its two files.
    pub(crate) id: String,
    /// When it was made, unix seconds.
    pub(crate) created: u64,
    /// When it was rotated out, unix seconds (retired keys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retired: Option<u64>,
    /// Until when it verifies, unix seconds, exclusive (retired keys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) until: Option<u64>,
}

impl Meta {
    /// A fresh metadata for one current key.
    pub(crate) fn new(current: MetaKey) -> Meta {
        Meta { format: META_FORMAT, current, retired: Vec::new() }
    }

    /// Reads `dir/keys.json`; `None` if there is none.
    pub(crate) fn read(dir: &Path) -> Result<Option<Meta>, KeyError> {
        let path = dir.join(META_FILE);
        let Some(bytes) = read_bounded(&path)? else {
            return Ok(None);
        };
        Meta::parse(&bytes).map(Some).map_err(|why| KeyError::Corrupt { path, why })
    }

    /// Reads metadata from its JSON, refusing what [`Meta::read`] refuses; the error says why.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Meta, String> {
        let meta: Meta = serde_json::from_slice(bytes).map_err(|e| format!("not valid key metadata: {e}"))?;
        meta.validate()?;
        Ok(meta)
    }

    /// Refuses what a store never writes: another format, a retired key without `until`, an
    /// id that is not 16 lower-case hex digits.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let meta = self;
        if meta.format != META_FORMAT {
            return Err(format!("metadata format {} is not {META_FORMAT}", meta.format));
        }
        if meta.retired.iter().any(|r| r.until.is_none()) {
            return Err("a retired key has no `until`".into());
        }
        let ids = std::iter::once(&meta.current).chain(&meta.retired);
        if ids.clone().any(|k| {
            k.id.len() != 16 || !k.id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        }) {
            return Err("a key id is not 16 lower-case hex digits".into());
        }
        Ok(())
    }

    /// Writes `dir/keys.json` atomically.
    pub(crate) fn write(&self, dir: &Path) -> Result<(), KeyError> {
        let mut text =
            serde_json::to_vec_pretty(self).map_err(|_| KeyError::Crypto("serialise key metadata"))?;
        text.push(b'\n');
        write_atomic(dir, META_FILE, &text)
    }
}

/// The file names of key set `id`: the RSA private key and the ECDSA private key, both
/// unencrypted PKCS#8 v1 DER.
pub(crate) fn key_file_names(id: &str) -> [String; 2] {
    [format!("{id}.rsa.p8"), format!("{id}.ec.p8")]
}

/// Whether `name` looks like a key file this store writes.
pub(crate) fn is_key_file(name: &str) -> bool {
    name.ends_with(".rsa.p8") || name.ends_with(".ec.p8")
}

/// Creates `dir` (owner-only, 0700, if it is made here) and its parents (with the usual
/// permissions: the storage directory is not the key store's to restrict).
pub(crate) fn create_dir(dir: &Path) -> Result<(), KeyError> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| KeyError::Io {
            action: "create directory",
            path: parent.to_owned(),
            source,
        })?;
    }
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|source| KeyError::Io {
        action: "create directory",
        path: dir.to_owned(),
        source,
    })
}

/// Reads a file of at most [`MAX_FILE_LEN`] bytes; `None` if it does not exist.
pub(crate) fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, KeyError> {
    let io = |source| KeyError::Io { action: "read", path: path.to_owned(), source };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_LEN + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_LEN {
        return Err(KeyError::Corrupt {
            path: path.to_owned(),
            why: format!("larger than {MAX_FILE_LEN} bytes"),
        });
    }
    Ok(Some(bytes))
}

/// Writes `dir/name` atomically, owner-only (0600).
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), KeyError> {
    let mut suffix = [0u8; 8];
    aws_lc_rs::rand::fill(&mut suffix).map_err(|_| KeyError::Crypto("draw a temporary file name"))?;
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), hex(&suffix)));
    let target = dir.join(name);
    let written = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp).map_err(|source| KeyError::Io {
            action: "create",
            path: tmp.clone(),
            source,
        })?;
        file.write_all(bytes).and_then(|()| file.sync_all()).map_err(|source| KeyError::Io {
            action: "write",
            path: tmp.clone(),
            source,
        })?;
        std::fs::rename(&tmp, &target).map_err(|source| KeyError::Io {
            action: "rename into place",
            path: target.clone(),
            source,
        })
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    sync_dir(dir)
}

/// Removes `dir/name`; a file already gone is fine.
pub(crate) fn remove(dir: &Path, name: &str) -> Result<(), KeyError> {
    let path = dir.join(name);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(KeyError::Io { action: "remove", path, source: e })
        }
        _ => Ok(()),
    }
}

/// The key files in `dir`, sorted.
pub(crate) fn key_files(dir: &Path) -> Result<Vec<String>, KeyError> {
    let io = |source| KeyError::Io { action: "list", path: dir.to_owned(), source };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let name = entry.map_err(io)?.file_name();
        if let Some(name) = name.to_str().filter(|n| is_key_file(n)) {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<(), KeyError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|source| KeyError::Io {
        action: "sync directory",
        path: dir.to_owned(),
        source,
    })
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<(), KeyError> {
    Ok(())
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The exclusive lock on a keys directory, held until dropped.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
    #[cfg(not(unix))]
    path: PathBuf,
}

impl DirLock {
    /// Waits for and takes the lock on `dir`.
    #[cfg(unix)]
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock, KeyError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let path: PathBuf = dir.join(LOCK_FILE);
        let io = |source| KeyError::Io { action: "lock", path: path.clone(), source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).map_err(|e| io(e.into()))?;
        Ok(DirLock { _file: file })
    }

    /// Takes the lock on `dir` by creating the lock file exclusively, waiting while another
    /// process holds it. Without `flock`, a crash leaves the file behind; the error then says
    /// to remove it.
    #[cfg(not(unix))]
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock, KeyError> {
        let path = dir.join(LOCK_FILE);
        for _ in 0..100 {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => return Ok(DirLock { _file: file, path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(source) => return Err(KeyError::Io { action: "lock", path, source }),
            }
        }
        Err(KeyError::Io {
            action: "lock (held for 10 s; remove it if no mesgd is creating or rotating keys)",
            path,
            source: std::io::ErrorKind::WouldBlock.into(),
        })
    }
}

#[cfg(not(unix))]
impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_are_owner_only_and_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "a.rsa.p8", b"one").unwrap();
        write_atomic(dir.path(), "a.rsa.p8", b"two").unwrap();
        assert_eq!(std::fs::read(dir.path().join("a.rsa.p8")).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join("a.rsa.p8")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn oversized_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(META_FILE);
        std::fs::write(&path, vec![b' '; MAX_FILE_LEN as usize + 1]).unwrap();
        assert!(matches!(Meta::read(dir.path()), Err(KeyError::Corrupt { .. })));
    }

    #[test]
    fn metadata_round_trips_and_refuses_unknown_formats() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Meta::read(dir.path()).unwrap(), None);
        let meta = Meta::new(MetaKey { id: "00".repeat(8), created: 5, retired: None, until: None });
        meta.write(dir.path()).unwrap();
        assert_eq!(Meta::read(dir.path()).unwrap(), Some(meta));
        let text = std::fs::read_to_string(dir.path().join(META_FILE))
            .unwrap()
            .replace("\"format\": 1", "\"format\": 9");
        std::fs::write(dir.path().join(META_FILE), text).unwrap();
        let err = Meta::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("format 9"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn the_lock_excludes_a_second_holder_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let held = DirLock::acquire(dir.path()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = dir.path().to_owned();
        let waiter = std::thread::spawn(move || {
            let _second = DirLock::acquire(&path).unwrap();
            tx.send(()).unwrap();
        });
        // The waiter cannot get the lock while `held` lives: nothing arrives.
        assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err());
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the second holder gets the lock");
        waiter.join().unwrap();
    }
}
