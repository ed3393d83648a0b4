//! `POST /users/{name}/grant-token`: a grant token for a user, to any admin credential of the
//! REST API. `POST /auth/admin/issue` takes only an admin API token as Bearer; this route
//! lets the console (a browser session with its CSRF token) issue one too, through the same
//! issuing function, so the token carries the same patterns and expiry.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;

use super::{ApiError, ApiPath, directory};
use crate::accounts::issue::{IssueRefusal, grant_token};
use crate::context::ServerContext;

/// A grant token, shown once: the server keeps no copy.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct GrantToken {
    /// The token, for `Authorization: Bearer` or `?token=` at a content-routing upgrade.
    token: String,
    /// When it expires, in seconds since the Unix epoch.
    expires_at: u64,
}

#[utoipa::path(post, path = "/users/{name}/grant-token", tag = "accounts", params(("name" = String, Path, description = "The user name")), responses((status = 200, description = "A grant token carrying the user's patterns now", body = GrantToken), (status = 404, description = "No such user", body = super::ErrorBody), (status = 409, description = "The user is disabled or holds no pattern", body = super::ErrorBody)))]
pub(crate) async fn issue(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<GrantToken>, ApiError> {
    let directory = directory(&ctx)?;
    match grant_token(&ctx, &directory, &name).await {
        Ok((token, expires_at)) => Ok(Json(GrantToken { token, expires_at })),
        Err(IssueRefusal::NoUser(user)) => Err(ApiError::not_found(format!("no user {user:?}"))),
        Err(IssueRefusal::Refused(e)) => Err(ApiError::conflict(e.to_string())),
        Err(IssueRefusal::Unavailable) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the grant signing keys are not open; see the server log",
        )),
    }
}
