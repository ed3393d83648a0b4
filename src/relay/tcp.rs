//! The relay over TCP (or TLS): 4-byte big-endian length-prefixed frames in both directions.
//!
//! A length over 65,536 is refused from the header alone: the client gets `error{msg: "frame
//! too large", fatal: true}` and the connection is closed, as the stream cannot be
//! resynchronised. Output is written as the outbox holds it, since it is already framed.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, BytesMut};
use mesgd_core::auth::TlsInfo;
use mesgd_core::relay::frame::{self, MAX_TCP_FRAME};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use super::client::{Client, End, Origin, Transport};
use super::stats::RelayStats;
use super::stream::{Connection, Input, Wire};
use crate::context::ServerContext;

/// Read buffer growth step.
const READ_CHUNK: usize = 8 * 1024;

/// Length-prefixed frames over a byte stream.
pub(crate) struct TcpWire<S> {
    input: Input<S>,
}

impl<S> TcpWire<S> {
    pub(crate) fn new(stream: S) -> Self {
        TcpWire { input: Input::new(stream) }
    }
}

/// Hands every complete buffered frame to `client`, until it is busy; returns whether it handed
/// any.
fn handle_buffered(inbuf: &mut BytesMut, client: &mut Client, now: Instant) -> Result<bool, End> {
    let mut handled = false;
    while !client.is_busy() {
        match frame::decode(inbuf, MAX_TCP_FRAME) {
            Ok(Some(body)) => {
                client.handle_frame(&body, now)?;
                handled = true;
            }
            Ok(None) => break,
            Err(_) => {
                RelayStats::add(&client.ctx.relay.stats().oversize_tcp, 1);
                return Err(End::FrameTooLarge);
            }
        }
    }
    Ok(handled)
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Wire for TcpWire<S> {
    fn poll_read(&mut self, cx: &mut Context<'_>, client: &mut Client, now: Instant) -> Result<bool, End> {
        self.input.poll_frames::<READ_CHUNK>(cx, client, now, handle_buffered)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, out: &mut BytesMut) -> io::Result<usize> {
        let mut written = 0;
        while !out.is_empty() {
            match Pin::new(&mut self.input.stream).poll_write(cx, out) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => {
                    out.advance(n);
                    written += n;
                }
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(written),
            }
        }
        // TLS streams buffer internally; a plain TCP flush is a no-op.
        match Pin::new(&mut self.input.stream).poll_flush(cx) {
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Ready(Ok(())) | Poll::Pending => {}
        }
        if out.capacity() > 0 {
            *out = BytesMut::new();
        }
        Ok(written)
    }

    fn ping(&mut self) -> bool {
        false
    }

    fn poll_close(&mut self, cx: &mut Context<'_>, _end: &End) -> Poll<()> {
        Pin::new(&mut self.input.stream).poll_shutdown(cx).map(|_| ())
    }
}

/// Serves one relay connection over a (decrypted) byte stream until it ends.
pub(crate) fn serve<S>(
    stream: S,
    peer: SocketAddr,
    listener: Arc<str>,
    tls: Option<TlsInfo>,
    ctx: Arc<ServerContext>,
) -> impl std::future::Future<Output = ()> + Send
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let span = tracing::info_span!("relay", %peer, listener = %listener, transport = "tcp");
    let idle = ctx.relay.settings().tcp_idle;
    let origin = Origin { listener, peer, tls, bearer: None, transport: Transport::Tcp };
    let client = Client::new(ctx, origin, MAX_TCP_FRAME, crate::clock::now());
    let connection = Box::new(Connection::new(TcpWire::new(stream), client, idle, None));
    connection.run().instrument(span)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use crate::context::ServerContext;

    /// An idle connection costs its task, and plain relay TCP shares its task type with plain
    /// MQTT (the listener's fast path): a larger relay future would grow every MQTT task too.
    #[tokio::test]
    async fn the_connection_future_is_no_larger_than_mqtts() {
        let ctx = ServerContext::for_tests();
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let (relay_end, _a) = tokio::io::duplex(64);
        let (mqtt_end, _b) = tokio::io::duplex(64);
        let relay = super::serve(relay_end, peer, "relay".into(), None, ctx.clone());
        let deadline = crate::clock::now();
        let mqtt = crate::mqtt::serve(mqtt_end, peer, "mqtt".into(), None, ctx, deadline, None);
        let (relay, mqtt) = (std::mem::size_of_val(&relay), std::mem::size_of_val(&mqtt));
        assert!(relay <= mqtt, "relay TCP future {relay} B, MQTT's {mqtt} B");
    }
}
