//! The HTTP stack: hyper serves each accepted connection (plain or TLS) and an axum router
//! answers its requests. Every HTTP-based front end is a set of routes here, so they share one
//! listener (`kind = "http"`), one header timeout and one WebSocket upgrade.
//!
//! # Layout
//!
//! - [`ws`]: the generic WebSocket upgrade every WebSocket front end calls.
//! - [`body_deadline`]: the deadline on reading a request body (a slowloris after the headers).
//! - [`body_limit`]: reading a request body up to a size (413 over it, on every route).
//! - [`api`]: the REST API under `/api/v1`, with administrator authentication.
//! - [`console`]: the web console at `/console`, a client of the REST API.
//!
//! The routes themselves live with their front ends (`crate::mqtt::ws` for MQTT over
//! WebSocket); [`router`] assembles them per listener kind.

pub(crate) mod api;
pub(crate) mod body_deadline;
pub(crate) mod body_limit;
pub(crate) mod console;
pub(crate) mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::any;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use mesgd_core::auth::TlsInfo;
use tokio::io::{AsyncRead, AsyncWrite};

use self::body_deadline::DeadlineBody;
use crate::config::{ListenerConfig, ListenerKind};
use crate::context::ServerContext;
use crate::limits::Tripped;
use crate::listener::ConnectionSlot;

/// The HTTP path of MQTT over WebSocket on an `http` listener.
pub(crate) const MQTT_PATH: &str = "/mqtt";

/// What a route knows of the connection its request came on (a request extension).
#[derive(Clone, Debug)]
pub(crate) struct HttpConnection {
    pub(crate) peer: SocketAddr,
    pub(crate) listener: Arc<str>,
    pub(crate) tls: Option<TlsInfo>,
    /// The listener's connection slot: a WebSocket that outlives the HTTP exchange keeps it.
    pub(crate) slot: Arc<ConnectionSlot>,
    /// When every handshake on the connection (TLS, the upgrade, the protocol's first message)
    /// must be done: `limits.connect_timeout_ms` after the accept.
    pub(crate) deadline: std::time::Instant,
}

/// The routes of one listener: `mqtt-ws` answers MQTT over WebSocket on its `path`; `http`
/// carries MQTT over WebSocket at [`MQTT_PATH`] (and, as they are built, the content-routing
/// WebSockets, the REST API, the console, `/auth` and `/metrics`).
pub(crate) fn router(ctx: &Arc<ServerContext>, listener: &ListenerConfig) -> Router {
    let routes = match listener.kind {
        ListenerKind::MqttWs => Router::new().route(listener.ws_path(), any(crate::mqtt::ws::route)),
        ListenerKind::Http => Router::new()
            .route(MQTT_PATH, any(crate::mqtt::ws::route))
            .route(crate::metrics::route::PATH, axum::routing::get(crate::metrics::route::serve))
            .merge(api::router(ctx))
            .merge(console::routes())
            .merge(crate::accounts::routes())
            .merge(crate::content::routes()),
        // The relay answers on every path: there is nothing else on its listener.
        ListenerKind::RelayWs => {
            return Router::new().fallback(crate::relay::ws::route).with_state(ctx.clone());
        }
        ListenerKind::Mqtt | ListenerKind::RelayTcp | ListenerKind::RelayUdp => Router::new(),
    };
    routes.fallback(not_found).with_state(ctx.clone())
}

async fn not_found(req: axum::extract::Request) -> axum::response::Response {
    let listener = req.extensions().get::<HttpConnection>().map(|c| c.listener.clone());
    tracing::info!(?listener, path = req.uri().path(), "HTTP request for an unknown path");
    ws::text(StatusCode::NOT_FOUND, "not found\n")
}

/// Counts a request answered 413 (a body over `http.max_body_bytes`, refused by whichever route
/// read it) and logs it once per interval.
fn body_too_large(ctx: &ServerContext, peer: SocketAddr) {
    if let Some(more) = ctx.limits.trip(Tripped::BodySize, crate::clock::now()) {
        tracing::info!(%peer, more_since_last_line = more, "request body over http.max_body_bytes: answered 413");
    }
}

/// Serves HTTP/1.1 on one connection until the client closes it (or upgrades it and the
/// WebSocket connection ends, for the slot it holds).
pub(crate) async fn serve<S>(io: S, connection: HttpConnection, router: Router, ctx: &Arc<ServerContext>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = connection.peer;
    let body_timeout = ctx.connect_timeout;
    let shared = ctx.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(connection.clone());
        let expired = Arc::new(AtomicBool::new(false));
        let deadline = tokio::time::Instant::now() + body_timeout;
        let req = req.map(|body| DeadlineBody::new(body, deadline, expired.clone()));
        let (router, ctx) = (router.clone(), shared.clone());
        async move {
            let response = tower::ServiceExt::oneshot(router, req).await;
            if !expired.load(Ordering::Relaxed) {
                if let Ok(refused) = &response
                    && refused.status() == StatusCode::PAYLOAD_TOO_LARGE
                {
                    body_too_large(&ctx, peer);
                }
                return response;
            }
            if let Some(more) = ctx.limits.trip(Tripped::BodyTimeout, crate::clock::now()) {
                tracing::info!(
                    %peer,
                    more_since_last_line = more,
                    "request body not received within connect_timeout_ms: answering 408 and closing"
                );
            }
            let mut timed_out = ws::text(StatusCode::REQUEST_TIMEOUT, "request body not received in time\n");
            timed_out.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            Ok(timed_out)
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Some(ctx.connect_timeout))
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
    }
}
