//! A parked socket over real loopback TCP: it leaves the reactor, its watch wakes the parked
//! connection for data, for a close and for data that was already there, and the next read or
//! write brings it back.

use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
    let (server, _) = listener.accept().await.expect("accept");
    (ParkableTcp::new(server), client)
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
    let mut got = [0u8; 4];
    socket.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"ping");
    assert!(!socket.is_watched(), "reading put it back into the reactor");
    assert_eq!(gauge.get(), 0);

    // And it parks again, as often as the connection does.
    socket.leave_reactor(&watch, &Waker::from(signal.clone()));
    client.write_all(b"again").await.expect("write");
    signal.woken().await;
    let mut got = [0u8; 5];
    socket.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"again");
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
    let mut got = [0u8; 5];
    socket.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"early");
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

#[tokio::test]
async fn a_write_while_watched_goes_out_and_brings_it_back() {
    let (watch, gauge) = watch();
    let (mut socket, mut client) = pair().await;
    socket.leave_reactor(&watch, &Waker::from(Arc::new(Signal::default())));
    socket.write_all(b"delivery").await.expect("write");
    assert!(!socket.is_watched());
    assert_eq!(gauge.get(), 0);
    let mut got = [0u8; 8];
    client.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"delivery");
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
