//! The REST API under `/api/v1`: JSON in and out, one error shape, cursor pagination, and
//! administrator authentication in front of every route (docs/api.md).
//!
//! # Layout
//!
//! - this file: the router, [`ApiError`] (`{"error": {"code", "message"}}`), the JSON, query
//!   and path extractors that answer with that shape, pagination, and the store helper.
//! - `auth`: who is asking — API tokens (`Authorization: Bearer`), browser sessions (cookie +
//!   CSRF token), login with lockout, the cross-origin and no-administrator refusals.
//! - `browser_sessions`: the console's sessions (cookie digest, CSRF token, last use), bounded
//!   and idle-timed; with `[cluster]` the node's copy of the cluster's sessions.
//! - `cluster`: with `[cluster]`, the sessions and the login CSRF key shared by every node.
//! - `openapi`: what the generated OpenAPI document gets besides the routes (security
//!   schemes, the error answers every route can give).
//! - `users`: builtin users, their ACL rules, and the ACL tester.
//! - `accounts`: accounts' content-routing patterns and roles (message access).
//! - `grants`: issuing a grant token to a user.
//! - `broker`: sessions and clients, subscriptions, retained messages, the provider chain and
//!   broker statistics.
//! - `stream`: broker statistics as server-sent events, one sample a second (the console's
//!   live chart).
//! - `routing`: the content-routing route tester (which listener paths a JSON message reaches).
//!
//! Every change goes through the same [`Store`](mesgd_providers::builtin::Store) method the
//! command line calls, then [`UserDirectory::sync`] so that the answer means the change is live
//! for connected clients.

mod accounts;
mod auth;
mod broker;
mod browser_sessions;
pub(crate) mod cluster;
mod grants;
mod openapi;
mod routing;
mod stream;
mod users;

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mesgd_providers::builtin::{StoreError, UserDirectory};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) use self::auth::ApiState;
use crate::context::ServerContext;

/// Where the API is mounted.
pub(crate) const PREFIX: &str = "/api/v1";

/// The routes, with authentication in front of them, and the OpenAPI document made from the
/// same list (`GET /api/v1/openapi.json`), so the two cannot drift apart.
pub(crate) fn router(ctx: &Arc<ServerContext>) -> Router<Arc<ServerContext>> {
    let (routes, document) = routes().split_for_parts();
    let document = openapi::finish(document);
    let routes = routes
        .route(openapi::PATH, get(move || std::future::ready(document.clone())))
        // A route, not only a fallback: the listener's other front ends have catch-all routes
        // (content routing answers every path), and axum consults fallbacks only when no route
        // matches, so unknown API paths would otherwise never reach the API's own answer.
        .route("/{*rest}", axum::routing::any(not_found))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(axum::middleware::from_fn_with_state(ctx.clone(), auth::guard))
        .layer(axum::extract::DefaultBodyLimit::max(ctx.api.max_body_bytes()));
    Router::new().nest(PREFIX, routes)
}

/// The API's answer to a path it does not have (behind the guard, like every route).
async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// Every documented route (paths relative to [`PREFIX`]).
fn routes() -> OpenApiRouter<Arc<ServerContext>> {
    OpenApiRouter::new()
        .routes(routes!(auth::login_challenge, auth::login))
        .routes(routes!(auth::logout))
        .routes(routes!(auth::whoami))
        .routes(routes!(users::list, users::create))
        .routes(routes!(users::get_one, users::modify, users::remove))
        .routes(routes!(users::list_rules, users::add_rule))
        .routes(routes!(users::replace_rule, users::remove_rule))
        .routes(routes!(users::move_rule))
        .routes(routes!(users::acl_test))
        .routes(routes!(accounts::list_patterns, accounts::assign, accounts::unassign))
        .routes(routes!(accounts::list_roles, accounts::add_role))
        .routes(routes!(accounts::get_role, accounts::remove_role))
        .routes(routes!(accounts::permit, accounts::forbid))
        .routes(routes!(accounts::assign_role))
        .routes(routes!(accounts::unassign_role))
        .routes(routes!(grants::issue))
        .routes(routes!(broker::list_sessions))
        .routes(routes!(broker::get_session, broker::delete_session))
        .routes(routes!(broker::kick))
        .routes(routes!(broker::list_subscriptions))
        .routes(routes!(broker::list_retained))
        .routes(routes!(broker::get_retained, broker::delete_retained))
        .routes(routes!(broker::providers))
        .routes(routes!(broker::stats))
        .routes(routes!(stream::stats_stream))
        .routes(routes!(routing::route_test))
}

/// The one error shape: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

/// The body of every error answer.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(Serialize, utoipa::ToSchema)]
struct ErrorDetail {
    /// A stable, machine-readable code (`not_found`, `csrf`, `locked`, ...).
    code: String,
    /// What was wrong, for people.
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), retry_after: None }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_owned(), message: self.message } };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::UserExists(_)
            | StoreError::AdminExists(_)
            | StoreError::TokenExists(_)
            | StoreError::RoleExists(_)
            | StoreError::TooManyPatterns { .. } => ApiError::conflict(e.to_string()),
            StoreError::UnknownUser(_)
            | StoreError::UnknownAdmin(_)
            | StoreError::UnknownToken(_)
            | StoreError::NoSuchRule { .. }
            | StoreError::NoRuleWithPattern { .. }
            | StoreError::UnknownRole(_)
            | StoreError::UnknownPermission(_)
            | StoreError::NotAssigned { .. } => ApiError::not_found(e.to_string()),
            StoreError::InvalidUsername { .. }
            | StoreError::InvalidRule(_)
            | StoreError::X509HasNoPassword(_)
            | StoreError::PasswordRequired(_)
            | StoreError::Password(_)
            | StoreError::InvalidPattern { .. }
            | StoreError::InvalidRoleName { .. } => ApiError::bad_request(e.to_string()),
            _ => {
                tracing::error!(error = %e, "REST API: user store failed");
                ApiError::internal("the user store failed; see the server log")
            }
        }
    }
}

/// A JSON body; a body that does not parse is a 400 (415 without a JSON content type) in the
/// API's error shape.
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
            Err(JsonRejection::MissingJsonContentType(e)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                e.body_text(),
            )),
            Err(JsonRejection::BytesRejection(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", e.body_text()))
            }
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}

/// Query parameters, refused in the API's error shape.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e: QueryRejection| ApiError::bad_request(e.body_text()))
    }
}

/// Path parameters (percent-decoded), refused in the API's error shape.
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e: PathRejection| ApiError::bad_request(e.body_text()))
    }
}

/// The default and the largest page size.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// A page of items and the cursor of the next page (absent on the last page).
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Page<T> {
    items: Vec<T>,
    next_cursor: Option<String>,
}

/// Checks `limit` (1 to 1000, default 100).
pub(crate) fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit.unwrap_or(DEFAULT_LIMIT) {
        n @ 1..=MAX_LIMIT => Ok(n),
        n => Err(ApiError::bad_request(format!("limit {n} is out of range (1 to {MAX_LIMIT})"))),
    }
}

/// An opaque cursor: the sort key of the last item of a page, base64url-encoded.
pub(crate) fn encode_cursor(key: &str) -> String {
    URL_SAFE_NO_PAD.encode(key)
}

/// The sort key a cursor stands for.
pub(crate) fn decode_cursor(cursor: Option<&str>) -> Result<Option<String>, ApiError> {
    let Some(cursor) = cursor else { return Ok(None) };
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_cursor", "the cursor is not one this API gave")
    })?;
    String::from_utf8(bytes).map(Some).map_err(|_| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_cursor", "the cursor is not one this API gave")
    })
}

/// Makes a page from up to `limit + 1` sorted items: the extra one only says there is more.
pub(crate) fn page<T>(mut items: Vec<T>, limit: usize, key: impl Fn(&T) -> String) -> Page<T> {
    let more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = if more { items.last().map(|last| encode_cursor(&key(last))) } else { None };
    Page { items, next_cursor }
}

/// The builtin store's directory (opened at start for every server with an `http` listener).
pub(crate) fn directory(ctx: &ServerContext) -> Result<Arc<UserDirectory>, ApiError> {
    ctx.services.get::<UserDirectory>().ok_or_else(|| ApiError::internal("the user store is not open"))
}

/// Runs a store operation on the blocking pool (SQLite waits for other writers, and hashing is
/// slow by design).
pub(crate) async fn blocking<T: Send + 'static>(
    ctx: &ServerContext,
    operation: impl FnOnce(&UserDirectory) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let directory = directory(ctx)?;
    match tokio::task::spawn_blocking(move || operation(&directory)).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(_) => Err(ApiError::internal("the store operation failed")),
    }
}

/// As [`blocking`], for a change: returns once connected clients have been told of it.
pub(crate) async fn change<T: Send + 'static>(
    ctx: &ServerContext,
    operation: impl FnOnce(&UserDirectory) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let value = blocking(ctx, operation).await?;
    directory(ctx)?.sync().await;
    Ok(value)
}
