//! Admitting a content-routing upgrade: where the credential is read from, what it is, and
//! whether it admits the path.
//!
//! # Carriers
//!
//! A token may come as `Authorization: Bearer T`, as `Authorization: Basic base64(T)` (the
//! decoded text is the token; `T:` and `:T`, what a user/password prompt with one field left
//! empty sends, give `T`), as the subprotocol list `Sec-WebSocket-Protocol: json, T` (the server
//! answers `json`), or as the query parameter `?token=T`. Several carriers may repeat the same
//! token; two different tokens are refused (400) rather than one silently preferred.
//!
//! # Credentials
//!
//! [`Credential`] is what admitted a connection: authentication switched off, a public path, a
//! claim token whose pairs match the path, an anonymous token one of whose prefixes covers
//! the path, or a login session of an enabled account (any path). Each of them makes a
//! listener (`Role::Listener`). A grant token admits the path when one of its patterns that
//! the account *still* holds covers it; the connection is a `Role::FilteredSender`, not
//! registered, whose messages are filtered before each scan (`super::grant`). A login session
//! is told from a PKI token by its shape (three dot-separated parts, a JWT).
//!
//! # Refusals
//!
//! No credential where one is needed: exactly 401, with `WWW-Authenticate: Bearer`. A
//! credential that does not verify (malformed, another format, a bad signature, expired,
//! unknown key): 401 and the reason. A valid token that does not admit the path, or of a kind
//! that cannot open a content connection: 403 and the reason. Every refused credential is a
//! failed login for the login guard, which slows the next attempts from that address down.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Response, StatusCode, Uri};
use base64::Engine as _;
use mesgd_core::broker::Stats;
use mesgd_core::content::Path;
use mesgd_providers::builtin::UserDirectory;
use mesgd_providers::sessions::{Sessions, looks_like_session};
use mesgd_providers::tokens::{Claims, ContentPaths, Kind, Payload, TokenError, claim_admits};

use super::grant::{Bound, standing, still_assigned};
use super::registry::Role;
use crate::context::ServerContext;

/// The subprotocol that carries a token after it, and the one the server answers with.
pub(crate) const JSON_PROTOCOL: &str = "json";

/// A token as presented. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Presented(String);

impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Presented({} bytes)", self.0.len())
    }
}

impl Presented {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// What admitted a connection.
#[derive(Debug)]
pub(crate) enum Credential {
    /// `[content] disable_auth = true`.
    AuthDisabled,
    /// No credential, on a path covered by one of `public_paths`.
    Public,
    /// A claim token whose pairs match the path.
    Claim {
        /// The token's id (for the log; never the token).
        jti: String,
    },
    /// An anonymous token, one of whose prefixes covers the path.
    Anonymous {
        /// The token's id.
        jti: String,
    },
    /// A login session of an enabled account.
    Session {
        /// The account.
        account: String,
        /// Its expiry, unix seconds.
        exp: u64,
    },
    /// A grant token, one of whose still-assigned patterns covers the path.
    Grant {
        /// The token's id.
        jti: String,
        /// The account.
        account: String,
        /// Its expiry, unix seconds.
        exp: u64,
        /// The token's patterns (all of them: which are still assigned is checked per message).
        patterns: Arc<[Path]>,
    },
}

impl Credential {
    /// How a connection admitted by this credential on `path` takes part.
    pub(crate) fn role(&self, path: Path) -> Role {
        match self {
            Credential::Grant { .. } => Role::FilteredSender,
            _ => Role::Listener(path),
        }
    }

    /// The live checks of a connection that speaks for an account.
    pub(crate) fn bound(&self, ctx: &ServerContext) -> Option<Bound> {
        let directory = ctx.services.get::<UserDirectory>()?;
        match self {
            Credential::Session { account, exp } => Some(Bound::session(directory, account.clone(), *exp)),
            Credential::Grant { account, exp, patterns, .. } => {
                Some(Bound::grant(directory, account.clone(), *exp, patterns.clone()))
            }
            _ => None,
        }
    }

    /// A word for the log.
    pub(crate) fn describe(&self) -> Cow<'static, str> {
        match self {
            Credential::AuthDisabled => "auth disabled".into(),
            Credential::Public => "public path".into(),
            Credential::Claim { jti } => format!("claim token {jti}").into(),
            Credential::Anonymous { jti } => format!("anonymous token {jti}").into(),
            Credential::Session { account, .. } => format!("login session of {account:?}").into(),
            Credential::Grant { jti, account, .. } => format!("grant token {jti} of {account:?}").into(),
        }
    }
}

/// An upgrade refused before it happened: the HTTP answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) reason: Cow<'static, str>,
}

impl Refusal {
    fn new(status: StatusCode, reason: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal { status, reason: reason.into() }
    }

    fn bad_request(reason: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal::new(StatusCode::BAD_REQUEST, reason)
    }

    fn unauthorized(reason: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal::new(StatusCode::UNAUTHORIZED, reason)
    }

    fn forbidden(reason: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal::new(StatusCode::FORBIDDEN, reason)
    }

    /// Whether this refuses a credential (missing or not good enough), rather than the request.
    pub(crate) fn refuses_credential(&self) -> bool {
        matches!(self.status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
    }

    /// The response: the reason as one line of text; a 401 also says how to authenticate.
    pub(crate) fn response(&self) -> Response<Body> {
        let mut r = super::route::text_response(self.status, format!("{}\n", self.reason));
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"mesgd\""));
        }
        r
    }
}

const MISSING: &str = "a credential is required: send a token as Authorization: Bearer TOKEN, \
                       Authorization: Basic base64(TOKEN), Sec-WebSocket-Protocol: json, TOKEN, or ?token=TOKEN";

/// The token in an `Authorization` header value.
fn from_authorization(value: &HeaderValue) -> Result<Presented, Refusal> {
    let text =
        value.to_str().map_err(|_| Refusal::bad_request("the Authorization header is not visible ASCII"))?;
    let text = text.trim();
    let (scheme, rest) = text.split_once(' ').unwrap_or((text, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        if rest.is_empty() {
            return Err(Refusal::unauthorized("the Bearer credential is empty"));
        }
        return Ok(Presented(rest.to_owned()));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| Refusal::unauthorized("the Basic credential is not base64"))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| Refusal::unauthorized("the Basic credential is not UTF-8 text"))?;
        // A user/password prompt with one field empty sends "T:" or ":T".
        let token = match decoded.split_once(':') {
            Some((t, "")) | Some(("", t)) => t,
            _ => decoded.as_str(),
        };
        if token.is_empty() {
            return Err(Refusal::unauthorized("the Basic credential is empty"));
        }
        return Ok(Presented(token.to_owned()));
    }
    Err(Refusal::unauthorized(format!(
        "the Authorization scheme {:?} is not supported: use Bearer or Basic",
        scheme.chars().take(32).collect::<String>()
    )))
}

/// Whether the client offered the `json` subprotocol.
pub(crate) fn offers_json(headers: &HeaderMap) -> bool {
    crate::http::ws::offered_protocols(headers).any(|p| p.eq_ignore_ascii_case(JSON_PROTOCOL))
}

/// The credential of an upgrade request, from whichever carriers hold one; `None` if none does.
pub(crate) fn presented(headers: &HeaderMap, uri: &Uri) -> Result<Option<Presented>, Refusal> {
    let mut found: Vec<(&'static str, Presented)> = Vec::new();
    let mut authorization = headers.get_all(header::AUTHORIZATION).iter();
    if let Some(value) = authorization.next() {
        if authorization.next().is_some() {
            return Err(Refusal::bad_request("more than one Authorization header"));
        }
        found.push(("Authorization", from_authorization(value)?));
    }
    if offers_json(headers) {
        for p in crate::http::ws::offered_protocols(headers) {
            if !p.eq_ignore_ascii_case(JSON_PROTOCOL) && !p.is_empty() {
                found.push(("Sec-WebSocket-Protocol", Presented(p.to_owned())));
            }
        }
    }
    if let Some(query) = uri.query() {
        let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map_err(|_| Refusal::bad_request(format!("the query string is malformed: {:?}", cut(query))))?;
        for (k, v) in pairs.0 {
            if k == "token" {
                if v.is_empty() {
                    return Err(Refusal::unauthorized("the token query parameter is empty"));
                }
                found.push(("?token", Presented(v)));
            }
        }
    }
    let mut found = found.into_iter();
    let Some((first_carrier, first)) = found.next() else { return Ok(None) };
    for (carrier, other) in found {
        if other != first {
            return Err(Refusal::bad_request(format!(
                "two different credentials ({first_carrier} and {carrier}): send one"
            )));
        }
    }
    Ok(Some(first))
}

fn cut(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Decides whether an upgrade from `peer` to `path` with `presented` is admitted.
pub(crate) async fn admit(
    ctx: &Arc<ServerContext>,
    peer: IpAddr,
    path: &Path,
    presented: Option<Presented>,
) -> Result<Credential, Refusal> {
    let settings = &ctx.content.config;
    if settings.disable_auth {
        return Ok(Credential::AuthDisabled);
    }
    let Some(token) = presented else {
        if settings.public_paths.iter().any(|p| p.covers(path)) {
            return Ok(Credential::Public);
        }
        return Err(Refusal::unauthorized(MISSING));
    };
    // As for MQTT logins: repeated failures from this address make every attempt wait first.
    let delay = ctx.login_guard.delay_for(peer, None);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let decided = if looks_like_session(token.as_str()) {
        session_credential(ctx, &token).await
    } else {
        match ctx.content.verify(token).await {
            Ok(claims) => credential_for(ctx, &claims, path).await,
            Err(e) => Err(Refusal::unauthorized(format!("the credential is refused: {e}"))),
        }
    };
    match &decided {
        Ok(_) => ctx.login_guard.succeeded(peer, None),
        Err(refusal) if refusal.refuses_credential() => {
            ctx.login_guard.failed(peer, None);
            Stats::add(&ctx.broker.stats().auth_failures, 1);
        }
        Err(_) => {}
    }
    decided
}

/// What a login session admits: any path, for an enabled account.
async fn session_credential(ctx: &ServerContext, token: &Presented) -> Result<Credential, Refusal> {
    let sessions = ctx
        .services
        .get::<Sessions>()
        .ok_or_else(|| Refusal::unauthorized("this server has no login sessions"))?;
    let claims = sessions
        .verify(token.as_str(), SystemTime::now())
        .map_err(|e| Refusal::unauthorized(format!("the credential is refused: {e}")))?;
    sessions.directory().catch_up().await;
    let record = sessions.directory().find_user(&claims.sub).await;
    standing(record.as_deref())
        .map_err(|reason| Refusal::unauthorized(format!("the login session is refused: {reason}")))?;
    Ok(Credential::Session { account: claims.sub, exp: claims.exp })
}

/// Parses a token's patterns or prefixes.
fn paths(items: &[String]) -> Result<Vec<Path>, Refusal> {
    items
        .iter()
        .map(|p| {
            Path::parse(p).map_err(|e| Refusal::forbidden(format!("the token holds an invalid path: {e}")))
        })
        .collect()
}

/// What verified `claims` admit on `path`.
async fn credential_for(ctx: &ServerContext, claims: &Claims, path: &Path) -> Result<Credential, Refusal> {
    match (&claims.payload, claims.kind()) {
        (_, Kind::Claim) => match claim_admits(claims, path.as_str(), &ContentPaths) {
            Ok(true) => Ok(Credential::Claim { jti: claims.jti.clone() }),
            Ok(false) => Err(Refusal::forbidden("the claim token's pairs do not match this path")),
            Err(e) => Err(Refusal::forbidden(format!("the claim token cannot be checked: {e}"))),
        },
        (Payload::Anonymous(prefixes), _) => {
            if paths(prefixes)?.iter().any(|p| p.covers(path)) {
                Ok(Credential::Anonymous { jti: claims.jti.clone() })
            } else {
                Err(Refusal::forbidden("no prefix of the anonymous token covers this path"))
            }
        }
        (Payload::Grant(patterns), _) => {
            let (Some(account), Some(exp)) = (&claims.sub, claims.exp) else {
                return Err(Refusal::forbidden("a grant token must name its account and expire"));
            };
            let directory = ctx
                .services
                .get::<UserDirectory>()
                .ok_or_else(|| Refusal::forbidden("this server has no accounts"))?;
            let patterns: Arc<[Path]> = paths(patterns)?.into();
            directory.catch_up().await;
            let record = directory.find_user(account).await;
            let record = standing(record.as_deref())
                .map_err(|reason| Refusal::forbidden(format!("the grant token is refused: {reason}")))?;
            if still_assigned(&patterns, record).iter().any(|p| p.covers(path)) {
                Ok(Credential::Grant { jti: claims.jti.clone(), account: account.clone(), exp, patterns })
            } else {
                Err(Refusal::forbidden(
                    "no pattern of the grant token that is still assigned covers this path",
                ))
            }
        }
        (_, other) => Err(Refusal::forbidden(format!("a {other} token cannot open a content connection"))),
    }
}

/// Verifies a token, off the async threads (an RSA decryption), refreshing the key store
/// once when the token names a key this process has not loaded (a rotation by the CLI).
pub(crate) fn verify_now(keys: &super::Keys, token: &Presented) -> Result<Claims, TokenError> {
    let now = SystemTime::now();
    match keys.verify(token.as_str(), now) {
        Err(TokenError::UnknownKey { .. }) if keys.refresh(now) => keys.verify(token.as_str(), now),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderName;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn read(pairs: &[(&str, &str)], uri: &str) -> Result<Option<String>, Refusal> {
        presented(&headers(pairs), &uri.parse().unwrap()).map(|p| p.map(|p| p.0))
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn every_carrier_gives_the_token() {
        let basic = format!("Basic {}", b64("T.x"));
        let basic_user = format!("Basic {}", b64("T.x:"));
        let basic_password = format!("basic {}", b64(":T.x"));
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (vec![("authorization", "Bearer T.x")], "/a"),
            (vec![("authorization", "bearer   T.x ")], "/a"),
            (vec![("authorization", &basic)], "/a"),
            (vec![("authorization", &basic_user)], "/a"),
            (vec![("authorization", &basic_password)], "/a"),
            (vec![("sec-websocket-protocol", "json, T.x")], "/a"),
            (vec![("sec-websocket-protocol", "json"), ("sec-websocket-protocol", "T.x")], "/a"),
            (vec![], "/a?token=T.x"),
            (vec![], "/a?x=1&token=T%2Ex"),
            (vec![("authorization", "Bearer T.x")], "/a?token=T.x"),
        ];
        for (h, uri) in cases {
            assert_eq!(read(&h, uri), Ok(Some("T.x".to_owned())), "{h:?} {uri}");
        }
    }

    #[test]
    fn no_carrier_is_no_credential() {
        assert_eq!(read(&[], "/a"), Ok(None));
        assert_eq!(read(&[("sec-websocket-protocol", "json")], "/a?x=1"), Ok(None));
        // Without `json` first, the subprotocol list carries no token.
        assert_eq!(read(&[("sec-websocket-protocol", "mqtt, T.x")], "/a"), Ok(None));
    }

    #[test]
    fn malformed_credentials_are_refused_with_the_reason() {
        let not_b64 = "Basic !!!";
        let empty_basic = format!("Basic {}", b64(":"));
        type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, StatusCode, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (vec![("authorization", "Bearer")], "/a", StatusCode::UNAUTHORIZED, "empty"),
            (vec![("authorization", not_b64)], "/a", StatusCode::UNAUTHORIZED, "not base64"),
            (vec![("authorization", &empty_basic)], "/a", StatusCode::UNAUTHORIZED, "empty"),
            (
                vec![("authorization", "Digest x=1")],
                "/a",
                StatusCode::UNAUTHORIZED,
                "\"Digest\" is not supported",
            ),
            (
                vec![("authorization", "Bearer a"), ("authorization", "Bearer a")],
                "/a",
                StatusCode::BAD_REQUEST,
                "more than one",
            ),
            (vec![("authorization", "Bearer a")], "/a?token=b", StatusCode::BAD_REQUEST, "two different"),
            (vec![("sec-websocket-protocol", "json, a, b")], "/a", StatusCode::BAD_REQUEST, "two different"),
            (vec![], "/a?token=", StatusCode::UNAUTHORIZED, "empty"),
            (vec![], "/a?token=a&token=b", StatusCode::BAD_REQUEST, "two different"),
        ];
        for (h, uri, status, words) in cases {
            let refusal = read(&h, uri).expect_err(uri);
            assert_eq!(refusal.status, status, "{h:?} {uri}: {refusal:?}");
            assert!(refusal.reason.contains(words), "{h:?} {uri}: {:?} should say {words:?}", refusal.reason);
        }
    }

    #[test]
    fn a_refusal_never_echoes_the_token() {
        let refusal = read(&[("authorization", "Bearer secret-one")], "/a?token=secret-two").unwrap_err();
        assert!(!refusal.reason.contains("secret"), "{:?}", refusal.reason);
        assert_eq!(format!("{:?}", Presented("secret".into())), "Presented(6 bytes)");
    }

    proptest::proptest! {
        /// Whatever the headers and query say, reading the credential never panics, and a
        /// token it returns is one of the carriers' texts (never made up, never merged).
        #[test]
        fn reading_any_request_never_panics_and_returns_only_what_was_sent(
            auth in proptest::option::of("[ -~]{0,40}"),
            protocols in proptest::option::of("[ -~]{0,40}"),
            query in proptest::option::of("[ -~]{0,40}"),
        ) {
            let mut h = HeaderMap::new();
            if let Some(a) = &auth {
                h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
            }
            if let Some(p) = &protocols {
                h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_str(p).unwrap());
            }
            let uri = match &query {
                Some(q) => format!("/a?{}", q.replace([' ', '#', '"', '<', '>', '\\', '^', '`', '{', '|', '}'], "")),
                None => "/a".to_owned(),
            };
            let Ok(uri) = uri.parse::<Uri>() else { return Ok(()) };
            if let Ok(Some(token)) = presented(&h, &uri) {
                let t = token.as_str();
                let decoded_basic = auth.as_deref().and_then(|a| a.trim().split_once(' ')).and_then(|(_, b)| {
                    base64::engine::general_purpose::STANDARD.decode(b.trim()).ok()
                });
                let in_basic = decoded_basic.is_some_and(|d| String::from_utf8_lossy(&d).contains(t));
                let in_query = query.as_deref().is_some_and(|_| uri.query().is_some_and(|q| {
                    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
                        .is_ok_and(|p| p.0.iter().any(|(k, v)| k == "token" && v == t))
                        && !q.is_empty()
                }));
                let in_text = auth.as_deref().is_some_and(|a| a.contains(t))
                    || protocols.as_deref().is_some_and(|p| p.contains(t));
                proptest::prop_assert!(in_basic || in_query || in_text, "{t:?} was not sent");
            }
        }
    }
}
