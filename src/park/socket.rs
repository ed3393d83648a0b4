//! A plain TCP socket that leaves tokio's reactor while its connection is parked.
//!
//! A socket registered with tokio costs its `ScheduledIo` (128-byte aligned, with its wakers
//! and list links: about 270 bytes that an idle MQTT client holds only to learn that its next
//! PINGREQ has arrived). While a connection waits in a parking lot, its socket is taken out of
//! tokio's reactor ([`ParkableTcp::leave_reactor`]) and into the lot's [`IdleWatch`]: one epoll
//! set for every parked socket of the server, on a thread of its own, with a waker per socket
//! (16 bytes, in a table indexed by the file descriptor). A readable socket (data, a close, an
//! error) wakes its parked connection; the connection's next read or write puts the socket back
//! into tokio's reactor, so the connection's own code never sees the difference.
//!
//! Why no wake-up is lost: the socket joins the set after the connection's last read found
//! nothing, and epoll reports a socket that is already readable when it is added, edge-triggered
//! or not. A stale event for a descriptor number that has since been reused wakes its new owner
//! once for nothing, which costs that connection one poll.
//!
//! A socket the watch cannot take (an `epoll_ctl` error) stays in tokio's reactor: parked as
//! before, without the saving.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use mesgd_core::sync::lock;
use mio::unix::SourceFd;
use mio::{Events, Interest, Token};
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A TCP stream for a connection that may park: in tokio's reactor while it is used, in an
/// [`IdleWatch`] while its connection is parked.
#[derive(Debug)]
pub(crate) struct ParkableTcp {
    state: State,
}

#[derive(Debug)]
enum State {
    Live(tokio::net::TcpStream),
    Watched(Watched),
    /// The socket could not be moved between the two and is closed; every poll reports it.
    Lost,
}

impl ParkableTcp {
    pub(crate) fn new(stream: tokio::net::TcpStream) -> Self {
        ParkableTcp { state: State::Live(stream) }
    }

    /// Takes the socket out of tokio's reactor into `watch`, which wakes `waker` when it turns
    /// readable (or closed). Called by a connection that parks, after its last read found
    /// nothing. Leaves the socket in the reactor if the watch cannot take it.
    pub(crate) fn leave_reactor(&mut self, watch: &Arc<IdleWatch>, waker: &Waker) {
        let stream = match std::mem::replace(&mut self.state, State::Lost) {
            State::Live(stream) => stream,
            other => {
                self.state = other;
                return;
            }
        };
        let std = match stream.into_std() {
            Ok(std) => std,
            Err(e) => {
                // Deregistering failed and took the socket with it: the next poll ends the
                // connection.
                tracing::debug!(error = %e, "could not take an idle socket out of the reactor");
                return;
            }
        };
        self.state = match watch.watch(std, waker) {
            Ok(watched) => State::Watched(watched),
            Err((std, e)) => {
                tracing::debug!(error = %e, "could not watch an idle socket: it stays in the reactor");
                match tokio::net::TcpStream::from_std(std) {
                    Ok(stream) => State::Live(stream),
                    Err(e) => {
                        tracing::debug!(error = %e, "could not put an idle socket back into the reactor");
                        State::Lost
                    }
                }
            }
        };
    }

    /// Appends to `inbuf` what the socket's receive buffer holds now, up to `limit` bytes in
    /// `inbuf`, without waiting. Reads the socket itself: tokio reads only once its reactor
    /// has reported the socket readable, which may not have happened yet for bytes that did
    /// arrive (and never happens for a socket in an idle watch).
    pub(crate) fn read_available(&self, inbuf: &mut bytes::BytesMut, limit: usize) {
        use std::io::Read;
        let socket = match &self.state {
            State::Live(stream) => socket2::SockRef::from(stream),
            State::Watched(Watched { stream: Some(stream), .. }) => socket2::SockRef::from(stream),
            _ => return,
        };
        let mut chunk = [0u8; 4096];
        while inbuf.len() < limit {
            // Non-blocking (as tokio and the watch keep it): WouldBlock once it is empty.
            match (&*socket).read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => inbuf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Whether the socket is out of tokio's reactor, in an idle watch.
    #[cfg(test)]
    pub(crate) fn is_watched(&self) -> bool {
        matches!(self.state, State::Watched(_))
    }

    /// The stream in tokio's reactor, put back there first if it is watched.
    fn live(&mut self) -> io::Result<&mut tokio::net::TcpStream> {
        if matches!(self.state, State::Watched(_)) {
            let State::Watched(watched) = std::mem::replace(&mut self.state, State::Lost) else {
                unreachable!("matched above")
            };
            self.state = State::Live(tokio::net::TcpStream::from_std(watched.into_std())?);
        }
        match &mut self.state {
            State::Live(stream) => Ok(stream),
            _ => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the socket was lost while its connection was parked",
            )),
        }
    }
}

/// Every I/O call goes to the stream in tokio's reactor, after putting it back there.
macro_rules! live {
    ($self:ident, $stream:ident => $call:expr) => {
        match $self.get_mut().live() {
            Ok($stream) => $call,
            Err(e) => Poll::Ready(Err(e)),
        }
    };
}

impl AsyncRead for ParkableTcp {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        live!(self, stream => Pin::new(stream).poll_read(cx, buf))
    }
}

impl AsyncWrite for ParkableTcp {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        live!(self, stream => Pin::new(stream).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        live!(self, stream => Pin::new(stream).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        live!(self, stream => Pin::new(stream).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        live!(self, stream => Pin::new(stream).poll_shutdown(cx))
    }
}

/// A socket in an idle watch; leaves it when taken back or dropped.
#[derive(Debug)]
struct Watched {
    /// `None` only once `into_std` has taken it.
    stream: Option<std::net::TcpStream>,
    watch: Arc<IdleWatch>,
}

impl Watched {
    fn into_std(mut self) -> std::net::TcpStream {
        let stream = self.stream.take().expect("a watched socket has its stream");
        self.watch.unwatch(&stream);
        stream
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // Out of the set before the descriptor closes and its number can be reused.
        if let Some(stream) = self.stream.take() {
            self.watch.unwatch(&stream);
        }
    }
}

/// The token of the watch's own waker, which stops its thread.
const STOP: Token = Token(usize::MAX);

/// One epoll set for the parked sockets of a server, watched by a thread of its own, and the
/// waker each socket wakes. The thread ends when the watch is dropped.
#[derive(Debug)]
pub(crate) struct IdleWatch {
    registry: mio::Registry,
    /// Indexed by file descriptor: the waker of the parked connection on it.
    wakers: Arc<Mutex<Vec<Option<Waker>>>>,
    stop: Arc<AtomicBool>,
    stopper: mio::Waker,
    /// Sockets in the set now.
    watched: Gauge,
}

impl IdleWatch {
    /// Starts the watch's thread.
    pub(crate) fn start(watched: Gauge) -> io::Result<IdleWatch> {
        let mut poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let stopper = mio::Waker::new(poll.registry(), STOP)?;
        let wakers: Arc<Mutex<Vec<Option<Waker>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (table, stopped) = (wakers.clone(), stop.clone());
        std::thread::Builder::new().name("mesgd-idle-sockets".into()).spawn(move || {
            let mut events = Events::with_capacity(1024);
            let mut woken = Vec::with_capacity(1024);
            while !stopped.load(Ordering::Acquire) {
                if let Err(e) = poll.poll(&mut events, None) {
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    // Parked connections still resume at their keep-alive deadlines.
                    tracing::error!(error = %e, "the watch of idle sockets failed: parked MQTT connections now wake only at their deadlines");
                    return;
                }
                {
                    let table = lock(&table);
                    woken.extend(
                        events.iter().filter(|e| e.token() != STOP).filter_map(|e| table.get(e.token().0)?.clone()),
                    );
                }
                // Woken (and dropped) outside the lock: a lot's waker may take other locks.
                for waker in woken.drain(..) {
                    waker.wake();
                }
            }
        })?;
        Ok(IdleWatch { registry, wakers, stop, stopper, watched })
    }

    /// Adds `stream` to the set, to wake `waker`; gives the stream back if it cannot.
    fn watch(
        self: &Arc<Self>,
        stream: std::net::TcpStream,
        waker: &Waker,
    ) -> Result<Watched, (std::net::TcpStream, io::Error)> {
        let fd = stream.as_raw_fd();
        let Ok(index) = usize::try_from(fd) else {
            return Err((stream, io::Error::new(io::ErrorKind::InvalidInput, "a negative file descriptor")));
        };
        // The waker first: an event may come the moment the socket is in the set.
        let replaced = self.set_waker(index, Some(waker.clone()));
        drop(replaced);
        if let Err(e) = self.registry.register(&mut SourceFd(&fd), Token(index), Interest::READABLE) {
            drop(self.set_waker(index, None));
            return Err((stream, e));
        }
        self.watched.inc();
        Ok(Watched { stream: Some(stream), watch: self.clone() })
    }

    fn unwatch(&self, stream: &std::net::TcpStream) {
        let fd: RawFd = stream.as_raw_fd();
        if let Err(e) = self.registry.deregister(&mut SourceFd(&fd)) {
            tracing::debug!(error = %e, "could not take a socket out of the idle watch");
        }
        if let Ok(index) = usize::try_from(fd) {
            drop(self.set_waker(index, None));
        }
        self.watched.dec();
    }

    /// Sets the waker of descriptor `index`, returning the one it replaces, to be dropped by
    /// the caller outside the lock (dropping a lot's last waker may drop the lot).
    fn set_waker(&self, index: usize, waker: Option<Waker>) -> Option<Waker> {
        let mut table = lock(&self.wakers);
        if table.len() <= index {
            // Clearing a descriptor the table never reached: nothing to clear.
            waker.as_ref()?;
            table.resize(index + 1, None);
        }
        std::mem::replace(&mut table[index], waker)
    }
}

impl Drop for IdleWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Err(e) = self.stopper.wake() {
            tracing::debug!(error = %e, "could not stop the idle-socket watch's thread");
        }
    }
}

#[cfg(test)]
#[path = "socket_tests.rs"]
mod tests;
