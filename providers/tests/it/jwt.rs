//! The jwt provider with real tokens signed by jsonwebtoken (and hand-built ones where a real
//! library refuses to make them).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use mesgd_core::acl::Permission::{Read, Write};
use mesgd_core::auth::{Authenticator, DenyReason, Outcome};
use mesgd_providers::{BuildContext, Registry};
use serde_json::{Value, json};

use crate::support::{allowed, decide, denied, info, next, providers, rule};

const SECRET: &str = "an HS256 secret of at least thirty-two bytes";
const RSA_TEST_KEY: &str = include_str!("data/rs256-test-key.pem");

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
}

fn provider_with(extra: &str) -> Arc<dyn Authenticator> {
    let text = format!("[[auth.providers]]\ntype = \"jwt\"\nsecret = \"{SECRET}\"\n{extra}");
    let chain = Registry::with_builtin_providers()
        .build_chain(&providers(&text), false, &mut BuildContext::new("/nonexistent"))
        .expect("builds");
    Arc::clone(&chain.entries()[0].provider)
}

fn sign(claims: &Value) -> String {
    sign_with(claims, SECRET.as_bytes())
}

fn sign_with(claims: &Value, secret: &[u8]) -> String {
    encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret)).expect("signs")
}

/// A valid claim set (`sub` alice, expiring in ten minutes) with `extra` claims on top.
fn claims(extra: Value) -> Value {
    let Value::Object(extra) = extra else { panic!("extra claims must be an object") };
    let mut claims = json!({"sub": "alice", "exp": now() + 600});
    claims.as_object_mut().expect("object").extend(extra);
    claims
}

async fn with_token(provider: &dyn Authenticator, username: Option<&str>, token: &str) -> Outcome {
    decide(provider, &info(username, Some(token.as_bytes()))).await
}

#[tokio::test]
async fn a_valid_token_admits_with_its_claims() {
    let jwt = provider_with("");
    let exp = now() + 600;
    let token = sign(&json!({
        "sub": "alice", "exp": exp,
        "acl": [{"pattern": "devices/%u/#", "permission": "read"}, {"pattern": "cmd/%c", "permission": "write"}]
    }));
    for username in [None, Some("alice")] {
        let identity = allowed(with_token(&*jwt, username, &token).await);
        assert_eq!(identity.username.as_deref(), Some("alice"));
        assert_eq!(identity.provider, "jwt");
        assert_eq!(identity.acl, Some(vec![rule("devices/%u/#", Read), rule("cmd/%c", Write)]));
        assert_eq!(
            identity.expires_at,
            Some(UNIX_EPOCH + Duration::from_secs(exp + 30)),
            "expires with the token, plus the default 30 s leeway that admitted it"
        );
    }
}

#[tokio::test]
async fn bad_tokens_are_refused() {
    let jwt = provider_with("");
    let hand_built = |header: &str, claims: &Value, signature: &str| {
        format!(
            "{}.{}.{signature}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        )
    };
    let rs256 = encode(
        &Header::new(Algorithm::RS256),
        &claims(json!({})),
        &EncodingKey::from_rsa_pem(RSA_TEST_KEY.as_bytes()).expect("test key parses"),
    )
    .expect("signs");
    let valid = sign(&claims(json!({})));
    let (head, rest) = valid.split_once('.').expect("three segments");
    let tampered_claims = format!(
        "{head}.{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"sub":"mallory","exp":9999999999}"#),
        rest.split_once('.').expect("signature").1
    );

    let cases: Vec<(&str, String, Option<&str>)> = vec![
        ("expired beyond the leeway", sign(&claims(json!({"exp": now() - 120}))), None),
        ("not valid yet", sign(&claims(json!({"nbf": now() + 120}))), None),
        ("alg none", hand_built(r#"{"alg":"none","typ":"JWT"}"#, &claims(json!({})), ""), None),
        ("alg None", hand_built(r#"{"alg":"None"}"#, &claims(json!({})), ""), None),
        ("alg hs256 (lower case)", hand_built(r#"{"alg":"hs256"}"#, &claims(json!({})), "c2ln"), None),
        ("RS256", rs256, None),
        ("wrong secret", sign_with(&claims(json!({})), b"another secret that is also long enough!!"), None),
        ("tampered claims", tampered_claims, None),
        ("truncated signature", valid[..valid.len() - 4].to_owned(), None),
        ("no exp", sign(&json!({"sub": "alice"})), None),
        ("exp not a number", sign(&json!({"sub": "alice", "exp": "tomorrow"})), None),
        ("no sub", sign(&json!({"exp": now() + 600})), None),
        ("sub not a string", sign(&json!({"sub": 42, "exp": now() + 600})), None),
        ("empty sub", sign(&claims(json!({"sub": ""}))), None),
        ("username differs", valid.clone(), Some("bob")),
        ("aud without a configured audience", sign(&claims(json!({"aud": "other-service"}))), None),
        (
            "forged signature on non-object claims",
            hand_built(r#"{"alg":"HS256"}"#, &json!("not an object"), "c2ln"),
            None,
        ),
    ];
    for (what, token, username) in cases {
        let denial = denied(with_token(&*jwt, username, &token).await);
        assert_eq!(denial.reason, DenyReason::BadCredentials, "{what}: {denial:?}");
        assert!(!denial.message.contains(&token[..20]), "{what}: the message quotes the token");
    }
}

#[tokio::test]
async fn leeway_allows_clock_skew() {
    let token = sign(&claims(json!({"exp": now() - 10, "nbf": now() + 10})));
    allowed(with_token(&*provider_with(""), None, &token).await);
    denied(with_token(&*provider_with("leeway_s = 0"), None, &token).await);
}

#[tokio::test]
async fn passwords_that_are_not_tokens_pass_on() {
    let jwt = provider_with("");
    for password in ["hunter2", "a.b", "a.b.c", "e30.e30.e30.e30", "not base64!.e30.c2ln", ""] {
        next(with_token(&*jwt, Some("alice"), password).await);
    }
    next(decide(&*jwt, &info(Some("alice"), None)).await);
    next(decide(&*jwt, &info(Some("alice"), Some(&[0xff, 0xfe, b'.', b'a', b'.', b'b']))).await);
}

#[tokio::test]
async fn the_acl_claim_decides_the_acl() {
    let jwt = provider_with("");
    assert_eq!(
        allowed(with_token(&*jwt, None, &sign(&claims(json!({})))).await).acl,
        Some(vec![]),
        "absent: deny all"
    );
    assert_eq!(
        allowed(with_token(&*jwt, None, &sign(&claims(json!({"acl": null})))).await).acl,
        Some(vec![])
    );
    assert_eq!(allowed(with_token(&*jwt, None, &sign(&claims(json!({"acl": []})))).await).acl, Some(vec![]));
    let open = provider_with("missing_acl = \"unrestricted\"");
    assert_eq!(allowed(with_token(&*open, None, &sign(&claims(json!({})))).await).acl, None);

    for bad in [
        json!("read everything"),
        json!({"pattern": "#", "permission": "read"}),
        json!([{"pattern": "#"}]),
        json!([{"pattern": "#", "permission": "admin"}]),
        json!([{"pattern": "a/#/b", "permission": "read"}]),
        json!([{"pattern": "", "permission": "read"}]),
    ] {
        let denial = denied(with_token(&*jwt, None, &sign(&claims(json!({"acl": bad})))).await);
        assert_eq!(denial.reason, DenyReason::NotAuthorized, "{bad}: {denial:?}");
    }
}

#[tokio::test]
async fn claims_issuer_audience_and_expiry_are_configurable() {
    let custom = provider_with(
        "username_claim = \"name\"\nacl_claim = \"perms\"\nissuer = \"auth.example\"\naudience = \"mesgd\"\nrequire_exp = false",
    );
    let good = json!({"name": "dave", "iss": "auth.example", "aud": "mesgd", "perms": [{"pattern": "x", "permission": "read"}]});
    let identity = allowed(with_token(&*custom, None, &sign(&good)).await);
    assert_eq!(identity.username.as_deref(), Some("dave"));
    assert_eq!(identity.acl, Some(vec![rule("x", Read)]));
    assert_eq!(identity.expires_at, None, "no exp, none required");

    for (what, claims) in [
        ("wrong issuer", json!({"name": "dave", "iss": "evil", "aud": "mesgd"})),
        ("no issuer", json!({"name": "dave", "aud": "mesgd"})),
        ("wrong audience", json!({"name": "dave", "iss": "auth.example", "aud": "other"})),
        ("no audience", json!({"name": "dave", "iss": "auth.example"})),
        (
            "expired still checked",
            json!({"name": "dave", "iss": "auth.example", "aud": "mesgd", "exp": now() - 3600}),
        ),
    ] {
        let outcome = with_token(&*custom, None, &sign(&claims)).await;
        assert!(matches!(outcome, Outcome::Deny(_)), "{what}: {outcome:?}");
    }
}

#[tokio::test]
async fn secret_file_is_read_and_trimmed() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("jwt.secret"), format!("{SECRET}\n")).expect("writes");
    let text = "[[auth.providers]]\ntype = \"jwt\"\nsecret_file = \"jwt.secret\"";
    let mut ctx = BuildContext::new(dir.path()).with_base_dir(dir.path());
    let chain =
        Registry::with_builtin_providers().build_chain(&providers(text), false, &mut ctx).expect("builds");
    allowed(with_token(&*chain.entries()[0].provider, None, &sign(&claims(json!({})))).await);
}

#[test]
fn bad_settings_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("absent.secret");
    let cases = [
        (format!("secret = \"{SECRET}\"\nsecrt = \"x\""), "unknown field `secrt`, expected one of `secret`, `secret_file`, `leeway_s`, `issuer`, `audience`, `username_claim`, `acl_claim`, `missing_acl`, `require_exp`".to_owned()),
        (String::new(), "missing key: set `secret` or `secret_file`".to_owned()),
        (format!("secret = \"{SECRET}\"\nsecret_file = \"x\""), "set one of `secret` and `secret_file`, not both".to_owned()),
        ("secret = \"short\"".to_owned(), "the HS256 secret must be at least 32 bytes (RFC 7518 §3.2), it has 5".to_owned()),
        (format!("secret = \"{SECRET}\"\nleeway_s = 7200"), "`leeway_s` must be at most 3600, found 7200".to_owned()),
        (format!("secret = \"{SECRET}\"\nusername_claim = \"\""), "`username_claim` must not be empty".to_owned()),
        (
            format!("secret = \"{SECRET}\"\nmissing_acl = \"allow\""),
            "unknown variant `allow`, expected `deny_all` or `unrestricted` in `missing_acl`".to_owned(),
        ),
        (
            format!("secret_file = \"{}\"", missing.display()),
            format!("cannot read `secret_file` file {}: No such file or directory (os error 2)", missing.display()),
        ),
    ];
    for (settings, expected) in cases {
        let text =
            format!("[[auth.providers]]\ntype = \"builtin\"\n[[auth.providers]]\ntype = \"jwt\"\n{settings}");
        let error = Registry::with_builtin_providers()
            .build_chain(&providers(&text), false, &mut BuildContext::new(dir.path()))
            .expect_err("refused");
        assert_eq!(error.to_string(), format!("auth.providers[2] (type = \"jwt\"): {expected}"));
        assert!(!error.to_string().contains(SECRET), "the secret is never shown");
    }
}
