//! The relay over WebSocket (or secure WebSocket): one JSON object per text message, on any
//! URL path of a `relay-ws` listener.
//!
//! The upgrade may carry a credential for the provider chain — `Authorization: Bearer <token>`
//! or a `token` query parameter (`/any/path?token=…`) — used as the password of every
//! `register` on the connection that carries none of its own. A message over 64 KiB closes the
//! connection with status 1009 (message too big) and the reason `frame too large`; a binary
//! message is read like a text one (a body that is not a UTF-8 JSON object is `invalid json`);
//! a text message that is not UTF-8 breaks RFC 6455 and closes the connection with 1007.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response, header};
use bytes::{Bytes, BytesMut};
use futures_util::{Sink, Stream};
use mesgd_core::auth::Secret;
use mesgd_core::model::Kick;
use mesgd_core::relay::frame::MAX_WS_FRAME;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::Error as WsError;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tracing::Instrument;

use super::client::{Client, End, Origin, Transport};
use super::outbox::next_frame;
use super::stats::RelayStats;
use super::stream::{Connection, Wire};
use crate::context::ServerContext;
use crate::http::{HttpConnection, ws};

/// Text messages over a WebSocket.
pub(crate) struct WsWire<S> {
    ws: WebSocketStream<S>,
    /// A ping to send with the next write.
    ping: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Wire for WsWire<S> {
    fn poll_read(&mut self, cx: &mut Context<'_>, client: &mut Client, now: Instant) -> Result<bool, End> {
        if client.is_busy() {
            return Ok(false);
        }
        let message = match Pin::new(&mut self.ws).poll_next(cx) {
            Poll::Pending => return Ok(false),
            Poll::Ready(None) | Poll::Ready(Some(Ok(Message::Close(_)))) => return Err(End::Closed),
            Poll::Ready(Some(Ok(message))) => message,
            Poll::Ready(Some(Err(WsError::Capacity(_)))) => {
                RelayStats::add(&client.ctx.relay.stats().oversize_ws, 1);
                return Err(End::WsTooLarge);
            }
            Poll::Ready(Some(Err(WsError::Utf8(_)))) => {
                return Err(End::WsProtocol("a text message that is not UTF-8".into()));
            }
            Poll::Ready(Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed))) => {
                return Err(End::Closed);
            }
            Poll::Ready(Some(Err(WsError::Io(e)))) => return Err(End::Io(e)),
            Poll::Ready(Some(Err(e))) => return Err(End::WsProtocol(e.to_string())),
        };
        match message {
            Message::Text(text) => client.handle_frame(&Bytes::from(text), now)?,
            Message::Binary(data) => client.handle_frame(&data, now)?,
            // Pings are answered by the WebSocket layer; any message proves the peer alive.
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) | Message::Close(_) => {}
        }
        Ok(true)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, out: &mut BytesMut) -> io::Result<usize> {
        let mut written = 0;
        let mut ws = Pin::new(&mut self.ws);
        loop {
            if !self.ping && out.is_empty() {
                break;
            }
            match ws.as_mut().poll_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Err(io::Error::other(e)),
                Poll::Pending => return Ok(written),
            }
            let message = if self.ping {
                self.ping = false;
                Message::Ping(Bytes::new())
            } else {
                let Some(body) = next_frame(out) else { break };
                written += body.len();
                // Every frame the relay writes is UTF-8 JSON; a body that were not would still
                // reach the client, as a binary message.
                match Utf8Bytes::try_from(body.clone()) {
                    Ok(text) => Message::Text(text),
                    Err(_) => Message::Binary(body),
                }
            };
            ws.as_mut().start_send(message).map_err(io::Error::other)?;
        }
        match ws.as_mut().poll_flush(cx) {
            Poll::Ready(Err(e)) => return Err(io::Error::other(e)),
            Poll::Ready(Ok(())) | Poll::Pending => {}
        }
        if out.is_empty() && out.capacity() > 0 {
            *out = BytesMut::new();
        }
        Ok(written)
    }

    fn ping(&mut self) -> bool {
        self.ping = true;
        true
    }

    fn poll_close(&mut self, cx: &mut Context<'_>, end: &End) -> Poll<()> {
        let mut ws = Pin::new(&mut self.ws);
        if let Some((code, reason)) = close_reason(end) {
            if ready!(ws.as_mut().poll_ready(cx)).is_err() {
                return Poll::Ready(());
            }
            let frame = CloseFrame { code, reason: Utf8Bytes::from_static(reason) };
            if ws.as_mut().start_send(Message::Close(Some(frame))).is_err() {
                return Poll::Ready(());
            }
        }
        ws.poll_close(cx).map(|_| ())
    }
}

/// The close status and reason the peer is told when the relay closes.
fn close_reason(end: &End) -> Option<(CloseCode, &'static str)> {
    Some(match end {
        End::Closed | End::Io(_) => return None,
        End::WsTooLarge | End::FrameTooLarge => (CloseCode::Size, "frame too large"),
        End::WsProtocol(_) => (CloseCode::Invalid, "invalid json"),
        End::Idle => (CloseCode::Away, "no answer to ping"),
        End::Abuse => (CloseCode::Policy, "rate limit exceeded"),
        End::SlowConsumer => (CloseCode::Policy, "output limit exceeded"),
        End::NotAuthorized | End::Kicked(Kick::Revoked(_)) => (CloseCode::Policy, "not authorized"),
        End::Kicked(Kick::ShuttingDown) => (CloseCode::Away, "server shutting down"),
        End::Kicked(_) => (CloseCode::Policy, "closed by the server"),
    })
}

/// The bearer token of an upgrade request: `Authorization: Bearer …`, else `?token=…`.
fn bearer(req: &Request<Body>) -> Option<Secret> {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    if let Some(token) = header.filter(|t| !t.is_empty()) {
        return Some(Secret::new(token.as_bytes().to_vec()));
    }
    let query = req.uri().query()?;
    query.split('&').find_map(|pair| {
        let value = pair.strip_prefix("token=")?;
        let decoded = percent_decode(value)?;
        (!decoded.is_empty()).then(|| Secret::new(decoded))
    })
}

/// Decodes `%XX` escapes and `+` (a space, in a query string); `None` for a broken escape.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// The relay-over-WebSocket route: any path, no subprotocol required.
pub(crate) async fn route(
    State(ctx): State<Arc<ServerContext>>,
    Extension(connection): Extension<HttpConnection>,
    req: Request<Body>,
) -> Response<Body> {
    let bearer = bearer(&req);
    let limits = ws::Limits { protocol: None, max_message: MAX_WS_FRAME };
    ws::accept(req, limits, move |socket| async move {
        let HttpConnection { peer, listener, tls, slot } = connection;
        let transport = if tls.is_some() { "wss" } else { "ws" };
        let span = tracing::info_span!("relay", %peer, listener = %listener, transport);
        let settings = ctx.relay.settings();
        let (idle, pong) = (settings.ws_ping_interval, settings.ws_pong_timeout);
        let origin = Origin { listener, peer, tls, bearer, transport: Transport::Ws };
        let client = Client::new(ctx.clone(), origin, MAX_WS_FRAME, crate::clock::now());
        let wire = WsWire { ws: socket, ping: false };
        Box::new(Connection::new(wire, client, idle, Some(pong))).run().instrument(span).await;
        drop(slot);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, authorization: Option<&str>) -> Request<Body> {
        let mut b = Request::builder().uri(uri);
        if let Some(a) = authorization {
            b = b.header(header::AUTHORIZATION, a);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn bearer_from_header_or_query() {
        let token = |r: &Request<Body>| bearer(r).map(|s| s.expose().to_vec());
        assert_eq!(token(&request("/", Some("Bearer abc.def"))), Some(b"abc.def".to_vec()));
        assert_eq!(token(&request("/x?a=1&token=t%2Bk+n", None)), Some(b"t+k n".to_vec()));
        assert_eq!(token(&request("/x?token=", None)), None);
        assert_eq!(token(&request("/x?token=%zz", None)), None);
        assert_eq!(token(&request("/x", Some("Basic Zm9v"))), None);
        assert_eq!(
            token(&request("/x?token=q", Some("Bearer h"))),
            Some(b"h".to_vec()),
            "the header wins over the query"
        );
    }
}
