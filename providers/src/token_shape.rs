//! Recognising a JSON Web Token by its shape, shared by the `jwt` provider (which passes on
//! anything that is not one) and the PKI tokens (which explain that a JWT is a login session,
//! not a claim token).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

/// The `alg` of `token` if it is shaped like a JWT: three base64url segments (the signature may
/// be empty, as in an unsigned token) whose first decodes to a JSON object with a string
/// `alg`. Anything else is not a JWT.
pub(crate) fn jwt_algorithm(token: &str) -> Option<String> {
    let mut segments = token.split('.');
    let (header, payload, signature) = (segments.next()?, segments.next()?, segments.next()?);
    if segments.next().is_some() || header.is_empty() || payload.is_empty() {
        return None;
    }
    let base64url = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !(base64url(header) && base64url(payload) && base64url(signature)) {
        return None;
    }
    let header = URL_SAFE_NO_PAD.decode(header).ok()?;
    let header: Map<String, Value> = serde_json::from_slice(&header).ok()?;
    header.get("alg")?.as_str().map(str::to_owned)
}
