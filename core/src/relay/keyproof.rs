//! Key proof: a `register` with a `pubkey` proves possession of the private key.
//!
//! The seed's `register{pubkey}` carries no proof, so anyone who knows a public key (it is
//! public: peers exchange it for end-to-end encryption) can register its derived address, or an
//! alias bound to it, and drain the queue of messages waiting there. With `[relay]
//! require_key_proof = true` a key must sign a nonce the relay chose:
//!
//! 1. client → relay `{"t":"challenge"}`; relay → client `{"t":"challenge","nonce":N}` with `N`
//!    the standard base64 of 32 random bytes. The nonce belongs to the connection (on UDP: the
//!    source address) and is good for one `register`.
//! 2. client → relay `{"t":"register","pubkey":K,"sig":S, ...}` (with or without `addr`), `S`
//!    the standard base64 of the 64-byte Ed25519 signature ([RFC 8032]) by `K`'s private key
//!    over [`signed_message`]: the ASCII bytes `mesgd relay register v1`, one zero byte, the 32
//!    raw nonce bytes, then the UTF-8 of the address being registered.
//!
//! The fixed prefix keeps the signature from meaning anything in another protocol that signs
//! with the same key; the address keeps it from being replayed for another alias. Both messages
//! are outside the seed's tables, so seed clients that never ask for a challenge are unaffected
//! when the option is off. With the option off a `sig` is still checked if a client sends one,
//! so a client that always proves gets the same answers from every relay.
//!
//! Ed25519 comes from aws-lc-rs, the crypto library rustls already brings into mesgd: one
//! reviewed implementation for the TLS stack and the relay, no second one to keep up to date.
//!
//! [RFC 8032]: https://www.rfc-editor.org/rfc/rfc8032

use std::fmt;

use aws_lc_rs::signature::{ED25519, UnparsedPublicKey};
use base64::Engine as _;

use super::address::{BASE64, Claim, ED25519_KEY_LEN};
use super::error::RelayError;

/// The domain-separation prefix of the signed message, followed by one zero byte.
pub const SIGNATURE_CONTEXT: &[u8] = b"mesgd relay register v1";

/// The length of a challenge nonce, in bytes.
pub const NONCE_LEN: usize = 32;

const SIGNATURE_LEN: usize = 64;

/// A nonce issued to one connection for one key-proof `register`.
#[derive(Clone, PartialEq, Eq)]
pub struct Challenge {
    nonce: [u8; NONCE_LEN],
}

impl Challenge {
    /// A fresh nonce from the thread-local CSPRNG (ChaCha, seeded by the operating system).
    pub fn new() -> Self {
        Challenge { nonce: rand::random() }
    }

    /// A challenge with a given nonce (tests and fixed vectors).
    #[cfg(test)]
    pub(crate) fn from_nonce(nonce: [u8; NONCE_LEN]) -> Self {
        Challenge { nonce }
    }

    /// The nonce as sent in the `challenge` reply: standard base64 with padding.
    pub fn nonce_base64(&self) -> String {
        BASE64.encode(self.nonce)
    }
}

impl Default for Challenge {
    fn default() -> Self {
        Challenge::new()
    }
}

impl fmt::Debug for Challenge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Challenge(..)")
    }
}

/// The bytes a key-proof signature covers: `mesgd relay register v1`, `0x00`, the nonce, the
/// address.
pub fn signed_message(challenge: &Challenge, address: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(SIGNATURE_CONTEXT.len() + 1 + NONCE_LEN + address.len());
    message.extend_from_slice(SIGNATURE_CONTEXT);
    message.push(0);
    message.extend_from_slice(&challenge.nonce);
    message.extend_from_slice(address.as_bytes());
    message
}

/// The key-proof rule in force (`[relay] require_key_proof`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyProof {
    /// Whether a `register` with a `pubkey` must carry a valid `sig`.
    pub required: bool,
}

impl KeyProof {
    /// Checks a `register`'s proof. `challenge` is the connection's outstanding challenge,
    /// which the caller takes (it is single-use whatever the outcome); `sig` is the `register`'s
    /// `sig` field.
    ///
    /// - A claim without a key needs no proof; a `sig` on it is `invalid signature` (there is no
    ///   key to check it with).
    /// - A claim with a key and no `sig`: accepted unless proof is required
    ///   (`key proof required`).
    /// - A `sig` without an outstanding challenge: `key proof required`.
    /// - A key that is not 32 bytes: `invalid pubkey` (only Ed25519 keys can prove).
    /// - A `sig` that is not base64 of 64 bytes or does not verify: `invalid signature`.
    pub fn check(
        &self,
        claim: &Claim,
        sig: Option<&str>,
        challenge: Option<&Challenge>,
    ) -> Result<(), RelayError> {
        let Some(key) = claim.key() else {
            return if sig.is_some() { Err(RelayError::InvalidSignature) } else { Ok(()) };
        };
        let Some(sig) = sig else {
            return if self.required { Err(RelayError::KeyProofRequired) } else { Ok(()) };
        };
        let Some(challenge) = challenge else {
            return Err(RelayError::KeyProofRequired);
        };
        if key.raw().len() != ED25519_KEY_LEN {
            return Err(RelayError::InvalidPubkey);
        }
        verify(key.raw(), &signed_message(challenge, claim.address()), sig)
    }
}

fn verify(raw_key: &[u8], message: &[u8], sig_base64: &str) -> Result<(), RelayError> {
    if sig_base64.len() > SIGNATURE_LEN.div_ceil(3) * 4 {
        return Err(RelayError::InvalidSignature);
    }
    let sig = BASE64.decode(sig_base64).map_err(|_| RelayError::InvalidSignature)?;
    if sig.len() != SIGNATURE_LEN {
        return Err(RelayError::InvalidSignature);
    }
    UnparsedPublicKey::new(&ED25519, raw_key).verify(message, &sig).map_err(|_| RelayError::InvalidSignature)
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};

    use super::*;

    /// An independent vector, made once with Python's `cryptography` package:
    ///
    /// ```text
    /// from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    /// from cryptography.hazmat.primitives import serialization; import base64
    /// sk = Ed25519PrivateKey.from_private_bytes(bytes([0x42]*32))
    /// pk = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    /// sig = sk.sign(b"mesgd relay register v1\0" + bytes(range(32)) + b"alice")
    /// print(base64.b64encode(pk).decode(), base64.b64encode(sig).decode())
    /// ```
    const PYTHON_KEY: &str = "IVL40Zt5HSRFMkLhXy6rbLfP+ntqXtMAl5YOBpiB2xI=";
    const PYTHON_SIG: &str =
        "MXrC2NtHWDANgnXwv7mSJsliFnXpSUsDFDN1rHmqdodZawI/c7jQqtsLYGkHuIA+DfPDeQ9hDT8ZaJ/Qu9BRBQ==";

    fn fixed_challenge() -> Challenge {
        let mut nonce = [0u8; NONCE_LEN];
        for (i, b) in nonce.iter_mut().enumerate() {
            *b = i as u8;
        }
        Challenge::from_nonce(nonce)
    }

    fn alias(addr: &str, key: &str) -> Claim {
        Claim::from_register(Some(addr), Some(key)).unwrap()
    }

    #[test]
    fn verifies_a_signature_made_by_another_implementation() {
        let required = KeyProof { required: true };
        let challenge = fixed_challenge();
        assert_eq!(required.check(&alias("alice", PYTHON_KEY), Some(PYTHON_SIG), Some(&challenge)), Ok(()));
        // The same signature does not prove another address, or another nonce.
        assert_eq!(
            required.check(&alias("alicf", PYTHON_KEY), Some(PYTHON_SIG), Some(&challenge)),
            Err(RelayError::InvalidSignature)
        );
        assert_eq!(
            required.check(&alias("alice", PYTHON_KEY), Some(PYTHON_SIG), Some(&Challenge::new())),
            Err(RelayError::InvalidSignature)
        );
    }

    #[test]
    fn both_modes() {
        let pair = Ed25519KeyPair::generate().unwrap();
        let key = BASE64.encode(pair.public_key().as_ref());
        let challenge = Challenge::new();
        let derived = Claim::from_register(None, Some(&key)).unwrap();
        let good = BASE64.encode(pair.sign(&signed_message(&challenge, derived.address())).as_ref());
        let wrong_address = BASE64.encode(pair.sign(&signed_message(&challenge, "alice")).as_ref());
        let plain = Claim::from_register(Some("alice"), None).unwrap();
        let long_key = Claim::from_register(None, Some(&BASE64.encode([1u8; 33]))).unwrap();

        for required in [false, true] {
            let policy = KeyProof { required };
            let unproven = if required { Err(RelayError::KeyProofRequired) } else { Ok(()) };
            type Case<'c> =
                (&'c str, &'c Claim, Option<&'c str>, Option<&'c Challenge>, Result<(), RelayError>);
            let cases: [Case<'_>; 9] = [
                ("plain address", &plain, None, None, Ok(())),
                (
                    "plain address with a sig",
                    &plain,
                    Some(&good),
                    Some(&challenge),
                    Err(RelayError::InvalidSignature),
                ),
                ("key without sig", &derived, None, None, unproven),
                ("key without sig, challenge asked", &derived, None, Some(&challenge), unproven),
                ("good proof", &derived, Some(&good), Some(&challenge), Ok(())),
                ("sig without challenge", &derived, Some(&good), None, Err(RelayError::KeyProofRequired)),
                (
                    "sig over another address",
                    &derived,
                    Some(&wrong_address),
                    Some(&challenge),
                    Err(RelayError::InvalidSignature),
                ),
                (
                    "sig not base64",
                    &derived,
                    Some("***"),
                    Some(&challenge),
                    Err(RelayError::InvalidSignature),
                ),
                (
                    "33-byte key cannot prove",
                    &long_key,
                    Some(&good),
                    Some(&challenge),
                    Err(RelayError::InvalidPubkey),
                ),
            ];
            for (name, claim, sig, challenge, expected) in cases {
                assert_eq!(policy.check(claim, sig, challenge), expected, "{name}, required = {required}");
            }
        }
        // Proof not required still lets a 33-byte key register without a sig.
        assert_eq!(KeyProof { required: false }.check(&long_key, None, None), Ok(()));
    }

    #[test]
    fn short_or_long_signatures_are_refused() {
        let policy = KeyProof { required: true };
        let claim = alias("alice", PYTHON_KEY);
        let challenge = fixed_challenge();
        for sig in [BASE64.encode([0u8; 63]), BASE64.encode([0u8; 65]), "A".repeat(10_000)] {
            assert_eq!(policy.check(&claim, Some(&sig), Some(&challenge)), Err(RelayError::InvalidSignature));
        }
    }

    #[test]
    fn nonces_are_fresh_and_well_formed() {
        let a = Challenge::new();
        let b = Challenge::new();
        assert_ne!(a, b);
        assert_eq!(BASE64.decode(a.nonce_base64()).unwrap().len(), NONCE_LEN);
        assert_eq!(format!("{a:?}"), "Challenge(..)");
    }

    #[test]
    fn signed_message_layout() {
        let message = signed_message(&fixed_challenge(), "bob");
        assert_eq!(&message[..24], b"mesgd relay register v1\0");
        assert_eq!(message[24..56], (0u8..32).collect::<Vec<_>>()[..]);
        assert_eq!(&message[56..], b"bob");
    }
}
