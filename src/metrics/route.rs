//! `GET /metrics` on `http` listeners: the Prometheus text page, behind a bearer token when
//! `[http] metrics_token` (or `metrics_token_file`) is set. The token is compared in constant
//! time and never logged.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq as _;

use crate::context::ServerContext;

/// The path.
pub(crate) const PATH: &str = "/metrics";

/// Serves the page.
pub(crate) async fn serve(State(ctx): State<Arc<ServerContext>>, headers: HeaderMap) -> Response {
    if let Some(expected) = ctx.metrics.token() {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !bool::from(presented.as_bytes().ct_eq(expected.as_bytes())) {
            let mut refused = (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
            refused.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return refused;
        }
    }
    let body = ctx.metrics.encode();
    ([(header::CONTENT_TYPE, super::CONTENT_TYPE)], body).into_response()
}
