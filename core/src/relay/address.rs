//! Address rules: valid addresses, public keys, derived addresses, and what a `register` claims.
//!
//! An address is any string of 1 to 256 characters (Unicode scalar values, not bytes) in one
//! namespace shared by every transport. A public key (`pubkey`, the standard base64 of the raw
//! key bytes) derives the self-certifying address: the lowercase RFC 4648 base32, without
//! padding, of SHA-256 over the raw key — 52 characters. 256 bits make 51 full 5-bit groups and
//! one last group holding a single bit, so the 52nd character is always `a` or `q`.
//!
//! An alias is a freely chosen address. None may have the shape of a derived address
//! ([`is_derived_shape`]: exactly the strings some key could derive), or a client could take a
//! key's address without the key. Registering a derived-shaped address is allowed only together
//! with the key it derives from.

use std::fmt;

use aws_lc_rs::digest;
use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use super::error::RelayError;

/// The longest address, in characters.
pub const MAX_ADDRESS_CHARS: usize = 256;

/// The length of a derived address, in characters.
pub const DERIVED_ADDRESS_LEN: usize = 52;

/// The longest public key accepted, in bytes once decoded. Keys are hashed, never stored, so
/// the bound only keeps a `register` cheap; real keys (Ed25519, X25519, P-256) are 32–65 bytes.
pub const MAX_PUBKEY_BYTES: usize = 512;

/// The length of an Ed25519 public key, the only kind a key proof can verify.
pub const ED25519_KEY_LEN: usize = 32;

/// Standard base64 (RFC 4648 §4) that reads input with or without padding and writes it with.
/// Non-canonical trailing bits are refused, so one key has one text per padding choice.
pub(crate) const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

const BASE32_ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Whether `s` is a valid address: 1–256 characters.
pub fn is_valid_address(s: &str) -> bool {
    // A character is at least one byte, so short strings need no counting.
    !s.is_empty() && (s.len() <= MAX_ADDRESS_CHARS || s.chars().nth(MAX_ADDRESS_CHARS).is_none())
}

/// Checks an address: [`RelayError::InvalidAddress`] if it is empty or over 256 characters.
pub fn validate_address(s: &str) -> Result<(), RelayError> {
    if is_valid_address(s) { Ok(()) } else { Err(RelayError::InvalidAddress) }
}

/// Checks a freely chosen address: valid, and not of the shape of a derived address.
pub fn validate_alias(s: &str) -> Result<(), RelayError> {
    validate_address(s)?;
    if is_derived_shape(s) { Err(RelayError::InvalidAddress) } else { Ok(()) }
}

/// Whether `s` could be a derived address: 52 characters, the first 51 from `a–z2–7` and the
/// last `a` or `q` (its low four bits are padding, always zero).
pub fn is_derived_shape(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == DERIVED_ADDRESS_LEN
        && b[..DERIVED_ADDRESS_LEN - 1].iter().all(|c| matches!(c, b'a'..=b'z' | b'2'..=b'7'))
        && matches!(b[DERIVED_ADDRESS_LEN - 1], b'a' | b'q')
}

/// The address a raw public key derives: lowercase unpadded base32 of its SHA-256.
pub fn derive_address(raw_key: &[u8]) -> String {
    base32_lower(&key_digest(raw_key))
}

/// SHA-256 over the raw key: what identifies a key (and what alias bindings store).
pub(crate) fn key_digest(raw_key: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, raw_key).as_ref());
    out
}

/// RFC 4648 base32 with the lowercase alphabet and no padding.
fn base32_lower(bytes: &[u8]) -> String {
    let mut out = String::with_capacity((bytes.len() * 8).div_ceil(5));
    let mut acc: u16 = 0;
    let mut bits = 0;
    for &byte in bytes {
        acc = (acc << 8) | u16::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(BASE32_ALPHABET[usize::from((acc >> bits) & 0x1f)]));
        }
    }
    if bits > 0 {
        out.push(char::from(BASE32_ALPHABET[usize::from((acc << (5 - bits)) & 0x1f)]));
    }
    out
}

/// A decoded public key: 1–512 raw bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    raw: Box<[u8]>,
    digest: [u8; 32],
}

impl PublicKey {
    /// Decodes a `pubkey` field: standard base64 (padding optional) of 1–512 bytes, else
    /// [`RelayError::InvalidPubkey`].
    pub fn from_base64(text: &str) -> Result<Self, RelayError> {
        // Four characters carry three bytes: refuse over-long input before decoding it.
        if text.len() > MAX_PUBKEY_BYTES.div_ceil(3) * 4 {
            return Err(RelayError::InvalidPubkey);
        }
        let raw = BASE64.decode(text).map_err(|_| RelayError::InvalidPubkey)?;
        if raw.is_empty() || raw.len() > MAX_PUBKEY_BYTES {
            return Err(RelayError::InvalidPubkey);
        }
        let digest = key_digest(&raw);
        Ok(PublicKey { raw: raw.into_boxed_slice(), digest })
    }

    /// The raw key bytes.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// SHA-256 of the raw key.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The address this key derives.
    pub fn derived_address(&self) -> String {
        base32_lower(&self.digest)
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.derived_address())
    }
}

/// What a `register` asks for, once its `addr` and `pubkey` are checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A freely chosen address without a key. It must not be an alias bound to a key.
    Plain {
        /// The address.
        address: String,
    },
    /// The address derived from the key (`pubkey` alone, or `addr` equal to its derivation).
    Derived {
        /// The derived address.
        address: String,
        /// The key.
        key: PublicKey,
    },
    /// A freely chosen address bound to a key: first key wins.
    Alias {
        /// The alias.
        address: String,
        /// The key.
        key: PublicKey,
    },
}

impl Claim {
    /// Checks the `addr` and `pubkey` of a `register`:
    /// - neither: `invalid address` (an empty address);
    /// - a `pubkey` that does not decode: `invalid pubkey`;
    /// - an `addr` that is empty or over 256 characters, or derived-shaped without being the
    ///   derivation of the given key: `invalid address`.
    pub fn from_register(addr: Option<&str>, pubkey: Option<&str>) -> Result<Claim, RelayError> {
        let key = pubkey.map(PublicKey::from_base64).transpose()?;
        match (addr, key) {
            (None, None) => Err(RelayError::InvalidAddress),
            (None, Some(key)) => Ok(Claim::Derived { address: key.derived_address(), key }),
            (Some(addr), key) => {
                validate_address(addr)?;
                let derived = is_derived_shape(addr);
                match key {
                    None if derived => Err(RelayError::InvalidAddress),
                    None => Ok(Claim::Plain { address: addr.to_owned() }),
                    Some(key) if derived => {
                        if key.derived_address() == addr {
                            Ok(Claim::Derived { address: addr.to_owned(), key })
                        } else {
                            Err(RelayError::InvalidAddress)
                        }
                    }
                    Some(key) => Ok(Claim::Alias { address: addr.to_owned(), key }),
                }
            }
        }
    }

    /// The address claimed.
    pub fn address(&self) -> &str {
        match self {
            Claim::Plain { address } | Claim::Derived { address, .. } | Claim::Alias { address, .. } => {
                address
            }
        }
    }

    /// The key, if the claim has one.
    pub fn key(&self) -> Option<&PublicKey> {
        match self {
            Claim::Plain { .. } => None,
            Claim::Derived { key, .. } | Claim::Alias { key, .. } => Some(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Computed once with Python's standard library:
    /// `python3 -c "import hashlib,base64; k=bytes(range(32));
    ///  print(base64.b64encode(k).decode(),
    ///        base64.b32encode(hashlib.sha256(k).digest()).decode().rstrip('=').lower())"`
    /// (and the same for `b''` and 32 zero bytes).
    const VECTORS: [(&[u8], &str); 3] = [
        (b"", "4oymiquy7qobjgx36tejs35zeqt24qpemsnzgtfeswmrw6csxbkq"),
        (
            &[
                0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
                26, 27, 28, 29, 30, 31,
            ],
            "mmg42klgyqzwneiskrelxms3j72bfje4omw3fsflyg4fqg6xcdoq",
        ),
        (&[0; 32], "mzuhvlpymk6xo3epygfy5h4oeaejofefn3rdhm4qfjmr2dk7fesq"),
    ];

    #[test]
    fn derived_addresses_match_an_independent_computation() {
        for (key, address) in VECTORS {
            assert_eq!(derive_address(key), address);
            assert!(is_derived_shape(address));
        }
        let key = PublicKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
        assert_eq!(key.derived_address(), VECTORS[1].1);
    }

    #[test]
    fn address_lengths_count_characters() {
        assert!(!is_valid_address(""));
        assert!(is_valid_address("a"));
        assert!(is_valid_address(&"a".repeat(256)));
        assert!(!is_valid_address(&"a".repeat(257)));
        // 256 four-byte characters are 1024 bytes and still valid.
        assert!(is_valid_address(&"😀".repeat(256)));
        assert!(!is_valid_address(&"😀".repeat(257)));
        assert_eq!(validate_address(""), Err(RelayError::InvalidAddress));
    }

    #[test]
    fn derived_shape_is_exact() {
        let derived = VECTORS[0].1;
        assert!(is_derived_shape(derived));
        let mut last_z = derived[..51].to_string();
        last_z.push('z');
        assert!(!is_derived_shape(&last_z), "the last character carries one bit: a or q only");
        assert!(!is_derived_shape(&derived.to_uppercase()));
        assert!(!is_derived_shape(&derived[..51]));
        assert!(!is_derived_shape(&format!("{derived}a")));
        let with_one = derived.replacen('4', "1", 1);
        assert!(!is_derived_shape(&with_one));
        assert_eq!(validate_alias(derived), Err(RelayError::InvalidAddress));
        assert_eq!(validate_alias("alice"), Ok(()));
    }

    #[test]
    fn pubkey_decoding_table() {
        let cases: [(&str, Result<usize, RelayError>); 9] = [
            // Padding is optional, and a partial one is read as none.
            ("AQ=", Ok(1)),
            ("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", Ok(32)),
            ("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", Ok(32)),
            ("AQ==", Ok(1)),
            ("", Err(RelayError::InvalidPubkey)),
            ("not base64!", Err(RelayError::InvalidPubkey)),
            ("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8-", Err(RelayError::InvalidPubkey)),
            ("AR==", Err(RelayError::InvalidPubkey)),
            ("A", Err(RelayError::InvalidPubkey)),
        ];
        for (text, expected) in cases {
            assert_eq!(PublicKey::from_base64(text).map(|k| k.raw().len()), expected, "{text:?}");
        }
        let long = BASE64.encode(vec![7u8; MAX_PUBKEY_BYTES]);
        assert!(PublicKey::from_base64(&long).is_ok());
        let too_long = BASE64.encode(vec![7u8; MAX_PUBKEY_BYTES + 1]);
        assert_eq!(PublicKey::from_base64(&too_long), Err(RelayError::InvalidPubkey));
    }

    #[test]
    fn register_claims() {
        let key_b64 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let derived = VECTORS[1].1;
        let other_derived = VECTORS[0].1;
        let claim = |addr, key| Claim::from_register(addr, key);

        assert_eq!(claim(None, None), Err(RelayError::InvalidAddress));
        assert_eq!(claim(Some(""), None), Err(RelayError::InvalidAddress));
        assert_eq!(claim(Some("alice"), None), Ok(Claim::Plain { address: "alice".into() }));
        assert_eq!(claim(Some(derived), None), Err(RelayError::InvalidAddress));
        assert_eq!(claim(None, Some("!!")), Err(RelayError::InvalidPubkey));
        assert_eq!(claim(Some("alice"), Some("!!")), Err(RelayError::InvalidPubkey));

        let by_key = claim(None, Some(key_b64)).unwrap();
        assert!(matches!(&by_key, Claim::Derived { address, .. } if address == derived));
        assert_eq!(claim(Some(derived), Some(key_b64)), Ok(by_key));
        assert_eq!(claim(Some(other_derived), Some(key_b64)), Err(RelayError::InvalidAddress));

        let alias = claim(Some("alice"), Some(key_b64)).unwrap();
        assert!(matches!(&alias, Claim::Alias { address, .. } if address == "alice"));
        assert_eq!(alias.key().map(|k| k.raw().len()), Some(32));
    }

    #[test]
    fn debug_shows_the_derived_address_only() {
        let key = PublicKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
        assert_eq!(format!("{key:?}"), format!("PublicKey({})", VECTORS[1].1));
    }

    proptest! {
        /// Every derivation has the derived shape, and base32 decodes back to the digest (the
        /// inverse checked with an independent decoder: base32 via the standard alphabet).
        #[test]
        fn derivations_have_the_shape(key in proptest::collection::vec(any::<u8>(), 0..80)) {
            let address = derive_address(&key);
            prop_assert!(is_derived_shape(&address));
            prop_assert_eq!(decode_base32(&address), key_digest(&key).to_vec());
        }

        /// Strings of every other length are never derived-shaped, so any of them is an alias.
        #[test]
        fn other_lengths_are_never_derived(s in "[a-z2-7]{0,51}|[a-z2-7]{53,60}") {
            prop_assert!(!is_derived_shape(&s));
        }
    }

    /// A plain bit-by-bit base32 decoder for the property above.
    fn decode_base32(text: &str) -> Vec<u8> {
        let bits: Vec<u8> = text
            .bytes()
            .flat_map(|c| {
                let v = BASE32_ALPHABET.iter().position(|&a| a == c).unwrap() as u8;
                (0..5).rev().map(move |i| (v >> i) & 1)
            })
            .collect();
        bits.chunks_exact(8).map(|byte| byte.iter().fold(0, |acc, b| acc << 1 | b)).collect()
    }
}
