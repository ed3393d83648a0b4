//! One TCP or WebSocket relay connection: a single task with one hand-written poll loop, in the
//! style of the MQTT connection (`crate::mqtt::connection`). Each turn it lets the client do
//! what is due (a registration completing, pub/sub deliveries), takes what the outbox holds
//! (unless the durability gate is closed), writes it, reads and handles frames, and checks its
//! timer. The framing is the [`Wire`]'s: length-prefixed frames on TCP (`super::tcp`), text
//! messages on WebSocket (`super::ws`).
//!
//! Dead peers: a TCP connection that sends nothing for `tcp_idle_s` is closed; a WebSocket that
//! sends nothing for `ws_ping_interval_s` is pinged and closed if nothing (a pong included)
//! arrives within `ws_pong_timeout_s`. The timer is not moved per frame: it fires at the old
//! deadline and re-arms from the last frame, as the MQTT keep-alive does.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::time::Sleep;

use super::client::{Client, End};
use super::stats::RelayStats;

/// Stop reading while this much output waits for the socket.
const OUT_HIGH_WATER: usize = 256 * 1024;
/// How long a closing connection may take to flush its last frames.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);

/// How a transport carries frames.
pub(crate) trait Wire: Send + Unpin {
    /// Reads what has arrived and hands complete frames to `client` while it is not busy.
    /// Returns whether anything arrived.
    fn poll_read(&mut self, cx: &mut Context<'_>, client: &mut Client, now: Instant) -> Result<bool, End>;

    /// Writes the length-prefixed frames of `out` as far as the socket takes them, removing
    /// what was written; returns the bytes written.
    fn poll_write(&mut self, cx: &mut Context<'_>, out: &mut BytesMut) -> io::Result<usize>;

    /// Sends a keep-alive probe; false if the transport has none (TCP).
    fn ping(&mut self) -> bool;

    /// Closes the transport, telling the peer why where it can (a WebSocket close code).
    fn poll_close(&mut self, cx: &mut Context<'_>, end: &End) -> Poll<()>;
}

/// A wire's byte stream and its read buffer, read without a buffer while idle
/// ([`crate::lean_read`]).
pub(crate) struct Input<S> {
    pub(crate) stream: S,
    inbuf: BytesMut,
}

impl<S> Input<S> {
    pub(crate) fn new(stream: S) -> Self {
        Input { stream, inbuf: BytesMut::new() }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> Input<S> {
    /// The read step of every stream wire. `decode` hands the complete frames buffered to the
    /// client until it is busy and says whether it handed any; it runs first on what an
    /// earlier read left (the client was busy with a `register`), then on what the socket has.
    /// Only frames handled are progress: a partial frame in the buffer is not, or a client
    /// that sends half a frame would keep its task spinning.
    pub(crate) fn poll_frames<const CHUNK: usize>(
        &mut self,
        cx: &mut Context<'_>,
        client: &mut Client,
        now: Instant,
        mut decode: impl FnMut(&mut BytesMut, &mut Client, Instant) -> Result<bool, End>,
    ) -> Result<bool, End> {
        let buffered = decode(&mut self.inbuf, client, now)?;
        if client.is_busy() {
            return Ok(buffered);
        }
        match crate::lean_read::poll_read::<_, CHUNK>(&mut self.stream, cx, &mut self.inbuf) {
            Poll::Pending => {
                crate::lean_read::release_if_empty(&mut self.inbuf);
                Ok(buffered)
            }
            Poll::Ready(Ok(0)) => Err(End::Closed),
            Poll::Ready(Ok(_)) => {
                decode(&mut self.inbuf, client, now)?;
                Ok(true)
            }
            Poll::Ready(Err(e)) => Err(End::Io(e)),
        }
    }
}

/// A connected relay client over a stream transport.
pub(crate) struct Connection<W> {
    wire: W,
    client: Client,
    /// Taken from the outbox, not yet written.
    out: BytesMut,
    last_received: Instant,
    /// When a keep-alive probe went out that nothing has answered yet.
    pinged_at: Option<Instant>,
    idle: Duration,
    /// How long a probe may go unanswered (`None`: no probes, `idle` is final).
    pong_timeout: Option<Duration>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<W: Wire> Connection<W> {
    pub(crate) fn new(wire: W, client: Client, idle: Duration, pong_timeout: Option<Duration>) -> Self {
        RelayStats::add(&client.ctx.relay.stats().connections, 1);
        let mut c = Connection {
            wire,
            client,
            out: BytesMut::new(),
            last_received: crate::clock::now(),
            pinged_at: None,
            idle,
            pong_timeout,
            timer: None,
        };
        c.arm_timer();
        c
    }

    /// Serves the connection to its end.
    pub(crate) async fn run(mut self: Box<Self>) {
        let end = std::future::poll_fn(|cx| self.poll_run(cx)).await;
        // Boxed: the closing flush waits on a timer, and held inline its state would be in every
        // idle connection's task (and, through the listener's accept path, in MQTT's too).
        Box::pin(self.finish(end)).await;
    }

    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        loop {
            let now = crate::clock::now();
            let more = match self.client.poll(cx, now) {
                Ok(more) => more,
                Err(end) => return Poll::Ready(end),
            };
            if self.client.poll_gate(cx) {
                let (open, frames) = self.client.outbox.poll_take_counted(cx.waker(), &mut self.out);
                if !open {
                    return Poll::Ready(End::SlowConsumer);
                }
                if frames > 0 {
                    RelayStats::add(&self.client.ctx.relay.stats().frames_sent, frames);
                }
            }
            match self.wire.poll_write(cx, &mut self.out) {
                Ok(0) => {}
                Ok(n) => {
                    RelayStats::add(&self.client.ctx.relay.stats().bytes_sent, n as u64);
                    self.client.outbox.set_unwritten(self.out.len());
                }
                Err(e) => return Poll::Ready(End::Io(e)),
            }
            let mut progress = false;
            if !self.client.is_busy() && self.out.len() < OUT_HIGH_WATER && self.client.poll_journal_room(cx)
            {
                match self.wire.poll_read(cx, &mut self.client, now) {
                    Ok(true) => {
                        progress = true;
                        self.last_received = now;
                        self.pinged_at = None;
                    }
                    Ok(false) => {}
                    Err(end) => return Poll::Ready(end),
                }
            }
            if let Some(end) = self.poll_timer(cx) {
                return Poll::Ready(end);
            }
            if !more && !progress {
                return Poll::Pending;
            }
        }
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Option<End> {
        loop {
            let timer = self.timer.as_mut()?;
            if timer.as_mut().poll(cx).is_pending() {
                return None;
            }
            let now = crate::clock::now();
            if self.client.identity_expires().is_some_and(|at| at <= now) {
                return Some(End::NotAuthorized);
            }
            match (self.pinged_at, self.pong_timeout) {
                (Some(at), Some(wait)) if at + wait <= now => return Some(End::Idle),
                (None, _) if self.last_received + self.idle <= now => {
                    if self.pong_timeout.is_some() && self.wire.ping() {
                        self.pinged_at = Some(now);
                        // The probe goes out with the next write.
                        cx.waker().wake_by_ref();
                    } else {
                        return Some(End::Idle);
                    }
                }
                _ => {}
            }
            self.arm_timer();
        }
    }

    /// Sets the timer to the next deadline: the idle bound (or the probe's), the identity's
    /// expiry.
    fn arm_timer(&mut self) {
        let keep_alive = match (self.pinged_at, self.pong_timeout) {
            (Some(at), Some(wait)) => at + wait,
            _ => self.last_received + self.idle,
        };
        let deadline = self.client.identity_expires().map_or(keep_alive, |at| at.min(keep_alive));
        let deadline = tokio::time::Instant::from_std(deadline);
        match &mut self.timer {
            Some(t) => t.as_mut().reset(deadline),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    async fn finish(mut self: Box<Self>, end: End) {
        let ctx = self.client.ctx.clone();
        let stats = ctx.relay.stats();
        match &end {
            End::Closed => tracing::debug!("relay connection closed by the client"),
            End::Io(e) => tracing::debug!(error = %e, "relay connection lost"),
            End::SlowConsumer => {
                RelayStats::add(&stats.slow_consumer_disconnects, 1);
                tracing::info!("closing relay connection: output limit exceeded (the client does not read)");
            }
            End::Idle => {
                RelayStats::add(&stats.dead_peer_releases, 1);
                tracing::info!("closing relay connection: nothing received within the idle bound");
            }
            End::WsProtocol(why) => {
                tracing::info!(%why, "closing relay connection: WebSocket protocol error")
            }
            other => tracing::info!(why = ?other, "closing relay connection"),
        }
        if let Some(error) = end.fatal_error() {
            self.client.fatal(error);
        }
        // What is queued goes out, but the address is released before the flush waits.
        self.client.outbox.poll_take(std::task::Waker::noop(), &mut self.out);
        self.client.finish(crate::clock::now());
        RelayStats::sub(&stats.connections, 1);
        if !matches!(end, End::Io(_)) {
            let flushed = std::future::poll_fn(|cx| {
                while !self.out.is_empty() {
                    match self.wire.poll_write(cx, &mut self.out) {
                        Ok(0) => return Poll::Pending,
                        Ok(n) => RelayStats::add(&stats.bytes_sent, n as u64),
                        Err(_) => return Poll::Ready(()),
                    }
                }
                self.wire.poll_close(cx, &end)
            });
            let _ = tokio::time::timeout(CLOSE_FLUSH, flushed).await;
        }
    }
}
