//! The web console at `/console` on the `http` listener: a small hand-written front end
//! (HTML, CSS and JavaScript modules, no framework, no build step) that is a client of the
//! REST API under `/api/v1`, with the API's browser sessions and CSRF tokens (docs/console.md).
//!
//! # Layout
//!
//! - this file: the routes. Every console address but an asset answers with the same page
//!   (the front end reads the path), so a reload or a bookmark lands on the right view; only
//!   `GET` and `HEAD` are answered.
//! - [`assets`]: the embedded files and their size budget.
//! - `assets/`: the front end. `app.js` (who is logged in, navigation, login, first run, log
//!   out), `api.js` (fetch with the CSRF token, the error shape), `ui.js` (DOM helpers),
//!   `chart.js` (the live rate chart), and one module per page in `pages/`.
//!
//! The page itself carries no state and needs no credential: everything it shows comes from
//! the API, which authenticates every request. Every answer forbids framing and inline script
//! (`Content-Security-Policy`), so an injected string can never run.

pub(crate) mod assets;

use std::sync::Arc;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::context::ServerContext;

/// Where the console is mounted.
pub(crate) const PATH: &str = "/console";

/// What every console answer may load and do: its own files and the API, nothing else.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The console's routes (mounted on `http` listeners by [`crate::http::router`]).
pub(crate) fn routes() -> Router<Arc<ServerContext>> {
    Router::new()
        .route(PATH, get(page))
        .route("/console/", get(page))
        .route("/console/{*rest}", get(file_or_page))
}

fn serve(asset: &assets::Asset) -> Response {
    let mut response = asset.bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    // Small files, served from memory: always revalidate, so an upgraded server is never
    // paired with an old script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

async fn page() -> Response {
    serve(assets::shell())
}

async fn file_or_page(Path(rest): Path<String>) -> Response {
    match rest.strip_prefix("assets/") {
        Some(name) => match assets::find(name) {
            Some(asset) => serve(asset),
            None => (StatusCode::NOT_FOUND, "no such console file\n").into_response(),
        },
        None => serve(assets::shell()),
    }
}
