//! The relay over UDP: one JSON object per datagram, one socket task for every source.
//!
//! Each source address gets a relay [`Client`] of its own, made by its first datagram and
//! forgotten after `udp_idle_s` without a datagram from it (its address, if it registered one,
//! is released then). The socket task is the clients' executor: every client has a waker of its
//! own ([`SourceWaker`]) that the outbox, the session mailbox, the journal and a pending
//! registration wake; waking it marks the source ready and wakes the socket task, which then
//! polls that client and sends what its outbox holds, one datagram per frame.
//!
//! Bounds and signals:
//! - a datagram over 16 KiB is dropped and counted; a registered source is also sent
//!   `error{msg: "frame too large"}`;
//! - until a source has registered, it is sent at most three times the bytes it sent (QUIC's
//!   anti-amplification rule); replies past that are dropped and counted;
//! - at most `udp_max_sources` sources are tracked; datagrams from further new sources are
//!   dropped and counted;
//! - while a source's `register` is being admitted, up to [`MAX_HELD`] later datagrams wait
//!   (UDP promises no order, but a client that sends `register` and then `send` should not
//!   lose the `send`); further ones are dropped and counted as rate-limited.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mesgd_core::relay::frame::MAX_UDP_DATAGRAM;
use mesgd_core::relay::{Amplification, RelayError};
use mesgd_core::sync::lock;
use tokio::io::ReadBuf;
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::Sleep;

use super::client::{Client, End, Origin, Transport};
use super::outbox::next_frame;
use super::stats::RelayStats;
use crate::context::ServerContext;

/// Datagrams held for a source while its `register` is admitted.
const MAX_HELD: usize = 16;
/// Datagrams received per turn before the task serves its ready sources.
const RECV_BATCH: usize = 64;
/// The largest datagram read: IPv4's limit, so that an oversize datagram is seen as such.
const RECV_BUF: usize = 65_536;

/// Sources whose client has something to do, and the socket task to wake for them.
#[derive(Default)]
struct Ready {
    sources: Mutex<HashSet<SocketAddr>>,
    task: Mutex<Option<Waker>>,
}

impl Ready {
    fn mark(&self, source: SocketAddr) {
        lock(&self.sources).insert(source);
        if let Some(task) = lock(&self.task).as_ref() {
            task.wake_by_ref();
        }
    }
}

/// The waker of one source's client.
struct SourceWaker {
    source: SocketAddr,
    ready: Arc<Ready>,
}

impl Wake for SourceWaker {
    fn wake(self: Arc<Self>) {
        self.ready.mark(self.source);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.mark(self.source);
    }
}

/// One source.
struct Source {
    client: Client,
    amplification: Amplification,
    last_seen: Instant,
    /// Frames taken from the outbox, not yet sent.
    out: BytesMut,
    /// Datagrams that arrived while a `register` was being admitted.
    held: VecDeque<Bytes>,
    waker: Waker,
}

/// The socket task's state.
struct Endpoint {
    socket: UdpSocket,
    listener: Arc<str>,
    ctx: Arc<ServerContext>,
    sources: HashMap<SocketAddr, Source>,
    ready: Arc<Ready>,
    /// Sources with output the socket did not take (its buffer was full).
    blocked: HashSet<SocketAddr>,
    recv: Box<[u8]>,
    sweep: std::pin::Pin<Box<Sleep>>,
    sweep_every: Duration,
}

/// Serves the UDP relay on `socket` until `stop` changes.
pub(crate) async fn run(
    socket: UdpSocket,
    listener: Arc<str>,
    ctx: Arc<ServerContext>,
    mut stop: watch::Receiver<bool>,
) {
    let idle = ctx.relay.settings().udp_idle;
    let sweep_every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut endpoint = Endpoint {
        socket,
        listener,
        ctx,
        sources: HashMap::new(),
        ready: Arc::default(),
        blocked: HashSet::new(),
        recv: vec![0; RECV_BUF].into_boxed_slice(),
        sweep: Box::pin(tokio::time::sleep(sweep_every)),
        sweep_every,
    };
    tokio::select! {
        _ = stop.changed() => {}
        _ = std::future::poll_fn(|cx| endpoint.poll(cx)) => {}
    }
    let now = crate::clock::now();
    let all: Vec<SocketAddr> = endpoint.sources.keys().copied().collect();
    for source in all {
        endpoint.end(source, &End::Kicked(mesgd_core::model::Kick::ShuttingDown), now);
    }
}

impl Endpoint {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut task = lock(&self.ready.task);
            if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        loop {
            let now = crate::clock::now();
            let mut progress = self.receive(cx, now);
            if !self.blocked.is_empty() && self.socket.poll_send_ready(cx).is_ready() {
                let blocked: Vec<SocketAddr> = self.blocked.drain().collect();
                lock(&self.ready.sources).extend(blocked);
            }
            let ready: Vec<SocketAddr> = lock(&self.ready.sources).drain().collect();
            progress |= !ready.is_empty();
            for source in ready {
                self.serve(source, now);
            }
            if self.sweep.as_mut().poll(cx).is_ready() {
                self.expire_idle(now);
                let next = tokio::time::Instant::from_std(now + self.sweep_every);
                self.sweep.as_mut().reset(next);
                progress = true;
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Receives up to a batch of datagrams; returns whether any arrived.
    fn receive(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut any = false;
        for _ in 0..RECV_BATCH {
            let mut buf = ReadBuf::new(&mut self.recv);
            let source = match self.socket.poll_recv_from(cx, &mut buf) {
                Poll::Pending => break,
                Poll::Ready(Ok(source)) => source,
                // An ICMP error for an earlier datagram, and the like: not this socket's end.
                Poll::Ready(Err(e)) => {
                    tracing::debug!(error = %e, "relay UDP receive error");
                    continue;
                }
            };
            any = true;
            let datagram = Bytes::copy_from_slice(buf.filled());
            self.on_datagram(source, datagram, now);
        }
        any
    }

    fn on_datagram(&mut self, source: SocketAddr, datagram: Bytes, now: Instant) {
        let stats = self.ctx.relay.stats();
        if !self.sources.contains_key(&source) {
            if self.sources.len() >= self.ctx.relay.settings().udp_max_sources {
                RelayStats::add(&stats.udp_sources_refused, 1);
                return;
            }
            let origin = Origin {
                listener: self.listener.clone(),
                peer: source,
                tls: None,
                bearer: None,
                transport: Transport::Udp,
            };
            let waker = Waker::from(Arc::new(SourceWaker { source, ready: self.ready.clone() }));
            let client = Client::new(self.ctx.clone(), origin, MAX_UDP_DATAGRAM, now);
            let entry = Source {
                client,
                amplification: Amplification::default(),
                last_seen: now,
                out: BytesMut::new(),
                held: VecDeque::new(),
                waker,
            };
            self.sources.insert(source, entry);
            RelayStats::add(&stats.udp_sources, 1);
        }
        let Some(peer) = self.sources.get_mut(&source) else { return };
        peer.last_seen = now;
        if !peer.client.is_registered() {
            peer.amplification.on_receive(datagram.len());
        }
        let result = if datagram.len() > MAX_UDP_DATAGRAM {
            RelayStats::add(&stats.oversize_udp, 1);
            if peer.client.is_registered() {
                peer.client.error(RelayError::FrameTooLarge);
            }
            Ok(())
        } else if peer.client.is_busy() || !peer.held.is_empty() {
            if peer.held.len() < MAX_HELD {
                peer.held.push_back(datagram);
            } else {
                RelayStats::add(&stats.rate_limited, 1);
            }
            Ok(())
        } else {
            peer.client.handle_frame(&datagram, now)
        };
        match result {
            Ok(()) => lock(&self.ready.sources).insert(source),
            Err(end) => {
                self.end(source, &end, now);
                false
            }
        };
    }

    /// Polls one source's client and sends what it has.
    fn serve(&mut self, source: SocketAddr, now: Instant) {
        let Some(peer) = self.sources.get_mut(&source) else { return };
        let waker = peer.waker.clone();
        let mut cx = Context::from_waker(&waker);
        let mut ended = None;
        loop {
            match peer.client.poll(&mut cx, now) {
                Ok(more) => {
                    // Datagrams held during a registration, now that it is done.
                    let mut handled = false;
                    while !peer.client.is_busy()
                        && let Some(datagram) = peer.held.pop_front()
                    {
                        handled = true;
                        if let Err(end) = peer.client.handle_frame(&datagram, now) {
                            ended = Some(end);
                            break;
                        }
                    }
                    if ended.is_some() || !(more || handled) {
                        break;
                    }
                }
                Err(end) => {
                    ended = Some(end);
                    break;
                }
            }
        }
        if ended.is_none()
            && peer.client.poll_gate(&mut cx)
            && !peer.client.outbox.poll_take(&waker, &mut peer.out)
        {
            ended = Some(End::SlowConsumer);
        }
        if let Some(end) = ended {
            self.end(source, &end, now);
            return;
        }
        if !send_out(&self.socket, source, peer, &self.ctx) {
            self.blocked.insert(source);
        }
    }

    /// Forgets sources that sent nothing for `udp_idle_s`.
    fn expire_idle(&mut self, now: Instant) {
        let idle = self.ctx.relay.settings().udp_idle;
        let gone: Vec<SocketAddr> =
            self.sources.iter().filter(|(_, s)| s.last_seen + idle <= now).map(|(a, _)| *a).collect();
        for source in gone {
            RelayStats::add(&self.ctx.relay.stats().dead_peer_releases, 1);
            self.end(source, &End::Idle, now);
        }
    }

    /// Ends a source: a last error if it is owed one, then its client is finished.
    fn end(&mut self, source: SocketAddr, end: &End, now: Instant) {
        let Some(mut peer) = self.sources.remove(&source) else { return };
        let stats = self.ctx.relay.stats();
        match end {
            End::SlowConsumer => RelayStats::add(&stats.slow_consumer_disconnects, 1),
            End::Idle => {}
            other => tracing::debug!(%source, why = ?other, "relay UDP source ended"),
        }
        if let Some(error) = end.fatal_error() {
            peer.client.fatal(error);
            peer.client.outbox.poll_take(Waker::noop(), &mut peer.out);
            let _ = send_out(&self.socket, source, &mut peer, &self.ctx);
        }
        peer.client.finish(now);
        self.blocked.remove(&source);
        RelayStats::sub(&stats.udp_sources, 1);
    }
}

/// Sends the source's pending frames, one datagram each; returns false if the socket's buffer
/// is full (the rest waits).
fn send_out(socket: &UdpSocket, source: SocketAddr, peer: &mut Source, ctx: &ServerContext) -> bool {
    let stats = ctx.relay.stats();
    let registered = peer.client.is_registered();
    while let Some(datagram) = next_frame(&mut peer.out) {
        if !registered && !peer.amplification.try_send(datagram.len()) {
            RelayStats::add(&stats.udp_amplification_drops, 1);
            continue;
        }
        match socket.try_send_to(&datagram, source) {
            Ok(n) => {
                RelayStats::add(&stats.frames_sent, 1);
                RelayStats::add(&stats.bytes_sent, n as u64);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Put it back in front: it goes when the socket has room.
                let mut rest = BytesMut::with_capacity(4 + datagram.len() + peer.out.len());
                mesgd_core::relay::frame::encode(&datagram, &mut rest);
                rest.extend_from_slice(&peer.out);
                peer.out = rest;
                peer.client.outbox.set_unwritten(peer.out.len());
                return false;
            }
            Err(_) => RelayStats::add(&stats.udp_send_errors, 1),
        }
    }
    if peer.out.capacity() > 0 {
        peer.out = BytesMut::new();
    }
    peer.client.outbox.set_unwritten(0);
    true
}
