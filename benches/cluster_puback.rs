//! What storing QoS 1 messages in JetStream before PUBACK costs.
//!
//! `cargo bench --bench cluster_puback` starts a `nats-server -js` (Debian's, on a free
//! loopback port, its store in a temporary directory) and, in this process, a single node and
//! a clustered node (whose QoS 1/2 publishes wait for the durable stream). It reports, on each:
//!
//! - PUBLISH → PUBACK latency of QoS 1 messages sent one at a time (MQTT 3.1.1, 64-byte
//!   payloads, no subscriber): on the clustered node, one JetStream store per message;
//! - the same with 64 publishes outstanding (pipelined), over a fixed period: the latency of
//!   each PUBACK and the messages acknowledged per second.
//!
//! Figures are for comparing on one machine, not absolute.

#[path = "support/nats.rs"]
#[allow(dead_code)]
mod nats;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mesgd::Server;
use mesgd::config::Config;
use mesgd_core::mqtt::{self, Packet, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SEQUENTIAL: usize = 3000;
const OUTSTANDING: usize = 64;
const PERIOD: Duration = Duration::from_secs(3);

fn frame(first: u8, body: &[u8]) -> Vec<u8> {
    let mut v = BytesMut::from(&[first][..]);
    mqtt::encode_var_int(body.len() as u32, &mut v).expect("bench packets are small");
    v.extend_from_slice(body);
    v.to_vec()
}

fn publish(packet_id: u16) -> Vec<u8> {
    let mut body = (5u16).to_be_bytes().to_vec();
    body.extend_from_slice(b"bench");
    body.extend_from_slice(&packet_id.to_be_bytes());
    body.extend_from_slice(&[b'x'; 64]);
    frame(0x32, &body)
}

struct Connection {
    stream: TcpStream,
    buf: BytesMut,
}

impl Connection {
    async fn open(addr: std::net::SocketAddr, client_id: &str) -> Connection {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut body = (4u16).to_be_bytes().to_vec();
        body.extend_from_slice(b"MQTT");
        body.extend_from_slice(&[4, 0x02, 0, 60]);
        body.extend_from_slice(&(client_id.len() as u16).to_be_bytes());
        body.extend_from_slice(client_id.as_bytes());
        stream.write_all(&frame(0x10, &body)).await.unwrap();
        let mut c = Connection { stream, buf: BytesMut::new() };
        assert!(matches!(c.next().await, Some(Packet::ConnAck(a)) if !a.reason_code.is_error()));
        c
    }

    async fn next(&mut self) -> Option<Packet> {
        loop {
            if let Some(p) = mqtt::decode(&mut self.buf, Some(ProtocolVersion::V311), u32::MAX).unwrap() {
                return Some(p);
            }
            self.buf.reserve(4096);
            if self.stream.read_buf(&mut self.buf).await.unwrap_or(0) == 0 {
                return None;
            }
        }
    }

    async fn puback(&mut self) -> u16 {
        match self.next().await {
            Some(Packet::PubAck(a)) => a.packet_id,
            other => panic!("expected PUBACK, got {other:?}"),
        }
    }
}

async fn node(cluster: &str) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[storage]\ndir = {:?}\n[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
         [auth]\nallow_anonymous = true\n[mqtt]\nsys_interval = 0\n{cluster}",
        dir.path().display().to_string()
    );
    (Server::start(Config::from_toml(&text, None).unwrap()).await.unwrap(), dir)
}

fn report(what: &str, mut samples: Vec<Duration>, extra: &str) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "{what:<40} n={:<6} mean {:>7.1} µs  p50 {:>7.1} µs  p99 {:>7.1} µs {extra}",
        samples.len(),
        mean.as_secs_f64() * 1e6,
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    );
}

async fn sequential(addr: std::net::SocketAddr, id: &str) -> Vec<Duration> {
    let mut c = Connection::open(addr, id).await;
    let mut samples = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let packet_id = (i % 65_000) as u16 + 1;
        let started = Instant::now();
        c.stream.write_all(&publish(packet_id)).await.unwrap();
        assert_eq!(c.puback().await, packet_id);
        samples.push(started.elapsed());
    }
    samples
}

/// Latencies of each PUBACK with [`OUTSTANDING`] publishes in flight, and messages per second.
async fn pipelined(addr: std::net::SocketAddr, id: &str) -> (Vec<Duration>, f64) {
    let mut c = Connection::open(addr, id).await;
    let mut sent: VecDeque<(u16, Instant)> = VecDeque::new();
    let mut samples = Vec::new();
    let mut next = 0u16;
    let started = Instant::now();
    while started.elapsed() < PERIOD || !sent.is_empty() {
        while sent.len() < OUTSTANDING && started.elapsed() < PERIOD {
            next = next % 65_000 + 1;
            c.stream.write_all(&publish(next)).await.unwrap();
            sent.push_back((next, Instant::now()));
        }
        let acked = c.puback().await;
        let (id, at) = sent.pop_front().expect("a publish in flight");
        assert_eq!(acked, id, "PUBACKs in order");
        samples.push(at.elapsed());
    }
    let rate = samples.len() as f64 / started.elapsed().as_secs_f64();
    (samples, rate)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let nats = nats::start().await;
        let (single, _d0) = node("").await;
        let (a, _d1) = node(&format!("[cluster]\nnode = \"a\"\nnats = [{:?}]\n", nats.url)).await;
        let (single_addr, a_addr) = (single.local_addr("mqtt").unwrap(), a.local_addr("mqtt").unwrap());

        // Warm up both paths.
        sequential(single_addr, "warm").await;
        sequential(a_addr, "warm").await;

        report("QoS 1 PUBACK, one at a time, single node", sequential(single_addr, "seq").await, "");
        report("QoS 1 PUBACK, one at a time, clustered", sequential(a_addr, "seq").await, "");
        for (what, addr) in [("single node", single_addr), ("clustered", a_addr)] {
            let (samples, rate) = pipelined(addr, "pipe").await;
            report(
                &format!("QoS 1 PUBACK, {OUTSTANDING} outstanding, {what}"),
                samples,
                &format!("{rate:>8.0} msg/s"),
            );
        }
        for s in [single, a] {
            s.shutdown().await;
        }
    });
}
