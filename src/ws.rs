//! MQTT over WebSocket (RFC 6455, subprotocol `mqtt`, also `mqttv3.1`), on plain or TLS
//! listeners.
//!
//! hyper answers the HTTP request: a request for another path gets 404, a request that is not a
//! WebSocket upgrade gets 426, one without the `mqtt` subprotocol gets 400 — each with a line in
//! the log. An accepted upgrade becomes a [`WsByteStream`], which presents binary frames as a
//! byte stream, so the MQTT connection code is the same as for TCP: a packet split across frames
//! and several packets in one frame both work, because framing is MQTT's business, not the
//! frames'.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use mesgd_core::auth::TlsInfo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::mqtt::{self, Shared};

/// The subprotocols accepted, in order of preference.
const SUBPROTOCOLS: [&str; 2] = ["mqtt", "mqttv3.1"];

/// A WebSocket connection seen as a byte stream of binary frames.
pub(crate) struct WsByteStream<S> {
    ws: WebSocketStream<S>,
    /// The unread rest of the last binary frame.
    pending: Bytes,
}

impl<S> WsByteStream<S> {
    pub(crate) fn new(ws: WebSocketStream<S>) -> Self {
        WsByteStream { ws, pending: Bytes::new() }
    }
}

fn ws_error(e: tokio_tungstenite::tungstenite::Error) -> io::Error {
    io::Error::other(e)
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsByteStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(data))) => self.pending = data,
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "text frame: MQTT over WebSocket uses binary frames",
                    )));
                }
                // Pings are answered by the WebSocket layer itself.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | None => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(ws_error(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsByteStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(ws_error)?;
        Pin::new(&mut self.ws).start_send(Message::Binary(Bytes::copy_from_slice(buf))).map_err(ws_error)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(ws_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_close(cx).map_err(ws_error)
    }
}

/// What one WebSocket listener's connections share.
pub(crate) struct WsEndpoint {
    pub(crate) path: Arc<str>,
    pub(crate) listener: Arc<str>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) header_timeout: Duration,
}

fn refuse(status: StatusCode, why: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(why.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

fn header_has_token(req: &Request<Incoming>, name: header::HeaderName, token: &str) -> bool {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Serves HTTP on one connection until it upgrades to MQTT over WebSocket (or is refused).
/// `keep` is held for as long as the MQTT connection lives (the listener's connection slot).
pub(crate) async fn serve_http<S, K>(
    io: S,
    peer: SocketAddr,
    tls: Option<TlsInfo>,
    endpoint: Arc<WsEndpoint>,
    keep: K,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    K: Send + Sync + 'static,
{
    let keep = Arc::new(keep);
    let header_timeout = endpoint.header_timeout;
    let service = service_fn(move |req| {
        let endpoint = endpoint.clone();
        let tls = tls.clone();
        let keep = keep.clone();
        async move { Ok::<_, Infallible>(upgrade(req, peer, tls, &endpoint, keep)) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Some(header_timeout))
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
    }
}

fn upgrade<K: Send + Sync + 'static>(
    req: Request<Incoming>,
    peer: SocketAddr,
    tls: Option<TlsInfo>,
    endpoint: &WsEndpoint,
    keep: Arc<K>,
) -> Response<Full<Bytes>> {
    let listener = &endpoint.listener;
    if req.uri().path() != &*endpoint.path {
        tracing::info!(%peer, %listener, path = req.uri().path(), "WebSocket request for an unknown path");
        return refuse(StatusCode::NOT_FOUND, "not found\n");
    }
    let is_upgrade = header_has_token(&req, header::CONNECTION, "upgrade")
        && header_has_token(&req, header::UPGRADE, "websocket");
    let key = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned();
    let (true, Some(key)) = (is_upgrade, key) else {
        tracing::info!(%peer, %listener, "HTTP request without a WebSocket upgrade");
        let mut r = refuse(StatusCode::UPGRADE_REQUIRED, "this endpoint speaks MQTT over WebSocket\n");
        r.headers_mut().insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        return r;
    };
    if req.headers().get(header::SEC_WEBSOCKET_VERSION).map(|v| v.as_bytes()) != Some(b"13") {
        tracing::info!(%peer, %listener, "WebSocket upgrade with an unsupported version");
        let mut r = refuse(StatusCode::BAD_REQUEST, "WebSocket version 13 required\n");
        r.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        return r;
    }
    let Some(subprotocol) =
        SUBPROTOCOLS.into_iter().find(|p| header_has_token(&req, header::SEC_WEBSOCKET_PROTOCOL, p))
    else {
        tracing::info!(%peer, %listener, "WebSocket upgrade without the mqtt subprotocol");
        return refuse(StatusCode::BAD_REQUEST, "subprotocol mqtt required\n");
    };
    let accept = derive_accept_key(key.as_bytes());
    let max_frame = endpoint.shared.settings.max_packet_size as usize + 16;
    let listener_name = endpoint.listener.clone();
    let shared = endpoint.shared.clone();
    tokio::spawn(async move {
        let _keep = keep;
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let config = WebSocketConfig::default()
                    .max_message_size(Some(max_frame))
                    .max_frame_size(Some(max_frame));
                let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                    .await;
                mqtt::serve(WsByteStream::new(ws), peer, listener_name, tls, shared).await;
            }
            Err(e) => tracing::info!(%peer, error = %e, "WebSocket upgrade failed"),
        }
    });
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(subprotocol));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}
