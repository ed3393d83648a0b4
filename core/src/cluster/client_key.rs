//! MQTT client id → NATS KV key, and back.
//!
//! The cluster's session registry keeps one record per client id in a JetStream KV bucket. KV
//! keys may hold only `-`, `/`, `_`, `=`, `.`, ASCII letters and digits, and a `.` splits the
//! key into subject tokens (none may be empty); a client id may hold any Unicode. So:
//!
//! - ASCII letters, digits, `-` and `_` stand for themselves;
//! - every other byte of the id's UTF-8 (`.`, `/`, `=`, space, control, non-ASCII, ...) is
//!   written `=XX`, two upper-case hex digits;
//! - the empty id is `=` alone (which no escape can produce).
//!
//! A key is therefore always one subject token (no `.`), and the mapping is injective: the
//! decoder accepts only the canonical form (upper-case hex, no escape of a byte that stands
//! for itself), so `id → key → id` and `key → id → key` are both the identity (the property
//! tests check both).

use std::fmt::Write as _;

/// The longest key the mapping produces, in bytes: the key is the last token of the subject
/// `$KV.<bucket>.<key>`, and nats-server's control line is 4 KiB. A client id whose key would
/// be longer cannot be registered (a clustered node refuses its CONNECT).
pub const MAX_KEY_LEN: usize = 2048;

/// Why a client id has no key, or a key is not one the mapping produced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientKeyError {
    /// The escaped key would exceed [`MAX_KEY_LEN`] bytes.
    #[error("the client id's registry key would be {len} bytes, more than the limit of {MAX_KEY_LEN}")]
    TooLong {
        /// The length it would have.
        len: usize,
    },
    /// A byte that is never in a key (anything but `=`, `-`, `_`, letters and digits).
    #[error("key byte {byte:#04x} at {at} is not a letter, digit, '-', '_' or '='")]
    Forbidden {
        /// The byte.
        byte: u8,
        /// Its position.
        at: usize,
    },
    /// `=` not followed by two upper-case hex digits, or an escape of a byte that stands for
    /// itself (not the canonical form).
    #[error("bad escape at {at}: '=' takes two upper-case hex digits of a byte that needs escaping")]
    BadEscape {
        /// The position of the `=`.
        at: usize,
    },
    /// The unescaped bytes are not UTF-8.
    #[error("the unescaped key is not UTF-8")]
    NotUtf8,
    /// The key is empty (the empty client id is `=`).
    #[error("the key is empty")]
    Empty,
}

fn is_literal(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// The KV key of client id `id`.
pub fn encode(id: &str) -> Result<String, ClientKeyError> {
    if id.is_empty() {
        return Ok("=".to_owned());
    }
    let len: usize = id.bytes().map(|b| if is_literal(b) { 1 } else { 3 }).sum();
    if len > MAX_KEY_LEN {
        return Err(ClientKeyError::TooLong { len });
    }
    let mut out = String::with_capacity(len);
    for b in id.bytes() {
        if is_literal(b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "={b:02X}");
        }
    }
    Ok(out)
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The client id of KV key `key`, which must be in the canonical form [`encode`] produces.
pub fn decode(key: &str) -> Result<String, ClientKeyError> {
    match key {
        "=" => return Ok(String::new()),
        "" => return Err(ClientKeyError::Empty),
        _ => {}
    }
    let bytes = key.as_bytes();
    if bytes.len() > MAX_KEY_LEN {
        return Err(ClientKeyError::TooLong { len: bytes.len() });
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if is_literal(b) {
            out.push(b);
            i += 1;
        } else if b == b'=' {
            let value = match (
                bytes.get(i + 1).copied().and_then(hex_digit),
                bytes.get(i + 2).copied().and_then(hex_digit),
            ) {
                (Some(hi), Some(lo)) => (hi << 4) | lo,
                _ => return Err(ClientKeyError::BadEscape { at: i }),
            };
            if is_literal(value) {
                return Err(ClientKeyError::BadEscape { at: i });
            }
            out.push(value);
            i += 3;
        } else {
            return Err(ClientKeyError::Forbidden { byte: b, at: i });
        }
    }
    String::from_utf8(out).map_err(|_| ClientKeyError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn examples() {
        let cases = [
            ("sensor-1_a", "sensor-1_a"),
            ("", "="),
            ("a.b", "a=2Eb"),
            ("a/b", "a=2Fb"),
            ("x=y", "x=3Dy"),
            ("a b", "a=20b"),
            ("*>", "=2A=3E"),
            ("é", "=C3=A9"),
            ("=", "=3D"),
        ];
        for (id, key) in cases {
            assert_eq!(encode(id).unwrap(), key, "{id:?}");
            assert_eq!(decode(key).unwrap(), id, "{key:?}");
        }
        let long = "a".repeat(MAX_KEY_LEN);
        assert_eq!(decode(&encode(&long).unwrap()).unwrap(), long);
        assert_eq!(encode(&".".repeat(700)), Err(ClientKeyError::TooLong { len: 2100 }));
    }

    #[test]
    fn malformed_keys_are_refused() {
        let cases = [
            ("a.b", ClientKeyError::Forbidden { byte: b'.', at: 1 }),
            ("a/b", ClientKeyError::Forbidden { byte: b'/', at: 1 }),
            ("a=2e", ClientKeyError::BadEscape { at: 1 }),
            ("a=2", ClientKeyError::BadEscape { at: 1 }),
            ("==", ClientKeyError::BadEscape { at: 0 }),
            ("a=", ClientKeyError::BadEscape { at: 1 }),
            ("=41", ClientKeyError::BadEscape { at: 0 }),
            ("=5F", ClientKeyError::BadEscape { at: 0 }),
            ("=FF", ClientKeyError::NotUtf8),
            ("=C3", ClientKeyError::NotUtf8),
            ("", ClientKeyError::Empty),
        ];
        for (key, expected) in cases {
            assert_eq!(decode(key), Err(expected), "{key:?}");
        }
        assert!(matches!(decode(&"a".repeat(MAX_KEY_LEN + 1)), Err(ClientKeyError::TooLong { .. })));
    }

    proptest! {
        #[test]
        fn an_id_round_trips_through_a_valid_key(id in any::<String>()) {
            if let Ok(key) = encode(&id) {
                prop_assert!(!key.is_empty());
                prop_assert!(key.bytes().all(|b| is_literal(b) || b == b'='), "{}", key);
                prop_assert_eq!(decode(&key), Ok(id));
            }
        }

        #[test]
        fn distinct_ids_have_distinct_keys(a in "[a-c./= é=-]{0,6}", b in "[a-c./= é=-]{0,6}") {
            if a != b {
                prop_assert_ne!(encode(&a).unwrap(), encode(&b).unwrap());
            }
        }

        #[test]
        fn a_key_that_decodes_is_canonical(key in "[a-cA-F0-9=_-]{0,12}") {
            if let Ok(id) = decode(&key) {
                prop_assert_eq!(encode(&id).unwrap(), key);
            }
        }
    }
}
