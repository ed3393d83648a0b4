//! Issuing and verifying tokens: the one implementation the CLI, the REST API and the broker
//! call.
//!
//! Issuing encrypts, then signs: a fresh AES-256-GCM key and nonce seal the claims JSON (the
//! header as associated data), the AES key is wrapped with RSA-OAEP to the current key set's
//! RSA key, and the whole body is signed with its ECDSA key.
//!
//! Verifying runs the cheap, public checks first and the private-key operation last: size and
//! layout, then the signature (a public-key operation), and only for a token this server signed
//! the RSA decryption. An unauthenticated client therefore never reaches the RSA private key
//! with bytes of its choosing, which rules out padding-oracle games against OAEP.

use std::time::SystemTime;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::OAEP_SHA256_MGF1SHA256;
use zeroize::Zeroizing;

use super::wire::{self, Envelope, NONCE_LEN, TAG_LEN};
use super::{Claims, KeyStore, MAX_TOKEN_LEN, Pairs, Payload, TokenError};

/// The AES-256 key length.
const AES_KEY_LEN: usize = 32;

/// Seals `claims` into a token with the store's current key set.
pub fn issue(keys: &KeyStore, claims: &Claims) -> Result<String, TokenError> {
    seal(keys, claims.to_json())
}

/// Encrypts `plaintext` and signs the result with the current key set.
pub(crate) fn seal(keys: &KeyStore, plaintext: Vec<u8>) -> Result<String, TokenError> {
    let set = keys.current();
    let mut aes_key = Zeroizing::new([0u8; AES_KEY_LEN]);
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(aes_key.as_mut()).map_err(|_| TokenError::Crypto("draw an AES key"))?;
    aws_lc_rs::rand::fill(&mut nonce).map_err(|_| TokenError::Crypto("draw a nonce"))?;

    let mut wrapped = vec![0u8; set.encrypting.ciphertext_size()];
    let wrapped_len = set
        .encrypting
        .encrypt(&OAEP_SHA256_MGF1SHA256, aes_key.as_ref(), &mut wrapped, None)
        .map_err(|_| TokenError::Crypto("wrap the AES key with RSA-OAEP"))?
        .len();
    wrapped.truncate(wrapped_len);

    let header = Envelope::header(set.id, &wrapped, &nonce);
    let mut sealed = plaintext;
    let aead = aead_key(&aes_key)?;
    aead.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&header), &mut sealed)
        .map_err(|_| TokenError::Crypto("encrypt the claims"))?;

    let body = Envelope::build_body(set.id, &wrapped, &nonce, &sealed);
    let signature =
        set.signing.sign(&SystemRandom::new(), &body).map_err(|_| TokenError::Crypto("sign the token"))?;
    let token = Envelope::encode(&body, signature.as_ref());
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::TooLarge { len: token.len(), max: MAX_TOKEN_LEN });
    }
    Ok(token)
}

/// `mesgd forge`: a claim token for `pairs`, issued at `now`, without expiry (it lives as long
/// as the key that signs it). Saves nothing.
pub fn forge_claim(keys: &KeyStore, pairs: &Pairs, now: SystemTime) -> Result<String, TokenError> {
    issue(keys, &Claims::new(Payload::Claim(pairs.clone()), None, now, None)?)
}

/// Verifies `token` at `now` and returns its claims: size and layout, the signature with the
/// key set its key id names, the AES key's unwrapping, the claims' decryption and parsing, and
/// `exp`. Any kind of token is returned; use [`Claims::expect_kind`] for one kind.
pub fn verify(keys: &KeyStore, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
    let envelope = wire::parse(token)?;
    let key_id = envelope.key_id();
    let set = keys.verifier(key_id, now)?;
    if envelope.wrapped_key().len() != set.decrypting.key_size_bytes() {
        return Err(TokenError::Malformed {
            what: "the wrapped key does not have the length of its key's RSA modulus",
        });
    }
    set.verifying
        .verify_sig(envelope.body(), envelope.signature())
        .map_err(|_| TokenError::BadSignature { key_id })?;

    let mut unwrapped = Zeroizing::new(vec![0u8; set.decrypting.min_output_size()]);
    let aes_key: Zeroizing<[u8; AES_KEY_LEN]> = {
        let plain = set
            .decrypting
            .decrypt(&OAEP_SHA256_MGF1SHA256, envelope.wrapped_key(), &mut unwrapped, None)
            .map_err(|_| TokenError::Decrypt { key_id })?;
        Zeroizing::new(<[u8; AES_KEY_LEN]>::try_from(&*plain).map_err(|_| TokenError::Decrypt { key_id })?)
    };
    let mut sealed = envelope.sealed().to_vec();
    if sealed.len() < TAG_LEN {
        return Err(TokenError::Malformed { what: "the sealed claims are shorter than their tag" });
    }
    let aead = aead_key(&aes_key)?;
    let plain = aead
        .open_in_place(Nonce::assume_unique_for_key(envelope.nonce()), Aad::from(envelope.aad()), &mut sealed)
        .map_err(|_| TokenError::Decrypt { key_id })?;
    let claims = Claims::from_json(plain)?;
    claims.check_expiry(now)?;
    Ok(claims)
}

fn aead_key(key: &[u8; AES_KEY_LEN]) -> Result<LessSafeKey, TokenError> {
    let unbound = UnboundKey::new(&AES_256_GCM, key).map_err(|_| TokenError::Crypto("set up AES-256-GCM"))?;
    Ok(LessSafeKey::new(unbound))
}
