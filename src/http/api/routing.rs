//! `POST /api/v1/content/test`: the content-routing route tester. A JSON message in, the
//! listener paths it would reach out, matched by the same shared matcher a real message goes
//! through. Nothing is delivered and no counter moves.
//!
//! The message is sent as the JSON text itself (a string field), so the tester scans exactly
//! the bytes a content connection would send and reports the scanner's own error for text that
//! is not a routable message. At most [`MAX_PATHS`] distinct paths are listed.
//!
//! With a `user`, each reached path also lists which of that user's assigned patterns cover it
//! (`Path::covers`, the same check a grant connection's message goes through): the grant
//! patterns by which a grant token issued now could reach that listener.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use mesgd_core::content::{Message, Path};
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiJson, blocking};
use crate::context::ServerContext;

/// The most distinct listener paths one answer lists.
const MAX_PATHS: usize = 1000;

/// The message to route.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RouteQuestion {
    /// The message as JSON text: an object or an array, e.g. `{"kind":"chat","room":"lobby"}`.
    message: String,
    /// A builtin user: list, for each reached path, which of their assigned patterns cover it.
    user: Option<String>,
}

/// A listener path the message reaches.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ReachedPath {
    /// The listener path, in its canonical text (`/kind=chat/room=lobby`).
    path: String,
    /// How many connections listen on it.
    listeners: usize,
    /// With a `user` in the question: their assigned patterns that cover this path.
    #[serde(skip_serializing_if = "Option::is_none")]
    grant_patterns: Option<Vec<String>>,
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
    let patterns = match q.user {
        Some(user) => {
            let held = blocking(&ctx, move |d| d.store().patterns(&user)).await?;
            // Stored patterns are canonical paths; one that no longer parses covers nothing.
            Some(
                held.into_iter()
                    .filter_map(|p| Path::parse(&p).ok().map(|parsed| (p, parsed)))
                    .collect::<Vec<_>>(),
            )
        }
        None => None,
    };
    let registry = &ctx.content.registry;
    let (paths, truncated) = registry.reached_paths(&message, MAX_PATHS);
    let covering = |path: &str| {
        let patterns = patterns.as_ref()?;
        let reached = Path::parse(path).ok();
        Some(
            patterns
                .iter()
                .filter(|(_, p)| reached.as_ref().is_some_and(|r| p.covers(r)))
                .map(|(text, _)| text.clone())
                .collect(),
        )
    };
    Ok(Json(RouteAnswer {
        paths: paths
            .into_iter()
            .map(|(path, listeners)| ReachedPath { grant_patterns: covering(&path), path, listeners })
            .collect(),
        truncated,
        listeners_registered: registry.listeners(),
    }))
}
