//! Listeners: binding each `[[listeners]]` table, accepting connections, and handing each one
//! to its front end by the listener's kind — after the TLS handshake where the listener has TLS.
//!
//! # Layout
//!
//! - [`slots`]: the count of open connections (`limits.max_connections`, shutdown).
//!
//! Stream kinds (TCP, optionally TLS) have an accept loop and a task per connection; datagram
//! kinds ([`Transport::Datagram`], the relay over UDP) have one socket task for every source.

pub(crate) mod slots;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use mesgd_core::auth::TlsInfo;
use mesgd_core::broker::Stats;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;

pub(crate) use self::slots::{ConnectionSlot, Connections};
use crate::config::{ListenerConfig, ListenerKind};
use crate::context::ServerContext;
use crate::http::{self, HttpConnection};
use crate::limits::Tripped;
use crate::mqtt;
use crate::relay;
use crate::tls::ReloadableAcceptor;

/// How a listener's kind carries bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// A connection per client: TCP, with TLS when configured.
    Stream,
    /// One socket for every client: UDP.
    Datagram,
}

impl ListenerKind {
    /// How this kind carries bytes.
    pub(crate) fn transport(self) -> Transport {
        match self {
            ListenerKind::Mqtt
            | ListenerKind::MqttWs
            | ListenerKind::Http
            | ListenerKind::RelayTcp
            | ListenerKind::RelayWs => Transport::Stream,
            ListenerKind::RelayUdp => Transport::Datagram,
        }
    }
}

/// One listener's way of serving an accepted socket.
pub(crate) struct Endpoint {
    name: Arc<str>,
    kind: ListenerKind,
    ctx: Arc<ServerContext>,
    tls: Option<Arc<ReloadableAcceptor>>,
    /// The routes of an HTTP-based listener.
    router: Option<axum::Router>,
}

/// A connection's whole life as one boxed future (TLS and HTTP connections).
type BoxedConnection = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl Endpoint {
    pub(crate) fn new(
        name: Arc<str>,
        config: &ListenerConfig,
        ctx: Arc<ServerContext>,
        tls: Option<Arc<ReloadableAcceptor>>,
    ) -> Self {
        let router = matches!(config.kind, ListenerKind::MqttWs | ListenerKind::Http | ListenerKind::RelayWs)
            .then(|| http::router(&ctx, config));
        Endpoint { name, kind: config.kind, ctx, tls, router }
    }

    /// The task that serves one accepted socket (non-blocking, in no reactor yet): the TLS
    /// handshake if the listener has TLS, then the front end of the listener's kind.
    ///
    /// An idle connection costs what this future holds, so it holds little: the plain MQTT and
    /// relay TCP paths box their handshake and connection state separately (see `mqtt::serve`,
    /// `relay::tcp::serve`), and the TLS
    /// and HTTP paths live in their own box, allocated only for their connections. `slot` is
    /// held until the connection ends (for a WebSocket, until the connection on it ends, which
    /// outlives the HTTP exchange).
    fn connection(
        self: &Arc<Self>,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        slot: ConnectionSlot,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        // Every handshake on the connection (TLS, an HTTP upgrade, the protocol's first
        // message) must be done this long after the accept.
        let deadline = crate::clock::now() + self.ctx.connect_timeout;
        if self.tls.is_none() && self.kind == ListenerKind::Mqtt {
            // The connection holds the slot: it may outlive this task (parked).
            // Its socket enters tokio's reactor only when it has to wait.
            let stream = crate::park::ParkableTcp::accepted(stream);
            let serve =
                mqtt::serve(stream, peer, self.name.clone(), None, self.ctx.clone(), deadline, Some(slot));
            return Either::Left(Either::Left(serve));
        }
        let stream = match TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(listener = %self.name, %peer, error = %e, "could not register an accepted socket with the reactor: closing it");
                let closed: BoxedConnection = Box::pin(std::future::ready(()));
                return Either::Right(closed);
            }
        };
        if self.tls.is_none() && self.kind == ListenerKind::RelayTcp {
            // Like plain MQTT: the relay boxes its connection state itself, and the box below
            // (sized for a TLS handshake and an HTTP exchange) would cost 6 KiB per idle client.
            let serve = relay::tcp::serve(stream, peer, self.name.clone(), None, self.ctx.clone());
            return Either::Left(Either::Right(async move {
                serve.await;
                drop(slot);
            }));
        }
        let endpoint = self.clone();
        let boxed: BoxedConnection = Box::pin(async move {
            match &endpoint.tls {
                None => endpoint.serve_stream(stream, peer, None, slot, deadline).await,
                Some(acceptor) => match acceptor.accept(stream, endpoint.ctx.connect_timeout).await {
                    Ok((stream, info)) => {
                        tracing::debug!(listener = %endpoint.name, %peer, client_cn = ?info.common_name, "TLS handshake done");
                        endpoint.serve_stream(stream, peer, Some(info), slot, deadline).await;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                        let now = crate::clock::now();
                        if let Some(more) = endpoint.ctx.limits.trip(Tripped::HandshakeTimeout, now) {
                            tracing::info!(listener = %endpoint.name, %peer, more_since_last_line = more, "TLS handshake not done within connect_timeout_ms: closing");
                        }
                    }
                    Err(e) => {
                        tracing::info!(listener = %endpoint.name, %peer, error = %e, "TLS handshake failed")
                    }
                },
            }
        });
        Either::Right(boxed)
    }

    /// Serves a (decrypted) byte stream with the front end of this listener's kind.
    async fn serve_stream<S>(
        &self,
        stream: S,
        peer: SocketAddr,
        tls: Option<TlsInfo>,
        slot: ConnectionSlot,
        deadline: std::time::Instant,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        match &self.router {
            Some(router) => {
                let connection =
                    HttpConnection { peer, listener: self.name.clone(), tls, slot: Arc::new(slot), deadline };
                http::serve(stream, connection, router.clone(), &self.ctx).await;
            }
            None if self.kind == ListenerKind::RelayTcp => {
                relay::tcp::serve(stream, peer, self.name.clone(), tls, self.ctx.clone()).await;
                drop(slot);
            }
            None => {
                mqtt::serve(stream, peer, self.name.clone(), tls, self.ctx.clone(), deadline, Some(slot))
                    .await;
            }
        }
    }
}

/// A bound listener and the task that serves it.
pub(crate) struct Running {
    /// The address it is bound to (the real port when the config said 0).
    pub(crate) addr: SocketAddr,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

/// Binds `bind` as the endpoint's kind needs (a TCP listener with a `listen` backlog of
/// `backlog`) and starts serving it until `stop` changes.
pub(crate) async fn start(
    bind: SocketAddr,
    backlog: u32,
    endpoint: Arc<Endpoint>,
    connections: Arc<Connections>,
    max_connections: usize,
    stop: &watch::Receiver<bool>,
) -> std::io::Result<Running> {
    match endpoint.kind.transport() {
        Transport::Stream => {
            let socket = tcp_listener(bind, backlog)?;
            let addr = socket.get_ref().local_addr()?;
            let task =
                tokio::spawn(accept_loop(socket, endpoint, connections, max_connections, stop.clone()));
            Ok(Running { addr, task })
        }
        Transport::Datagram => {
            let socket = tokio::net::UdpSocket::bind(bind).await?;
            let addr = socket.local_addr()?;
            let task = tokio::spawn(relay::udp::run(
                socket,
                endpoint.name.clone(),
                endpoint.ctx.clone(),
                stop.clone(),
            ));
            Ok(Running { addr, task })
        }
    }
}

/// A TCP listener on `bind` with room for `backlog` connections the broker has not accepted
/// yet. The standard library's 128 is few for a reconnect storm: when a burst of connections
/// fills it while the broker is busy, the kernel drops the SYNs beyond it, and each of those
/// clients waits a retransmission timeout (a second at first) before it tries again.
///
/// The listener is mio's, in tokio's reactor, so that an accepted socket is not registered
/// with the reactor before its front end knows it needs that (see `crate::park::ParkableTcp`).
fn tcp_listener(bind: SocketAddr, backlog: u32) -> std::io::Result<AsyncFd<mio::net::TcpListener>> {
    let domain = if bind.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    // As the standard library's listeners: a restarted broker binds at once although
    // connections of the previous process are still in TIME_WAIT.
    socket.set_reuse_address(true)?;
    // Every front end answers small messages at once (Nagle's delay would hold a PUBACK back
    // for the peer's delayed ACK). Linux copies the option to every socket the listener
    // accepts, which saves a `setsockopt` per connection; elsewhere `accept` sets it.
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&bind.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    let listener = mio::net::TcpListener::from_std(socket.into());
    // Tokio deprecates the safe constructors because an `AsRawFd` type need not own its
    // descriptor, which could then be closed while registered. The listener is moved in and owns
    // its descriptor for as long as the `AsyncFd` lives, which is what `register_with_interest`
    // asks of its caller (and `unsafe` is kept to the plugin ABI).
    #[allow(deprecated)]
    AsyncFd::with_interest(listener, tokio::io::Interest::READABLE)
}

/// The next connection on `listener`: non-blocking, with `TCP_NODELAY`, in no reactor.
async fn accept(
    listener: &AsyncFd<mio::net::TcpListener>,
) -> std::io::Result<(std::net::TcpStream, SocketAddr)> {
    loop {
        let mut ready = listener.readable().await?;
        // WouldBlock clears the readiness, and the loop waits for the next connection.
        if let Ok(accepted) = ready.try_io(|listener| listener.get_ref().accept()) {
            let (stream, peer) = accepted?;
            let stream = std::net::TcpStream::from(stream);
            #[cfg(not(target_os = "linux"))]
            let _ = stream.set_nodelay(true);
            return Ok((stream, peer));
        }
    }
}

/// Accepts connections on `socket` until `stop` changes, within `max_connections` open
/// connections across every listener.
async fn accept_loop(
    socket: AsyncFd<mio::net::TcpListener>,
    endpoint: Arc<Endpoint>,
    connections: Arc<Connections>,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
) {
    let name = endpoint.name.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            r = accept(&socket) => r,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and similar: back off instead of spinning.
                tracing::warn!(listener = %name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = admit(&endpoint.ctx, &connections, max_connections, &name, peer) else { continue };
        Stats::add(&endpoint.ctx.broker.stats().connections_total, 1);
        tokio::spawn(endpoint.connection(stream, peer, slot));
    }
}

/// A slot for a connection from `peer`, unless `limits.max_connections` or, for an address not
/// in `limits.exempt`, `limits.max_connections_per_ip` are open. A refusal is counted and logged
/// once per interval.
fn admit(
    ctx: &ServerContext,
    connections: &Arc<Connections>,
    max_connections: usize,
    listener: &str,
    peer: SocketAddr,
) -> Option<ConnectionSlot> {
    let limits = &ctx.limits;
    let now = crate::clock::now();
    let Some(slot) = connections.try_open(max_connections) else {
        if let Some(more) = limits.trip(Tripped::MaxConnections, now) {
            tracing::warn!(listener, %peer, max_connections, more_since_last_line = more, "connection refused: max_connections reached");
        }
        return None;
    };
    if limits.exempt.contains(peer.ip()) {
        return Some(slot);
    }
    match limits.per_ip.try_open(peer.ip()) {
        Some(ip) => Some(slot.with_ip(ip)),
        None => {
            if let Some(more) = limits.trip(Tripped::ConnectionsPerIp, now) {
                tracing::warn!(
                    listener,
                    %peer,
                    max_connections_per_ip = limits.per_ip.max(),
                    more_since_last_line = more,
                    "connection refused: max_connections_per_ip reached for the address"
                );
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::{accept, tcp_listener};

    /// The kernel completes the handshake of up to `backlog` connections that nobody has
    /// accepted yet (the standard library's 128 would leave the rest waiting on retransmitted
    /// SYNs, which this test would see as connects that do not finish).
    #[tokio::test]
    async fn a_listener_holds_its_backlog_of_connections_not_yet_accepted() {
        let listener = tcp_listener("127.0.0.1:0".parse().unwrap(), 300).expect("listener");
        let addr = listener.get_ref().local_addr().unwrap();
        let connects = (0..250).map(|_| tokio::net::TcpStream::connect(addr));
        let all = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            futures_util::future::join_all(connects),
        );
        let streams = all.await.expect("every connect completes without an accept");
        assert!(streams.iter().all(Result::is_ok));
        drop(listener);
    }

    /// An accepted socket answers at once (no Nagle delay) and never blocks the thread that
    /// reads it, although nothing set either option on it after the accept.
    #[tokio::test]
    async fn an_accepted_socket_has_no_nagle_delay_and_does_not_block() {
        let listener = tcp_listener("127.0.0.1:0".parse().unwrap(), 16).expect("listener");
        let addr = listener.get_ref().local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut stream, peer) = accept(&listener).await.expect("accept");
        assert_eq!(peer, client.local_addr().unwrap());
        assert!(stream.nodelay().expect("TCP_NODELAY"), "TCP_NODELAY on the accepted socket");
        let mut byte = [0u8; 1];
        let nothing = stream.read(&mut byte).expect_err("nothing was sent");
        assert_eq!(nothing.kind(), std::io::ErrorKind::WouldBlock);
    }
}
