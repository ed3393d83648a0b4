//! MQTT over WebSocket (RFC 6455, subprotocol `mqtt`, also `mqttv3.1`), on plain or TLS
//! listeners (`kind = "mqtt-ws"` at its `path`, or `kind = "http"` at `/mqtt`).
//!
//! The HTTP stack (`crate::http`) answers the request: another path gets 404, a request that is
//! not a WebSocket upgrade gets 426, one without the `mqtt` subprotocol gets 400 — each with a
//! line in the log. An accepted upgrade becomes a [`WsByteStream`], which presents binary frames
//! as a byte stream, so the MQTT connection code is the same as for TCP: a packet split across
//! frames and several packets in one frame both work, because framing is MQTT's business, not
//! the frames'.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response, StatusCode};
use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::context::ServerContext;
use crate::http::{HttpConnection, ws};

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

/// The MQTT-over-WebSocket route: requires the `mqtt` (or `mqttv3.1`) subprotocol, then serves
/// MQTT on the binary frames.
pub(crate) async fn route(
    State(ctx): State<Arc<ServerContext>>,
    Extension(connection): Extension<HttpConnection>,
    req: Request<Body>,
) -> Response<Body> {
    if let Some(refused) = ws::refusal(&req) {
        return refused;
    }
    let offered: Vec<&str> = ws::offered_protocols(req.headers()).collect();
    let Some(protocol) = SUBPROTOCOLS.into_iter().find(|p| offered.iter().any(|o| o.eq_ignore_ascii_case(p)))
    else {
        tracing::info!(
            peer = %connection.peer,
            listener = %connection.listener,
            "WebSocket upgrade without the mqtt subprotocol"
        );
        return ws::text(StatusCode::BAD_REQUEST, "subprotocol mqtt required\n");
    };
    // A frame carries at most one MQTT packet's worth, plus framing slack.
    let limits = ws::Limits { protocol: Some(protocol), max_message: ctx.mqtt.max_packet_size as usize + 16 };
    ws::accept(req, limits, move |socket| async move {
        let HttpConnection { peer, listener, tls, slot, deadline } = connection;
        super::serve(WsByteStream::new(socket), peer, listener, tls, ctx, deadline, None).await;
        drop(slot);
    })
}
