//! The SDK conventions for message signatures and message encryption, for clients and for the
//! documentation's examples.
//!
//! - **Signatures** are ECDSA P-256 with SHA-256, written as the JSON object
//!   `{"r":"…","s":"…"}` whose fields are the 32-byte big-endian `r` and `s`, base64url without
//!   padding (the fixed `r || s` form that WebCrypto produces, split in two).
//! - **Encryption** is RSA-OAEP with SHA-256 and MGF1-SHA-256, no label; the ciphertext is
//!   base64url without padding. One RSA block: at most `k - 66` bytes of plaintext for a `k`-byte
//!   modulus (318 bytes for RSA-3072).
//!
//! mesgd's own token signatures are *not* this encoding: they are DER (`SEQUENCE { r INTEGER,
//! s INTEGER }`) over the token's binary body. An SDK verify that expects `{"r","s"}` cannot
//! check a claim token, and [`verify_message`] refuses a DER signature rather than guessing;
//! verify tokens with [`super::verify`].

use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{
    KeySize, OAEP_SHA256_MGF1SHA256, OaepPrivateDecryptingKey, OaepPublicEncryptingKey, PrivateDecryptingKey,
    PublicEncryptingKey,
};
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey,
};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};
use zeroize::Zeroizing;

/// The length of `r` and of `s`.
const SCALAR_LEN: usize = 32;
/// The longest signature or ciphertext text looked at.
const MAX_INPUT_LEN: usize = 4096;

/// Why an SDK operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SdkError {
    /// The key bytes are not a key of the expected type.
    #[error("not a usable {0}")]
    BadKey(&'static str),
    /// The signature text is not the SDK's `{"r","s"}` JSON.
    #[error("not an SDK signature ({why}); SDK signatures are JSON {{\"r\",\"s\"}} with base64url fields")]
    NotSdkSignature {
        /// What is wrong.
        why: &'static str,
    },
    /// The signature is well-formed but does not verify.
    #[error("the signature does not verify for this message and key")]
    BadSignature,
    /// The plaintext is longer than one RSA-OAEP block holds.
    #[error("the plaintext is {len} bytes; RSA-OAEP with this key takes at most {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The key's limit.
        max: usize,
    },
    /// The ciphertext is not base64url of one RSA block, or does not decrypt.
    #[error("the ciphertext does not decrypt with this key")]
    Decrypt,
    /// The crypto library failed.
    #[error("the crypto library failed to {0}")]
    Crypto(&'static str),
}

/// An ECDSA P-256 private key that signs in the SDK's encoding.
pub struct SigningKey(EcdsaKeyPair);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new random key.
    pub fn generate() -> Result<SigningKey, SdkError> {
        EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)
            .map(SigningKey)
            .map_err(|_| SdkError::Crypto("generate an ECDSA key"))
    }

    /// A key from an unencrypted PKCS#8 document.
    pub fn from_pkcs8(der: &[u8]) -> Result<SigningKey, SdkError> {
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
            .map(SigningKey)
            .map_err(|_| SdkError::BadKey("ECDSA P-256 private key in PKCS#8 DER"))
    }

    /// The key as an unencrypted PKCS#8 v1 document (secret: store it owner-only).
    pub fn to_pkcs8(&self) -> Result<Zeroizing<Vec<u8>>, SdkError> {
        let doc = self.0.to_pkcs8v1().map_err(|_| SdkError::Crypto("serialise an ECDSA key"))?;
        Ok(Zeroizing::new(doc.as_ref().to_vec()))
    }

    /// The public key as an uncompressed SEC1 point (65 bytes, `0x04 || x || y`), the form
    /// [`verify_message`] takes.
    pub fn public_key(&self) -> Vec<u8> {
        self.0.public_key().as_ref().to_vec()
    }
}

/// Signs `message`: `{"r":"…","s":"…"}`.
pub fn sign_message(key: &SigningKey, message: &[u8]) -> Result<String, SdkError> {
    let signature = key.0.sign(&SystemRandom::new(), message).map_err(|_| SdkError::Crypto("sign"))?;
    let (r, s) = signature.as_ref().split_at(SCALAR_LEN);
    let mut map = Map::new();
    map.insert("r".into(), Value::String(URL_SAFE_NO_PAD.encode(r)));
    map.insert("s".into(), Value::String(URL_SAFE_NO_PAD.encode(s)));
    Ok(Value::Object(map).to_string())
}

/// Verifies an SDK signature of `message` by `public_key` (an uncompressed SEC1 point, or an
/// X.509 SubjectPublicKeyInfo in DER). The signature must be exactly `{"r","s"}`, each 32
/// bytes.
pub fn verify_message(public_key: &[u8], message: &[u8], signature: &str) -> Result<(), SdkError> {
    let not = |why| SdkError::NotSdkSignature { why };
    if signature.len() > MAX_INPUT_LEN {
        return Err(not("too long"));
    }
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(signature) else {
        return Err(not("not a JSON object"));
    };
    if map.len() != 2 {
        return Err(not("fields other than r and s"));
    }
    let scalar = |name: &str| -> Result<Vec<u8>, SdkError> {
        let text = map.get(name).and_then(Value::as_str).ok_or(not("r or s is missing or not a string"))?;
        let bytes =
            URL_SAFE_NO_PAD.decode(text).map_err(|_| not("r or s is not base64url without padding"))?;
        if bytes.len() != SCALAR_LEN {
            return Err(not("r or s is not 32 bytes"));
        }
        Ok(bytes)
    };
    let mut fixed = scalar("r")?;
    fixed.extend(scalar("s")?);
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, public_key)
        .verify(message, &fixed)
        .map_err(|_| SdkError::BadSignature)
}

/// An RSA private key that decrypts SDK messages.
pub struct DecryptingKey {
    key: OaepPrivateDecryptingKey,
    public_der: Vec<u8>,
}

impl std::fmt::Debug for DecryptingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecryptingKey").field("bits", &self.key.key_size_bits()).finish_non_exhaustive()
    }
}

impl DecryptingKey {
    /// A new random RSA-3072 key.
    pub fn generate() -> Result<DecryptingKey, SdkError> {
        let key = PrivateDecryptingKey::generate(KeySize::Rsa3072)
            .map_err(|_| SdkError::Crypto("generate an RSA key"))?;
        DecryptingKey::wrap(key)
    }

    /// A key from an unencrypted PKCS#8 document (RSA, 2048 to 8192 bits).
    pub fn from_pkcs8(der: &[u8]) -> Result<DecryptingKey, SdkError> {
        let key = PrivateDecryptingKey::from_pkcs8(der)
            .map_err(|_| SdkError::BadKey("RSA private key in PKCS#8 DER"))?;
        DecryptingKey::wrap(key)
    }

    fn wrap(key: PrivateDecryptingKey) -> Result<DecryptingKey, SdkError> {
        let public =
            key.public_key().as_der().map_err(|_| SdkError::Crypto("serialise an RSA public key"))?;
        let public_der = public.as_ref().to_vec();
        let key = OaepPrivateDecryptingKey::new(key).map_err(|_| SdkError::Crypto("use an RSA key"))?;
        Ok(DecryptingKey { key, public_der })
    }

    /// The public key as X.509 SubjectPublicKeyInfo DER, the form [`encrypt`] takes.
    pub fn public_key(&self) -> &[u8] {
        &self.public_der
    }
}

/// Encrypts `plaintext` to `public_key` (X.509 SubjectPublicKeyInfo DER): base64url of one
/// RSA-OAEP block.
pub fn encrypt(public_key: &[u8], plaintext: &[u8]) -> Result<String, SdkError> {
    let key = PublicEncryptingKey::from_der(public_key)
        .map_err(|_| SdkError::BadKey("RSA public key in X.509 SubjectPublicKeyInfo DER"))?;
    let key = OaepPublicEncryptingKey::new(key).map_err(|_| SdkError::Crypto("use an RSA public key"))?;
    let max = key.max_plaintext_size(&OAEP_SHA256_MGF1SHA256);
    if plaintext.len() > max {
        return Err(SdkError::TooLong { len: plaintext.len(), max });
    }
    let mut out = vec![0u8; key.ciphertext_size()];
    let sealed = key
        .encrypt(&OAEP_SHA256_MGF1SHA256, plaintext, &mut out, None)
        .map_err(|_| SdkError::Crypto("encrypt with RSA-OAEP"))?;
    Ok(URL_SAFE_NO_PAD.encode(sealed))
}

/// Decrypts base64url text made by [`encrypt`] (or an SDK).
pub fn decrypt(key: &DecryptingKey, ciphertext: &str) -> Result<Vec<u8>, SdkError> {
    if ciphertext.len() > MAX_INPUT_LEN {
        return Err(SdkError::Decrypt);
    }
    let bytes = URL_SAFE_NO_PAD.decode(ciphertext).map_err(|_| SdkError::Decrypt)?;
    let mut out = Zeroizing::new(vec![0u8; key.key.min_output_size()]);
    let plain =
        key.key.decrypt(&OAEP_SHA256_MGF1SHA256, &bytes, &mut out, None).map_err(|_| SdkError::Decrypt)?;
    Ok(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_r_and_s_json_and_verify() {
        let key = SigningKey::generate().unwrap();
        let signature = sign_message(&key, b"hello").unwrap();
        let json: Value = serde_json::from_str(&signature).unwrap();
        for field in ["r", "s"] {
            let bytes = URL_SAFE_NO_PAD.decode(json[field].as_str().unwrap()).unwrap();
            assert_eq!(bytes.len(), 32, "{field}");
        }
        verify_message(&key.public_key(), b"hello", &signature).unwrap();
        assert!(matches!(
            verify_message(&key.public_key(), b"hellO", &signature),
            Err(SdkError::BadSignature)
        ));
        let other = SigningKey::generate().unwrap();
        assert!(matches!(
            verify_message(&other.public_key(), b"hello", &signature),
            Err(SdkError::BadSignature)
        ));
        let again = SigningKey::from_pkcs8(&key.to_pkcs8().unwrap()).unwrap();
        verify_message(&key.public_key(), b"m", &sign_message(&again, b"m").unwrap()).unwrap();
    }

    #[test]
    fn malformed_sdk_signatures_table() {
        let key = SigningKey::generate().unwrap();
        let good: Value = serde_json::from_str(&sign_message(&key, b"m").unwrap()).unwrap();
        let (r, s) = (good["r"].as_str().unwrap(), good["s"].as_str().unwrap());
        let table = [
            ("[]".to_owned(), "not a JSON object"),
            ("MEUCIQ".to_owned(), "not a JSON object"),
            (format!(r#"{{"r":"{r}"}}"#), "fields other than r and s"),
            (format!(r#"{{"r":"{r}","s":"{s}","x":1}}"#), "fields other than r and s"),
            (format!(r#"{{"r":"{r}","t":"{s}"}}"#), "missing"),
            (format!(r#"{{"r":"{r}","s":"{s}="}}"#), "base64url"),
            (format!(r#"{{"r":"{r}","s":"AAAA"}}"#), "32 bytes"),
        ];
        for (text, expected) in &table {
            let err = verify_message(&key.public_key(), b"m", text).unwrap_err();
            assert!(matches!(err, SdkError::NotSdkSignature { .. }), "{text}: {err:?}");
            assert!(err.to_string().contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn encryption_round_trips_and_is_bounded() {
        let key = DecryptingKey::generate().unwrap();
        let public = key.public_key().to_vec();
        let sealed = encrypt(&public, b"secret message").unwrap();
        assert_eq!(URL_SAFE_NO_PAD.decode(&sealed).unwrap().len(), 384);
        assert_ne!(encrypt(&public, b"secret message").unwrap(), sealed, "OAEP is randomised");
        assert_eq!(decrypt(&key, &sealed).unwrap(), b"secret message");
        assert_eq!(decrypt(&key, &encrypt(&public, &[7; 318]).unwrap()).unwrap(), vec![7; 318]);
        assert!(matches!(encrypt(&public, &[7; 319]), Err(SdkError::TooLong { len: 319, max: 318 })));
        let mut bytes = URL_SAFE_NO_PAD.decode(&sealed).unwrap();
        bytes[10] ^= 1;
        assert!(matches!(decrypt(&key, &URL_SAFE_NO_PAD.encode(bytes)), Err(SdkError::Decrypt)));
        assert!(matches!(decrypt(&key, "!!"), Err(SdkError::Decrypt)));
        assert!(matches!(encrypt(b"not a key", b"x"), Err(SdkError::BadKey(_))));
    }
}
