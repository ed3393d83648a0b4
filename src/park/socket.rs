//! A plain TCP socket that leaves tokio's reactor while its connection is parked.
//!
//! A socket registered with tokio costs its `ScheduledIo` (128-byte aligned, with its wakers
//! and list links: about 270 bytes that an idle MQTT client holds only to learn that its next
//! PINGREQ has arrived). While a connection waits in a parking lot, its socket is taken out of
//! tokio's reactor ([`ParkableTcp::leave_reactor`]) and into the lot's [`IdleWatch`]: one epoll
//! set for every parked socket of the server, on a thread of its own, with a waker per socket
//! (16 bytes, in a table indexed by the file descriptor). A readable socket (data, a close, an
//! error) wakes its parked connection; the connection's next read that finds bytes, or its next
//! write, puts the socket into tokio's reactor, so the connection's own code never sees the
//! difference.
//!
//! A socket starts in neither ([`ParkableTcp::accepted`]): the CONNECT that has usually arrived
//! by the time the broker accepts is read, and the CONNACK written, with plain system calls.
//! The socket goes to tokio's reactor the first time it has to wait, except once its connection
//! has said that it is about to park ([`ParkableTcp::wait_in`], right after CONNACK): then it
//! waits for bytes in the idle watch straight away. A device that connects and then only keeps
//! alive, which parks right after its CONNACK, so costs one `epoll_ctl` instead of three (into
//! the reactor, out of it, into the watch) and no wait for the reactor to report the CONNECT.
//! A CONNECT that comes after the accept is waited for in the reactor, as before: through the
//! watch it would cost a wake-up of the watch's thread.
//!
//! Why no wake-up is lost: a socket joins the set after a read found nothing (or found the
//! receive queue emptied), and epoll reports a socket that is already readable when it is added,
//! edge-triggered or not; a watched socket's waker is replaced before its read, so bytes that
//! come after the read wake the new waker. A stale event for a descriptor number that has since
//! been reused wakes its new owner once for nothing, which costs that connection one poll.
//!
//! A socket the watch cannot take (an `epoll_ctl` error) stays in, or goes to, tokio's reactor:
//! parked as before, without the saving.

use std::io::{self, Read, Write};
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

/// A TCP stream for a connection that may park: read and written directly until it first has
/// to wait, in tokio's reactor while it is used, in an [`IdleWatch`] while it waits for bytes.
#[derive(Debug)]
pub(crate) struct ParkableTcp {
    state: State,
}

#[derive(Debug)]
enum State {
    /// Just accepted, in no reactor: read and written with plain system calls.
    Fresh(Fresh),
    Live(tokio::net::TcpStream),
    Watched(Watched),
    /// The socket could not be moved between the two and is closed; every poll reports it.
    Lost,
}

/// A socket in no reactor yet, and where it waits for bytes when it has to.
#[derive(Debug)]
struct Fresh {
    /// Non-blocking, as `accept4` made it.
    stream: std::net::TcpStream,
    /// Where the socket waits for bytes: the server's watch of idle sockets once its connection
    /// is about to park, tokio's reactor while this is `None`.
    watch: Option<Arc<IdleWatch>>,
    /// The last read took less than it could: the receive queue is most likely empty, so the
    /// next read joins the watch (which reports bytes already there) without trying first.
    drained: bool,
}

impl ParkableTcp {
    /// A socket in tokio's reactor (where one that was accepted goes once it has been busy).
    #[cfg(test)]
    pub(crate) fn new(stream: tokio::net::TcpStream) -> Self {
        ParkableTcp { state: State::Live(stream) }
    }

    /// A socket just accepted (non-blocking), in no reactor until it has to wait.
    pub(crate) fn accepted(stream: std::net::TcpStream) -> Self {
        ParkableTcp { state: State::Fresh(Fresh { stream, watch: None, drained: false }) }
    }

    /// Makes a socket still in no reactor wait for its next bytes in `watch` rather than in
    /// tokio's reactor: its connection is about to park, and there the socket would have to
    /// leave the reactor again. A socket already in the reactor stays there until it parks.
    pub(crate) fn wait_in(&mut self, watch: &Arc<IdleWatch>) {
        if let State::Fresh(fresh) = &mut self.state {
            fresh.watch = Some(watch.clone());
        }
    }

    /// Takes the socket out of tokio's reactor (or keeps it out) into `watch`, which wakes
    /// `waker` when it turns readable (or closed). Called by a connection that parks, after its
    /// last read found nothing. Leaves the socket in the reactor if the watch cannot take it.
    pub(crate) fn leave_reactor(&mut self, watch: &Arc<IdleWatch>, waker: &Waker) {
        let std = match std::mem::replace(&mut self.state, State::Lost) {
            State::Live(stream) => match stream.into_std() {
                Ok(std) => std,
                Err(e) => {
                    // Deregistering failed and took the socket with it: the next poll ends the
                    // connection.
                    tracing::debug!(error = %e, "could not take an idle socket out of the reactor");
                    return;
                }
            },
            State::Fresh(fresh) => fresh.stream,
            State::Watched(watched) => {
                watched.wake(waker);
                self.state = State::Watched(watched);
                return;
            }
            State::Lost => return,
        };
        self.state = match watch.watch(std, waker) {
            Ok(watched) => State::Watched(watched),
            Err((std, e)) => {
                tracing::debug!(error = %e, "could not watch an idle socket: it stays in the reactor");
                into_reactor(std)
            }
        };
    }

    /// Appends to `inbuf` what the socket's receive buffer holds now, up to `limit` bytes in
    /// `inbuf`, without waiting. Reads the socket itself: tokio reads only once its reactor
    /// has reported the socket readable, which may not have happened yet for bytes that did
    /// arrive (and never happens for a socket in an idle watch).
    pub(crate) fn read_available(&self, inbuf: &mut bytes::BytesMut, limit: usize) {
        let socket = match &self.state {
            State::Live(stream) => socket2::SockRef::from(stream),
            State::Fresh(fresh) => socket2::SockRef::from(&fresh.stream),
            State::Watched(Watched { stream: Some(stream), .. }) => socket2::SockRef::from(stream),
            _ => return,
        };
        let mut chunk = [0u8; 4096];
        while inbuf.len() < limit {
            // Non-blocking (as accept4, tokio and the watch keep it): WouldBlock once it is empty.
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

    /// Whether the socket is in tokio's reactor.
    #[cfg(test)]
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.state, State::Live(_))
    }

    /// Reads what the socket holds now into `buf`, without a reactor: `Pending` (with `cx`'s
    /// waker registered where the socket now waits) when it holds nothing.
    fn poll_read_direct(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match &mut self.state {
            State::Fresh(fresh) if !fresh.drained => {
                let room = buf.remaining();
                match read_into(&fresh.stream, buf) {
                    Ok(n) => {
                        fresh.drained = n < room;
                        return Poll::Ready(Ok(()));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            State::Watched(watched) => {
                // The waker first: bytes that come after the read below wake this one.
                watched.wake(cx.waker());
                let Some(stream) = &watched.stream else { return Poll::Ready(Err(lost())) };
                return match read_into(stream, buf) {
                    // Bytes: the connection is busy again, and waits in tokio's reactor from now.
                    Ok(n) if n > 0 => {
                        let State::Watched(watched) = std::mem::replace(&mut self.state, State::Lost) else {
                            unreachable!("matched above")
                        };
                        self.state = into_reactor(watched.into_std());
                        Poll::Ready(Ok(()))
                    }
                    Ok(_) => Poll::Ready(Ok(())),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
                    Err(e) => Poll::Ready(Err(e)),
                };
            }
            _ => {}
        }
        // A fresh socket with nothing to read: it waits in the watch, or in tokio's reactor.
        let State::Fresh(fresh) = std::mem::replace(&mut self.state, State::Lost) else {
            unreachable!("only a fresh socket gets here")
        };
        match fresh.watch {
            Some(watch) => match watch.watch(fresh.stream, cx.waker()) {
                Ok(watched) => {
                    self.state = State::Watched(watched);
                    Poll::Pending
                }
                Err((std, e)) => {
                    tracing::debug!(error = %e, "could not watch a socket: it waits in the reactor");
                    self.state = into_reactor(std);
                    self.poll_read_live(cx, buf)
                }
            },
            None => {
                self.state = into_reactor(fresh.stream);
                self.poll_read_live(cx, buf)
            }
        }
    }

    fn poll_read_live(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.live() {
            Ok(stream) => Pin::new(stream).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Writes with a plain system call while the socket is fresh; `None` when it has to wait
    /// (then it goes to tokio's reactor) or is not fresh.
    fn write_direct(
        &mut self,
        write: impl FnOnce(&std::net::TcpStream) -> io::Result<usize>,
    ) -> Option<io::Result<usize>> {
        let State::Fresh(fresh) = &self.state else { return None };
        match write(&fresh.stream) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            done => Some(done),
        }
    }

    /// The stream in tokio's reactor, put there first if it is fresh or watched.
    fn live(&mut self) -> io::Result<&mut tokio::net::TcpStream> {
        // Checked first: this is every read and write of a busy connection.
        if !matches!(self.state, State::Live(_)) {
            match std::mem::replace(&mut self.state, State::Lost) {
                State::Fresh(fresh) => self.state = into_reactor(fresh.stream),
                State::Watched(watched) => self.state = into_reactor(watched.into_std()),
                other => self.state = other,
            }
        }
        match &mut self.state {
            State::Live(stream) => Ok(stream),
            _ => Err(lost()),
        }
    }
}

/// Reads into `buf`'s unfilled part; the count read.
fn read_into(mut stream: &std::net::TcpStream, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
    let n = stream.read(buf.initialize_unfilled())?;
    buf.advance(n);
    Ok(n)
}

/// `stream` registered with tokio's reactor, or lost (closed) if it cannot be.
fn into_reactor(stream: std::net::TcpStream) -> State {
    match tokio::net::TcpStream::from_std(stream) {
        Ok(stream) => State::Live(stream),
        Err(e) => {
            tracing::debug!(error = %e, "could not put a socket into the reactor");
            State::Lost
        }
    }
}

fn lost() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the socket was lost while its connection was parked")
}

/// Every other I/O call goes to the stream in tokio's reactor, after putting it there.
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
        let this = self.get_mut();
        match this.state {
            State::Fresh(_) | State::Watched(_) => this.poll_read_direct(cx, buf),
            _ => this.poll_read_live(cx, buf),
        }
    }
}

impl AsyncWrite for ParkableTcp {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(done) = self.write_direct(|mut stream| stream.write(buf)) {
            return Poll::Ready(done);
        }
        live!(self, stream => Pin::new(stream).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(done) = self.write_direct(|mut stream| stream.write_vectored(bufs)) {
            return Poll::Ready(done);
        }
        live!(self, stream => Pin::new(stream).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // TCP holds nothing back in user space, wherever the socket waits: a flush must not
        // take a parked socket out of its watch.
        Poll::Ready(Ok(()))
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
    /// Makes the watch wake `waker` for this socket (unless it already wakes the same task).
    fn wake(&self, waker: &Waker) {
        let Some(stream) = &self.stream else { return };
        let Ok(index) = usize::try_from(stream.as_raw_fd()) else { return };
        drop(self.watch.replace_waker(index, waker));
    }

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

    /// Makes descriptor `index` wake `waker`, unless its waker already wakes the same task;
    /// returns the one it replaces, to be dropped by the caller outside the lock.
    fn replace_waker(&self, index: usize, waker: &Waker) -> Option<Waker> {
        let mut table = lock(&self.wakers);
        match table.get_mut(index) {
            Some(Some(held)) if held.will_wake(waker) => None,
            Some(slot) => slot.replace(waker.clone()),
            // Not in the table: not watched.
            None => None,
        }
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
