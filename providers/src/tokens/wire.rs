//! The token wire format, version 1: the layout, its size checks, and the explanation of
//! inputs in another format. No crypto happens here (see `ops`).
//!
//! ```text
//! token = base64url(body) "." base64url(signature)          (no padding; ≤ 16 KiB of text)
//! body  = version     1 byte   0x01
//!         key id      8 bytes  the key set that signed it and holds the RSA key
//!         wrap length 2 bytes  big-endian, 256..=512 (384 for RSA-3072)
//!         wrapped key         RSA-OAEP(SHA-256, MGF1-SHA-256, no label) of the 32-byte AES key
//!         nonce      12 bytes  AES-256-GCM nonce
//!         sealed              AES-256-GCM(claims JSON), tag (16 bytes) last;
//!                             associated data: every body byte before `sealed`
//! signature = ECDSA P-256 / SHA-256 over `body`, ASN.1 DER, 8..=72 bytes
//! ```
//!
//! The byte-by-byte description, and why, is in `docs/tokens.md`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use super::keys::KeyId;
use super::{MAX_TOKEN_LEN, TokenError};

/// The format version this build writes and reads.
pub const VERSION: u8 = 1;
/// Version bytes that look like a later format rather than garbage.
const PLAUSIBLE_VERSIONS: std::ops::RangeInclusive<u8> = 1..=15;
/// Bytes before the wrapped key: version, key id, wrap length.
const PREFIX_LEN: usize = 1 + 8 + 2;
/// The AES-GCM nonce length.
pub(crate) const NONCE_LEN: usize = 12;
/// The AES-GCM tag length.
pub(crate) const TAG_LEN: usize = 16;
/// Wrapped key lengths accepted before the key is known: RSA-2048 to RSA-4096 moduli.
const WRAP_LEN: std::ops::RangeInclusive<usize> = 256..=512;
/// DER ECDSA P-256 signatures: SEQUENCE of two INTEGERs of at most 33 bytes each.
const SIGNATURE_LEN: std::ops::RangeInclusive<usize> = 8..=72;
/// The shortest body: a minimal wrap, a nonce, a tag.
const MIN_BODY_LEN: usize = PREFIX_LEN + 256 + NONCE_LEN + TAG_LEN;

/// A token split into its parts, sizes checked, nothing verified.
#[derive(Clone, PartialEq, Eq)]
pub struct Envelope {
    body: Vec<u8>,
    signature: Vec<u8>,
    wrap_len: usize,
}

impl std::fmt::Debug for Envelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envelope")
            .field("key_id", &self.key_id())
            .field("body_len", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl Envelope {
    /// Assembles a body from its fields (the sealed part, tag included, last).
    pub(crate) fn build_body(
        key_id: KeyId,
        wrapped: &[u8],
        nonce: &[u8; NONCE_LEN],
        sealed: &[u8],
    ) -> Vec<u8> {
        let mut body = Envelope::header(key_id, wrapped, nonce);
        body.extend_from_slice(sealed);
        body
    }

    /// Every body byte before the sealed claims: the AES-GCM associated data.
    pub(crate) fn header(key_id: KeyId, wrapped: &[u8], nonce: &[u8; NONCE_LEN]) -> Vec<u8> {
        let mut out = Vec::with_capacity(PREFIX_LEN + wrapped.len() + NONCE_LEN);
        out.push(VERSION);
        out.extend_from_slice(&key_id.0);
        // Wrapped keys are 256..=512 bytes, checked by the caller.
        out.extend_from_slice(&u16::try_from(wrapped.len()).unwrap_or(u16::MAX).to_be_bytes());
        out.extend_from_slice(wrapped);
        out.extend_from_slice(nonce);
        out
    }

    /// The token text for `body` and its DER `signature`.
    pub(crate) fn encode(body: &[u8], signature: &[u8]) -> String {
        format!("{}.{}", URL_SAFE_NO_PAD.encode(body), URL_SAFE_NO_PAD.encode(signature))
    }

    /// The signed bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The DER signature.
    pub fn signature(&self) -> &[u8] {
        &self.signature
    }

    /// The key set that signed the token.
    pub fn key_id(&self) -> KeyId {
        let mut id = [0u8; 8];
        id.copy_from_slice(&self.body[1..9]);
        KeyId(id)
    }

    /// The RSA-OAEP-wrapped AES key.
    pub fn wrapped_key(&self) -> &[u8] {
        &self.body[PREFIX_LEN..PREFIX_LEN + self.wrap_len]
    }

    /// The AES-GCM nonce.
    pub fn nonce(&self) -> [u8; NONCE_LEN] {
        let start = PREFIX_LEN + self.wrap_len;
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&self.body[start..start + NONCE_LEN]);
        nonce
    }

    /// The associated data of the sealed claims.
    pub fn aad(&self) -> &[u8] {
        &self.body[..PREFIX_LEN + self.wrap_len + NONCE_LEN]
    }

    /// The encrypted claims followed by the tag.
    pub fn sealed(&self) -> &[u8] {
        &self.body[PREFIX_LEN + self.wrap_len + NONCE_LEN..]
    }
}

/// Splits `token` into its parts and checks every size, before any crypto. Inputs in another
/// known format (a JWT, an SDK signature) get an error that says what they are.
pub fn parse(token: &str) -> Result<Envelope, TokenError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::TooLong { len: token.len(), max: MAX_TOKEN_LEN });
    }
    if token.trim_start().starts_with('{') {
        return Err(if is_sdk_signature(token.as_bytes()) {
            TokenError::SdkSignature
        } else {
            TokenError::NotMesgdToken {
                why: "this is JSON; a mesgd token is two base64url parts joined by a dot",
            }
        });
    }
    let mut parts = token.split('.');
    let (Some(body), Some(signature), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(match crate::token_shape::jwt_algorithm(token) {
            Some(alg) => TokenError::Jwt { alg: alg.chars().take(16).collect() },
            None => {
                TokenError::NotMesgdToken { why: "a mesgd token is two base64url parts joined by one dot" }
            }
        });
    };
    let body = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| TokenError::NotMesgdToken { why: "the first part is not base64url without padding" })?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| TokenError::NotMesgdToken { why: "the second part is not base64url without padding" })?;
    if is_sdk_signature(&signature) {
        return Err(TokenError::SdkSignature);
    }
    if body.len() < MIN_BODY_LEN {
        return Err(TokenError::NotMesgdToken {
            why: "the first part is too short to hold encrypted claims",
        });
    }
    let version = body[0];
    if version != VERSION {
        return Err(if PLAUSIBLE_VERSIONS.contains(&version) {
            TokenError::UnsupportedVersion { version, supported: VERSION }
        } else {
            TokenError::NotMesgdToken { why: "the first byte is not a format version" }
        });
    }
    check_signature_shape(&signature)?;
    let wrap_len = usize::from(u16::from_be_bytes([body[9], body[10]]));
    if !WRAP_LEN.contains(&wrap_len) {
        return Err(TokenError::Malformed {
            what: "the wrapped key length is not that of an RSA-2048 to RSA-4096 key",
        });
    }
    if body.len() < PREFIX_LEN + wrap_len + NONCE_LEN + TAG_LEN {
        return Err(TokenError::Malformed {
            what: "the encrypted part is shorter than its wrapped key, nonce and tag",
        });
    }
    Ok(Envelope { body, signature, wrap_len })
}

fn check_signature_shape(signature: &[u8]) -> Result<(), TokenError> {
    if signature.len() == 64 && signature[0] != 0x30 {
        return Err(TokenError::RawSignature);
    }
    if !SIGNATURE_LEN.contains(&signature.len()) || signature[0] != 0x30 {
        return Err(TokenError::Malformed { what: "the signature is not a DER ECDSA P-256 signature" });
    }
    Ok(())
}

/// Whether `bytes` are the SDK's JSON message signature: an object with string `r` and `s`.
fn is_sdk_signature(bytes: &[u8]) -> bool {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => {
            map.get("r").is_some_and(Value::is_string) && map.get("s").is_some_and(Value::is_string)
        }
        _ => false,
    }
}
