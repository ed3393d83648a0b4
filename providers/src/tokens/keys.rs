//! The server's token keys: one current key set that signs and encrypts new tokens, and the
//! retired sets that still verify (and decrypt) tokens until their grace period ends.
//!
//! A key set is an RSA-3072 key (claims are encrypted to it with RSA-OAEP) and an ECDSA P-256
//! key (tokens are signed with it). Its id is the first 8 bytes of SHA-256 over the ECDSA public
//! point (65 bytes, uncompressed) followed by the RSA public key (X.509 SubjectPublicKeyInfo
//! DER): derived from the keys, so a key file that does not match its name is caught at load.
//!
//! On disk, under `<storage.dir>/keys/` ([`keys_dir`]):
//!
//! | file | content |
//! |---|---|
//! | `keys.json` | which set is current, and the retired ones with their retirement and end of grace |
//! | `<id>.rsa.p8`, `<id>.ec.p8` | the set's private keys, unencrypted PKCS#8 v1 DER, mode 0600 |
//! | `lock` | the `flock(2)` writers hold (see `keyfiles`) |
//!
//! Nothing that exists is ever overwritten: a missing, unreadable or corrupt file named by
//! `keys.json` is an error that says what to do, and key files that no `keys.json` names stop
//! the creation of new ones.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::rsa::{KeySize, OaepPrivateDecryptingKey, OaepPublicEncryptingKey, PrivateDecryptingKey};
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _, ParsedPublicKey,
};

use super::KeyError;
use super::claims::unix_seconds;
use super::keyfiles::{self, DirLock, Meta, MetaKey};

/// The RSA modulus size of new key sets, in bits. 3072 bits give about 128 bits of security,
/// the level of AES-256-GCM's 128-bit tag and of P-256; 2048 bits (about 112) are deprecated by
/// NIST SP 800-57 after 2030. RSA is used once per token verification (to unwrap the AES key),
/// never per message, so the slower decryption costs little.
pub const RSA_BITS: usize = 3072;

/// At most this many retired key sets in their grace period at once.
pub const MAX_RETIRED: usize = 8;

/// The directory the key store lives in, under the storage directory.
pub fn keys_dir(storage_dir: &Path) -> PathBuf {
    storage_dir.join("keys")
}

/// A key set's id: 8 bytes, written as 16 lower-case hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId(pub [u8; 8]);

impl KeyId {
    fn of(ec_public: &[u8], rsa_public_der: &[u8]) -> KeyId {
        let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        ctx.update(ec_public);
        ctx.update(rsa_public_der);
        let digest = ctx.finish();
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest.as_ref()[..8]);
        KeyId(id)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&keyfiles::hex(&self.0))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// One key set, loaded.
pub(crate) struct KeySet {
    pub(crate) id: KeyId,
    pub(crate) decrypting: OaepPrivateDecryptingKey,
    pub(crate) encrypting: OaepPublicEncryptingKey,
    pub(crate) signing: EcdsaKeyPair,
    pub(crate) verifying: ParsedPublicKey,
}

impl KeySet {
    fn generate() -> Result<(KeySet, [Vec<u8>; 2]), KeyError> {
        let rsa = PrivateDecryptingKey::generate(KeySize::Rsa3072)
            .map_err(|_| KeyError::Crypto("generate an RSA key"))?;
        let rsa_der = rsa.as_der().map_err(|_| KeyError::Crypto("serialise an RSA key"))?.as_ref().to_vec();
        let ec = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING)
            .map_err(|_| KeyError::Crypto("generate an ECDSA key"))?;
        let ec_der =
            ec.to_pkcs8v1().map_err(|_| KeyError::Crypto("serialise an ECDSA key"))?.as_ref().to_vec();
        let set = KeySet::from_parts(rsa, ec).map_err(KeyError::Crypto)?;
        Ok((set, [rsa_der, ec_der]))
    }

    fn from_parts(rsa: PrivateDecryptingKey, ec: EcdsaKeyPair) -> Result<KeySet, &'static str> {
        let rsa_public = rsa.public_key();
        let rsa_public_der = rsa_public.as_der().map_err(|_| "serialise the RSA public key")?;
        let id = KeyId::of(ec.public_key().as_ref(), rsa_public_der.as_ref());
        let verifying = ParsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, ec.public_key().as_ref())
            .map_err(|_| "parse the ECDSA public key")?;
        Ok(KeySet {
            id,
            encrypting: OaepPublicEncryptingKey::new(rsa_public).map_err(|_| "use the RSA public key")?,
            decrypting: OaepPrivateDecryptingKey::new(rsa).map_err(|_| "use the RSA private key")?,
            signing: ec,
            verifying,
        })
    }

    /// The set of an RSA and an ECDSA private key, each PKCS#8 DER, checked as at load.
    pub(crate) fn from_der(rsa_der: &[u8], ec_der: &[u8]) -> Result<KeySet, DerError> {
        let rsa = PrivateDecryptingKey::from_pkcs8(rsa_der)
            .map_err(|_| DerError::Rsa("not an RSA private key in PKCS#8 DER"))?;
        if rsa.key_size_bits() < 2048 {
            return Err(DerError::Rsa("the RSA key is shorter than 2048 bits"));
        }
        let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, ec_der)
            .map_err(|_| DerError::Ec("not an ECDSA P-256 private key in PKCS#8 DER"))?;
        KeySet::from_parts(rsa, ec).map_err(DerError::Rsa)
    }

    /// Loads set `id` from `dir`; `Ok(None)` if one of its files is gone (a concurrent prune).
    fn load(dir: &Path, id: &str) -> Result<Option<KeySet>, KeyError> {
        let [rsa_name, ec_name] = keyfiles::key_file_names(id);
        let (rsa_path, ec_path) = (dir.join(&rsa_name), dir.join(&ec_name));
        let (Some(rsa_der), Some(ec_der)) =
            (keyfiles::read_bounded(&rsa_path)?, keyfiles::read_bounded(&ec_path)?)
        else {
            return Ok(None);
        };
        let corrupt =
            |path: &Path, why: &str| KeyError::Corrupt { path: path.to_owned(), why: why.to_owned() };
        let set = KeySet::from_der(&rsa_der, &ec_der).map_err(|e| match e {
            DerError::Rsa(why) => corrupt(&rsa_path, why),
            DerError::Ec(why) => corrupt(&ec_path, why),
        })?;
        if set.id.to_string() != id {
            return Err(corrupt(
                &ec_path,
                &format!(
                    "the keys in {rsa_name} and {ec_name} have id {}, not the {id} their names say",
                    set.id
                ),
            ));
        }
        Ok(Some(set))
    }
}

/// Which of a set's two keys is unusable, and why.
#[derive(Debug)]
pub(crate) enum DerError {
    Rsa(&'static str),
    Ec(&'static str),
}

/// A retired key set and its grace period.
struct Retired {
    id: KeyId,
    retired: u64,
    until: u64,
    /// `None` once its grace period had ended when the store was loaded.
    keys: Option<KeySet>,
}

/// What [`KeyStore::key_ids`] reports about one key set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    /// The set's id.
    pub id: KeyId,
    /// `None` for the current set; for a retired one, when it was rotated out and until when
    /// it verifies (unix seconds).
    pub retired: Option<(u64, u64)>,
}

/// The server's token keys. Cheap to share behind an `Arc`; every operation takes `&self`
/// except [`KeyStore::rotate`] and [`KeyStore::refresh`].
pub struct KeyStore {
    dir: PathBuf,
    meta: Meta,
    current: KeySet,
    retired: Vec<Retired>,
}

impl fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyStore")
            .field("dir", &self.dir)
            .field("current", &self.current.id)
            .field("retired", &self.retired.iter().map(|r| r.id).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl KeyStore {
    /// Opens the store in `dir` (see [`keys_dir`]), creating the directory and a first key set
    /// if there is none. Another process creating it at the same moment is waited for, and its
    /// keys are used.
    pub fn open_or_create(dir: &Path, now: SystemTime) -> Result<KeyStore, KeyError> {
        keyfiles::create_dir(dir)?;
        if let Some(store) = KeyStore::load(dir, now)? {
            return Ok(store);
        }
        let _lock = DirLock::acquire(dir)?;
        if let Some(store) = KeyStore::load(dir, now)? {
            return Ok(store);
        }
        let orphans = keyfiles::key_files(dir)?;
        if !orphans.is_empty() {
            return Err(KeyError::Orphans {
                dir: dir.to_owned(),
                meta: keyfiles::META_FILE,
                files: orphans.join(", "),
            });
        }
        let created = unix_seconds(now);
        let (set, files) = KeySet::generate()?;
        write_key_files(dir, set.id, &files)?;
        let meta = Meta::new(MetaKey { id: set.id.to_string(), created, retired: None, until: None });
        meta.write(dir)?;
        Ok(KeyStore { dir: dir.to_owned(), meta, current: set, retired: Vec::new() })
    }

    /// Opens an existing store; [`KeyError::Missing`] if `dir` has none. Never writes.
    pub fn open(dir: &Path, now: SystemTime) -> Result<KeyStore, KeyError> {
        KeyStore::load(dir, now)?.ok_or_else(|| KeyError::Missing { dir: dir.to_owned() })
    }

    /// Makes a new key set current. The previous current set verifies until `now + grace`
    /// (`grace` zero: at once no more, for a compromised key); retired sets whose grace has
    /// ended are pruned, files included. The store is re-read under the lock first, so a
    /// rotation by another process is never lost.
    pub fn rotate(&mut self, now: SystemTime, grace: Duration) -> Result<(), KeyError> {
        let _lock = DirLock::acquire(&self.dir)?;
        let fresh = KeyStore::open(&self.dir, now)?;
        let now_s = unix_seconds(now);
        let until = now_s.saturating_add(grace.as_secs());
        let mut retired: Vec<MetaKey> = Vec::with_capacity(fresh.meta.retired.len() + 1);
        if until > now_s {
            retired.push(MetaKey { retired: Some(now_s), until: Some(until), ..fresh.meta.current.clone() });
        }
        retired.extend(fresh.meta.retired.iter().filter(|r| r.until.is_some_and(|u| u > now_s)).cloned());
        if retired.len() > MAX_RETIRED {
            return Err(KeyError::TooManyRetired { count: retired.len(), max: MAX_RETIRED });
        }
        let (set, files) = KeySet::generate()?;
        write_key_files(&self.dir, set.id, &files)?;
        let meta = Meta {
            retired,
            ..Meta::new(MetaKey { id: set.id.to_string(), created: now_s, retired: None, until: None })
        };
        meta.write(&self.dir)?;
        let kept: Vec<&str> =
            meta.retired.iter().map(|r| r.id.as_str()).chain([meta.current.id.as_str()]).collect();
        let pruned = [&fresh.meta.current]
            .into_iter()
            .chain(&fresh.meta.retired)
            .filter(|k| !kept.contains(&k.id.as_str()));
        for key in pruned {
            for name in keyfiles::key_file_names(&key.id) {
                keyfiles::remove(&self.dir, &name)?;
            }
        }
        *self = KeyStore::open(&self.dir, now)?;
        Ok(())
    }

    /// Re-reads the store if another process rotated it since it was loaded; `true` if it did.
    /// A long-running broker calls this when it meets an unknown key id, or periodically.
    pub fn refresh(&mut self, now: SystemTime) -> Result<bool, KeyError> {
        match Meta::read(&self.dir)? {
            Some(meta) if meta == self.meta => Ok(false),
            _ => {
                *self = KeyStore::open(&self.dir, now)?;
                Ok(true)
            }
        }
    }

    /// Whether `keys.json` on disk is no longer the one this store loaded (another process,
    /// or a cluster, changed the keys): a cheap read that takes no lock, for a caller that
    /// holds the store behind a lock and wants [`KeyStore::refresh`]'s write only when needed.
    pub fn is_stale(&self) -> Result<bool, KeyError> {
        Ok(Meta::read(&self.dir)?.as_ref() != Some(&self.meta))
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The id of the key set that signs new tokens.
    pub fn current_key_id(&self) -> KeyId {
        self.current.id
    }

    /// Every key set in the store: the current one first, then the retired ones, newest first.
    pub fn key_ids(&self) -> Vec<KeyInfo> {
        std::iter::once(KeyInfo { id: self.current.id, retired: None })
            .chain(self.retired.iter().map(|r| KeyInfo { id: r.id, retired: Some((r.retired, r.until)) }))
            .collect()
    }

    pub(crate) fn current(&self) -> &KeySet {
        &self.current
    }

    /// The key set that verifies tokens signed with `id` at `now`.
    pub(crate) fn verifier(&self, id: KeyId, now: SystemTime) -> Result<&KeySet, super::TokenError> {
        if id == self.current.id {
            return Ok(&self.current);
        }
        let retired =
            self.retired.iter().find(|r| r.id == id).ok_or(super::TokenError::UnknownKey { key_id: id })?;
        match &retired.keys {
            Some(keys) if unix_seconds(now) < retired.until => Ok(keys),
            _ => Err(super::TokenError::KeyRetired { key_id: id, until: retired.until }),
        }
    }

    /// Loads the store in `dir`; `None` if it has no metadata. A key file that vanishes while
    /// loading (another process pruned it) makes it start over with the new metadata.
    fn load(dir: &Path, now: SystemTime) -> Result<Option<KeyStore>, KeyError> {
        const ATTEMPTS: usize = 3;
        for _ in 0..ATTEMPTS {
            let Some(meta) = Meta::read(dir)? else {
                return Ok(None);
            };
            match KeyStore::load_sets(dir, &meta, now)? {
                Some((current, retired)) => {
                    return Ok(Some(KeyStore { dir: dir.to_owned(), meta, current, retired }));
                }
                None if Meta::read(dir)?.as_ref() != Some(&meta) => continue,
                None => break,
            }
        }
        Err(KeyError::Corrupt {
            path: dir.join(keyfiles::META_FILE),
            why: "it names a key set whose files are missing".into(),
        })
    }

    fn load_sets(
        dir: &Path,
        meta: &Meta,
        now: SystemTime,
    ) -> Result<Option<(KeySet, Vec<Retired>)>, KeyError> {
        let path = dir.join(keyfiles::META_FILE);
        let Some(current) = KeySet::load(dir, &meta.current.id)? else {
            return Ok(None);
        };
        let mut retired = Vec::with_capacity(meta.retired.len());
        for r in &meta.retired {
            let until = r.until.unwrap_or(0);
            let keys = if unix_seconds(now) < until {
                match KeySet::load(dir, &r.id)? {
                    Some(keys) => Some(keys),
                    None => return Ok(None),
                }
            } else {
                None
            };
            let id = keys.as_ref().map(|k| k.id).or_else(|| parse_key_id(&r.id)).ok_or_else(|| {
                KeyError::Corrupt { path: path.clone(), why: "a retired key id is not 16 hex digits".into() }
            })?;
            retired.push(Retired { id, retired: r.retired.unwrap_or(0), until, keys });
        }
        Ok(Some((current, retired)))
    }
}

pub(crate) fn write_key_files(dir: &Path, id: KeyId, files: &[Vec<u8>; 2]) -> Result<(), KeyError> {
    let id = id.to_string();
    for (name, bytes) in keyfiles::key_file_names(&id).iter().zip(files) {
        keyfiles::write_atomic(dir, name, bytes)?;
    }
    Ok(())
}

pub(crate) fn parse_key_id(text: &str) -> Option<KeyId> {
    if text.len() != 16 {
        return None;
    }
    let mut id = [0u8; 8];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(KeyId(id))
}
