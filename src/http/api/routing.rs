//! `POST /api/v1/content/test`: the content-routing route tester. A JSON message in, the
//! listener paths it would reach out, matched by the same shared matcher a real message goes
//! through. Nothing is delivered and no counter moves.
//!
//! The message is sent as the JSON text itself (a string field), so the tester scans exactly
//! the bytes a content connection would send and reports the scanner's own error for text that
//! is not a routable message. At most [`MAX_PATHS`] distinct paths are listed.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use mesgd_core::content::Message;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiJson};
use crate::context::ServerContext;

/// The most distinct listener paths one answer lists.
const MAX_PATHS: usize = 1000;

/// The message to route.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RouteQuestion {
    /// The message as JSON text: an object or an array, e.g. `{"kind":"chat","room":"lobby"}`.
    message: String,
}

/// A listener path the message reaches.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ReachedPath {
    /// The listener path, in its canonical text (`/kind=chat/room=lobby`).
    path: String,
    /// How many connections listen on it.
    listeners: usize,
}

/// Where the message would go.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct RouteAnswer {
    /// The distinct listener paths it reaches, sorted.
    paths: Vec<ReachedPath>,
    /// Whether more paths matched than are listed.
    truncated: bool,
    /// How many listeners are registered on the server in all.
    listeners_registered: usize,
}

/// `POST /api/v1/content/test`
#[utoipa::path(post, path = "/content/test", tag = "content", request_body = RouteQuestion, responses((status = 200, description = "The listener paths the message reaches", body = RouteAnswer)))]
pub(crate) async fn route_test(
    State(ctx): State<Arc<ServerContext>>,
    ApiJson(q): ApiJson<RouteQuestion>,
) -> Result<Json<RouteAnswer>, ApiError> {
    let message = Message::scan(q.message.as_bytes())
        .map_err(|e| ApiError::bad_request(format!("the message is not routable JSON: {e}")))?;
    let registry = &ctx.content.registry;
    let (paths, truncated) = registry.reached_paths(&message, MAX_PATHS);
    Ok(Json(RouteAnswer {
        paths: paths.into_iter().map(|(path, listeners)| ReachedPath { path, listeners }).collect(),
        truncated,
        listeners_registered: registry.listeners(),
    }))
}
