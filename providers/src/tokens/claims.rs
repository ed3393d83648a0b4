//! The claims inside a token: what kind of token it is, when it was issued and expires, its
//! unique id, an optional user, and the kind's payload (pairs, patterns or prefixes).
//!
//! Claims travel as one JSON object (see `docs/tokens.md`):
//!
//! ```json
//! {"kind":"claim","jti":"…22 chars…","iat":1760000000,"pairs":[["sub","alice"],["room","lobby"]]}
//! ```
//!
//! Parsing is strict and hand-written rather than derived, so that a refusal can name the field
//! at fault without quoting its value: claims are encrypted to keep them from the bearer, and an
//! error message must not leak them. Unknown fields, an unknown `kind`, a payload field that
//! does not belong to the kind, and out-of-range sizes are all refused.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use super::TokenError;

/// At most this many pairs in a claim token.
pub const MAX_PAIRS: usize = 64;
/// At most this many patterns in a grant token.
pub const MAX_PATTERNS: usize = 256;
/// At most this many prefixes in an anonymous token (the seed's limit).
pub const MAX_PREFIXES: usize = 8;
/// The longest key, value, pattern, prefix or `sub`, in bytes.
pub const MAX_FIELD_LEN: usize = 1024;
/// The longest `jti` accepted when parsing (issued ones are 22 characters).
const MAX_JTI_LEN: usize = 64;
/// Random bytes in an issued `jti`.
const JTI_BYTES: usize = 16;

/// The fields a claims object may have.
const FIELDS: [&str; 8] = ["kind", "jti", "iat", "exp", "sub", "pairs", "patterns", "prefixes"];

/// What a token is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// `mesgd forge`: a set of pairs, accepted where they match the path.
    Claim,
    /// `POST /auth/admin/issue`: the patterns assigned to a user (issue #16).
    Grant,
    /// `mesgd token anonymous`: at most eight path prefixes (issue #16).
    Anonymous,
}

impl Kind {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Claim => "claim",
            Kind::Grant => "grant",
            Kind::Anonymous => "anonymous",
        }
    }

    fn from_wire(name: &str) -> Option<Kind> {
        match name {
            "claim" => Some(Kind::Claim),
            "grant" => Some(Kind::Grant),
            "anonymous" => Some(Kind::Anonymous),
            _ => None,
        }
    }

    /// The payload field this kind carries.
    fn payload_field(self) -> &'static str {
        match self {
            Kind::Claim => "pairs",
            Kind::Grant => "patterns",
            Kind::Anonymous => "prefixes",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The value of one pair: a string, or `true` for a key given without a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PairValue {
    /// `forge room lobby`: `"room": "lobby"`.
    Text(String),
    /// The last key of an odd number of words: the JSON boolean `true`.
    True,
}

impl PairValue {
    fn to_json(&self) -> Value {
        match self {
            PairValue::Text(s) => Value::String(s.clone()),
            PairValue::True => Value::Bool(true),
        }
    }
}

/// The ordered, validated pairs of a claim token: 1 to [`MAX_PAIRS`] pairs, keys non-empty
/// and distinct, every key and value at most [`MAX_FIELD_LEN`] bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pairs(Vec<(String, PairValue)>);

impl Pairs {
    /// Validates `pairs`. A repeated key is refused rather than resolved: as a JSON object the
    /// pairs can hold one value per key, and silently keeping one hides a typo.
    pub fn new(pairs: Vec<(String, PairValue)>) -> Result<Pairs, TokenError> {
        if pairs.is_empty() {
            return Err(invalid("a claim token needs at least one pair"));
        }
        if pairs.len() > MAX_PAIRS {
            return Err(invalid(format!("{} pairs, at most {MAX_PAIRS} allowed", pairs.len())));
        }
        for (i, (key, value)) in pairs.iter().enumerate() {
            if key.is_empty() {
                return Err(invalid(format!("pair {} has an empty key", i + 1)));
            }
            check_len("a key", key)?;
            if let PairValue::Text(v) = value {
                check_len("a value", v)?;
            }
            if pairs[..i].iter().any(|(k, _)| k == key) {
                return Err(invalid(format!("the key `{}` is given twice", shorten(key))));
            }
        }
        Ok(Pairs(pairs))
    }

    /// The pairs from command-line words `k v k v …`; an odd count gives the last key the value
    /// `true`.
    pub fn from_words<S: AsRef<str>>(words: &[S]) -> Result<Pairs, TokenError> {
        let pairs = words
            .chunks(2)
            .map(|chunk| {
                let key = chunk[0].as_ref().to_owned();
                let value = chunk.get(1).map_or(PairValue::True, |v| PairValue::Text(v.as_ref().to_owned()));
                (key, value)
            })
            .collect();
        Pairs::new(pairs)
    }

    /// The pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PairValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The number of pairs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true for validated pairs; here for symmetry with [`Pairs::len`].
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pairs as a JSON object: `sub alice room lobby` → `{"sub":"alice","room":"lobby"}`.
    /// This is the message a claim token is matched against.
    pub fn to_object(&self) -> Value {
        Value::Object(self.0.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
    }

    fn to_json(&self) -> Value {
        Value::Array(
            self.0.iter().map(|(k, v)| Value::Array(vec![Value::String(k.clone()), v.to_json()])).collect(),
        )
    }

    fn from_json(value: &Value) -> Result<Pairs, TokenError> {
        let items = value.as_array().ok_or_else(|| claims_err("`pairs` is not an array"))?;
        if items.len() > MAX_PAIRS {
            return Err(claims_err(format!("`pairs` has more than {MAX_PAIRS} entries")));
        }
        let mut pairs = Vec::with_capacity(items.len());
        for item in items {
            let pair = match item.as_array().map(Vec::as_slice) {
                Some([Value::String(k), Value::String(v)]) => (k.clone(), PairValue::Text(v.clone())),
                Some([Value::String(k), Value::Bool(true)]) => (k.clone(), PairValue::True),
                _ => return Err(claims_err("an entry of `pairs` is not [key, string or true]")),
            };
            pairs.push(pair);
        }
        Pairs::new(pairs).map_err(|e| claims_err(format!("`pairs`: {}", inner(&e))))
    }
}

/// The payload of a token, one per [`Kind`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Payload {
    /// A claim token's pairs.
    Claim(Pairs),
    /// A grant token's patterns (paths), as assigned when it was issued.
    Grant(Vec<String>),
    /// An anonymous token's path prefixes.
    Anonymous(Vec<String>),
}

impl Payload {
    /// The kind of token that carries this payload.
    pub fn kind(&self) -> Kind {
        match self {
            Payload::Claim(_) => Kind::Claim,
            Payload::Grant(_) => Kind::Grant,
            Payload::Anonymous(_) => Kind::Anonymous,
        }
    }

    fn validate(&self) -> Result<(), TokenError> {
        match self {
            Payload::Claim(_) => Ok(()),
            Payload::Grant(patterns) => check_list("patterns", patterns, MAX_PATTERNS),
            Payload::Anonymous(prefixes) => check_list("prefixes", prefixes, MAX_PREFIXES),
        }
    }

    fn to_json(&self) -> Value {
        let strings = |items: &[String]| Value::Array(items.iter().cloned().map(Value::String).collect());
        match self {
            Payload::Claim(pairs) => pairs.to_json(),
            Payload::Grant(items) | Payload::Anonymous(items) => strings(items),
        }
    }
}

/// The claims of one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    /// A unique token id (16 random bytes, base64url), for revocation lists.
    pub jti: String,
    /// Issued at, unix seconds.
    pub iat: u64,
    /// Expires at, unix seconds; `None` for a token that lives as long as its signing key.
    pub exp: Option<u64>,
    /// The user the token speaks for (grant tokens); forged claim tokens name none.
    pub sub: Option<String>,
    /// What the token carries.
    pub payload: Payload,
}

impl Claims {
    /// New claims issued at `now`, expiring `ttl` later (never, with `None`), with a fresh
    /// random `jti`.
    pub fn new(
        payload: Payload,
        sub: Option<String>,
        now: SystemTime,
        ttl: Option<Duration>,
    ) -> Result<Claims, TokenError> {
        payload.validate()?;
        if let Some(s) = &sub {
            check_sub(s).map_err(|e| invalid(format!("`sub`: {e}")))?;
        }
        let iat = unix_seconds(now);
        let exp = ttl.map(|t| iat.saturating_add(t.as_secs().max(1)));
        let mut id = [0u8; JTI_BYTES];
        aws_lc_rs::rand::fill(&mut id).map_err(|_| TokenError::Crypto("draw a random token id"))?;
        Ok(Claims { jti: URL_SAFE_NO_PAD.encode(id), iat, exp, sub, payload })
    }

    /// The kind of token.
    pub fn kind(&self) -> Kind {
        self.payload.kind()
    }

    /// `Ok` if this is a token of `kind`, else [`TokenError::WrongKind`].
    pub fn expect_kind(&self, kind: Kind) -> Result<(), TokenError> {
        if self.kind() == kind {
            Ok(())
        } else {
            Err(TokenError::WrongKind { expected: kind, found: self.kind() })
        }
    }

    /// A claim token's pairs; `None` for the other kinds.
    pub fn pairs(&self) -> Option<&Pairs> {
        match &self.payload {
            Payload::Claim(pairs) => Some(pairs),
            _ => None,
        }
    }

    /// A claim token's pairs as a JSON object ([`Pairs::to_object`]); `None` for the other
    /// kinds, which match by coverage, not as a message.
    pub fn pairs_object(&self) -> Option<Value> {
        self.pairs().map(Pairs::to_object)
    }

    /// `Err(Expired)` if `exp` is at or before `now`.
    pub fn check_expiry(&self, now: SystemTime) -> Result<(), TokenError> {
        let now = unix_seconds(now);
        match self.exp {
            Some(exp) if exp <= now => Err(TokenError::Expired { exp, now }),
            _ => Ok(()),
        }
    }

    /// The claims as the JSON text that is encrypted into a token.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut map = Map::new();
        map.insert("kind".into(), Value::String(self.kind().as_str().into()));
        map.insert("jti".into(), Value::String(self.jti.clone()));
        map.insert("iat".into(), Value::from(self.iat));
        if let Some(exp) = self.exp {
            map.insert("exp".into(), Value::from(exp));
        }
        if let Some(sub) = &self.sub {
            map.insert("sub".into(), Value::String(sub.clone()));
        }
        map.insert(self.kind().payload_field().into(), self.payload.to_json());
        serde_json::to_vec(&Value::Object(map)).unwrap_or_default()
    }

    /// Parses decrypted claims, strictly.
    pub(crate) fn from_json(bytes: &[u8]) -> Result<Claims, TokenError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|_| claims_err("they are not JSON"))?;
        let Value::Object(map) = value else {
            return Err(claims_err("they are not a JSON object"));
        };
        if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(claims_err(format!("unknown field `{}`", shorten(unknown))));
        }
        let kind = match map.get("kind") {
            Some(Value::String(name)) => Kind::from_wire(name)
                .ok_or_else(|| claims_err("unknown `kind` (claim, grant or anonymous expected)"))?,
            Some(_) => return Err(claims_err("`kind` is not a string")),
            None => return Err(claims_err("no `kind`")),
        };
        for other in [Kind::Claim, Kind::Grant, Kind::Anonymous] {
            let field = other.payload_field();
            if other != kind && map.contains_key(field) {
                return Err(claims_err(format!("`{field}` does not belong in a {kind} token")));
            }
        }
        let jti = match map.get("jti") {
            Some(Value::String(j)) if !j.is_empty() && j.len() <= MAX_JTI_LEN => j.clone(),
            _ => return Err(claims_err("`jti` is missing or not a short string")),
        };
        let iat = map
            .get("iat")
            .and_then(Value::as_u64)
            .ok_or_else(|| claims_err("`iat` is missing or not unix seconds"))?;
        let exp = match map.get("exp") {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| claims_err("`exp` is not unix seconds"))?),
        };
        if exp.is_some_and(|e| e < iat) {
            return Err(claims_err("`exp` is before `iat`"));
        }
        let sub = match map.get("sub") {
            None => None,
            Some(Value::String(s)) => {
                check_sub(s).map_err(|e| claims_err(format!("`sub`: {e}")))?;
                Some(s.clone())
            }
            Some(_) => return Err(claims_err("`sub` is not a string")),
        };
        let field = kind.payload_field();
        let raw = map.get(field).ok_or_else(|| claims_err(format!("a {kind} token needs `{field}`")))?;
        let payload = match kind {
            Kind::Claim => Payload::Claim(Pairs::from_json(raw)?),
            Kind::Grant => Payload::Grant(string_list(field, raw, MAX_PATTERNS)?),
            Kind::Anonymous => Payload::Anonymous(string_list(field, raw, MAX_PREFIXES)?),
        };
        Ok(Claims { jti, iat, exp, sub, payload })
    }
}

/// Seconds since the Unix epoch; 0 for a time before it.
pub(crate) fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn string_list(field: &str, value: &Value, max: usize) -> Result<Vec<String>, TokenError> {
    let items = value.as_array().ok_or_else(|| claims_err(format!("`{field}` is not an array")))?;
    if items.len() > max {
        return Err(claims_err(format!("`{field}` has more than {max} entries")));
    }
    let list = items
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| claims_err(format!("an entry of `{field}` is not a string")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_list(field, &list, max).map_err(|e| claims_err(inner(&e)))?;
    Ok(list)
}

fn check_list(field: &str, items: &[String], max: usize) -> Result<(), TokenError> {
    if items.is_empty() {
        return Err(invalid(format!("`{field}` needs at least one entry")));
    }
    if items.len() > max {
        return Err(invalid(format!("`{field}` has {} entries, at most {max} allowed", items.len())));
    }
    if items.iter().any(String::is_empty) {
        return Err(invalid(format!("`{field}` has an empty entry")));
    }
    items.iter().try_for_each(|item| check_len(field, item))
}

fn check_sub(sub: &str) -> Result<(), String> {
    if sub.is_empty() {
        return Err("empty".into());
    }
    if sub.len() > MAX_FIELD_LEN {
        return Err(format!("longer than {MAX_FIELD_LEN} bytes"));
    }
    Ok(())
}

fn check_len(what: &str, text: &str) -> Result<(), TokenError> {
    if text.len() > MAX_FIELD_LEN {
        return Err(invalid(format!("{what} is {} bytes long, at most {MAX_FIELD_LEN} allowed", text.len())));
    }
    Ok(())
}

fn invalid(message: impl Into<String>) -> TokenError {
    TokenError::InvalidClaims(message.into())
}

fn claims_err(reason: impl Into<String>) -> TokenError {
    TokenError::Claims { reason: reason.into() }
}

/// The message of an `InvalidClaims` error without its prefix, to re-wrap it.
fn inner(e: &TokenError) -> String {
    match e {
        TokenError::InvalidClaims(m) => m.clone(),
        other => other.to_string(),
    }
}

/// Text from the command line or a token, cut to a length fit for an error message.
fn shorten(text: &str) -> String {
    text.chars().take(32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_760_000_000)
    }

    fn claim(words: &[&str]) -> Claims {
        Claims::new(Payload::Claim(Pairs::from_words(words).unwrap()), None, now(), None).unwrap()
    }

    #[test]
    fn pairs_become_an_object_and_an_odd_last_key_is_true() {
        let pairs = Pairs::from_words(&["sub", "alice", "room", "lobby"]).unwrap();
        assert_eq!(pairs.to_object(), serde_json::json!({"sub": "alice", "room": "lobby"}));
        let odd = Pairs::from_words(&["room", "lobby", "admin"]).unwrap();
        assert_eq!(odd.to_object(), serde_json::json!({"room": "lobby", "admin": true}));
        assert_eq!(odd.iter().last(), Some(("admin", &PairValue::True)));
    }

    #[test]
    fn bad_pairs_are_refused_with_the_reason() {
        let table: &[(&[&str], &str)] = &[
            (&[], "at least one pair"),
            (&["room", "a", "room", "b"], "`room` is given twice"),
            (&["", "x"], "empty key"),
        ];
        for (words, expected) in table {
            let err = Pairs::from_words(words).unwrap_err().to_string();
            assert!(err.contains(expected), "{words:?}: {err}");
        }
        let many: Vec<String> = (0..=MAX_PAIRS).flat_map(|i| [format!("k{i}"), "v".into()]).collect();
        assert!(Pairs::from_words(&many).unwrap_err().to_string().contains("at most 64"));
        let long = "x".repeat(MAX_FIELD_LEN + 1);
        assert!(Pairs::from_words(&["k", long.as_str()]).unwrap_err().to_string().contains("at most 1024"));
    }

    #[test]
    fn claims_round_trip_through_json_for_every_kind() {
        let c = claim(&["sub", "alice", "room", "lobby", "flag"]);
        assert_eq!(c.jti.len(), 22);
        assert_eq!(Claims::from_json(&c.to_json()).unwrap(), c);
        let g = Claims::new(
            Payload::Grant(vec!["/room=lobby".into()]),
            Some("alice".into()),
            now(),
            Some(Duration::from_secs(3600)),
        )
        .unwrap();
        assert_eq!(g.exp, Some(g.iat + 3600));
        assert_eq!(Claims::from_json(&g.to_json()).unwrap(), g);
        let a = Claims::new(
            Payload::Anonymous(vec!["/kind=public".into()]),
            None,
            now(),
            Some(Duration::from_secs(3600)),
        )
        .unwrap();
        assert_eq!(Claims::from_json(&a.to_json()).unwrap(), a);
        assert_ne!(claim(&["a", "b"]).jti, claim(&["a", "b"]).jti, "jti must be unique");
    }

    #[test]
    fn anonymous_tokens_take_at_most_eight_prefixes() {
        let nine: Vec<String> = (0..9).map(|i| format!("/p={i}")).collect();
        let err = Claims::new(Payload::Anonymous(nine), None, now(), None).unwrap_err();
        assert!(err.to_string().contains("at most 8"), "{err}");
    }

    #[test]
    fn malformed_claims_table() {
        let table: &[(&str, &str)] = &[
            ("[1]", "not a JSON object"),
            ("nope", "not JSON"),
            (r#"{"kind":"root","jti":"j","iat":1,"pairs":[["a","b"]]}"#, "unknown `kind`"),
            (r#"{"kind":7,"jti":"j","iat":1,"pairs":[["a","b"]]}"#, "`kind` is not a string"),
            (r#"{"jti":"j","iat":1,"pairs":[["a","b"]]}"#, "no `kind`"),
            (
                r#"{"kind":"claim","jti":"j","iat":1,"pairs":[["a","b"]],"admin":true}"#,
                "unknown field `admin`",
            ),
            (r#"{"kind":"claim","jti":"j","iat":1,"pairs":[["a","b"]],"patterns":["/"]}"#, "does not belong"),
            (r#"{"kind":"claim","iat":1,"pairs":[["a","b"]]}"#, "`jti`"),
            (r#"{"kind":"claim","jti":"j","iat":-1,"pairs":[["a","b"]]}"#, "`iat`"),
            (r#"{"kind":"claim","jti":"j","iat":5,"exp":4,"pairs":[["a","b"]]}"#, "before `iat`"),
            (r#"{"kind":"claim","jti":"j","iat":1}"#, "needs `pairs`"),
            (r#"{"kind":"claim","jti":"j","iat":1,"pairs":[["a",false]]}"#, "not [key, string or true]"),
            (r#"{"kind":"claim","jti":"j","iat":1,"pairs":[["a","b"],["a","c"]]}"#, "given twice"),
            (r#"{"kind":"claim","jti":"j","iat":1,"pairs":[]}"#, "at least one pair"),
            (r#"{"kind":"grant","jti":"j","iat":1,"patterns":[1]}"#, "not a string"),
            (r#"{"kind":"grant","jti":"j","iat":1,"sub":"","patterns":["/a"]}"#, "`sub`: empty"),
        ];
        for (json, expected) in table {
            let err = Claims::from_json(json.as_bytes()).unwrap_err();
            assert!(matches!(err, TokenError::Claims { .. }), "{json}: {err:?}");
            assert!(err.to_string().contains(expected), "{json}: {err}");
        }
    }

    #[test]
    fn claim_errors_never_quote_values() {
        let json = r#"{"kind":"s3cr3t-kind","jti":"j","iat":1,"pairs":[["a","b"]]}"#;
        assert!(!Claims::from_json(json.as_bytes()).unwrap_err().to_string().contains("s3cr3t"));
    }

    #[test]
    fn expiry_is_exclusive_at_exp() {
        let c = Claims::new(
            Payload::Claim(Pairs::from_words(&["a"]).unwrap()),
            None,
            now(),
            Some(Duration::from_secs(10)),
        )
        .unwrap();
        assert!(c.check_expiry(now() + Duration::from_secs(9)).is_ok());
        assert!(matches!(c.check_expiry(now() + Duration::from_secs(10)), Err(TokenError::Expired { .. })));
        assert!(claim(&["a"]).check_expiry(now() + Duration::from_secs(1 << 40)).is_ok());
    }

    #[test]
    fn wrong_kind_is_named() {
        let err = claim(&["a"]).expect_kind(Kind::Grant).unwrap_err();
        assert_eq!(err.to_string(), "this is a claim token; a grant token is needed here");
    }
}
