//! `GET /auth/oauth/start` and `GET /auth/oauth/complete`. Every refusal is a JSON
//! `{"error"}` and a log line; nothing is answered but a refusal until the ID token is valid
//! and names an existing, enabled account.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::http::header::{self, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mesgd_core::broker::Stats;
use serde_json::json;

use super::pending::random_text;
use super::provider::challenge;
use crate::context::ServerContext;
use crate::http::HttpConnection;

/// The routes, merged into the accounts' routes.
pub(crate) fn routes() -> axum::Router<Arc<ServerContext>> {
    axum::Router::new().route("/auth/oauth/start", get(start)).route("/auth/oauth/complete", get(complete))
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// The query's parameters; a parameter given twice is refused (which one would count?).
fn params(query: Option<&str>, names: &[&str]) -> Result<Vec<Option<String>>, String> {
    let mut out = vec![None; names.len()];
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if let Some(i) = names.iter().position(|n| *n == k) {
            if out[i].replace(v.into_owned()).is_some() {
                return Err(format!("the query parameter {k:?} is given twice"));
            }
        }
    }
    Ok(out)
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("application/json"))
}

/// `GET /auth/oauth/start?provider=NAME`: 302 to the provider's authorization endpoint, or
/// 200 `{"url"}` when the request accepts `application/json`.
async fn start(
    State(ctx): State<Arc<ServerContext>>,
    Extension(connection): Extension<HttpConnection>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let peer = connection.peer.ip();
    let name = match params(query.as_deref(), &["provider"]) {
        Ok(mut p) => p.remove(0),
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e),
    };
    let Some(name) = name else {
        return refuse(StatusCode::BAD_REQUEST, "name the OAuth provider: /auth/oauth/start?provider=NAME");
    };
    let oauth = &ctx.accounts.oauth;
    let Some((index, provider)) = oauth.provider(&name) else {
        tracing::info!(%peer, provider = %name, "OAuth login refused: no such provider");
        return refuse(StatusCode::NOT_FOUND, format!("no OAuth provider is named {name:?}"));
    };
    let discovery = match provider.discovery().await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(%peer, provider = %name, error = %e, "OAuth login refused");
            return refuse(StatusCode::BAD_GATEWAY, format!("the OAuth provider is not usable: {e}"));
        }
    };
    let redirect_uri = match &provider.config.redirect_uri {
        Some(r) => r.clone(),
        None => {
            let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "the request has no Host to build the redirect URI from",
                );
            };
            let scheme = if connection.tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{host}/auth/oauth/complete")
        }
    };
    // RFC 7636 §4.1: 32 random bytes, base64url, is a 43-character verifier.
    let verifier = random_text::<32>();
    let nonce = random_text::<16>();
    let code_challenge = challenge(&verifier);
    let Some(state) =
        oauth.pending.start(index, verifier, nonce.clone(), redirect_uri.clone(), crate::clock::now())
    else {
        tracing::warn!(%peer, provider = %name, "OAuth login refused: too many logins under way");
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many OAuth logins are under way; try again later",
        );
    };
    let mut scopes = provider.config.scopes.clone();
    if !scopes.iter().any(|s| s == "openid") {
        scopes.insert(0, "openid".into());
    }
    let Ok(mut url) = url::Url::parse(&discovery.authorization_endpoint) else {
        tracing::warn!(%peer, provider = %name, "OAuth login refused: the authorization endpoint is not a URL");
        return refuse(StatusCode::BAD_GATEWAY, "the OAuth provider's authorization endpoint is not a URL");
    };
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &provider.config.client_id)
        .append_pair("redirect_uri", &redirect_uri)
        .append_pair("scope", &scopes.join(" "))
        .append_pair("state", &state)
        .append_pair("nonce", &nonce)
        .append_pair("code_challenge", &code_challenge)
        .append_pair("code_challenge_method", "S256");
    tracing::info!(%peer, provider = %name, "OAuth login started");
    if wants_json(&headers) {
        return axum::Json(json!({ "url": url.as_str() })).into_response();
    }
    (StatusCode::FOUND, [(header::LOCATION, url.as_str().to_owned())]).into_response()
}

/// `GET /auth/oauth/complete?state=S&code=C` (or `&error=E`, the provider's refusal): the
/// login session, as `POST /auth/login` answers it.
async fn complete(
    State(ctx): State<Arc<ServerContext>>,
    Extension(connection): Extension<HttpConnection>,
    RawQuery(query): RawQuery,
) -> Response {
    let peer = connection.peer.ip();
    let failed = |ctx: &ServerContext, account: Option<&str>, status: StatusCode, message: String| {
        ctx.login_guard.failed(peer, account);
        Stats::add(&ctx.broker.stats().auth_failures, 1);
        tracing::info!(%peer, account = account.unwrap_or("-"), reason = %message, "OAuth login failed");
        refuse(status, message)
    };
    // As for password logins: repeated failures from one address make the next attempts wait.
    let delay = ctx.login_guard.delay_for(peer, None);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let [state, code, provider_error] = match params(query.as_deref(), &["state", "code", "error"]) {
        Ok(p) => <[Option<String>; 3]>::try_from(p).unwrap_or_default(),
        Err(e) => return failed(&ctx, None, StatusCode::BAD_REQUEST, e),
    };
    let Some(state) = state else {
        return failed(&ctx, None, StatusCode::BAD_REQUEST, "the redirect has no state".into());
    };
    let oauth = &ctx.accounts.oauth;
    // Taken first, whatever follows: a state is good for one answer from the provider.
    let started = match oauth.pending.take(&state, crate::clock::now()) {
        Ok(s) => s,
        Err(e) => return failed(&ctx, None, StatusCode::BAD_REQUEST, e.to_string()),
    };
    let Some(provider) = oauth.providers.get(started.provider) else {
        return failed(&ctx, None, StatusCode::BAD_REQUEST, "the login's provider is gone".into());
    };
    if let Some(error) = provider_error {
        let error: String = error.chars().filter(|c| c.is_ascii_graphic()).take(100).collect();
        return failed(
            &ctx,
            None,
            StatusCode::UNAUTHORIZED,
            format!("the OAuth provider refused the login: {error}"),
        );
    }
    let Some(code) = code.filter(|c| !c.is_empty()) else {
        return failed(&ctx, None, StatusCode::BAD_REQUEST, "the redirect has no code".into());
    };
    let account =
        match provider.complete(&code, &started.verifier, &started.nonce, &started.redirect_uri).await {
            Ok(a) => a,
            Err(e) => return failed(&ctx, None, StatusCode::UNAUTHORIZED, e.to_string()),
        };
    let Some(sessions) = ctx.services.get::<mesgd_providers::sessions::Sessions>() else {
        tracing::error!(%peer, %account, "OAuth login refused: the account store is not available");
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the account store is not available; see the server log",
        );
    };
    let directory = sessions.directory().clone();
    directory.catch_up().await;
    let record = directory.find_user(&account).await;
    if let Err(reason) = crate::content::grant::standing(record.as_deref()) {
        let reason = if record.is_none() { "there is no such account" } else { reason };
        return failed(
            &ctx,
            Some(&account),
            StatusCode::FORBIDDEN,
            format!("the OAuth provider names the account {account:?}, but {reason}"),
        );
    }
    ctx.login_guard.succeeded(peer, Some(&account));
    super::super::routes::after_login(&ctx, &sessions, &account, peer).await
}
