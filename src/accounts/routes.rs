//! The `/auth` and `/account` routes. Answers are JSON; a refusal is `{"error": "..."}` with
//! 400 (a malformed body), 401 (no or a bad credential), 403 (a credential of the wrong kind,
//! e.g. a grant token on `/auth`), 404 (no such account), 503 (the store failed).

use std::sync::Arc;
use std::time::SystemTime;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::{self, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mesgd_core::broker::Stats;
use mesgd_providers::builtin::{AuthType, Scope, UserDirectory, UserRecord, password};
use mesgd_providers::sessions::{SessionClaims, Sessions, looks_like_session};
use serde_json::json;

use super::body::{self, MAX_BODY};
use super::confirm::Checked;
use super::issue::IssueRefusal;
use crate::content::grant::standing;
use crate::context::ServerContext;
use crate::http::HttpConnection;
use crate::http::body_limit::{self, BodyRefused};

/// The routes, for the `http` listener.
pub(crate) fn routes() -> axum::Router<Arc<ServerContext>> {
    axum::Router::new()
        .route("/auth/login", post(login))
        .route("/auth/logout", post(logout))
        .route("/auth/confirm", post(confirm))
        .route("/auth/admin/issue", post(issue))
        .route("/account", get(account))
        .merge(super::oauth::routes())
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

fn unavailable() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "the account store is not available; see the server log")
}

fn services(ctx: &ServerContext) -> Option<(Arc<Sessions>, Arc<UserDirectory>)> {
    let sessions = ctx.services.get::<Sessions>()?;
    let directory = sessions.directory().clone();
    Some((sessions, directory))
}

/// Reads the request's body (at most `MAX_BODY` bytes, else 413) and parses it with `parse`; a
/// 400 that says what was wrong otherwise.
async fn read_body<T>(req: Request, parse: fn(&[u8]) -> Result<T, body::BodyError>) -> Result<T, Response> {
    let bytes = body_limit::read(req.into_body(), MAX_BODY).await.map_err(|refused| match refused {
        BodyRefused::TooLarge => {
            error(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is over {MAX_BODY} bytes"))
        }
        BodyRefused::Unreadable => error(StatusCode::BAD_REQUEST, "the body is not readable"),
    })?;
    parse(&bytes).map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))
}

/// The Bearer token of a request, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim()).filter(|t| !t.is_empty())
}

/// A refusal: the status and the message of its `{"error"}` body.
type Refused = (StatusCode, String);

/// The login session of a request, verified, with its account's current record.
async fn session_of(
    sessions: &Sessions,
    directory: &UserDirectory,
    headers: &HeaderMap,
) -> Result<(SessionClaims, Arc<UserRecord>), Refused> {
    let Some(token) = bearer(headers) else {
        return Err((
            StatusCode::UNAUTHORIZED,
            "send the login session as Authorization: Bearer TOKEN".into(),
        ));
    };
    if !looks_like_session(token) {
        // A grant, anonymous or claim token (or anything else): never a credential for /auth.
        return Err((StatusCode::FORBIDDEN, "only a login session may call /auth and /account".into()));
    }
    let claims = sessions
        .verify(token, SystemTime::now())
        .map_err(|e| (StatusCode::UNAUTHORIZED, format!("the login session is refused: {e}")))?;
    // The account as it is now, after every change committed so far.
    directory.catch_up().await;
    let record = directory.find_user(&claims.sub).await;
    if let Err(reason) = standing(record.as_deref()) {
        return Err((StatusCode::UNAUTHORIZED, format!("the login session is refused: {reason}")));
    }
    let record =
        record.ok_or((StatusCode::SERVICE_UNAVAILABLE, "the account store is not available".into()))?;
    Ok((claims, record))
}

/// `POST /auth/login`.
async fn login(
    State(ctx): State<Arc<ServerContext>>,
    Extension(connection): Extension<HttpConnection>,
    req: Request,
) -> Response {
    let Some((sessions, directory)) = services(&ctx) else { return unavailable() };
    let login = match read_body(req, body::parse_login).await {
        Ok(parsed) => parsed,
        Err(r) => return r,
    };
    let peer = connection.peer.ip();
    // As for MQTT logins: repeated failures make the next attempts wait first.
    let delay = ctx.login_guard.delay_for(peer, Some(&login.username));
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let record = directory.find_user(&login.username).await;
    let hash = record
        .as_ref()
        .filter(|r| r.auth_type == AuthType::Basic && !r.disabled)
        .and_then(|r| r.password_hash.clone());
    // An unknown, disabled or certificate-only account costs one hash check too, against a
    // stand-in hash, so the answer's timing does not tell which names exist.
    let password = login.password.into_bytes();
    let stand_in = ctx.clone();
    let verified = tokio::task::spawn_blocking(move || match hash {
        Some(hash) => password::verify_password(&password, &hash).unwrap_or(false),
        None => {
            let dummy = stand_in.accounts.stand_in_hash(&directory);
            let _ = password::verify_password(&password, dummy);
            false
        }
    })
    .await
    .unwrap_or(false);
    if !verified {
        ctx.login_guard.failed(peer, Some(&login.username));
        Stats::add(&ctx.broker.stats().auth_failures, 1);
        tracing::info!(%peer, "account login failed");
        return error(StatusCode::UNAUTHORIZED, "wrong username or password");
    }
    ctx.login_guard.succeeded(peer, Some(&login.username));
    after_login(&ctx, &sessions, &login.username, peer).await
}

/// A verified login (password or OAuth): the session, or a pending confirmation first.
pub(super) async fn after_login(
    ctx: &ServerContext,
    sessions: &Sessions,
    account: &str,
    peer: std::net::IpAddr,
) -> Response {
    if ctx.accounts.require_confirm {
        return pend(ctx, account).await;
    }
    session_answer(sessions, account, ctx, peer)
}

/// The 200 answer with a new session for `account`.
fn session_answer(
    sessions: &Sessions,
    account: &str,
    ctx: &ServerContext,
    peer: std::net::IpAddr,
) -> Response {
    match sessions.issue(account, SystemTime::now(), ctx.accounts.session_ttl) {
        Ok((token, claims)) => {
            tracing::info!(%peer, account = %claims.sub, "account logged in");
            axum::Json(json!({ "token": token, "expires_at": claims.exp })).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot issue a login session");
            unavailable()
        }
    }
}

/// `require_confirm`: a pending login, its code delivered; 202 `{"pending"}`.
async fn pend(ctx: &ServerContext, account: &str) -> Response {
    let accounts = &ctx.accounts;
    let Some((id, code)) = accounts.pending.open(account, crate::clock::now()) else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many logins are waiting for confirmation; try again later",
        );
    };
    match super::confirm::deliver(&accounts.confirm, account, &code).await {
        Ok(()) => (StatusCode::ACCEPTED, axum::Json(json!({ "pending": id }))).into_response(),
        Err(e) => {
            accounts.pending.cancel(&id);
            tracing::error!(error = %e, %account, "cannot deliver a login confirmation code");
            error(StatusCode::SERVICE_UNAVAILABLE, "the confirmation code could not be delivered")
        }
    }
}

/// `POST /auth/confirm`: completes a pending login with its code.
async fn confirm(
    State(ctx): State<Arc<ServerContext>>,
    Extension(connection): Extension<HttpConnection>,
    req: Request,
) -> Response {
    let Some((sessions, directory)) = services(&ctx) else { return unavailable() };
    let wanted = match read_body(req, body::parse_confirm).await {
        Ok(parsed) => parsed,
        Err(r) => return r,
    };
    let peer = connection.peer.ip();
    let delay = ctx.login_guard.delay_for(peer, None);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match ctx.accounts.pending.check(&wanted.pending, &wanted.code, crate::clock::now()) {
        Checked::Confirmed(account) => {
            directory.catch_up().await;
            if let Err(reason) = standing(directory.find_user(&account).await.as_deref()) {
                return error(StatusCode::UNAUTHORIZED, format!("the login is refused: {reason}"));
            }
            session_answer(&sessions, &account, &ctx, peer)
        }
        Checked::Wrong | Checked::Unknown => {
            ctx.login_guard.failed(peer, None);
            Stats::add(&ctx.broker.stats().auth_failures, 1);
            error(StatusCode::UNAUTHORIZED, "wrong or expired confirmation code")
        }
    }
}

/// `POST /auth/logout`: ends the session that calls it.
async fn logout(State(ctx): State<Arc<ServerContext>>, headers: HeaderMap) -> Response {
    let Some((sessions, directory)) = services(&ctx) else { return unavailable() };
    let claims = match session_of(&sessions, &directory, &headers).await {
        Ok((claims, _)) => claims,
        Err((status, message)) => return error(status, message),
    };
    let ended = tokio::task::spawn_blocking(move || sessions.revoke(&claims, SystemTime::now())).await;
    match ended {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot end a login session");
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(_) => unavailable(),
    }
}

/// `GET /account`: the session's account.
async fn account(State(ctx): State<Arc<ServerContext>>, headers: HeaderMap) -> Response {
    let Some((sessions, directory)) = services(&ctx) else { return unavailable() };
    match session_of(&sessions, &directory, &headers).await {
        Ok((claims, record)) => axum::Json(json!({
            "name": record.username,
            "username": record.username,
            "patterns": record.patterns,
            "expires_at": claims.exp,
        }))
        .into_response(),
        Err((status, message)) => error(status, message),
    }
}

/// `POST /auth/admin/issue`: a grant token for `{"user"}`, to an admin API token.
async fn issue(State(ctx): State<Arc<ServerContext>>, req: Request<Body>) -> Response {
    let Some((_, directory)) = services(&ctx) else { return unavailable() };
    let Some(token) = bearer(req.headers()).map(str::to_owned) else {
        return error(StatusCode::UNAUTHORIZED, "send an admin API token as Authorization: Bearer TOKEN");
    };
    let d = directory.clone();
    let admin = tokio::task::spawn_blocking(move || d.store().verify_token(&token)).await;
    match admin {
        Ok(Ok(Some(record))) if record.scope.covers(Scope::Admin) => {}
        Ok(Ok(Some(_))) => return error(StatusCode::FORBIDDEN, "this needs an API token of the admin scope"),
        Ok(Ok(None)) => {
            return error(
                StatusCode::UNAUTHORIZED,
                "not an admin API token (a grant token or a login session cannot issue)",
            );
        }
        _ => return unavailable(),
    }
    let wanted = match read_body(req, body::parse_issue).await {
        Ok(parsed) => parsed,
        Err(r) => return r,
    };
    match super::issue::grant_token(&ctx, &directory, &wanted.user).await {
        Ok((token, exp)) => axum::Json(json!({ "token": token, "expires_at": exp })).into_response(),
        Err(IssueRefusal::NoUser(user)) => error(StatusCode::NOT_FOUND, format!("no user {user:?}")),
        Err(IssueRefusal::Refused(e)) => error(StatusCode::CONFLICT, e.to_string()),
        Err(IssueRefusal::Unavailable) => unavailable(),
    }
}
