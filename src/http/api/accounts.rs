//! Accounts' message access over REST: the content-routing patterns assigned to a user
//! (directly or through roles), and roles, the named sets of patterns. Every change goes
//! through the same [`Store`](mesgd_providers::builtin::Store) method as `mesgd grant` and
//! `mesgd role`, and answers once it is live: a grant connection's next message is checked
//! against it.
//!
//! A pattern is given as a path (`{"path": "/kind=chat"}`) or compiled from a sample message
//! with the pattern compiler (`{"sample": {...}, "modes": {"kind": "exact"}}`, the body of
//! `POST /api/patterns/compile`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiJson, ApiPath, ApiQuery, blocking, change};
use crate::context::ServerContext;

/// The patterns a user holds.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct PatternsView {
    /// Every pattern, directly and through roles (what a grant token issued now carries).
    patterns: Vec<String>,
    /// The patterns assigned directly.
    direct: Vec<String>,
    /// The user's roles.
    roles: Vec<String>,
}

/// A pattern: a path, or a sample message and field modes for the pattern compiler.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatternBody {
    /// The pattern as a content-routing path.
    path: Option<String>,
    /// A sample JSON message (object or array) to compile a pattern from.
    #[schema(value_type = Option<Object>)]
    sample: Option<serde_json::Value>,
    /// Field modes for the sample (`exact`, `any`, `omit`), by field name.
    #[schema(value_type = Option<Object>)]
    modes: Option<serde_json::Map<String, serde_json::Value>>,
}

impl PatternBody {
    /// The pattern's text.
    fn pattern(self) -> Result<String, ApiError> {
        match (self.path, self.sample) {
            (Some(path), None) if self.modes.is_none() => Ok(path),
            (None, Some(sample)) => {
                let mut body = serde_json::Map::new();
                body.insert("sample".into(), sample);
                if let Some(modes) = self.modes {
                    body.insert("modes".into(), serde_json::Value::Object(modes));
                }
                let text = serde_json::Value::Object(body).to_string();
                crate::content::compile::answer(text.as_bytes())
                    .map_err(|e| ApiError::bad_request(e.to_string()))
            }
            _ => Err(ApiError::bad_request("give either `path`, or `sample` (with optional `modes`)")),
        }
    }
}

/// A pattern named in a query (`?path=/kind=chat`).
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PatternQuery {
    /// The pattern.
    path: String,
}

#[utoipa::path(get, path = "/users/{name}/patterns", tag = "accounts", params(("name" = String, Path, description = "The user name")), responses((status = 200, description = "The user's patterns", body = PatternsView)))]
pub(crate) async fn list_patterns(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<PatternsView>, ApiError> {
    let view = blocking(&ctx, move |d| {
        let s = d.store();
        Ok(PatternsView {
            patterns: s.patterns(&name)?,
            direct: s.direct_patterns(&name)?,
            roles: s.user_roles(&name)?,
        })
    })
    .await?;
    Ok(Json(view))
}

#[utoipa::path(post, path = "/users/{name}/patterns", tag = "accounts", params(("name" = String, Path, description = "The user name")), request_body = PatternBody, responses((status = 200, description = "Assigned (or already assigned); the user's patterns", body = PatternsView), (status = 409, description = "The user would hold too many patterns", body = super::ErrorBody)))]
pub(crate) async fn assign(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<PatternBody>,
) -> Result<Json<PatternsView>, ApiError> {
    let pattern = body.pattern()?;
    let n = name.clone();
    change(&ctx, move |d| d.store().assign_pattern(&n, &pattern)).await?;
    list_patterns(State(ctx), ApiPath(name)).await
}

#[utoipa::path(delete, path = "/users/{name}/patterns", tag = "accounts", params(("name" = String, Path, description = "The user name"), PatternQuery), responses((status = 204, description = "Unassigned; live at the user's grant connections' next message")))]
pub(crate) async fn unassign(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<PatternQuery>,
) -> Result<StatusCode, ApiError> {
    change(&ctx, move |d| d.store().unassign_pattern(&name, &q.path)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A role.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct RoleView {
    name: String,
    patterns: Vec<String>,
}

/// A new role.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewRole {
    name: String,
}

/// A role to give a user.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoleName {
    role: String,
}

#[utoipa::path(get, path = "/roles", tag = "accounts", responses((status = 200, description = "Every role, by name", body = Vec<RoleView>)))]
pub(crate) async fn list_roles(
    State(ctx): State<Arc<ServerContext>>,
) -> Result<Json<Vec<RoleView>>, ApiError> {
    let roles = blocking(&ctx, |d| d.store().roles()).await?;
    Ok(Json(roles.into_iter().map(|r| RoleView { name: r.name, patterns: r.patterns }).collect()))
}

#[utoipa::path(post, path = "/roles", tag = "accounts", request_body = NewRole, responses((status = 201, description = "Created", body = RoleView), (status = 409, description = "The name is taken", body = super::ErrorBody)))]
pub(crate) async fn add_role(
    State(ctx): State<Arc<ServerContext>>,
    ApiJson(new): ApiJson<NewRole>,
) -> Result<(StatusCode, Json<RoleView>), ApiError> {
    let name = new.name.clone();
    change(&ctx, move |d| d.store().add_role(&new.name)).await?;
    Ok((StatusCode::CREATED, Json(RoleView { name, patterns: Vec::new() })))
}

#[utoipa::path(get, path = "/roles/{role}", tag = "accounts", params(("role" = String, Path, description = "The role name")), responses((status = 200, description = "The role", body = RoleView)))]
pub(crate) async fn get_role(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(role): ApiPath<String>,
) -> Result<Json<RoleView>, ApiError> {
    let r = blocking(&ctx, move |d| d.store().role(&role)).await?;
    Ok(Json(RoleView { name: r.name, patterns: r.patterns }))
}

#[utoipa::path(delete, path = "/roles/{role}", tag = "accounts", params(("role" = String, Path, description = "The role name")), responses((status = 204, description = "Removed from every user")))]
pub(crate) async fn remove_role(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(role): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    change(&ctx, move |d| d.store().remove_role(&role)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/roles/{role}/patterns", tag = "accounts", params(("role" = String, Path, description = "The role name")), request_body = PatternBody, responses((status = 200, description = "The role with the pattern", body = RoleView)))]
pub(crate) async fn permit(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(role): ApiPath<String>,
    ApiJson(body): ApiJson<PatternBody>,
) -> Result<Json<RoleView>, ApiError> {
    let pattern = body.pattern()?;
    let r = change(&ctx, move |d| {
        d.store().role_add_pattern(&role, &pattern)?;
        d.store().role(&role)
    })
    .await?;
    Ok(Json(RoleView { name: r.name, patterns: r.patterns }))
}

#[utoipa::path(delete, path = "/roles/{role}/patterns", tag = "accounts", params(("role" = String, Path, description = "The role name"), PatternQuery), responses((status = 204, description = "The pattern is no longer in the role")))]
pub(crate) async fn forbid(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(role): ApiPath<String>,
    ApiQuery(q): ApiQuery<PatternQuery>,
) -> Result<StatusCode, ApiError> {
    change(&ctx, move |d| d.store().role_remove_pattern(&role, &q.path)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/users/{name}/roles", tag = "accounts", params(("name" = String, Path, description = "The user name")), request_body = RoleName, responses((status = 200, description = "The user's patterns", body = PatternsView)))]
pub(crate) async fn assign_role(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<RoleName>,
) -> Result<Json<PatternsView>, ApiError> {
    let n = name.clone();
    change(&ctx, move |d| d.store().assign_role(&n, &body.role)).await?;
    list_patterns(State(ctx), ApiPath(name)).await
}

#[utoipa::path(delete, path = "/users/{name}/roles/{role}", tag = "accounts", params(("name" = String, Path, description = "The user name"), ("role" = String, Path, description = "The role name")), responses((status = 204, description = "The user no longer has the role")))]
pub(crate) async fn unassign_role(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath((name, role)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    change(&ctx, move |d| d.store().unassign_role(&name, &role)).await?;
    Ok(StatusCode::NO_CONTENT)
}
