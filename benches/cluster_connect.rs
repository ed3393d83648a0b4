//! What the cluster's session registry adds to CONNECT.
//!
//! `cargo bench --bench cluster_connect` starts a `nats-server -js` (Debian's, on a free
//! loopback port, its store in a temporary directory) and, in this process, one single node
//! and two clustered nodes. It reports, each over a fixed count or period:
//!
//! - CONNECT → CONNACK latency of a fresh client id (MQTT 3.1.1, clean session, then
//!   DISCONNECT), sequentially, on the single node and on a clustered node: the difference is
//!   the claim (a read and a compare-and-swap on the KV bucket);
//! - the same when the id is connected on the other clustered node (the claim plus the
//!   takeover request and the old connection's close);
//! - connects per second with 16 clients connecting and disconnecting in a loop, on each kind
//!   of node (on the clustered one, every connect is a claim and every disconnect a delete).
//!
//! Figures are for comparing on one machine, not absolute.

#[path = "support/nats.rs"]
#[allow(dead_code)]
mod nats;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use mesgd::Server;
use mesgd::config::Config;
use mesgd_core::mqtt::{self, Packet, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SEQUENTIAL: usize = 2000;
const TAKEOVERS: usize = 500;
const CONCURRENT: usize = 16;
const PERIOD: Duration = Duration::from_secs(3);

fn frame(first: u8, body: &[u8]) -> Vec<u8> {
    let mut v = BytesMut::from(&[first][..]);
    mqtt::encode_var_int(body.len() as u32, &mut v).expect("bench packets are small");
    v.extend_from_slice(body);
    v.to_vec()
}

fn connect_packet(client_id: &str) -> Vec<u8> {
    let mut body = (4u16).to_be_bytes().to_vec();
    body.extend_from_slice(b"MQTT");
    body.extend_from_slice(&[4, 0x02, 0, 60]);
    body.extend_from_slice(&(client_id.len() as u16).to_be_bytes());
    body.extend_from_slice(client_id.as_bytes());
    frame(0x10, &body)
}

struct Connection {
    stream: TcpStream,
    buf: BytesMut,
}

impl Connection {
    /// Connects `client_id`; returns the connection and how long CONNACK took.
    async fn open(addr: std::net::SocketAddr, client_id: &str) -> (Connection, Duration) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let started = Instant::now();
        stream.write_all(&connect_packet(client_id)).await.unwrap();
        let mut c = Connection { stream, buf: BytesMut::new() };
        match c.next().await {
            Some(Packet::ConnAck(ack)) => assert!(!ack.reason_code.is_error(), "{ack:?}"),
            other => panic!("expected CONNACK, got {other:?}"),
        }
        (c, started.elapsed())
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

    async fn disconnect(mut self) {
        let _ = self.stream.write_all(&[0xE0, 0]).await;
        while self.next().await.is_some() {}
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

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "{what:<44} n={:<5} mean {:>7.1} µs  p50 {:>7.1} µs  p99 {:>7.1} µs",
        samples.len(),
        mean.as_secs_f64() * 1e6,
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    );
}

async fn sequential(addr: std::net::SocketAddr, prefix: &str) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let (c, took) = Connection::open(addr, &format!("{prefix}-{i}")).await;
        samples.push(took);
        c.disconnect().await;
    }
    samples
}

async fn rate(addr: std::net::SocketAddr, prefix: &str) -> f64 {
    let deadline = Instant::now() + PERIOD;
    let workers: Vec<_> = (0..CONCURRENT)
        .map(|w| {
            let prefix = format!("{prefix}-{w}");
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let (c, _) = Connection::open(addr, &format!("{prefix}-{n}")).await;
                    c.disconnect().await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for w in workers {
        total += w.await.unwrap();
    }
    total as f64 / PERIOD.as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let nats = nats::start().await;
        let (single, _d0) = node("").await;
        let (a, _d1) = node(&format!("[cluster]\nnode = \"a\"\nnats = [{:?}]\n", nats.url)).await;
        let (b, _d2) = node(&format!("[cluster]\nnode = \"b\"\nnats = [{:?}]\n", nats.url)).await;
        let (single_addr, a_addr, b_addr) = (
            single.local_addr("mqtt").unwrap(),
            a.local_addr("mqtt").unwrap(),
            b.local_addr("mqtt").unwrap(),
        );

        // Warm up both paths.
        sequential(single_addr, "warm").await;
        sequential(a_addr, "warm").await;

        report("CONNECT -> CONNACK, single node", sequential(single_addr, "seq").await);
        report("CONNECT -> CONNACK, clustered (claim)", sequential(a_addr, "seq").await);

        let mut takeovers = Vec::with_capacity(TAKEOVERS);
        for i in 0..TAKEOVERS {
            let id = format!("moving-{i}");
            let (old, _) = Connection::open(a_addr, &id).await;
            let (new, took) = Connection::open(b_addr, &id).await;
            takeovers.push(took);
            drop(old);
            new.disconnect().await;
        }
        report("CONNECT -> CONNACK, taking over from a node", takeovers);

        println!(
            "connects/s, {CONCURRENT} clients, single node:      {:>8.0}",
            rate(single_addr, "rate").await
        );
        println!("connects/s, {CONCURRENT} clients, clustered (claims): {:>8.0}", rate(a_addr, "rate").await);
        for s in [single, a, b] {
            s.shutdown().await;
        }
    });
}
