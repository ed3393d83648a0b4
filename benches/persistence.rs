//! QoS 1 throughput to a persistent session in each durability mode.
//!
//! `cargo bench --bench persistence` starts the broker in this process for each mode
//! (`none`, `periodic`, `always`), connects one persistent subscriber (clean session 0, acking
//! every message) and one publisher keeping 16 QoS 1 messages in flight, and reports the
//! acknowledged publishes per second over a fixed period. Raw sockets keep the client cost small
//! and the same in every mode. Figures are for comparing the modes on one machine, not absolute.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use mesgd::Server;
use mesgd::config::Config;
use mesgd_core::mqtt::{self, Packet, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

const WINDOW: usize = 16;
const PAYLOAD: usize = 64;

fn frame(first: u8, body: &[u8]) -> Vec<u8> {
    let mut v = BytesMut::from(&[first][..]);
    mqtt::encode_var_int(body.len() as u32, &mut v).expect("bench packets are small");
    v.extend_from_slice(body);
    v.to_vec()
}

fn string(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

fn connect(client_id: &str, clean: bool) -> Vec<u8> {
    let mut body = string("MQTT");
    body.extend_from_slice(&[4, if clean { 0x02 } else { 0x00 }, 0, 60]);
    body.extend_from_slice(&string(client_id));
    frame(0x10, &body)
}

struct Reader {
    half: OwnedReadHalf,
    buf: BytesMut,
}

impl Reader {
    async fn next(&mut self) -> Packet {
        loop {
            if let Some(p) =
                mqtt::decode(&mut self.buf, Some(ProtocolVersion::V311), u32::MAX).expect("decode")
            {
                return p;
            }
            self.buf.reserve(64 * 1024);
            let n = self.half.read_buf(&mut self.buf).await.expect("read");
            assert!(n > 0, "broker closed the connection");
        }
    }
}

async fn open(addr: std::net::SocketAddr, client_id: &str, clean: bool) -> (Reader, OwnedWriteHalf) {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (r, mut w) = stream.into_split();
    w.write_all(&connect(client_id, clean)).await.unwrap();
    let mut reader = Reader { half: r, buf: BytesMut::new() };
    assert!(matches!(reader.next().await, Packet::ConnAck(_)));
    (reader, w)
}

fn config(dir: &std::path::Path, durability: &str) -> Config {
    let text = format!(
        "[storage]\ndir = {:?}\ndurability = \"{durability}\"\n[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\n\
         bind = \"127.0.0.1:0\"\n[auth]\nallow_anonymous = true\n[mqtt]\nsys_interval = 0\n\
         [limits]\nmax_queued_messages = 1000000\nmax_queued_bytes = 1000000000\n",
        dir.display().to_string()
    );
    Config::from_toml(&text, None).unwrap()
}

/// Subscribes to `bench/#` at QoS 1 and waits for the SUBACK.
async fn subscribe_all(reader: &mut Reader, writer: &mut OwnedWriteHalf) {
    let mut body = 1u16.to_be_bytes().to_vec();
    body.extend_from_slice(&string("bench/#"));
    body.push(1);
    writer.write_all(&frame(0x82, &body)).await.unwrap();
    assert!(matches!(reader.next().await, Packet::SubAck(_)));
}

async fn run(durability: &str, seconds: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(config(dir.path(), durability)).await.unwrap();
    let addr = server.local_addr("mqtt").unwrap();

    // The persistent subscriber acks everything as it arrives.
    let (mut sub_r, mut sub_w) = open(addr, "bench-sink", false).await;
    subscribe_all(&mut sub_r, &mut sub_w).await;
    let sink = tokio::spawn(async move {
        loop {
            if let Packet::Publish(p) = sub_r.next().await {
                let id = p.packet_id.unwrap().to_be_bytes();
                if sub_w.write_all(&frame(0x40, &id)).await.is_err() {
                    return;
                }
            }
        }
    });

    let (mut pub_r, mut pub_w, mut send) = start_publishing(addr, "bench-source").await;
    let mut batch = Vec::new();
    let warmup = Instant::now() + Duration::from_millis(500);
    let mut started = None;
    let mut acked = 0u64;
    loop {
        if let Packet::PubAck(_) = pub_r.next().await {
            let now = Instant::now();
            match started {
                None if now >= warmup => started = Some(now),
                Some(t) if now - t >= Duration::from_secs(seconds) => break,
                Some(_) => acked += 1,
                None => {}
            }
            batch.clear();
            send(&mut batch);
            pub_w.write_all(&batch).await.unwrap();
        }
    }
    let rate = acked as f64 / seconds as f64;
    sink.abort();
    server.shutdown().await;
    rate
}

/// Frames QoS 1 publishes to `bench/x` with fresh packet ids.
fn publisher() -> impl FnMut(&mut Vec<u8>) {
    let mut payload = string("bench/x");
    let header = payload.len();
    payload.extend_from_slice(&[0, 0]);
    payload.extend_from_slice(&[7u8; PAYLOAD]);
    let mut next_id: u16 = 1;
    move |w: &mut Vec<u8>| {
        payload[header..header + 2].copy_from_slice(&next_id.to_be_bytes());
        next_id = if next_id == u16::MAX { 1 } else { next_id + 1 };
        w.extend_from_slice(&frame(0x32, &payload));
    }
}

/// Connects a publisher and sends the first window of QoS 1 publishes; returns it with the
/// function that frames the next ones.
async fn start_publishing(
    addr: std::net::SocketAddr,
    client_id: &str,
) -> (Reader, OwnedWriteHalf, impl FnMut(&mut Vec<u8>)) {
    let (reader, mut writer) = open(addr, client_id, true).await;
    let mut send = publisher();
    let mut batch = Vec::new();
    for _ in 0..WINDOW {
        send(&mut batch);
    }
    writer.write_all(&batch).await.unwrap();
    (reader, writer, send)
}

/// Queues `messages` QoS 1 messages for an offline persistent session, stops the broker and
/// returns how long a new broker takes to start on that state (recovery included).
async fn restart(messages: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(config(dir.path(), "periodic")).await.unwrap();
    let addr = server.local_addr("mqtt").unwrap();
    let (mut sub_r, mut sub_w) = open(addr, "bench-offline", false).await;
    subscribe_all(&mut sub_r, &mut sub_w).await;
    sub_w.write_all(&[0xE0, 0]).await.unwrap();
    // The broker closes the socket once it has taken the DISCONNECT: the session is offline.
    let mut rest = Vec::new();
    sub_r.half.read_to_end(&mut rest).await.unwrap();
    drop(sub_w);

    let (mut pub_r, mut pub_w, mut send) = start_publishing(addr, "bench-filler").await;
    let mut batch = Vec::new();
    let mut acked = 0;
    while acked < messages {
        if let Packet::PubAck(_) = pub_r.next().await {
            acked += 1;
            if acked + (WINDOW as u64) <= messages {
                batch.clear();
                send(&mut batch);
                pub_w.write_all(&batch).await.unwrap();
            }
        }
    }
    server.shutdown().await;

    let started = Instant::now();
    let server = Server::start(config(dir.path(), "periodic")).await.unwrap();
    let took = started.elapsed();
    // The queue must really be there: the first queued message arrives on reconnect.
    let addr = server.local_addr("mqtt").unwrap();
    let (mut sub_r, _sub_w) = open(addr, "bench-offline", false).await;
    assert!(matches!(sub_r.next().await, Packet::Publish(_)));
    server.shutdown().await;
    took
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and wants it quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let seconds = if quick { 1 } else { 5 };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    println!("QoS 1 to one persistent session, window {WINDOW}, {PAYLOAD}-byte payloads, {seconds} s each:");
    let mut none = 0.0;
    for mode in ["none", "periodic", "always"] {
        let rate = runtime.block_on(run(mode, seconds));
        if mode == "none" {
            none = rate;
        }
        println!("  {mode:>8}: {rate:>9.0} msg/s  ({:.2}x of none)", rate / none);
    }
    let messages = if quick { 10_000 } else { 100_000 };
    let took = runtime.block_on(restart(messages));
    println!("start-up with {messages} queued messages: {:.0} ms", took.as_secs_f64() * 1000.0);
}
