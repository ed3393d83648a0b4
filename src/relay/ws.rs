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
use std::task::{Context, Poll};
use std::time::Instant;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response, header};
use bytes::{Buf, Bytes, BytesMut};
use mesgd_core::auth::Secret;
use mesgd_core::model::Kick;
use mesgd_core::relay::frame::MAX_WS_FRAME;
use mesgd_core::websocket::{self, Decoder, Event, Opcode, WsError};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use super::client::{Client, End, Origin, Transport};
use super::outbox::next_frame;
use super::stats::RelayStats;
use super::stream::{Connection, Input, Wire};
use crate::context::ServerContext;
use crate::http::{HttpConnection, ws};

/// Read step, and the batch of frames encoded before they are written.
const CHUNK: usize = 4 * 1024;

/// Text messages over a WebSocket, framed by mesgd's own codec so that an idle connection holds
/// no buffer: it reads onto the stack while nothing is buffered, as [`super::tcp::TcpWire`] does.
pub(crate) struct WsWire<S> {
    input: Input<S>,
    received: Received,
    /// Encoded frames not yet written (empty and unallocated while idle).
    wbuf: BytesMut,
    /// A keep-alive ping to send with the next write.
    ping: bool,
    /// A close frame has been queued.
    close_sent: bool,
}

/// What the decoder keeps between reads, and what the client's control frames asked for.
struct Received {
    decoder: Decoder,
    /// The payload of the latest ping not yet answered (only the latest is answered: RFC 6455
    /// section 5.5.3 allows it, and it keeps a ping flood from growing anything).
    pong: Option<Bytes>,
    /// The client's close status, echoed in the server's close frame.
    peer_closed: Option<u16>,
}

impl<S> WsWire<S> {
    pub(crate) fn new(stream: S, max_message: usize) -> Self {
        WsWire {
            input: Input::new(stream),
            received: Received { decoder: Decoder::new(max_message), pong: None, peer_closed: None },
            wbuf: BytesMut::new(),
            ping: false,
            close_sent: false,
        }
    }
}

impl Received {
    /// Hands every complete buffered message to `client` until it is busy; returns whether any
    /// event arrived (a ping or a pong proves the peer alive too).
    fn handle_buffered(
        &mut self,
        inbuf: &mut BytesMut,
        client: &mut Client,
        now: Instant,
    ) -> Result<bool, End> {
        let mut handled = false;
        while !client.is_busy() {
            let event = match self.decoder.decode(inbuf) {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(e @ WsError::MessageTooLarge { .. }) => {
                    RelayStats::add(&client.ctx.relay.stats().oversize_ws, 1);
                    tracing::debug!(error = %e, "WebSocket message over the limit");
                    return Err(End::WsTooLarge);
                }
                Err(e) => return Err(End::WsProtocol(e)),
            };
            handled = true;
            match event {
                // A binary message is read like a text one (the body must be a JSON object).
                Event::Text(body) | Event::Binary(body) => client.handle_frame(&body, now)?,
                Event::Ping(payload) => self.pong = Some(payload),
                Event::Pong(_) => {}
                Event::Close(frame) => {
                    self.peer_closed = Some(frame.map_or(1000, |f| f.code));
                    return Err(End::Closed);
                }
            }
        }
        Ok(handled)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> WsWire<S> {
    /// Encodes pending control frames and then outbox frames into `wbuf`, up to [`CHUNK`]
    /// bytes; returns the outbox body bytes taken.
    fn encode_batch(&mut self, out: &mut BytesMut) -> usize {
        if let Some(payload) = self.received.pong.take() {
            websocket::encode_frame(Opcode::Pong, &payload, &mut self.wbuf);
        }
        if std::mem::take(&mut self.ping) {
            websocket::encode_frame(Opcode::Ping, b"", &mut self.wbuf);
        }
        let mut taken = 0;
        while self.wbuf.len() < CHUNK {
            let Some(body) = next_frame(out) else { break };
            taken += body.len();
            // Every frame the relay writes is UTF-8 JSON; a body that were not would still
            // reach the client, as a binary message.
            let opcode = if std::str::from_utf8(&body).is_ok() { Opcode::Text } else { Opcode::Binary };
            websocket::encode_frame(opcode, &body, &mut self.wbuf);
        }
        taken
    }

    /// Writes `wbuf` until it is empty or the socket is full.
    fn poll_flush_wbuf(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.wbuf.is_empty() {
            match Pin::new(&mut self.input.stream).poll_write(cx, &self.wbuf) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.wbuf.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        if self.wbuf.capacity() > 0 {
            self.wbuf = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Wire for WsWire<S> {
    fn poll_read(&mut self, cx: &mut Context<'_>, client: &mut Client, now: Instant) -> Result<bool, End> {
        let received = &mut self.received;
        self.input.poll_frames::<CHUNK>(cx, client, now, |inbuf, client, now| {
            received.handle_buffered(inbuf, client, now)
        })
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, out: &mut BytesMut) -> io::Result<usize> {
        let mut taken = 0;
        loop {
            if self.wbuf.is_empty() {
                taken += self.encode_batch(out);
                if self.wbuf.is_empty() {
                    break;
                }
            }
            match self.poll_flush_wbuf(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(taken),
            }
        }
        // TLS streams buffer internally; a plain TCP flush is a no-op.
        if let Poll::Ready(Err(e)) = Pin::new(&mut self.input.stream).poll_flush(cx) {
            return Err(e);
        }
        if out.is_empty() && out.capacity() > 0 {
            *out = BytesMut::new();
        }
        Ok(taken)
    }

    fn ping(&mut self) -> bool {
        self.ping = true;
        true
    }

    fn poll_close(&mut self, cx: &mut Context<'_>, end: &End) -> Poll<()> {
        if !self.close_sent {
            self.close_sent = true;
            match (self.received.peer_closed, close_reason(end)) {
                (Some(code), _) => websocket::encode_close(code, "", &mut self.wbuf),
                (None, Some((code, reason))) => websocket::encode_close(code, reason, &mut self.wbuf),
                (None, None) => {}
            }
        }
        match self.poll_flush_wbuf(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(()),
            Poll::Ready(Ok(())) => {}
        }
        Pin::new(&mut self.input.stream).poll_shutdown(cx).map(|_| ())
    }
}

/// The close status and reason the peer is told when the relay closes (a close the peer
/// started is echoed with its own status instead).
fn close_reason(end: &End) -> Option<(u16, &'static str)> {
    Some(match end {
        End::Closed | End::Io(_) => return None,
        End::WsTooLarge | End::FrameTooLarge => (1009, "frame too large"),
        End::WsProtocol(e) if e.close_code() == 1007 => (1007, "invalid json"),
        End::WsProtocol(e) => (e.close_code(), "protocol error"),
        End::Idle => (1001, "no answer to ping"),
        End::Abuse => (1008, "rate limit exceeded"),
        End::SlowConsumer => (1008, "output limit exceeded"),
        End::NotAuthorized | End::Kicked(Kick::Revoked(_)) => (1008, "not authorized"),
        End::Kicked(Kick::ShuttingDown) => (1001, "server shutting down"),
        End::Kicked(Kick::ClusterLost) => (1013, "try again later"),
        End::Kicked(_) => (1008, "closed by the server"),
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
    ws::accept_upgraded(req, None, move |socket| async move {
        let HttpConnection { peer, listener, tls, slot, .. } = connection;
        let transport = if tls.is_some() { "wss" } else { "ws" };
        let span = tracing::info_span!("relay", %peer, listener = %listener, transport);
        let settings = ctx.relay.settings();
        let (idle, pong) = (settings.ws_ping_interval, settings.ws_pong_timeout);
        let origin = Origin { listener, peer, tls, bearer, transport: Transport::Ws };
        let client = Client::new(ctx.clone(), origin, MAX_WS_FRAME, crate::clock::now());
        let wire = WsWire::new(socket, MAX_WS_FRAME);
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
