//! The body of the `jwt` fuzz target (`fuzz/fuzz_targets/jwt.rs`), kept here so that a unit
//! test replays the committed seed corpus on a stable compiler. It panics when it finds a bug
//! and returns normally on any input otherwise.
//!
//! The provider is the real one, built by [`JwtFactory`] from TOML with [`SECRET`] (and
//! `require_exp = false`, so that a token the fuzzer signs needs no clock). Two paths:
//!
//! - Negative: the input, as text, is the password. Whatever the provider decides must not
//!   panic, and an `Allow` needs a token that really is HS256-signed with the secret, which an
//!   independent HMAC check (the `hmac` crate, not jsonwebtoken) confirms. The same token with
//!   its signature altered, and re-headed as `alg: none` without a signature, is never
//!   admitted.
//! - Positive: the input as claims (a JSON object as it is; anything else becomes
//!   `{"sub": text}`), signed with the secret. The signature always verifies, so the outcome
//!   follows from the claims alone: the username claim, the `acl` claim through the rule
//!   parser, and the time claims (a token with `exp`, `nbf`, `iss` or `aud` is only checked not
//!   to fail its signature).

use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use mesgd_core::acl::Rule;
use mesgd_core::auth::{Authenticator, ConnectInfo, DenyReason, Outcome, Protocol, Secret};
use serde_json::{Map, Value};
use sha2::Sha256;

use super::{JwtFactory, TYPE_NAME};
use crate::registry::{BuildContext, ProviderFactory, ProviderSpec};
use crate::rules::rules_from_json;

/// The HS256 key of the fuzzed provider.
pub const SECRET: &str = "fuzzing-secret-of-at-least-32-bytes!";

fn provider() -> &'static Arc<dyn Authenticator> {
    static PROVIDER: OnceLock<Arc<dyn Authenticator>> = OnceLock::new();
    PROVIDER.get_or_init(|| {
        let settings: toml::Table = toml::from_str(&format!("secret = {SECRET:?}\nrequire_exp = false"))
            .expect("fuzzing settings parse");
        let spec = ProviderSpec::new(0, TYPE_NAME, settings);
        JwtFactory.build(&spec, &mut BuildContext::new("/nonexistent")).expect("the fuzzed provider builds")
    })
}

fn decide(password: &str, username: Option<&str>) -> Outcome {
    let info = ConnectInfo::new(Protocol::Mqtt311, "fuzz-client", "fuzz")
        .with_username(username.map(str::to_owned))
        .with_password(Some(Secret::new(password.as_bytes())));
    let future = provider().authenticate(&info);
    // The jwt provider decides before it returns the future; one poll completes it.
    let waker = std::task::Waker::noop();
    match std::pin::pin!(future).poll(&mut std::task::Context::from_waker(waker)) {
        std::task::Poll::Ready(result) => result.expect("the jwt provider never fails"),
        std::task::Poll::Pending => panic!("the jwt provider's answer is not ready at once"),
    }
}

/// Whether `token` is `header.payload.signature` with an HMAC-SHA256 of `header.payload` under
/// [`SECRET`] as its signature, and a header whose `alg` is `HS256`.
fn really_signed(token: &str) -> bool {
    let Some((signed, signature)) = token.rsplit_once('.') else { return false };
    let Some((header, _)) = signed.split_once('.') else { return false };
    let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else { return false };
    let header: Option<Map<String, Value>> =
        URL_SAFE_NO_PAD.decode(header).ok().and_then(|h| serde_json::from_slice(&h).ok());
    if header.as_ref().and_then(|h| h.get("alg")).and_then(Value::as_str) != Some("HS256") {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("HMAC takes any key");
    mac.update(signed.as_bytes());
    mac.verify_slice(&signature).is_ok()
}

fn sign(header: &str, claims: &Map<String, Value>) -> String {
    let claims = serde_json::to_vec(claims).expect("a map serialises");
    let signed = format!("{}.{}", URL_SAFE_NO_PAD.encode(header), URL_SAFE_NO_PAD.encode(claims));
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("HMAC takes any key");
    mac.update(signed.as_bytes());
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
}

/// Both paths, on one input.
pub fn token(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::token_shape::jwt_algorithm(&text);
    unsigned_or_forged(&text);
    signed(&text);
}

fn unsigned_or_forged(text: &str) {
    if let Outcome::Allow(_) = decide(text, None) {
        assert!(really_signed(text), "admitted a token that is not HS256-signed with the secret: {text:?}");
    }
    // The same token with the last signature character changed, and without a signature.
    if let Some((signed, signature)) = text.rsplit_once('.') {
        let altered = match signature.chars().last() {
            Some('A') => format!("{signed}.{}B", &signature[..signature.len() - 1]),
            Some(c) => format!("{signed}.{}A", &signature[..signature.len() - c.len_utf8()]),
            None => format!("{signed}.AAAA"),
        };
        if let Outcome::Allow(_) = decide(&altered, None) {
            assert!(really_signed(&altered), "admitted an altered signature: {altered:?}");
        }
        if let Some((_, payload)) = signed.split_once('.') {
            let unsigned = format!("{}.{payload}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#));
            assert!(!matches!(decide(&unsigned, None), Outcome::Allow(_)), "admitted alg none: {unsigned:?}");
        }
    }
}

fn signed(text: &str) -> Outcome {
    let claims = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(claims)) => claims,
        _ => Map::from_iter([("sub".to_owned(), Value::String(text.to_owned()))]),
    };
    let token = sign(r#"{"alg":"HS256","typ":"JWT"}"#, &claims);
    assert!(really_signed(&token));
    let outcome = decide(&token, None);
    if token.len() > super::MAX_TOKEN_LEN {
        // Refused by its length before anything else is read, however well it is signed.
        match &outcome {
            Outcome::Deny(denial) => assert_eq!(denial.reason, DenyReason::BadCredentials),
            other => panic!("a token of {} bytes decided {other:?}", token.len()),
        }
        return outcome;
    }
    if let Outcome::Deny(denial) = &outcome {
        assert_ne!(denial.message, "token signature does not verify", "a signed token failed its signature");
    }
    if ["exp", "nbf", "iss", "aud"].iter().any(|c| claims.contains_key(*c)) {
        return outcome;
    }
    let username = claims.get("sub").and_then(Value::as_str).filter(|u| !u.is_empty());
    let expected_acl: Option<Result<Vec<Rule>, String>> = match claims.get("acl") {
        None | Some(Value::Null) => Some(Ok(Vec::new())),
        Some(value) => Some(rules_from_json(value)),
    };
    match (&outcome, username, expected_acl) {
        (Outcome::Allow(identity), Some(user), Some(Ok(rules))) => {
            assert_eq!(identity.username.as_deref(), Some(user));
            assert_eq!(identity.acl.as_ref(), Some(&rules), "claims {claims:?}");
            // The username of the token is the only one the token admits.
            let other = format!("{user}-other");
            assert!(matches!(decide(&token, Some(&other)), Outcome::Deny(_)), "another username admitted");
        }
        (Outcome::Deny(denial), Some(_), Some(Err(_))) => {
            assert_eq!(denial.reason, DenyReason::NotAuthorized)
        }
        (Outcome::Deny(denial), None, _) => assert_eq!(denial.reason, DenyReason::BadCredentials),
        (outcome, _, _) => panic!("claims {claims:?} decided {outcome:?}"),
    }
    outcome
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn jwt_corpus() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/jwt");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut count = 0;
        for entry in entries {
            let file = entry.unwrap().path();
            let data = std::fs::read(&file).unwrap();
            if let Err(panic) = std::panic::catch_unwind(|| token(&data)) {
                eprintln!("seed {} fails", file.display());
                std::panic::resume_unwind(panic);
            }
            count += 1;
        }
        assert!(count >= 5, "only {count} seeds in {}", dir.display());
    }

    #[test]
    fn the_oracle_tells_signed_from_forged_tokens() {
        let claims = Map::from_iter([("sub".to_owned(), Value::String("alice".into()))]);
        let token = sign(r#"{"alg":"HS256"}"#, &claims);
        assert!(really_signed(&token));
        assert!(matches!(decide(&token, None), Outcome::Allow(_)));
        // Bob's claims under Alice's signature.
        let bob =
            sign(r#"{"alg":"HS256"}"#, &Map::from_iter([("sub".to_owned(), Value::String("bob".into()))]));
        let (bob_signed, _) = bob.rsplit_once('.').unwrap();
        let (signed, alice_signature) = token.rsplit_once('.').unwrap();
        let forged = format!("{bob_signed}.{alice_signature}");
        assert!(!really_signed(&forged));
        assert!(!matches!(decide(&forged, None), Outcome::Allow(_)));
        assert!(!really_signed(&format!("{signed}.")));
        assert!(matches!(
            signed_outcome(r#"{"sub":"alice","acl":[{"pattern":"a/#","permission":"read"}]}"#),
            Outcome::Allow(_)
        ));
        assert!(matches!(signed_outcome(r##"{"sub":"alice","acl":"#"}"##), Outcome::Deny(_)));
    }

    fn signed_outcome(claims: &str) -> Outcome {
        signed(claims)
    }
}
