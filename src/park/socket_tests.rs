//! A parked socket over real loopback TCP: it leaves the reactor, its watch wakes the parked
//! connection for data, for a close and for data that was already there, and the next read that
//! finds bytes, or the next write, brings it back. A socket just accepted is read and written
//! in no reactor, and waits in the watch the first time it has nothing to read.

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::{IdleWatch, ParkableTcp};

/// A waker that a test can wait on.
#[derive(Default)]
struct Signal(Notify);

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.0.notify_one();
    }
}

impl Signal {
    async fn woken(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.0.notified())
            .await
            .expect("the watch wakes the parked socket");
    }
}

/// A connected pair: the server side wrapped for parking, and the client.
async fn pair() -> (ParkableTcp, TcpStream) {
    let (server, client) = connected().await;
    (ParkableTcp::new(server), client)
}

/// A connected pair of plain sockets: the server's side, in tokio's reactor, and the client.
async fn connected() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
    let (server, _) = listener.accept().await.expect("accept");
    (server, client)
}

/// A connected pair whose server side is as the listener accepts it: non-blocking, in no
/// reactor, waiting in `watch` when it has to.
async fn accepted(watch: Option<&Arc<IdleWatch>>) -> (ParkableTcp, TcpStream) {
    let (server, client) = connected().await;
    let mut socket = ParkableTcp::accepted(server.into_std().expect("out of the reactor"));
    if let Some(watch) = watch {
        socket.wait_in(watch);
    }
    (socket, client)
}

/// Reads exactly `want` from `from`.
async fn reads(from: &mut (impl tokio::io::AsyncRead + Unpin), want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    from.read_exact(&mut got).await.expect("read");
    assert_eq!(got, want);
}

/// Whether the socket is in neither tokio's reactor nor the watch.
fn is_fresh(socket: &ParkableTcp) -> bool {
    matches!(socket.state, super::State::Fresh(_))
}

fn watch() -> (Arc<IdleWatch>, Gauge) {
    let gauge = Gauge::default();
    (Arc::new(IdleWatch::start(gauge.clone()).expect("the watch starts")), gauge)
}

#[tokio::test]
async fn data_wakes_a_parked_socket_and_is_read_back_in_the_reactor() {
    let (watch, gauge) = watch();
    let (mut socket, mut client) = pair().await;
    let signal = Arc::new(Signal::default());
    socket.leave_reactor(&watch, &Waker::from(signal.clone()));
    assert!(socket.is_watched());
    assert_eq!(gauge.get(), 1);

    client.write_all(b"ping").await.expect("write");
    signal.woken().await;
    reads(&mut socket, b"ping").await;
    assert!(!socket.is_watched(), "reading put it back into the reactor");
    assert_eq!(gauge.get(), 0);

    // And it parks again, as often as the connection does.
    socket.leave_reactor(&watch, &Waker::from(signal.clone()));
    client.write_all(b"again").await.expect("write");
    signal.woken().await;
    reads(&mut socket, b"again").await;
}

#[tokio::test]
async fn data_already_waiting_when_it_parks_wakes_it_at_once() {
    let (watch, _) = watch();
    let (mut socket, mut client) = pair().await;
    client.write_all(b"early").await.expect("write");
    // The bytes are in the socket's buffer before it joins the watch.
    let mut peek = [0u8; 5];
    match &socket.state {
        super::State::Live(stream) => {
            stream.readable().await.expect("readable");
            assert_eq!(stream.peek(&mut peek).await.expect("peek"), 5);
        }
        other => panic!("a new socket is live, not {other:?}"),
    }
    let signal = Arc::new(Signal::default());
    socket.leave_reactor(&watch, &Waker::from(signal.clone()));
    signal.woken().await;
    reads(&mut socket, b"early").await;
}

#[tokio::test]
async fn a_close_by_the_peer_wakes_it_and_reads_as_the_end() {
    let (watch, _) = watch();
    let (mut socket, client) = pair().await;
    let signal = Arc::new(Signal::default());
    socket.leave_reactor(&watch, &Waker::from(signal.clone()));
    drop(client);
    signal.woken().await;
    let mut got = Vec::new();
    assert_eq!(socket.read_to_end(&mut got).await.expect("read"), 0);
}

/// A parked connection's poll flushes its (empty) output every time it is woken; that must not
/// bring its socket back into the reactor (and out of it again when it parks on).
#[tokio::test]
async fn a_flush_while_watched_leaves_it_in_the_watch() {
    let (watch, gauge) = watch();
    let (mut socket, mut client) = pair().await;
    let signal = Arc::new(Signal::default());
    socket.leave_reactor(&watch, &Waker::from(signal.clone()));
    socket.flush().await.expect("flush");
    assert!(socket.is_watched());
    assert_eq!(gauge.get(), 1);
    client.write_all(b"z").await.expect("write");
    signal.woken().await;
}

#[tokio::test]
async fn a_write_while_watched_goes_out_and_brings_it_back() {
    let (watch, gauge) = watch();
    let (mut socket, mut client) = pair().await;
    socket.leave_reactor(&watch, &Waker::from(Arc::new(Signal::default())));
    socket.write_all(b"delivery").await.expect("write");
    assert!(!socket.is_watched());
    assert_eq!(gauge.get(), 0);
    reads(&mut client, b"delivery").await;
}

#[tokio::test]
async fn a_socket_dropped_while_watched_leaves_the_watch_and_closes() {
    let (watch, gauge) = watch();
    let (mut socket, mut client) = pair().await;
    socket.leave_reactor(&watch, &Waker::from(Arc::new(Signal::default())));
    assert_eq!(gauge.get(), 1);
    drop(socket);
    assert_eq!(gauge.get(), 0);
    let mut got = Vec::new();
    assert_eq!(client.read_to_end(&mut got).await.expect("the peer sees the close"), 0);

    // The descriptor number may be reused at once; a new socket on it is watched afresh.
    let (mut next, mut next_client) = pair().await;
    let signal = Arc::new(Signal::default());
    next.leave_reactor(&watch, &Waker::from(signal.clone()));
    next_client.write_all(b"x").await.expect("write");
    signal.woken().await;
    assert_eq!(gauge.get(), 1);
}

#[tokio::test]
async fn a_socket_just_accepted_is_read_and_written_in_no_reactor() {
    let (watch, gauge) = watch();
    let (server, mut client) = connected().await;
    // The CONNECT is in the server's receive buffer before it is accepted, as it mostly is.
    client.write_all(b"CONNECT").await.expect("write");
    let mut peek = [0u8; 7];
    while server.peek(&mut peek).await.expect("peek") < peek.len() {}
    let mut socket = ParkableTcp::accepted(server.into_std().expect("out of the reactor"));
    socket.wait_in(&watch);

    let mut got = [0u8; 7];
    let mut buf = ReadBuf::new(&mut got);
    assert!(poll_once(&mut socket, &mut buf).is_ready(), "read at the first poll");
    assert_eq!(buf.filled(), b"CONNECT");
    socket.write_all(b"CONNACK").await.expect("write");
    assert!(is_fresh(&socket), "read and written in no reactor");
    assert_eq!(gauge.get(), 0);
    reads(&mut client, b"CONNACK").await;
}

#[tokio::test]
async fn a_socket_just_accepted_waits_for_bytes_in_the_watch_and_reads_them_in_the_reactor() {
    let (watch, gauge) = watch();
    let (mut socket, mut client) = accepted(Some(&watch)).await;
    let signal = Arc::new(Signal::default());
    let waker = Waker::from(signal.clone());
    let mut got = [0u8; 4];
    let mut buf = ReadBuf::new(&mut got);
    assert!(socket.poll_read_with(&waker, &mut buf).is_pending(), "nothing sent yet");
    assert!(socket.is_watched(), "it waits in the watch, not in the reactor");
    assert_eq!(gauge.get(), 1);

    client.write_all(b"ping").await.expect("write");
    signal.woken().await;
    reads(&mut socket, b"ping").await;
    assert!(socket.is_live(), "busy again: in tokio's reactor");
    assert_eq!(gauge.get(), 0);
}

/// A CONNECT that comes after the accept is waited for in tokio's reactor: through the watch
/// it would cost a wake-up of the watch's thread for a connection that is busy.
#[tokio::test]
async fn a_socket_just_accepted_waits_in_the_reactor_until_its_connection_is_about_to_park() {
    let (watch, gauge) = watch();
    let (mut socket, mut client) = accepted(None).await;
    let mut got = [0u8; 5];
    assert!(poll_once(&mut socket, &mut ReadBuf::new(&mut got)).is_pending(), "nothing sent yet");
    assert!(socket.is_live());
    // Too late to wait elsewhere: it stays in the reactor until it parks.
    socket.wait_in(&watch);
    client.write_all(b"later").await.expect("write");
    socket.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"later");
    assert!(socket.is_live());
    assert_eq!(gauge.get(), 0);
}

#[tokio::test]
async fn a_socket_just_accepted_parks_straight_into_the_watch() {
    let (watch, gauge) = watch();
    let (mut socket, mut client) = accepted(Some(&watch)).await;
    let signal = Arc::new(Signal::default());
    socket.leave_reactor(&watch, &Waker::from(signal.clone()));
    assert!(socket.is_watched());
    assert_eq!(gauge.get(), 1);
    client.write_all(b"x").await.expect("write");
    signal.woken().await;
}

/// A connection that waited in the watch under its task's waker and then parks, or is
/// polled by its lot, is woken under the new waker: bytes that come after the hand-over are
/// not reported to the task that has ended.
#[tokio::test]
async fn a_watched_socket_wakes_the_waker_of_its_latest_read() {
    let (watch, _) = watch();
    let (mut socket, mut client) = accepted(Some(&watch)).await;
    let task = Arc::new(Signal::default());
    let mut got = [0u8; 1];
    assert!(socket.poll_read_with(&Waker::from(task.clone()), &mut ReadBuf::new(&mut got)).is_pending());
    let lot = Arc::new(Signal::default());
    assert!(socket.poll_read_with(&Waker::from(lot.clone()), &mut ReadBuf::new(&mut got)).is_pending());
    assert!(socket.is_watched());
    client.write_all(b"y").await.expect("write");
    lot.woken().await;
}

/// One poll of the socket's read with a waker that nobody waits on.
fn poll_once(socket: &mut ParkableTcp, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
    socket.poll_read_with(&Waker::noop().clone(), buf)
}

impl ParkableTcp {
    fn poll_read_with(&mut self, waker: &Waker, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let mut cx = Context::from_waker(waker);
        tokio::io::AsyncRead::poll_read(std::pin::Pin::new(self), &mut cx, buf)
    }
}
