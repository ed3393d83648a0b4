//! Password hashes: PBKDF2-HMAC-SHA256 for every password mesgd sets, bcrypt for hashes
//! imported from elsewhere.
//!
//! The PBKDF2 form is a PHC string:
//!
//! ```text
//! $pbkdf2-sha256$i=<iterations>,l=<key length>$<salt>$<derived key>
//! ```
//!
//! where salt and derived key are standard base64 without padding (the PHC "B64" encoding),
//! the salt is 16 random bytes and mesgd writes `l=32`. Parameters may appear in either order;
//! the key length may be 16 to 64 bytes and must match the encoded key. The default count,
//! [`DEFAULT_PBKDF2_ITERATIONS`] = 600 000, is OWASP's current recommendation for
//! PBKDF2-HMAC-SHA256; the provider setting `pbkdf2_iterations` changes it for new hashes (old
//! hashes keep verifying with the count they carry).
//!
//! bcrypt hashes (`$2a$`, `$2b$`, `$2y$`, cost 4 to 31) verify too; `$2x$` (the variant that
//! marks hashes from a broken implementation) is refused. Every comparison is constant-time.
//!
//! Errors never contain the hash: it is not a password, but it is the next best thing for an
//! offline attack.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

/// The PBKDF2 iteration count for new hashes unless configured otherwise.
pub const DEFAULT_PBKDF2_ITERATIONS: u32 = 600_000;
/// The smallest iteration count accepted for new hashes.
pub const MIN_PBKDF2_ITERATIONS: u32 = 1_000;
/// The largest iteration count accepted, in new hashes and stored ones (a bound on the CPU one
/// login may cost).
pub const MAX_PBKDF2_ITERATIONS: u32 = 10_000_000;

const PBKDF2_ID: &str = "pbkdf2-sha256";
const SALT_LEN: usize = 16;
const KEY_LEN: usize = 32;

/// The kind of a stored hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HashScheme {
    /// `$pbkdf2-sha256$...`
    Pbkdf2Sha256,
    /// `$2a$`, `$2b$` or `$2y$`.
    Bcrypt,
}

impl HashScheme {
    /// A short name for listings.
    pub fn as_str(self) -> &'static str {
        match self {
            HashScheme::Pbkdf2Sha256 => PBKDF2_ID,
            HashScheme::Bcrypt => "bcrypt",
        }
    }
}

/// A hash that cannot be used, or a parameter out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PasswordError {
    /// Neither a PBKDF2 PHC string nor a bcrypt hash.
    #[error("unknown password hash scheme (expected $pbkdf2-sha256$... or $2a$/$2b$/$2y$...)")]
    UnknownScheme,
    /// The hash has the right prefix but a malformed body.
    #[error("malformed {scheme} hash: {reason}")]
    Malformed {
        /// Which scheme the prefix named.
        scheme: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// An iteration count outside [`MIN_PBKDF2_ITERATIONS`]..=[`MAX_PBKDF2_ITERATIONS`].
    #[error(
        "PBKDF2 iteration count {0} is out of range ({MIN_PBKDF2_ITERATIONS} to {MAX_PBKDF2_ITERATIONS})"
    )]
    IterationsOutOfRange(u64),
    /// A new password that is empty.
    #[error("the password is empty")]
    Empty,
    /// A new password longer than [`MAX_PASSWORD_LEN`] bytes.
    #[error("the password is longer than {MAX_PASSWORD_LEN} bytes")]
    TooLong,
}

/// The longest new password accepted, in bytes.
pub const MAX_PASSWORD_LEN: usize = 4096;

/// Checks a new password against the rules every way of setting one shares (the command line,
/// the REST API): not empty, at most [`MAX_PASSWORD_LEN`] bytes.
pub fn check_new_password(password: &[u8]) -> Result<(), PasswordError> {
    if password.is_empty() {
        return Err(PasswordError::Empty);
    }
    if password.len() > MAX_PASSWORD_LEN {
        return Err(PasswordError::TooLong);
    }
    Ok(())
}

/// Hashes `password` with PBKDF2-HMAC-SHA256, `iterations` rounds and a random salt.
pub fn hash_password(password: &[u8], iterations: u32) -> Result<String, PasswordError> {
    check_new_password(password)?;
    if !(MIN_PBKDF2_ITERATIONS..=MAX_PBKDF2_ITERATIONS).contains(&iterations) {
        return Err(PasswordError::IterationsOutOfRange(iterations.into()));
    }
    let salt: [u8; SALT_LEN] = rand::random();
    let mut key = [0u8; KEY_LEN];
    pbkdf2::pbkdf2_hmac::<Sha256>(password, &salt, iterations, &mut key);
    Ok(format!(
        "${PBKDF2_ID}$i={iterations},l={KEY_LEN}${}${}",
        STANDARD_NO_PAD.encode(salt),
        STANDARD_NO_PAD.encode(key)
    ))
}

/// Checks that `stored` is a hash this module can verify, and says which kind it is.
pub fn hash_scheme(stored: &str) -> Result<HashScheme, PasswordError> {
    match parse(stored)? {
        Parsed::Pbkdf2 { .. } => Ok(HashScheme::Pbkdf2Sha256),
        Parsed::Bcrypt => Ok(HashScheme::Bcrypt),
    }
}

/// Whether `password` matches `stored`. CPU-heavy by design: call it off async workers.
pub fn verify_password(password: &[u8], stored: &str) -> Result<bool, PasswordError> {
    match parse(stored)? {
        Parsed::Pbkdf2 { iterations, salt, key } => {
            let mut derived = vec![0u8; key.len()];
            pbkdf2::pbkdf2_hmac::<Sha256>(password, &salt, iterations, &mut derived);
            Ok(derived.ct_eq(&key).into())
        }
        // The bcrypt crate compares in constant time; its errors would quote the hash, so
        // they are replaced (`parse` already checked the shape, so one is not expected).
        Parsed::Bcrypt => bcrypt::verify(password, stored)
            .map_err(|_| PasswordError::Malformed { scheme: "bcrypt", reason: "rejected by bcrypt" }),
    }
}

enum Parsed {
    Pbkdf2 { iterations: u32, salt: Vec<u8>, key: Vec<u8> },
    Bcrypt,
}

fn parse(stored: &str) -> Result<Parsed, PasswordError> {
    if let Some(rest) = stored.strip_prefix("$pbkdf2-sha256$") {
        parse_pbkdf2(rest)
    } else if ["$2a$", "$2b$", "$2y$"].iter().any(|prefix| stored.starts_with(prefix)) {
        check_bcrypt(&stored[4..])?;
        Ok(Parsed::Bcrypt)
    } else {
        Err(PasswordError::UnknownScheme)
    }
}

fn parse_pbkdf2(rest: &str) -> Result<Parsed, PasswordError> {
    let malformed = |reason| PasswordError::Malformed { scheme: PBKDF2_ID, reason };
    let mut fields = rest.split('$');
    let (Some(params), Some(salt), Some(key), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(malformed("expected $pbkdf2-sha256$<params>$<salt>$<key>"));
    };
    let (mut iterations, mut key_len) = (None, None);
    for param in params.split(',') {
        let (name, value) = param.split_once('=').ok_or(malformed("a parameter is not name=value"))?;
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) || value.len() > 10 {
            return Err(malformed("a parameter value is not a decimal number"));
        }
        let value: u64 = value.parse().map_err(|_| malformed("a parameter value is not a decimal number"))?;
        let slot = match name {
            "i" => &mut iterations,
            "l" => &mut key_len,
            _ => return Err(malformed("unknown parameter (expected i and l)")),
        };
        if slot.replace(value).is_some() {
            return Err(malformed("a parameter appears twice"));
        }
    }
    let iterations = iterations.ok_or(malformed("missing parameter i"))?;
    let key_len = key_len.ok_or(malformed("missing parameter l"))?;
    // Stored hashes may be older than today's minimum, but never beyond the CPU bound.
    let iterations = u32::try_from(iterations)
        .ok()
        .filter(|i| (1..=MAX_PBKDF2_ITERATIONS).contains(i))
        .ok_or(PasswordError::IterationsOutOfRange(iterations))?;
    if !(16..=64).contains(&key_len) {
        return Err(malformed("key length l must be 16 to 64"));
    }
    let salt = STANDARD_NO_PAD.decode(salt).map_err(|_| malformed("salt is not unpadded base64"))?;
    if !(8..=64).contains(&salt.len()) {
        return Err(malformed("salt must be 8 to 64 bytes"));
    }
    let key = STANDARD_NO_PAD.decode(key).map_err(|_| malformed("key is not unpadded base64"))?;
    if key.len() as u64 != key_len {
        return Err(malformed("key length does not match l"));
    }
    Ok(Parsed::Pbkdf2 { iterations, salt, key })
}

/// `rest` is what follows `$2b$`: `<cost>$<22 salt chars><31 hash chars>`.
fn check_bcrypt(rest: &str) -> Result<(), PasswordError> {
    let malformed = |reason| PasswordError::Malformed { scheme: "bcrypt", reason };
    let (cost, body) = rest.split_once('$').ok_or(malformed("expected $2b$<cost>$<salt and hash>"))?;
    if cost.len() != 2 || !cost.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("cost must be two digits"));
    }
    let cost: u32 = cost.parse().map_err(|_| malformed("cost must be two digits"))?;
    if !(4..=31).contains(&cost) {
        return Err(malformed("cost must be 4 to 31"));
    }
    let bcrypt_alphabet = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'/';
    if body.len() != 53 || !body.bytes().all(bcrypt_alphabet) {
        return Err(malformed("salt and hash must be 53 characters of bcrypt base64"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A published bcrypt test vector (OpenBSD / Openwall): password `U*U`, cost 5.
    const BCRYPT_VECTOR: &str = "$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW";

    #[test]
    fn pbkdf2_round_trip_and_form() {
        let hash = hash_password(b"correct horse", MIN_PBKDF2_ITERATIONS).expect("hashes");
        let fields: Vec<&str> = hash.split('$').collect();
        assert_eq!(fields[..3], ["", "pbkdf2-sha256", "i=1000,l=32"]);
        assert_eq!(STANDARD_NO_PAD.decode(fields[3]).expect("salt b64").len(), 16);
        assert_eq!(STANDARD_NO_PAD.decode(fields[4]).expect("key b64").len(), 32);
        assert_eq!(verify_password(b"correct horse", &hash), Ok(true));
        assert_eq!(verify_password(b"correct horsE", &hash), Ok(false));
        assert_eq!(verify_password(b"", &hash), Ok(false));
        assert_ne!(hash, hash_password(b"correct horse", MIN_PBKDF2_ITERATIONS).expect("hashes"), "salted");
        assert_eq!(hash_scheme(&hash), Ok(HashScheme::Pbkdf2Sha256));
    }

    #[test]
    fn pbkdf2_matches_a_published_vector() {
        // The widely published PBKDF2-HMAC-SHA256 vector: P = "passwordPASSWORDpassword",
        // S = "saltSALTsaltSALTsaltSALTsaltSALTsalt", c = 4096, dkLen = 40
        // (348c89dbcbd32b2f32d814b8116e84cf2b17347ebc1800181c4e2a1fb8dd53e1c635518c7dac47e9).
        let stored = "$pbkdf2-sha256$l=40,i=4096$c2FsdFNBTFRzYWx0U0FMVHNhbHRTQUxUc2FsdFNBTFRzYWx0\
                      $NIyJ28vTKy8y2BS4EW6EzysXNH68GAAYHE4qH7jdU+HGNVGMfaxH6Q";
        assert_eq!(
            verify_password(b"passwordPASSWORDpassword", stored),
            Ok(true),
            "parameters in either order"
        );
        assert_eq!(verify_password(b"passwordPASSWORDpassworD", stored), Ok(false));
    }

    #[test]
    fn iteration_bounds_for_new_hashes() {
        assert_eq!(hash_password(b"x", 999), Err(PasswordError::IterationsOutOfRange(999)));
        assert_eq!(
            hash_password(b"x", MAX_PBKDF2_ITERATIONS + 1),
            Err(PasswordError::IterationsOutOfRange(u64::from(MAX_PBKDF2_ITERATIONS) + 1))
        );
    }

    #[test]
    fn bcrypt_hashes_verify_in_every_accepted_variant() {
        for prefix in ["$2a$", "$2b$", "$2y$"] {
            let hash = format!("{prefix}{}", &BCRYPT_VECTOR[4..]);
            assert_eq!(verify_password(b"U*U", &hash), Ok(true), "{prefix}");
            assert_eq!(verify_password(b"U*V", &hash), Ok(false), "{prefix}");
            assert_eq!(hash_scheme(&hash), Ok(HashScheme::Bcrypt));
        }
        let fresh = bcrypt::hash("s3cret", 4).expect("bcrypt hashes");
        assert_eq!(verify_password(b"s3cret", &fresh), Ok(true));
        assert_eq!(verify_password(b"s3cre", &fresh), Ok(false));
    }

    #[test]
    fn malformed_hashes_table() {
        let key = STANDARD_NO_PAD.encode([7u8; 32]);
        let salt = STANDARD_NO_PAD.encode([1u8; 16]);
        let cases = [
            String::new(),
            "plaintext".into(),
            "$pbkdf2-sha512$i=1,l=32$AAAAAAAAAAA$AAAA".into(),
            "$pbkdf2-sha256$".into(),
            format!("$pbkdf2-sha256$i=1000,l=32${salt}"),
            format!("$pbkdf2-sha256$i=1000,l=32${salt}${key}$extra"),
            format!("$pbkdf2-sha256$i=1000${salt}${key}"),
            format!("$pbkdf2-sha256$l=32${salt}${key}"),
            format!("$pbkdf2-sha256$i=1000,l=32,x=1${salt}${key}"),
            format!("$pbkdf2-sha256$i=1000,i=1000,l=32${salt}${key}"),
            format!("$pbkdf2-sha256$i=-5,l=32${salt}${key}"),
            format!("$pbkdf2-sha256$i=+5,l=32${salt}${key}"),
            format!("$pbkdf2-sha256$i=,l=32${salt}${key}"),
            format!("$pbkdf2-sha256$i=0,l=32${salt}${key}"),
            format!("$pbkdf2-sha256$i=99999999999,l=32${salt}${key}"),
            format!("$pbkdf2-sha256$i=10000001,l=32${salt}${key}"),
            format!("$pbkdf2-sha256$i=1000,l=31${salt}${key}"),
            format!("$pbkdf2-sha256$i=1000,l=8${salt}${}", STANDARD_NO_PAD.encode([7u8; 8])),
            format!("$pbkdf2-sha256$i=1000,l=32$${key}"),
            format!("$pbkdf2-sha256$i=1000,l=32$not*base64${key}"),
            format!("$pbkdf2-sha256$i=1000,l=32${salt}=${key}"),
            format!("$pbkdf2-sha256$i=1000,l=32${salt}${key}=="),
            format!("$pbkdf2-sha256$i1000,l=32${salt}${key}"),
            "$2x$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW".into(),
            "$2b$5$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW".into(),
            "$2b$03$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW".into(),
            "$2b$32$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW".into(),
            "$2b$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOe".into(),
            "$2b$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW$".into(),
            "$2b$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOe+".into(),
            "$2b$05".into(),
            "$2b$xx$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW".into(),
        ];
        for stored in &cases {
            let result = verify_password(b"pw", stored);
            assert!(result.is_err(), "{stored:?} gave {result:?}");
            let message = result.expect_err("checked").to_string();
            if stored.len() > 20 {
                assert!(!message.contains(&stored[stored.len() - 10..]), "error quotes the hash: {message}");
            }
            assert!(hash_scheme(stored).is_err(), "{stored:?}");
        }
    }
}
