//! `echo-server` and `echo`: the raw TCP ceiling of the machine.
//!
//! The server reads and writes back, nothing else; the client is closed-loop like the MQTT
//! pairs, with frames the size of the generator's QoS 0 PUBLISH. What this pair reaches on the
//! same cores is the most any broker could reach here, and the server's CPU per message is the
//! floor under a broker's CPU per delivery.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::error::SetupError;
use crate::run::{self, Ctx, Timing};
use crate::stats::{Meta, Row};
use crate::window::Window;

/// Serves echo on `addr` (loopback) until `lifetime` has passed, with at most `max_conns`
/// connections at once.
pub(crate) async fn serve(addr: SocketAddr, max_conns: usize, lifetime: Duration) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    eprintln!("echo-server on {}", listener.local_addr()?);
    let open = Arc::new(AtomicU64::new(0));
    let accept = async {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { continue };
            if open.load(Relaxed) >= max_conns as u64 {
                continue;
            }
            let _ = sock.set_nodelay(true);
            open.fetch_add(1, Relaxed);
            let open = open.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = sock.read(&mut buf).await {
                    if sock.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                open.fetch_sub(1, Relaxed);
            });
        }
    };
    let _ = tokio::time::timeout(lifetime, accept).await;
    Ok(())
}

/// `conns` connections, each with a window of `window` frames of `frame` bytes.
pub(crate) async fn client(
    addr: SocketAddr,
    conns: u32,
    window: u32,
    frame: usize,
    timing: Timing,
    stall: Duration,
    meta: &Meta,
) -> Result<Value, SetupError> {
    let windows = (0..conns).map(|_| Window::new(u64::from(window))).collect();
    let (ctx, stopper) = Ctx::new(windows, stall);
    let mut tasks = Vec::new();
    for i in 0..conns as usize {
        let sock = tokio::time::timeout(crate::link::CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| SetupError::Timeout { what: "connect", after: crate::link::CONNECT_TIMEOUT })?
            .map_err(SetupError::io("connect"))?;
        sock.set_nodelay(true).map_err(SetupError::io("connect"))?;
        tasks.push(spawn_conn(sock, ctx.clone(), i, frame));
    }
    let interval = run::measure(&ctx, timing, meta.broker).await;
    let _ = run::finish(stopper, tasks, &ctx).await;
    let mut row = Row::new("echo", meta, "tcp", json!({"conns": conns, "window": window, "frame": frame}));
    interval.write(&mut row);
    row.set("errors", ctx.errors.to_json());
    Ok(row.into_value())
}

fn spawn_conn(
    sock: TcpStream,
    ctx: Arc<Ctx>,
    i: usize,
    frame: usize,
) -> tokio::task::JoinHandle<run::TaskOut> {
    tokio::spawn(async move {
        let (mut rd, mut wr) = sock.into_split();
        let window = &ctx.windows[i];
        let one = vec![0x30u8; frame];
        let mut out = Vec::with_capacity(64 * frame);
        let mut buf = vec![0u8; 64 * 1024];
        let mut partial = 0usize;
        loop {
            tokio::select! {
                biased;
                _ = ctx.stopped() => break,
                r = rd.read(&mut buf) => {
                    let Ok(n @ 1..) = r else {
                        ctx.errors.add("connection closed by the echo server");
                        break;
                    };
                    partial += n;
                    let frames = (partial / frame) as u64;
                    partial %= frame;
                    window.give_back(frames);
                    ctx.counters.delivered.fetch_add(frames, Relaxed);
                }
                n = window.take(1, 64, ctx.stall) => {
                    for _ in 0..n {
                        out.extend_from_slice(&one);
                    }
                    if wr.write_all(&out).await.is_err() {
                        ctx.errors.add("write failed");
                        break;
                    }
                    out.clear();
                    ctx.counters.sent.fetch_add(n, Relaxed);
                }
            }
        }
        run::TaskOut::empty()
    })
}
