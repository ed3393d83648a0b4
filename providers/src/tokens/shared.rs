//! The key store as the nodes of a cluster share it ([`SharedKeys`]): `keys.json` and the
//! private keys of every set it names, in one message, and how a node makes its own store the
//! one it received ([`SharedKeys::import`]).
//!
//! A claim, grant or anonymous token signed by one node must verify on every other, and a
//! rotation on one (`--grace 0s` for a leaked key above all) must hold on all of them; so the
//! nodes keep one key store, which travels whole: a few sets of two private keys each (about
//! 2 KiB a set, at most [`MAX_RETIRED`] + 1 sets). It holds private keys: the channel that
//! carries it must be authenticated and encrypted, and [`SharedKeys`]'s `Debug` shows key ids
//! only.
//!
//! Importing keeps the store's rules: key files are written before the `keys.json` that names
//! them, under the store's `flock`, each checked against its id first, so a reader never sees
//! a half-made store, a rotation by a local process is never interleaved, and a bad message
//! never replaces a good store.

use std::fmt;
use std::path::Path;
use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::KeyError;
use super::claims::unix_seconds;
use super::keyfiles::{self, DirLock, Meta};
use super::keys::{KeySet, MAX_RETIRED, write_key_files};

/// The largest encoded [`SharedKeys`] accepted: nine sets of a 3072-bit RSA key and a P-256 key
/// are about 25 KiB in base64.
pub const MAX_SHARED_KEYS_LEN: usize = 256 * 1024;

/// A key store's metadata: which set is current and which retired ones verify until when. Two
/// stores with equal versions hold the same keys.
#[derive(Clone, PartialEq, Eq)]
pub struct KeysVersion(Meta);

impl fmt::Debug for KeysVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeysVersion")
            .field("current", &self.0.current.id)
            .field("retired", &self.0.retired.iter().map(|r| r.id.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

impl KeysVersion {
    /// The version of the store in `dir` now; `None` if it has none.
    pub fn of(dir: &Path) -> Result<Option<KeysVersion>, KeyError> {
        Ok(Meta::read(dir)?.map(KeysVersion))
    }

    /// The id of the set that signs, 16 hex digits.
    pub fn current_id(&self) -> &str {
        &self.0.current.id
    }
}

/// A whole key store, as it travels between nodes.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedKeys {
    meta: Meta,
    sets: Vec<SharedSet>,
}

/// One set's two private keys, PKCS#8 DER.
#[derive(Clone, PartialEq, Eq)]
struct SharedSet {
    id: String,
    rsa: Vec<u8>,
    ec: Vec<u8>,
}

impl fmt::Debug for SharedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeys")
            .field("version", &self.version())
            .field("sets", &self.sets.iter().map(|s| s.id.as_str()).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The wire form: JSON, the keys in standard base64.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    meta: Meta,
    sets: Vec<WireSet>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireSet {
    id: String,
    rsa: String,
    ec: String,
}

impl SharedKeys {
    /// The store in `dir` with the keys of its current set and of every retired set whose
    /// files are still there; `None` if `dir` has no store.
    pub fn export(dir: &Path) -> Result<Option<SharedKeys>, KeyError> {
        // A rotation may prune files between reading the metadata and the files: start over.
        for _ in 0..3 {
            let Some(meta) = Meta::read(dir)? else {
                return Ok(None);
            };
            let mut sets = Vec::with_capacity(1 + meta.retired.len());
            let mut complete = true;
            for key in std::iter::once(&meta.current).chain(&meta.retired) {
                let [rsa_name, ec_name] = keyfiles::key_file_names(&key.id);
                match (
                    keyfiles::read_bounded(&dir.join(rsa_name))?,
                    keyfiles::read_bounded(&dir.join(ec_name))?,
                ) {
                    (Some(rsa), Some(ec)) => sets.push(SharedSet { id: key.id.clone(), rsa, ec }),
                    // A retired set pruned at its end of grace travels as a name only.
                    _ if key.id != meta.current.id => {}
                    _ => complete = false,
                }
            }
            if complete {
                let shared = SharedKeys { meta, sets };
                shared.check(dir, SystemTime::now())?;
                return Ok(Some(shared));
            }
        }
        Err(KeyError::Corrupt {
            path: dir.join(keyfiles::META_FILE),
            why: "it names a current key set whose files are missing".into(),
        })
    }

    /// Which keys these are.
    pub fn version(&self) -> KeysVersion {
        KeysVersion(self.meta.clone())
    }

    /// The wire form.
    pub fn encode(&self) -> Vec<u8> {
        let wire = Wire {
            meta: self.meta.clone(),
            sets: self
                .sets
                .iter()
                .map(|s| WireSet {
                    id: s.id.clone(),
                    rsa: STANDARD.encode(&s.rsa),
                    ec: STANDARD.encode(&s.ec),
                })
                .collect(),
        };
        // Strings and integers only: serialisation cannot fail.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads the wire form. Every set's keys are parsed and checked against its id, the
    /// metadata names every set given and has its current set among them; what a key file
    /// would be refused for at load is refused here, before anything is written.
    pub fn decode(bytes: &[u8]) -> Result<SharedKeys, SharedKeysError> {
        if bytes.len() > MAX_SHARED_KEYS_LEN {
            return Err(SharedKeysError::TooLong { len: bytes.len(), max: MAX_SHARED_KEYS_LEN });
        }
        let wire: Wire =
            serde_json::from_slice(bytes).map_err(|e| SharedKeysError::Malformed(e.to_string()))?;
        wire.meta.validate().map_err(SharedKeysError::Malformed)?;
        if wire.meta.retired.len() > MAX_RETIRED {
            return Err(SharedKeysError::Malformed(format!(
                "{} retired key sets (at most {MAX_RETIRED})",
                wire.meta.retired.len()
            )));
        }
        let named: Vec<&str> =
            std::iter::once(&wire.meta.current).chain(&wire.meta.retired).map(|k| k.id.as_str()).collect();
        let mut sets = Vec::with_capacity(wire.sets.len());
        for set in wire.sets {
            if !named.contains(&set.id.as_str()) || sets.iter().any(|s: &SharedSet| s.id == set.id) {
                return Err(SharedKeysError::Malformed(format!(
                    "key set {:?} is not named by the metadata, or given twice",
                    short(&set.id)
                )));
            }
            let rsa = STANDARD.decode(&set.rsa).map_err(|_| SharedKeysError::BadKey {
                id: short(&set.id),
                why: "its RSA key is not base64",
            })?;
            let ec = STANDARD.decode(&set.ec).map_err(|_| SharedKeysError::BadKey {
                id: short(&set.id),
                why: "its ECDSA key is not base64",
            })?;
            let parsed = KeySet::from_der(&rsa, &ec).map_err(|e| SharedKeysError::BadKey {
                id: short(&set.id),
                why: match e {
                    super::keys::DerError::Rsa(why) | super::keys::DerError::Ec(why) => why,
                },
            })?;
            if parsed.id.to_string() != set.id {
                return Err(SharedKeysError::BadKey { id: short(&set.id), why: "its keys have another id" });
            }
            sets.push(SharedSet { id: set.id, rsa, ec });
        }
        if !sets.iter().any(|s| s.id == wire.meta.current.id) {
            return Err(SharedKeysError::Malformed("the current key set's keys are missing".into()));
        }
        Ok(SharedKeys { meta: wire.meta, sets })
    }

    /// Makes the store in `dir` (created if missing) exactly this one: the sets it lacks are
    /// written, then `keys.json`, then the key files no longer named are removed; all under the
    /// store's lock. Returns whether anything changed (nothing is written when `dir` already
    /// holds this version). A process that loaded the store before sees the change at its next
    /// [`super::KeyStore::refresh`].
    pub fn import(&self, dir: &Path, now: SystemTime) -> Result<bool, KeyError> {
        keyfiles::create_dir(dir)?;
        let _lock = DirLock::acquire(dir)?;
        if Meta::read(dir)?.as_ref() == Some(&self.meta) {
            return Ok(false);
        }
        self.check(dir, now)?;
        for set in &self.sets {
            let [rsa_name, ec_name] = keyfiles::key_file_names(&set.id);
            if dir.join(&rsa_name).exists() && dir.join(&ec_name).exists() {
                // Named by its id, which its keys determine: the same keys (checked at load).
                continue;
            }
            let id = super::keys::parse_key_id(&set.id).ok_or_else(|| KeyError::Corrupt {
                path: dir.join(&rsa_name),
                why: "a key id is not 16 hex digits".into(),
            })?;
            write_key_files(dir, id, &[set.rsa.clone(), set.ec.clone()])?;
        }
        self.meta.write(dir)?;
        let kept: Vec<String> = std::iter::once(&self.meta.current)
            .chain(&self.meta.retired)
            .flat_map(|k| keyfiles::key_file_names(&k.id))
            .collect();
        for name in keyfiles::key_files(dir)? {
            if !kept.contains(&name) {
                keyfiles::remove(dir, &name)?;
            }
        }
        Ok(true)
    }

    /// Every set the store will need at `now` (the current one, the retired ones in their
    /// grace period) is given here or already on disk in `dir`.
    fn check(&self, dir: &Path, now: SystemTime) -> Result<(), KeyError> {
        let now = unix_seconds(now);
        let needed = std::iter::once(&self.meta.current)
            .chain(self.meta.retired.iter().filter(|r| r.until.is_some_and(|u| u > now)));
        for key in needed {
            let given = self.sets.iter().any(|s| s.id == key.id);
            let on_disk = keyfiles::key_file_names(&key.id).iter().all(|name| dir.join(name).exists());
            if !given && !on_disk {
                return Err(KeyError::Corrupt {
                    path: dir.join(keyfiles::META_FILE),
                    why: format!("the shared key store names key set {} without its keys", key.id),
                });
            }
        }
        Ok(())
    }
}

/// Why bytes are not a [`SharedKeys`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SharedKeysError {
    /// Longer than [`MAX_SHARED_KEYS_LEN`].
    #[error("a shared key store of {len} bytes (at most {max})")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not the JSON of a key store, or its metadata is inconsistent.
    #[error("not a shared key store: {0}")]
    Malformed(String),
    /// A set's keys cannot be used.
    #[error("shared key set {id:?}: {why}")]
    BadKey {
        /// The set's id as given (at most 16 characters).
        id: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// At most 16 characters of an id from the wire, for an error message.
fn short(id: &str) -> String {
    id.chars().take(16).collect()
}

/// The body of the `cluster_token_keys` fuzz target: any bytes are refused, or decode to a
/// store that encodes back to the same store.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    use super::SharedKeys;

    /// Panics on a bug, returns on any input otherwise.
    pub fn shared_keys(data: &[u8]) {
        if let Ok(keys) = SharedKeys::decode(data) {
            let again = SharedKeys::decode(&keys.encode()).expect("an encoded store decodes");
            assert_eq!(again, keys, "the wire form round-trips");
        }
    }
}
