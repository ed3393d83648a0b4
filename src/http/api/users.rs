//! Builtin users, their ACL rules, and the ACL tester. Rule positions count from 1, as on the
//! command line (`mesgd acl list`), so an operator sees the same numbers everywhere.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mesgd_core::acl::{Access, Explanation, Permission, Rule, explain};
use mesgd_core::topic::TopicName;
use mesgd_providers::builtin::{AuthType, StoreError, UserChanges, UserQuery, UserRecord};
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiJson, ApiPath, ApiQuery, Page, blocking, change, decode_cursor, page, page_limit};
use crate::context::ServerContext;

/// A user as the API shows it: never a password or its hash.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct UserView {
    username: String,
    auth_type: &'static str,
    disabled: bool,
    unrestricted: bool,
    /// Whether a password is set (for a basic user).
    has_password: bool,
    rules: usize,
}

impl From<&UserRecord> for UserView {
    fn from(u: &UserRecord) -> Self {
        UserView {
            username: u.username.clone(),
            auth_type: u.auth_type.as_str(),
            disabled: u.disabled,
            unrestricted: u.unrestricted,
            has_password: u.password_hash.is_some(),
            rules: u.rules.len(),
        }
    }
}

/// A rule with its position (from 1).
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct RuleView {
    position: usize,
    pattern: String,
    permission: &'static str,
}

fn rule_view(index: usize, rule: &Rule) -> RuleView {
    RuleView { position: index + 1, pattern: rule.pattern.clone(), permission: rule.permission.as_str() }
}

fn parse_auth_type(text: &str) -> Result<AuthType, ApiError> {
    text.parse().map_err(ApiError::bad_request)
}

fn parse_permission(text: &str) -> Result<Permission, ApiError> {
    Permission::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// 1-based position → index.
fn index_of(position: usize) -> Result<usize, ApiError> {
    position.checked_sub(1).ok_or_else(|| ApiError::bad_request("rule positions start at 1"))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListUsers {
    limit: Option<usize>,
    cursor: Option<String>,
    prefix: Option<String>,
    /// `basic` or `x509`.
    #[param(pattern = "^(basic|x509)$")]
    auth_type: Option<String>,
    disabled: Option<bool>,
}

/// `GET /api/v1/users`
#[utoipa::path(get, path = "/users", tag = "users", params(ListUsers), responses((status = 200, description = "A page of users, by name", body = Page<UserView>)))]
pub(crate) async fn list(
    State(ctx): State<Arc<ServerContext>>,
    ApiQuery(q): ApiQuery<ListUsers>,
) -> Result<Json<Page<UserView>>, ApiError> {
    let limit = page_limit(q.limit)?;
    let after = decode_cursor(q.cursor.as_deref())?;
    let auth_type = q.auth_type.as_deref().map(parse_auth_type).transpose()?;
    let (prefix, disabled) = (q.prefix, q.disabled);
    let users = blocking(&ctx, move |d| {
        d.store().users_page(&UserQuery {
            after: after.as_deref(),
            prefix: prefix.as_deref(),
            auth_type,
            disabled,
            limit: limit + 1,
        })
    })
    .await?;
    let views = users.iter().map(UserView::from).collect();
    Ok(Json(page(views, limit, |u: &UserView| u.username.clone())))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewUser {
    username: String,
    /// `basic` (the default) or `x509`.
    #[serde(default)]
    #[schema(pattern = "^(basic|x509)$")]
    auth_type: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    unrestricted: bool,
}

/// `POST /api/v1/users`
#[utoipa::path(post, path = "/users", tag = "users", request_body = NewUser, responses((status = 201, description = "Created", body = UserView), (status = 409, description = "The name is taken", body = super::ErrorBody)))]
pub(crate) async fn create(
    State(ctx): State<Arc<ServerContext>>,
    ApiJson(new): ApiJson<NewUser>,
) -> Result<Response, ApiError> {
    let auth_type = new.auth_type.as_deref().map(parse_auth_type).transpose()?.unwrap_or(AuthType::Basic);
    let user = change(&ctx, move |d| {
        let store = d.store();
        store.add_user(
            &new.username,
            auth_type,
            new.password.as_deref().map(str::as_bytes),
            new.unrestricted,
        )?;
        store.user(&new.username)?.ok_or(StoreError::UnknownUser(new.username))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(UserView::from(&user))).into_response())
}

/// `GET /api/v1/users/{name}`
#[utoipa::path(get, path = "/users/{name}", tag = "users", params(("name" = String, Path, description = "The user name")), responses((status = 200, description = "The user", body = UserView)))]
pub(crate) async fn get_one(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<UserView>, ApiError> {
    let user = blocking(&ctx, move |d| d.store().user(&name)?.ok_or(StoreError::UnknownUser(name))).await?;
    Ok(Json(UserView::from(&user)))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserPatch {
    password: Option<String>,
    /// `basic` or `x509`.
    #[schema(pattern = "^(basic|x509)$")]
    auth_type: Option<String>,
    disabled: Option<bool>,
    unrestricted: Option<bool>,
}

/// `PATCH /api/v1/users/{name}`: password, auth type, enable/disable, unrestricted, together.
#[utoipa::path(patch, path = "/users/{name}", tag = "users", params(("name" = String, Path, description = "The user name")), request_body = UserPatch, responses((status = 200, description = "The user as changed", body = UserView)))]
pub(crate) async fn modify(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(patch): ApiJson<UserPatch>,
) -> Result<Json<UserView>, ApiError> {
    let changes = UserChanges {
        password: patch.password.map(String::into_bytes),
        auth_type: patch.auth_type.as_deref().map(parse_auth_type).transpose()?,
        disabled: patch.disabled,
        unrestricted: patch.unrestricted,
    };
    let user = change(&ctx, move |d| d.store().modify_user(&name, &changes)).await?;
    Ok(Json(UserView::from(&user)))
}

/// `DELETE /api/v1/users/{name}`: its connections are closed.
#[utoipa::path(delete, path = "/users/{name}", tag = "users", params(("name" = String, Path, description = "The user name")), responses((status = 204, description = "Removed; its connections are closed")))]
pub(crate) async fn remove(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    change(&ctx, move |d| d.store().remove_user(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListRules {
    limit: Option<usize>,
    cursor: Option<String>,
}

/// `GET /api/v1/users/{name}/rules`: in order.
#[utoipa::path(get, path = "/users/{name}/rules", tag = "rules", params(("name" = String, Path, description = "The user name"), ListRules), responses((status = 200, description = "A page of rules, in order", body = Page<RuleView>)))]
pub(crate) async fn list_rules(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<ListRules>,
) -> Result<Json<Page<RuleView>>, ApiError> {
    let limit = page_limit(q.limit)?;
    let after: usize = match decode_cursor(q.cursor.as_deref())? {
        Some(text) => text.parse().map_err(|_| ApiError::bad_request("invalid cursor"))?,
        None => 0,
    };
    let rules = blocking(&ctx, move |d| d.store().rules(&name)).await?;
    let views = rules.iter().enumerate().skip(after).take(limit + 1).map(|(i, r)| rule_view(i, r)).collect();
    Ok(Json(page(views, limit, |r: &RuleView| r.position.to_string())))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewRule {
    pattern: String,
    /// `read`, `write`, `readwrite` (or `rw`, `all`) or `deny`.
    #[schema(pattern = "^(read|write|readwrite|rw|all|deny)$")]
    permission: String,
    /// Insert here (1 = first); at the end without it.
    position: Option<usize>,
}

/// `POST /api/v1/users/{name}/rules`
#[utoipa::path(post, path = "/users/{name}/rules", tag = "rules", params(("name" = String, Path, description = "The user name")), request_body = NewRule, responses((status = 201, description = "Inserted", body = RuleView)))]
pub(crate) async fn add_rule(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(new): ApiJson<NewRule>,
) -> Result<Response, ApiError> {
    let rule = Rule::new(new.pattern, parse_permission(&new.permission)?);
    let at = new.position.map(index_of).transpose()?;
    let view_rule = rule.clone();
    let index = change(&ctx, move |d| d.store().add_rule(&name, rule, at)).await?;
    Ok((StatusCode::CREATED, Json(rule_view(index, &view_rule))).into_response())
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleBody {
    pattern: String,
    /// `read`, `write`, `readwrite` (or `rw`, `all`) or `deny`.
    #[schema(pattern = "^(read|write|readwrite|rw|all|deny)$")]
    permission: String,
}

/// `PUT /api/v1/users/{name}/rules/{position}`: replaces the rule.
#[utoipa::path(put, path = "/users/{name}/rules/{position}", tag = "rules", params(("name" = String, Path, description = "The user name"), ("position" = u64, Path, description = "The rule position, from 1")), request_body = RuleBody, responses((status = 200, description = "The new rule", body = RuleView)))]
pub(crate) async fn replace_rule(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath((name, position)): ApiPath<(String, usize)>,
    ApiJson(body): ApiJson<RuleBody>,
) -> Result<Json<RuleView>, ApiError> {
    let index = index_of(position)?;
    let rule = Rule::new(body.pattern, parse_permission(&body.permission)?);
    let view = rule_view(index, &rule);
    change(&ctx, move |d| d.store().replace_rule(&name, index, rule)).await?;
    Ok(Json(view))
}

/// `DELETE /api/v1/users/{name}/rules/{position}`
#[utoipa::path(delete, path = "/users/{name}/rules/{position}", tag = "rules", params(("name" = String, Path, description = "The user name"), ("position" = u64, Path, description = "The rule position, from 1")), responses((status = 204, description = "Removed")))]
pub(crate) async fn remove_rule(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath((name, position)): ApiPath<(String, usize)>,
) -> Result<StatusCode, ApiError> {
    let index = index_of(position)?;
    change(&ctx, move |d| d.store().remove_rule_at(&name, index)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MoveTo {
    to: usize,
}

/// `POST /api/v1/users/{name}/rules/{position}/move`: `{"to": N}`.
#[utoipa::path(post, path = "/users/{name}/rules/{position}/move", tag = "rules", params(("name" = String, Path, description = "The user name"), ("position" = u64, Path, description = "The rule position, from 1")), request_body = MoveTo, responses((status = 200, description = "The rule at its new position", body = RuleView)))]
pub(crate) async fn move_rule(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath((name, position)): ApiPath<(String, usize)>,
    ApiJson(target): ApiJson<MoveTo>,
) -> Result<Json<RuleView>, ApiError> {
    let (from, to) = (index_of(position)?, index_of(target.to)?);
    let rule = change(&ctx, move |d| d.store().move_rule(&name, from, to)).await?;
    Ok(Json(rule_view(to, &rule)))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AclQuestion {
    username: String,
    /// The client id `%c` stands for; rules using `%c` match nothing without one.
    #[serde(default)]
    client_id: String,
    /// `read` or `write`.
    #[schema(pattern = "^(read|write)$")]
    access: String,
    topic: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct AclAnswer {
    allowed: bool,
    /// The rule that decides, if one does.
    rule: Option<RuleView>,
    /// The decision in words: `rule 2 (read devices/%u/#) allows`, `no rule matched: deny`.
    reason: String,
}

/// `POST /api/v1/acl/test`: "may alice read devices/bob/x?", answered with the deciding rule.
#[utoipa::path(post, path = "/acl/test", tag = "rules", request_body = AclQuestion, responses((status = 200, description = "The decision and the rule that makes it", body = AclAnswer), (status = 404, description = "No such user", body = super::ErrorBody)))]
pub(crate) async fn acl_test(
    State(ctx): State<Arc<ServerContext>>,
    ApiJson(q): ApiJson<AclQuestion>,
) -> Result<Json<AclAnswer>, ApiError> {
    let access = match q.access.as_str() {
        "read" => Access::Read,
        "write" => Access::Write,
        other => return Err(ApiError::bad_request(format!("access {other:?}: expected read or write"))),
    };
    let topic =
        TopicName::try_from(q.topic.as_str()).map_err(|e| ApiError::bad_request(format!("topic: {e}")))?;
    let name = q.username.clone();
    let user = blocking(&ctx, move |d| d.store().user(&name)?.ok_or(StoreError::UnknownUser(name))).await?;
    let rules = user.acl();
    let why = explain(rules.as_deref(), Some(&user.username), &q.client_id, access, &topic);
    let answer = match why {
        Explanation::Unrestricted => {
            AclAnswer { allowed: true, rule: None, reason: "the user is unrestricted: allow".into() }
        }
        Explanation::NoMatch => {
            AclAnswer { allowed: false, rule: None, reason: "no rule matched: deny".into() }
        }
        Explanation::Rule { index, allowed } => {
            let rule = &user.rules[index];
            AclAnswer {
                allowed,
                reason: format!(
                    "rule {} ({} {}) {}",
                    index + 1,
                    rule.permission.as_str(),
                    rule.pattern,
                    if allowed { "allows" } else { "denies" }
                ),
                rule: Some(rule_view(index, rule)),
            }
        }
    };
    Ok(Json(answer))
}
