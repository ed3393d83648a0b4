//! Who is asking the REST API, and whether they may.
//!
//! - **API tokens** (`Authorization: Bearer mesgd_...`, made by `mesgd admin token create`),
//!   scoped `read` or `admin`, checked against the store at every request (a revoked token stops
//!   working at once). No CSRF token: a bearer token is not sent by a browser on its own.
//! - **Browser sessions**: `POST /api/v1/login` with an administrator's name and password sets
//!   the `mesgd_session` cookie (HttpOnly, SameSite=Strict, Secure on TLS, no Max-Age) for a
//!   session kept server-side (`browser_sessions`: bounded by `[http] max_sessions`, least
//!   recently used ended first, ended after `session_idle_timeout_s` without a request; in a
//!   cluster, the same on every node). Every state-changing request of a session carries its
//!   CSRF token in `X-CSRF-Token`: a *synchroniser token*, kept with the session, given by the
//!   login answer and by `GET /api/v1/whoami`. Chosen over double-submit because the session is
//!   server-side anyway, so the token is bound to it and a cookie planted by a sibling domain
//!   cannot forge it.
//! - **Login CSRF**: there is no session yet, so the login uses a *signed double-submit* token:
//!   `GET /api/v1/login` (which stores nothing) answers a token — an expiry and a nonce with an
//!   HMAC-SHA256 under a key made at start (in a cluster, one derived from the cluster's login
//!   key, so that the token of one node's `GET` serves a `POST` on another) — and sets it as the
//!   `mesgd_login_csrf` cookie; `POST /api/v1/login` needs the same value in `X-CSRF-Token`, a
//!   valid MAC and no expiry.
//! - **Cross-origin refusal**: a state-changing request whose `Sec-Fetch-Site` is neither
//!   `same-origin` nor `none`, or whose `Origin` is not this server's `Host`, is refused before
//!   anything else, whatever its credentials.
//! - **Lockout**: failed logins are slowed down and then locked out per address and per name
//!   (the [`LoginGuard`] with a [`Lockout`]). A locked login is refused with 429 and
//!   `Retry-After` without its password being checked.
//! - **No administrator**: while the store has none, every route answers 403 `no_admin` with
//!   how to make one. Only the OpenAPI document (`GET /api/v1/openapi.json`) is served without
//!   credentials: it describes the code, not the broker.
//! - **Scope**: `GET` needs `read`; every other method needs `admin`, except the ACL tester and
//!   logout, which change nothing an administrator manages.
//!
//! Secrets (passwords, tokens, session cookies, CSRF tokens) are compared in constant time and
//! never logged.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac as _};
use mesgd_providers::builtin::Scope;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

use super::browser_sessions::{BrowserSessions, Session};
use super::{ApiError, ApiJson, blocking};
use crate::config::HttpConfig;
use crate::context::ServerContext;
use crate::http::HttpConnection;
use crate::limits::Exempt;
use crate::login_guard::{FailedLoginConfig, Lockout, LoginGuard};

const SESSION_COOKIE: &str = "mesgd_session";
const LOGIN_COOKIE: &str = "mesgd_login_csrf";
const CSRF_HEADER: &str = "x-csrf-token";
/// How long a login CSRF token is good for.
const LOGIN_TOKEN_TTL: Duration = Duration::from_secs(600);

/// The API's own state: browser sessions, the login guard, the login CSRF key.
pub(crate) struct ApiState {
    pub(super) sessions: BrowserSessions,
    guard: LoginGuard,
    login_key: [u8; 32],
    /// The login CSRF key of every node of the cluster, which replaces `login_key`.
    shared_login_key: OnceLock<[u8; 32]>,
    max_body_bytes: usize,
    /// Permits for the open statistics streams (`stream::MAX_STREAMS`).
    pub(super) streams: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").field("sessions", &self.sessions).finish_non_exhaustive()
    }
}

/// Who made a request (a request extension after [`guard`]).
#[derive(Clone, Debug)]
pub(crate) enum Principal {
    /// An API token.
    Token { name: String, scope: Scope },
    /// A browser session of an administrator.
    Session { id: String, admin: String, role: Scope, csrf: String },
}

impl Principal {
    fn scope(&self) -> Scope {
        match self {
            Principal::Token { scope, .. } => *scope,
            Principal::Session { role, .. } => *role,
        }
    }
}

impl ApiState {
    pub(crate) fn new(config: &HttpConfig) -> Self {
        let throttle = FailedLoginConfig {
            max_failures: 1,
            window_s: config.login_window_s.max(1),
            base_delay_ms: config.login_delay_ms,
            max_delay_ms: config.login_delay_ms.saturating_mul(8),
            max_tracked: 10_000,
            // Administrators' logins are few: an address earns the same delay as a name.
            address_max_failures: 1,
            max_address_delay_ms: config.login_delay_ms.saturating_mul(8),
        };
        let lockout = Lockout {
            failures: config.login_max_failures,
            duration: Duration::from_secs(config.login_lockout_s),
        };
        ApiState {
            sessions: BrowserSessions::new(
                Duration::from_secs(config.session_idle_timeout_s),
                config.max_sessions,
            ),
            // `limits.exempt` is for the MQTT side's proxies: no address is exempt from the
            // administrators' lockout.
            guard: LoginGuard::with_lockout(throttle, Exempt::default(), Some(lockout)),
            login_key: rand::random(),
            shared_login_key: OnceLock::new(),
            max_body_bytes: config.max_body_bytes,
            streams: Arc::new(tokio::sync::Semaphore::new(super::stream::MAX_STREAMS)),
        }
    }

    pub(crate) fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// Signs login CSRF tokens with `key` from now on: the cluster's, so that every node
    /// takes the token any of them gave (set once, before the listeners open).
    pub(crate) fn share_login_key(&self, key: [u8; 32]) {
        let _ = self.shared_login_key.set(key);
    }

    fn login_token(&self, now: SystemTime) -> String {
        let expires =
            now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() + LOGIN_TOKEN_TTL.as_secs();
        let nonce = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        let body = format!("{expires}.{nonce}");
        format!("{body}.{}", self.mac(&body))
    }

    fn mac(&self, body: &str) -> String {
        let key = self.shared_login_key.get().unwrap_or(&self.login_key);
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap_or_else(|_| unreachable!("any key length"));
        mac.update(body.as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    fn login_token_valid(&self, token: &str, now: SystemTime) -> bool {
        let Some((body, mac)) = token.rsplit_once('.') else { return false };
        if !bool::from(self.mac(body).as_bytes().ct_eq(mac.as_bytes())) {
            return false;
        }
        let expires = body.split('.').next().and_then(|e| e.parse::<u64>().ok()).unwrap_or(0);
        now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() < expires
    }
}

fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn is_state_changing(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a state-changing request comes from another site (see the module doc).
fn cross_origin(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"));
    if let Some(site) = text("sec-fetch-site") {
        if site != "same-origin" && site != "none" {
            return true;
        }
    }
    if let Some(origin) = text("origin") {
        let authority = origin.split_once("://").map(|(_, rest)| rest);
        let host = text("host");
        return authority.is_none() || host.is_none() || authority != host;
    }
    false
}

fn forbidden(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, code, message)
}

/// 503: a clustered node could not reach the cluster's sessions in time.
fn cluster_unavailable(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "cluster_unavailable",
        format!("{what}; try again, or another node"),
    )
}

fn unauthenticated() -> Response {
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "log in (POST /api/v1/login) or send Authorization: Bearer <API token>",
    )
    .into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn peer(req_headers: &axum::http::Extensions) -> IpAddr {
    req_headers.get::<HttpConnection>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.peer.ip())
}

fn on_tls(extensions: &axum::http::Extensions) -> bool {
    extensions.get::<HttpConnection>().is_some_and(|c| c.tls.is_some())
}

/// Who is asking, from the bearer token or the session cookie.
async fn authenticate(ctx: &Arc<ServerContext>, headers: &HeaderMap) -> Result<Option<Principal>, ApiError> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let Some(token) = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) else {
            return Ok(None);
        };
        let token = token.trim().to_owned();
        let record = blocking(ctx, move |d| d.store().verify_token(&token)).await?;
        return Ok(record.map(|t| Principal::Token { name: t.name, scope: t.scope }));
    }
    let Some(value) = cookie(headers, SESSION_COOKIE) else { return Ok(None) };
    let Some(Session { id, admin, csrf }) =
        ctx.api.sessions.session_anywhere(value, crate::clock::now()).await
    else {
        return Ok(None);
    };
    // The account may have been removed (or its role changed) since the login.
    let name = admin.clone();
    match blocking(ctx, move |d| d.store().admin(&name)).await? {
        Some(record) => Ok(Some(Principal::Session { id, admin, role: record.role, csrf })),
        None => {
            ctx.api.sessions.drop_here(&id);
            Ok(None)
        }
    }
}

/// The checks in front of every route (see the module doc).
pub(crate) async fn guard(State(ctx): State<Arc<ServerContext>>, mut req: Request, next: Next) -> Response {
    if req.method() == Method::GET && req.uri().path() == super::openapi::PATH {
        return next.run(req).await;
    }
    let changing = is_state_changing(req.method());
    if changing && cross_origin(req.headers()) {
        return forbidden("cross_origin", "cross-origin requests that change state are refused")
            .into_response();
    }
    match blocking(&ctx, |d| d.store().admin_count()).await {
        Ok(0) => {
            return forbidden(
                "no_admin",
                "no administrator exists yet: create one with `mesgd admin add NAME` on the server",
            )
            .into_response();
        }
        Ok(_) => {}
        Err(e) => return e.into_response(),
    }
    let path = req.uri().path().to_owned();
    if path == "/login" {
        return next.run(req).await;
    }
    let principal = match authenticate(&ctx, req.headers()).await {
        Ok(Some(p)) => p,
        Ok(None) => return unauthenticated(),
        Err(e) => return e.into_response(),
    };
    if let (true, Principal::Session { csrf, .. }) = (changing, &principal) {
        let presented = req.headers().get(CSRF_HEADER).map(HeaderValue::as_bytes).unwrap_or_default();
        if !bool::from(presented.ct_eq(csrf.as_bytes())) {
            return forbidden("csrf", "this request needs the session's CSRF token in X-CSRF-Token")
                .into_response();
        }
    }
    let read_only = !changing || path == "/acl/test" || path == "/logout";
    let needed = if read_only { Scope::Read } else { Scope::Admin };
    if !principal.scope().covers(needed) {
        return forbidden(
            "forbidden",
            format!("this needs the {needed} scope; these credentials have {}", principal.scope()),
        )
        .into_response();
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct LoginChallenge {
    csrf_token: String,
}

fn cookie_header(name: &str, value: &str, path: &str, tls: bool, max_age: Option<u64>) -> HeaderValue {
    let mut text = format!("{name}={value}; Path={path}; HttpOnly; SameSite=Strict");
    if let Some(seconds) = max_age {
        text.push_str(&format!("; Max-Age={seconds}"));
    }
    if tls {
        text.push_str("; Secure");
    }
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `GET /api/v1/login`: a login CSRF token (stores nothing).
#[utoipa::path(get, path = "/login", tag = "auth", security(()), responses((status = 200, description = "A login CSRF token, also set as the mesgd_login_csrf cookie", body = LoginChallenge)))]
pub(crate) async fn login_challenge(State(ctx): State<Arc<ServerContext>>, req: Request) -> Response {
    let token = ctx.api.login_token(SystemTime::now());
    let cookie = cookie_header(
        LOGIN_COOKIE,
        &token,
        "/api/v1/login",
        on_tls(req.extensions()),
        Some(LOGIN_TOKEN_TTL.as_secs()),
    );
    ([(header::SET_COOKIE, cookie)], Json(LoginChallenge { csrf_token: token })).into_response()
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Credentials {
    username: String,
    password: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct LoggedIn {
    username: String,
    role: &'static str,
    csrf_token: String,
    idle_timeout_s: u64,
}

/// `POST /api/v1/login`.
#[utoipa::path(post, path = "/login", tag = "auth", security(()), params(("x-csrf-token" = String, Header, description = "The token of GET /api/v1/login")), request_body = Credentials, responses((status = 200, description = "Logged in: the mesgd_session cookie is set", body = LoggedIn), (status = 429, description = "Locked out after repeated failures", body = super::ErrorBody), (status = 503, description = "A clustered node could not store the session in the cluster", body = super::ErrorBody)))]
pub(crate) async fn login(State(ctx): State<Arc<ServerContext>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let presented = parts.headers.get(CSRF_HEADER).map(HeaderValue::as_bytes).unwrap_or_default();
    let cookie_value = cookie(&parts.headers, LOGIN_COOKIE).unwrap_or_default();
    let matches = !cookie_value.is_empty() && bool::from(presented.ct_eq(cookie_value.as_bytes()));
    if !matches || !ctx.api.login_token_valid(cookie_value, SystemTime::now()) {
        return forbidden(
            "csrf",
            "a login needs the token of GET /api/v1/login in X-CSRF-Token and its cookie",
        )
        .into_response();
    }
    let tls = on_tls(&parts.extensions);
    let addr = peer(&parts.extensions);
    let req = Request::from_parts(parts, body);
    let credentials =
        match <ApiJson<Credentials> as axum::extract::FromRequest<_>>::from_request(req, &ctx).await {
            Ok(ApiJson(c)) => c,
            Err(e) => return e.into_response(),
        };
    let name = credentials.username;
    if let Some(left) = ctx.api.guard.locked_for(addr, Some(&name)) {
        let mut e =
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "locked", "too many failed logins: try again later");
        e.retry_after = Some(left.as_secs().max(1));
        return e.into_response();
    }
    let delay = ctx.api.guard.delay_for(addr, Some(&name));
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let (checked, password) = (name.clone(), credentials.password.into_bytes());
    let verified = match blocking(&ctx, move |d| d.store().verify_admin(&checked, &password)).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let Some(admin) = verified else {
        ctx.api.guard.failed(addr, Some(&name));
        tracing::info!(%addr, "administrator login failed");
        return ApiError::new(StatusCode::UNAUTHORIZED, "bad_credentials", "wrong name or password")
            .into_response();
    };
    ctx.api.guard.succeeded(addr, Some(&name));
    let Ok((cookie_value, csrf)) = ctx.api.sessions.open(&admin.name).await else {
        return cluster_unavailable("the session could not be stored in the cluster").into_response();
    };
    tracing::info!(%addr, admin = %admin.name, "administrator logged in");
    let body = LoggedIn {
        username: admin.name,
        role: admin.role.as_str(),
        csrf_token: csrf,
        idle_timeout_s: ctx.api.sessions.idle().as_secs(),
    };
    let mut response = Json(body).into_response();
    let headers = response.headers_mut();
    headers.append(header::SET_COOKIE, cookie_header(SESSION_COOKIE, &cookie_value, "/", tls, None));
    headers.append(header::SET_COOKIE, cookie_header(LOGIN_COOKIE, "", "/api/v1/login", tls, Some(0)));
    response
}

/// `POST /api/v1/logout`: ends the browser session.
#[utoipa::path(post, path = "/logout", tag = "auth", responses((status = 204, description = "The session ended"), (status = 503, description = "A clustered node could not store the logout in the cluster: the session is still open", body = super::ErrorBody)))]
pub(crate) async fn logout(
    State(ctx): State<Arc<ServerContext>>,
    Extension(principal): Extension<Principal>,
    req: Request,
) -> Response {
    if let Principal::Session { id, .. } = &principal
        && ctx.api.sessions.close(id).await.is_err()
    {
        return cluster_unavailable(
            "the logout could not be stored in the cluster: the session is still open",
        )
        .into_response();
    }
    let cookie = cookie_header(SESSION_COOKIE, "", "/", on_tls(req.extensions()), Some(0));
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response()
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct WhoAmI {
    kind: &'static str,
    name: String,
    scope: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    csrf_token: Option<String>,
}

/// `GET /api/v1/whoami`: the credentials of this request (and a session's CSRF token).
#[utoipa::path(get, path = "/whoami", tag = "auth", responses((status = 200, description = "The credentials of this request", body = WhoAmI)))]
pub(crate) async fn whoami(Extension(principal): Extension<Principal>) -> Json<WhoAmI> {
    Json(match principal {
        Principal::Token { name, scope } => {
            WhoAmI { kind: "token", name, scope: scope.as_str(), csrf_token: None }
        }
        Principal::Session { admin, role, csrf, .. } => {
            WhoAmI { kind: "session", name: admin, scope: role.as_str(), csrf_token: Some(csrf) }
        }
    })
}
