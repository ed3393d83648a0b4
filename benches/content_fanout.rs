//! End-to-end fan-out: one sender to 100 listeners, content routing over WebSocket against
//! MQTT over TCP, in the same run on the same runtime.
//!
//! `taskset -c 0 cargo bench --bench content_fanout` starts the broker in this process on a
//! current-thread runtime (so server and clients share one core), with an `http` and an `mqtt`
//! listener. Content: 100 WebSocket listeners on `/kind=bench`, one sender writing
//! `{"kind":"bench",…}` text frames. MQTT: 100 QoS 0 subscribers to `bench`, one publisher of
//! QoS 0 PUBLISHes with the same payload. Both sides use raw sockets with the same small
//! frame parser, so the clients cost the same; the sender stays at most `WINDOW` messages
//! ahead of the slowest listener (no queue ever overflows, nothing is dropped). Each round
//! reports deliveries per second for both and their ratio; the figures are for comparing the
//! two front ends on one machine, not absolutes. `FANOUT_ROUNDS` and `FANOUT_MESSAGES` override
//! the defaults (5 rounds of 20,000 messages).

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use mesgd::Server;
use mesgd::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

const LISTENERS: usize = 100;
const WINDOW: u64 = 256;
const BATCH: u64 = 16;

fn payload() -> String {
    format!(r#"{{"kind":"bench","room":"lobby","text":"{}"}}"#, "x".repeat(60))
}

fn config(dir: &std::path::Path) -> Config {
    let text = format!(
        "[storage]\ndir = {:?}\ndurability = \"none\"\n[auth]\nallow_anonymous = true\n[mqtt]\nsys_interval = 0\n\
         [limits]\nmax_queued_messages = 1000000\nmax_queued_bytes = 1000000000\n\
         [content]\ndisable_auth = true\nmax_queued_messages = 1000000\nmax_queued_bytes = 1000000000\n\
         [[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n\
         [[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n",
        dir.display().to_string()
    );
    Config::from_toml(&text, None).expect("bench config")
}

/// Which protocol's frames a listener counts.
#[derive(Clone, Copy)]
enum Proto {
    WebSocket,
    Mqtt,
}

/// The length of the next complete frame at the start of `buf`, if it is all there.
fn frame_len(proto: Proto, buf: &[u8]) -> Option<usize> {
    match proto {
        // Server frames are unmasked: 2 bytes, or 4 with a 16-bit length.
        Proto::WebSocket => {
            let len = *buf.get(1)? as usize & 0x7f;
            match len {
                126 => Some(4 + u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?]) as usize),
                127 => panic!("no bench message is that large"),
                n => Some(2 + n),
            }
            .filter(|n| *n <= buf.len())
        }
        Proto::Mqtt => {
            let (mut len, mut shift, mut i) = (0usize, 0, 1);
            loop {
                let b = *buf.get(i)?;
                len |= ((b & 0x7f) as usize) << shift;
                i += 1;
                if b & 0x80 == 0 {
                    break;
                }
                shift += 7;
            }
            Some(i + len).filter(|n| *n <= buf.len())
        }
    }
}

/// Counts the frames arriving on `r` into `count` until `target` are in.
async fn count_frames(proto: Proto, mut r: OwnedReadHalf, count: Rc<Cell<u64>>, target: u64) {
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    while count.get() < target {
        let n = r.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the server closed a listener");
        buf.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        while let Some(len) = frame_len(proto, &buf[at..]) {
            at += len;
            count.set(count.get() + 1);
        }
        buf.drain(..at);
    }
}

async fn ws_open(addr: SocketAddr, path: &str) -> (OwnedReadHalf, OwnedWriteHalf) {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut r, mut w) = stream.into_split();
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
         sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
    );
    w.write_all(request.as_bytes()).await.unwrap();
    // The 101 has no body; read it byte by byte so no frame is swallowed with it.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(r.read_u8().await.unwrap());
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    (r, w)
}

/// A masked client text frame, with the all-zero mask (the payload goes as it is).
fn ws_frame(text: &str) -> Vec<u8> {
    let mut f = vec![0x81];
    if text.len() < 126 {
        f.push(0x80 | text.len() as u8);
    } else {
        f.push(0x80 | 126);
        f.extend_from_slice(&(text.len() as u16).to_be_bytes());
    }
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(text.as_bytes());
    f
}

fn mqtt_string(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

fn mqtt_frame(first: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![first];
    let mut len = body.len();
    loop {
        let mut b = (len & 0x7f) as u8;
        len >>= 7;
        if len > 0 {
            b |= 0x80;
        }
        v.push(b);
        if len == 0 {
            break;
        }
    }
    v.extend_from_slice(body);
    v
}

async fn mqtt_open(addr: SocketAddr, id: &str, subscribe: bool) -> (OwnedReadHalf, OwnedWriteHalf) {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut r, mut w) = stream.into_split();
    let mut body = mqtt_string("MQTT");
    body.extend_from_slice(&[4, 0x02, 0, 60]);
    body.extend_from_slice(&mqtt_string(id));
    w.write_all(&mqtt_frame(0x10, &body)).await.unwrap();
    let mut connack = [0u8; 4];
    r.read_exact(&mut connack).await.unwrap();
    assert_eq!(connack[0], 0x20);
    if subscribe {
        let mut body = 1u16.to_be_bytes().to_vec();
        body.extend_from_slice(&mqtt_string("bench"));
        body.push(0);
        w.write_all(&mqtt_frame(0x82, &body)).await.unwrap();
        let mut suback = [0u8; 5];
        r.read_exact(&mut suback).await.unwrap();
        assert_eq!(suback[0], 0x90);
    }
    (r, w)
}

/// One fan-out run: deliveries per second.
async fn run(addr: SocketAddr, proto: Proto, messages: u64) -> f64 {
    let payload = payload();
    let mut counts = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..LISTENERS {
        let (r, w) = match proto {
            Proto::WebSocket => ws_open(addr, "/kind=bench").await,
            Proto::Mqtt => mqtt_open(addr, &format!("l{i}"), true).await,
        };
        let count = Rc::new(Cell::new(0));
        counts.push(count.clone());
        tasks.push(tokio::task::spawn_local(async move {
            count_frames(proto, r, count, messages).await;
            drop(w);
        }));
    }
    let (_sr, mut sw) = match proto {
        Proto::WebSocket => ws_open(addr, "/role=sender").await,
        Proto::Mqtt => mqtt_open(addr, "sender", false).await,
    };
    let one = match proto {
        Proto::WebSocket => ws_frame(&payload),
        Proto::Mqtt => {
            let mut body = mqtt_string("bench");
            body.extend_from_slice(payload.as_bytes());
            mqtt_frame(0x30, &body)
        }
    };
    let batch: Vec<u8> = one.repeat(BATCH as usize);
    let started = Instant::now();
    let mut sent = 0;
    while sent < messages {
        let slowest = counts.iter().map(|c| c.get()).min().unwrap_or(0);
        if sent - slowest + BATCH > WINDOW {
            tokio::task::yield_now().await;
            continue;
        }
        let n = BATCH.min(messages - sent);
        sw.write_all(&batch[..one.len() * n as usize]).await.unwrap();
        sent += n;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    (messages * LISTENERS as u64) as f64 / elapsed
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run once, briefly.
    let benching = std::env::args().any(|a| a == "--bench");
    let rounds = if benching { env("FANOUT_ROUNDS", 5) } else { 1 };
    let messages = if benching { env("FANOUT_MESSAGES", 20_000) } else { 200 };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(config(dir.path())).await.unwrap();
        let http = server.local_addr("http").unwrap();
        let mqtt = server.local_addr("mqtt").unwrap();
        println!("fan-out of one sender to {LISTENERS} listeners, {messages} messages per run");
        println!("round  content WS deliveries/s  MQTT deliveries/s  ratio");
        let mut ratios = Vec::new();
        for round in 1..=rounds {
            // Alternate which goes first, so neither always runs on a warmer process.
            let (ws, mq) = if round % 2 == 1 {
                let ws = run(http, Proto::WebSocket, messages).await;
                (ws, run(mqtt, Proto::Mqtt, messages).await)
            } else {
                let mq = run(mqtt, Proto::Mqtt, messages).await;
                (run(http, Proto::WebSocket, messages).await, mq)
            };
            ratios.push(ws / mq);
            println!("{round:>5}  {ws:>24.0}  {mq:>17.0}  {:.2}", ws / mq);
        }
        ratios.sort_by(f64::total_cmp);
        println!("median ratio (content WS / MQTT): {:.2}", ratios[ratios.len() / 2]);
        server.shutdown().await;
    });
}
