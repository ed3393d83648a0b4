//! The WebSocket upgrade (RFC 6455), for every front end that speaks over WebSocket: MQTT
//! (binary frames as a byte stream), and the JSON protocols (one JSON object per text frame).
//!
//! A route handler decides what it accepts (path, credential, subprotocol) and then calls
//! [`accept`], which checks that the request really is a version-13 upgrade, answers
//! `101 Switching Protocols`, and runs the connection on the upgraded stream in a task of its
//! own. Every refusal is an HTTP status with a one-line body that says what was wrong, and a log
//! line with the peer and the listener.

use std::future::Future;

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use super::HttpConnection;

/// The read buffer and the write batch of every WebSocket the server accepts, in bytes.
const WS_BUFFER_BYTES: usize = 4096;

/// An accepted WebSocket connection.
pub(crate) type WebSocket = WebSocketStream<Upgraded>;

/// What an accepted connection is allowed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// The subprotocol to answer with (`Sec-WebSocket-Protocol`), if any.
    pub(crate) protocol: Option<&'static str>,
    /// The largest message (and frame) accepted, in bytes.
    pub(crate) max_message: usize,
}

/// A plain-text HTTP response.
pub(crate) fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// Whether a comma-separated header has `token` (case-insensitive) in any of its values.
pub(crate) fn header_has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    offered(headers, name).any(|t| t.eq_ignore_ascii_case(token))
}

/// The comma-separated tokens of a header, trimmed, in order.
pub(crate) fn offered(headers: &HeaderMap, name: HeaderName) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// The subprotocols the client offered, in its order of preference.
pub(crate) fn offered_protocols(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    offered(headers, header::SEC_WEBSOCKET_PROTOCOL)
}

/// Why `req` is not an acceptable WebSocket upgrade, as the response to send: 426 without the
/// upgrade headers, 400 for another version than 13. Routes call it before they look at what
/// the upgrade asks for, so that a plain GET is told to upgrade rather than what it lacks.
pub(crate) fn refusal(req: &Request<Body>) -> Option<Response<Body>> {
    let (peer, listener) = match req.extensions().get::<HttpConnection>() {
        Some(c) => (Some(c.peer), Some(c.listener.clone())),
        None => (None, None),
    };
    let headers = req.headers();
    let is_upgrade = header_has_token(headers, header::CONNECTION, "upgrade")
        && header_has_token(headers, header::UPGRADE, "websocket")
        && headers.contains_key(header::SEC_WEBSOCKET_KEY);
    if !is_upgrade {
        tracing::info!(?peer, ?listener, path = req.uri().path(), "HTTP request without a WebSocket upgrade");
        let mut r = text(StatusCode::UPGRADE_REQUIRED, "this endpoint speaks WebSocket\n");
        r.headers_mut().insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        return Some(r);
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION).map(|v| v.as_bytes()) != Some(b"13") {
        tracing::info!(?peer, ?listener, "WebSocket upgrade with an unsupported version");
        let mut r = text(StatusCode::BAD_REQUEST, "WebSocket version 13 required\n");
        r.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        return Some(r);
    }
    None
}

/// Answers a WebSocket upgrade and runs `on_open` on the connection once it is upgraded, or
/// refuses a request that is not one: 426 without the upgrade headers, 400 for another version
/// than 13. The connection is framed by tungstenite, with small buffers.
pub(crate) fn accept<F, Fut>(req: Request<Body>, limits: Limits, on_open: F) -> Response<Body>
where
    F: FnOnce(WebSocket) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    accept_upgraded(req, limits.protocol, move |upgraded| async move {
        // tungstenite's defaults reserve 128 KiB for reading and 128 KiB for writing per
        // connection (134 KiB of RSS per idle relay WebSocket, measured); a few KiB each keep
        // idle connections small, and larger messages still grow the buffers as they come.
        let config = WebSocketConfig::default()
            .read_buffer_size(WS_BUFFER_BYTES)
            .write_buffer_size(WS_BUFFER_BYTES)
            .max_message_size(Some(limits.max_message))
            .max_frame_size(Some(limits.max_message));
        let ws = WebSocketStream::from_raw_socket(upgraded, Role::Server, Some(config)).await;
        on_open(ws).await;
    })
}

/// The upgraded byte stream of an accepted WebSocket, for a front end that frames it itself
/// (`mesgd_core::websocket`).
pub(crate) type Upgraded = TokioIo<hyper::upgrade::Upgraded>;

/// Like [`accept`], but `on_open` gets the upgraded byte stream to frame itself, answering
/// with `protocol` as the subprotocol if one is given.
pub(crate) fn accept_upgraded<F, Fut>(
    mut req: Request<Body>,
    protocol: Option<&'static str>,
    on_open: F,
) -> Response<Body>
where
    F: FnOnce(Upgraded) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if let Some(refused) = refusal(&req) {
        return refused;
    }
    let peer = req.extensions().get::<HttpConnection>().map(|c| c.peer);
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return text(StatusCode::BAD_REQUEST, "Sec-WebSocket-Key required\n");
    };
    let accept_key = derive_accept_key(key.as_bytes());
    // Only the upgrade is kept, not the request: the task lives as long as the connection, and
    // its future is as large as everything it holds across an await.
    let upgrade = hyper::upgrade::on(&mut req);
    drop(req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => on_open(TokioIo::new(upgraded)).await,
            Err(e) => tracing::info!(?peer, error = %e, "WebSocket upgrade failed"),
        }
    });
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Some(protocol) = protocol {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
    }
    if let Ok(v) = HeaderValue::from_str(&accept_key) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}
