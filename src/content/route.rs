//! The HTTP side of content routing on the `http` listener: `POST /api/patterns/compile`, and
//! a WebSocket upgrade at every other path that is not reserved.
//!
//! Reserved: a path whose first segment (of the raw URL path, empty pieces skipped, as the
//! router sees it) is `auth`, `account`, `api`, `metrics`, `console` or `mqtt` belongs to
//! another front end and is never a listener: what no route there answers is 404. So `/auth`
//! and `/api/x` are not content paths, but `/author=ann` and `/auth=x` are.
//!
//! Order of checks: reserved → 404; not a WebSocket upgrade → 426 (version ≠ 13 → 400); a
//! malformed path → 400 naming the segment; a malformed credential → 400 or 401; admission →
//! 401 or 403; too many listeners → 503; then `101 Switching Protocols`, answering the `json`
//! subprotocol if offered. The connection is registered before the `101` goes out: a client
//! that has its `101` receives every message sent after it.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{self, HeaderValue};
use axum::http::{Request, Response, StatusCode};
use axum::routing::{any, post};
use mesgd_core::content::Path;

use super::admission::{self, JSON_PROTOCOL};
use super::{compile, connection, stats};
use crate::context::ServerContext;
use crate::http::{HttpConnection, ws};

/// First path segments that belong to other front ends.
pub(crate) const RESERVED: [&str; 6] = ["auth", "account", "api", "metrics", "console", "mqtt"];

/// The content routes of an `http` listener: the compiler's endpoint and the upgrade at every
/// other path (`/` included). More specific routes of other front ends win over the catch-all.
pub(crate) fn routes() -> axum::Router<Arc<ServerContext>> {
    axum::Router::new()
        .route(compile::HTTP_PATH, post(compile::route))
        .route("/", any(upgrade))
        .route("/{*path}", any(upgrade))
}

/// A plain-text response.
pub(crate) fn text_response(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// Whether `raw` (a URL path, not decoded) belongs to another front end.
pub(crate) fn is_reserved(raw: &str) -> bool {
    raw.split('/').find(|s| !s.is_empty()).is_some_and(|first| RESERVED.contains(&first))
}

async fn upgrade(
    State(ctx): State<Arc<ServerContext>>,
    Extension(connection): Extension<HttpConnection>,
    req: Request<Body>,
) -> Response<Body> {
    let raw = req.uri().path();
    if is_reserved(raw) {
        tracing::info!(peer = %connection.peer, path = raw, "HTTP request for an unknown reserved path");
        return ws::text(StatusCode::NOT_FOUND, "not found\n");
    }
    if let Some(refused) = ws::refusal(&req) {
        return refused;
    }
    let path = match Path::from_url_path(raw) {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(peer = %connection.peer, error = %e, "content upgrade with an invalid path");
            return text_response(StatusCode::BAD_REQUEST, format!("invalid path: {e}\n"));
        }
    };
    let admitted = match admission::presented(req.headers(), req.uri()) {
        Ok(presented) => admission::admit(&ctx, connection.peer.ip(), &path, presented).await,
        Err(refusal) => Err(refusal),
    };
    let credential = match admitted {
        Ok(c) => c,
        Err(refusal) => {
            if refusal.refuses_credential() {
                stats::add(&ctx.content.stats().upgrades_refused, 1);
            }
            tracing::info!(
                peer = %connection.peer,
                path = %path,
                status = refusal.status.as_u16(),
                reason = %refusal.reason,
                "content upgrade refused"
            );
            return refusal.response();
        }
    };
    tracing::debug!(peer = %connection.peer, path = %path, credential = %credential.describe(), "content upgrade admitted");
    let limits = ws::Limits {
        protocol: admission::offers_json(req.headers()).then_some(JSON_PROTOCOL),
        max_message: ctx.content.config.max_message_bytes,
    };
    let bound = credential.bound(&ctx);
    let registered = match connection::Registered::open(&ctx, credential.role(path), bound) {
        Ok(r) => r,
        Err(full) => {
            tracing::warn!(peer = %connection.peer, error = %full, "content upgrade refused: too many listeners");
            return text_response(StatusCode::SERVICE_UNAVAILABLE, format!("{full}\n"));
        }
    };
    stats::add(&ctx.content.stats().upgrades, 1);
    ws::accept(req, limits, move |socket| connection::run(socket, registered, connection))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_paths_are_those_of_other_front_ends() {
        for p in [
            "/auth",
            "/auth/login",
            "//auth/x",
            "/account",
            "/api/patterns/compile",
            "/api/v1/users",
            "/metrics",
            "/console/",
            "/mqtt/x",
        ] {
            assert!(is_reserved(p), "{p}");
        }
        for p in
            ["/", "/author=ann", "/auth=x", "/kind=chat/auth", "/apis", "/%61pi", "/metrics=1", "/consoles"]
        {
            assert!(!is_reserved(p), "{p}");
        }
    }
}
