//! What spreading a broker over nodes costs and gains, with real processes.
//!
//! `cargo bench --bench cluster_scale` starts a `nats-server -js` (Debian's, on a free loopback
//! port with its monitoring port, its store in a temporary directory) and release `mesgd`
//! processes (the binary of this build), and reports:
//!
//! 1. **latency**: QoS 0 PUBLISH → delivery at a fixed 2,000 msg/s (MQTT 3.1.1, 64 bytes, one
//!    publisher and one subscriber): on a single node, on one clustered node, and with the
//!    publisher on node a and the subscriber on node b;
//! 2. **throughput**: closed-loop QoS 0 pairs (16 undelivered messages per pair at most) for a
//!    fixed period, with `taskset` pinning each mesgd process to a core of its own (core 0, and
//!    core 1 for the second node); the load generator (this process, two threads) and
//!    nats-server are not pinned and share both cores with the nodes. One clustered node with
//!    all the pairs against two with half the pairs each (each pair on one node, then each
//!    pair across the two); the CPU seconds each process used in the period beside the rate;
//! 3. **assets**: 10, 1,000 and 10,000 clients connected with persistent sessions (MQTT 3.1.1
//!    clean session 0), each with one QoS 1 subscription, spread over two nodes: the streams
//!    and consumers JetStream reports (`/jsz` of the server's monitoring port, as `$JS.API.INFO`
//!    counts them) and each node's NATS subscriptions (`/connz`).
//!
//! Every count and duration is bounded; every process is killed at the end. Pass `latency`,
//! `throughput` or `assets` to run one part. Figures are for comparing on one machine.

#[path = "support/nats.rs"]
mod nats;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mesgd_core::mqtt::{self, Packet, ProtocolVersion};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, Command};
use tokio::sync::Semaphore;

const LATENCY_RATE: u32 = 2000;
const LATENCY_COUNT: usize = 10_000;
const PAIRS: usize = 20;
const WINDOW: usize = 16;
const WARMUP: Duration = Duration::from_secs(1);
const PERIOD: Duration = Duration::from_secs(5);
const CLIENT_COUNTS: [usize; 3] = [10, 1_000, 10_000];
const CONNECTING_AT_ONCE: usize = 200;
/// The bound on every wait for a process or the network.
const WAIT: Duration = Duration::from_secs(120);

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

impl nats::Nats {
    async fn monitor(&self, path: &str) -> serde_json::Value {
        let url = format!("http://127.0.0.1:{}/{path}", self.monitor);
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }
}

/// A release `mesgd serve` process, optionally pinned to one core.
struct Node {
    child: Child,
    mqtt: SocketAddr,
    _dir: tempfile::TempDir,
}

async fn node(cluster: Option<(&str, &nats::Nats)>, core: Option<u32>) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster
        .map(|(name, nats)| format!("[cluster]\nnode = {name:?}\nnats = [{:?}]\n", nats.url))
        .unwrap_or_default();
    let config = dir.path().join("mesgd.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\ndir = {:?}\n[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
             [auth]\nallow_anonymous = true\n[limits]\nexempt = [\"127.0.0.0/8\"]\n[mqtt]\nsys_interval = 0\n{cluster}",
            dir.path().display().to_string()
        ),
    )
    .unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_mesgd"));
    let mut command = match core {
        Some(core) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(core.to_string()).arg(binary);
            c
        }
        None => Command::new(binary),
    };
    let mut child = command
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mesgd (and taskset, util-linux)");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mqtt = within("mesgd to listen", async {
        while let Ok(Some(line)) = lines.next_line().await {
            // e.g. `INFO listening listener=mqtt addr=127.0.0.1:4711 kind="mqtt" tls=false`
            if line.contains("listening") {
                if let Some(addr) = line.split_whitespace().find_map(|w| w.strip_prefix("addr=")) {
                    return addr.trim_matches('"').parse().unwrap();
                }
            }
        }
        panic!("mesgd exited during start-up");
    })
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Node { child, mqtt, _dir: dir }
}

impl Node {
    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }
}

/// User plus system CPU time of process `pid` so far (`/proc/<pid>/stat`, in clock ticks of
/// 1/100 s, as on every Linux the project supports).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

fn frame(first: u8, body: &[u8], out: &mut Vec<u8>) {
    let mut header = BytesMut::from(&[first][..]);
    mqtt::encode_var_int(body.len() as u32, &mut header).expect("bench packets are small");
    out.extend_from_slice(&header);
    out.extend_from_slice(body);
}

fn string(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A QoS 0 PUBLISH of a 64-byte payload that starts with `stamp`.
fn publish(topic: &str, stamp: u64, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(80 + topic.len());
    string(topic, &mut body);
    body.extend_from_slice(&stamp.to_be_bytes());
    body.extend_from_slice(&[b'x'; 56]);
    frame(0x30, &body, out);
}

/// A raw MQTT 3.1.1 connection.
struct Connection {
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
    buf: BytesMut,
}

impl Connection {
    async fn open(addr: SocketAddr, client_id: &str, clean: bool) -> Connection {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (read, write) = stream.into_split();
        let mut c = Connection { read, write, buf: BytesMut::new() };
        let mut body = Vec::new();
        string("MQTT", &mut body);
        body.extend_from_slice(&[4, if clean { 0x02 } else { 0x00 }, 0, 60]);
        string(client_id, &mut body);
        c.send(0x10, &body).await;
        match c.next().await {
            Some(Packet::ConnAck(a)) if !a.reason_code.is_error() => c,
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    async fn send(&mut self, first: u8, body: &[u8]) {
        let mut out = Vec::new();
        frame(first, body, &mut out);
        self.write.write_all(&out).await.unwrap();
    }

    async fn subscribe(&mut self, filter: &str, qos: u8) {
        let mut body = 1u16.to_be_bytes().to_vec();
        string(filter, &mut body);
        body.push(qos);
        self.send(0x82, &body).await;
        match self.next().await {
            Some(Packet::SubAck(_)) => {}
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    async fn next(&mut self) -> Option<Packet> {
        loop {
            if let Some(p) = mqtt::decode(&mut self.buf, Some(ProtocolVersion::V311), u32::MAX).unwrap() {
                return Some(p);
            }
            self.buf.reserve(64 * 1024);
            if self.read.read_buf(&mut self.buf).await.unwrap_or(0) == 0 {
                return None;
            }
        }
    }
}

fn stamp_of(payload: &[u8]) -> u64 {
    u64::from_be_bytes(payload[..8].try_into().unwrap())
}

fn report(what: &str, mut samples: Vec<Duration>, lost: usize) -> Duration {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{what:<44} n={:<6} p50 {:>7.1} µs  p99 {:>7.1} µs  p99.9 {:>7.1} µs  max {:>8.1} µs  lost {lost}",
        samples.len(),
        us(at(0.5)),
        us(at(0.99)),
        us(at(0.999)),
        us(*samples.last().unwrap()),
    );
    at(0.99)
}

/// Subscribes on `to`, then publishes on `from` until a message arrives (the interest has
/// reached every node), then [`LATENCY_COUNT`] messages at [`LATENCY_RATE`]; returns the
/// latencies of those that arrived and how many did not within a second after the last.
async fn latency(from: SocketAddr, to: SocketAddr, tag: &str) -> (Vec<Duration>, usize) {
    let topic = format!("lat/{tag}");
    let mut sub = Connection::open(to, &format!("lat-sub-{tag}"), true).await;
    sub.subscribe(&topic, 0).await;
    let mut publisher = Connection::open(from, &format!("lat-pub-{tag}"), true).await;
    let epoch = Instant::now();
    let probe = topic.clone();
    let prober = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let mut out = Vec::new();
        publish(&probe, u64::MAX, &mut out);
        loop {
            tick.tick().await;
            if PROBE_DONE.load(Ordering::Acquire) || publisher.write.write_all(&out).await.is_err() {
                return publisher;
            }
        }
    });
    within("the subscription to reach the publisher's node", async {
        while !matches!(sub.next().await, Some(Packet::Publish(_))) {}
    })
    .await;
    PROBE_DONE.store(true, Ordering::Release);
    let mut publisher = prober.await.unwrap();
    PROBE_DONE.store(false, Ordering::Release);
    let sender = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1) / LATENCY_RATE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut out = Vec::with_capacity(128);
        for _ in 0..LATENCY_COUNT {
            tick.tick().await;
            out.clear();
            publish(&topic, epoch.elapsed().as_nanos() as u64, &mut out);
            publisher.write.write_all(&out).await.unwrap();
        }
        publisher
    });
    let mut samples = Vec::with_capacity(LATENCY_COUNT);
    let deadline = tokio::time::Instant::now()
        + Duration::from_secs(1) * (LATENCY_COUNT as u32 / LATENCY_RATE + 1)
        + Duration::from_secs(1);
    while samples.len() < LATENCY_COUNT {
        match tokio::time::timeout_at(deadline, sub.next()).await {
            Ok(Some(Packet::Publish(p))) => {
                let stamp = stamp_of(&p.payload);
                if stamp != u64::MAX {
                    samples.push(epoch.elapsed() - Duration::from_nanos(stamp));
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    let _publisher = sender.await.unwrap();
    let lost = LATENCY_COUNT - samples.len();
    (samples, lost)
}

/// Set when the probe has arrived, so that the prober stops.
static PROBE_DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

async fn latency_part() {
    println!("== latency: QoS 0, {LATENCY_RATE} msg/s, {LATENCY_COUNT} messages of 64 bytes");
    let nats = nats::start().await;
    let single = node(None, None).await;
    let a = node(Some(("a", &nats)), None).await;
    let b = node(Some(("b", &nats)), None).await;
    let (s, lost) = latency(single.mqtt, single.mqtt, "single").await;
    let single_p99 = report("single node", s, lost);
    let (s, lost) = latency(a.mqtt, a.mqtt, "local").await;
    report("clustered, publisher and subscriber on a", s, lost);
    let (s, lost) = latency(a.mqtt, b.mqtt, "cross").await;
    let cross_p99 = report("clustered, publisher on a, subscriber on b", s, lost);
    println!(
        "p99 added by crossing nodes over a single node: {:.1} µs",
        (cross_p99.as_secs_f64() - single_p99.as_secs_f64()) * 1e6
    );
}

/// One publisher → subscriber pair, closed loop: at most [`WINDOW`] messages undelivered.
async fn pair(publish_to: SocketAddr, subscribe_to: SocketAddr, id: String, delivered: Arc<AtomicU64>) {
    let topic = format!("tp/{id}");
    let mut sub = Connection::open(subscribe_to, &format!("sub-{id}"), true).await;
    sub.subscribe(&topic, 0).await;
    let mut publisher = Connection::open(publish_to, &format!("pub-{id}"), true).await;
    let window = Arc::new(Semaphore::new(0));
    // Wait until the subscription reaches the publisher's node: one probe answered.
    let mut probe = Vec::new();
    publish(&topic, 0, &mut probe);
    within("a pair's subscription to arrive", async {
        loop {
            publisher.write.write_all(&probe).await.unwrap();
            if let Ok(Some(Packet::Publish(_))) =
                tokio::time::timeout(Duration::from_millis(50), sub.next()).await
            {
                return;
            }
        }
    })
    .await;
    // A probe still on its way when the first one arrived widens the window by one.
    window.add_permits(WINDOW);
    let reader_window = window.clone();
    // Owned by this task: aborting the pair ends its reader too.
    let mut reader = tokio::task::JoinSet::new();
    reader.spawn(async move {
        while let Some(p) = sub.next().await {
            if matches!(p, Packet::Publish(_)) {
                delivered.fetch_add(1, Ordering::Relaxed);
                reader_window.add_permits(1);
            }
        }
    });
    let mut out = Vec::with_capacity(WINDOW * 96);
    loop {
        let Ok(permit) = window.acquire().await else { return };
        permit.forget();
        let mut n = 1;
        while n < WINDOW {
            match window.try_acquire() {
                Ok(p) => {
                    p.forget();
                    n += 1;
                }
                Err(_) => break,
            }
        }
        out.clear();
        for _ in 0..n {
            publish(&topic, 0, &mut out);
        }
        if publisher.write.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Runs `pairs` (publisher's node, subscriber's node) for [`PERIOD`] after [`WARMUP`]; prints
/// the deliveries per second and the CPU seconds of `processes` in the period.
async fn throughput(what: &str, pairs: &[(SocketAddr, SocketAddr)], processes: &[(&str, u32)]) -> f64 {
    let delivered = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = pairs
        .iter()
        .enumerate()
        .map(|(i, &(from, to))| {
            tokio::spawn(pair(from, to, format!("{what}-{i}").replace(' ', "_"), delivered.clone()))
        })
        .collect();
    tokio::time::sleep(WARMUP).await;
    let (before, cpu_before) =
        (delivered.load(Ordering::Relaxed), processes.iter().map(|p| cpu_seconds(p.1)).collect::<Vec<_>>());
    let started = Instant::now();
    tokio::time::sleep(PERIOD).await;
    let count = delivered.load(Ordering::Relaxed) - before;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu: Vec<String> = processes
        .iter()
        .zip(cpu_before)
        .map(|((name, pid), b)| format!("{name} {:.2}", (cpu_seconds(*pid) - b) / elapsed))
        .collect();
    for t in tasks {
        t.abort();
    }
    let rate = count as f64 / elapsed;
    println!("{what:<44} {rate:>9.0} msg/s   CPU (cores): {}", cpu.join(", "));
    rate
}

async fn throughput_part() {
    println!(
        "== throughput: {PAIRS} QoS 0 pairs, {WINDOW} undelivered per pair, {} s; node a on core 0, b on core 1",
        PERIOD.as_secs()
    );
    let me = std::process::id();
    {
        let single = node(None, Some(0)).await;
        let pairs = vec![(single.mqtt, single.mqtt); PAIRS];
        throughput("single node (no cluster)", &pairs, &[("mesgd", single.pid()), ("load", me)]).await;
    }
    let nats = nats::start().await;
    let nats_pid = nats.child.id().expect("nats-server running");
    let one = {
        let a = node(Some(("a", &nats)), Some(0)).await;
        let pairs = vec![(a.mqtt, a.mqtt); PAIRS];
        throughput("one clustered node", &pairs, &[("a", a.pid()), ("nats", nats_pid), ("load", me)]).await
    };
    let a = node(Some(("a2", &nats)), Some(0)).await;
    let b = node(Some(("b2", &nats)), Some(1)).await;
    let processes = [("a", a.pid()), ("b", b.pid()), ("nats", nats_pid), ("load", me)];
    let local: Vec<_> =
        (0..PAIRS).map(|i| if i % 2 == 0 { (a.mqtt, a.mqtt) } else { (b.mqtt, b.mqtt) }).collect();
    let two_local = throughput("two nodes, each pair on one node", &local, &processes).await;
    let across: Vec<_> =
        (0..PAIRS).map(|i| if i % 2 == 0 { (a.mqtt, b.mqtt) } else { (b.mqtt, a.mqtt) }).collect();
    let two_across = throughput("two nodes, each pair across them", &across, &processes).await;
    println!(
        "two nodes against one: {:.2}x (pairs on one node), {:.2}x (pairs across)",
        two_local / one,
        two_across / one
    );
}

/// The NATS subscriptions of node `node`'s connections (`mesgd-<node>`, `mesgd-<node>-shared`)
/// in a `/connz` answer.
fn subscriptions(connz: &serde_json::Value, node: &str) -> u64 {
    let names = [format!("mesgd-{node}"), format!("mesgd-{node}-shared")];
    connz["connections"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"].as_str().is_some_and(|n| names.iter().any(|x| x == n)))
        .map(|c| c["subscriptions"].as_u64().unwrap_or(0))
        .sum()
}

async fn assets_part() {
    println!("== assets: persistent sessions with one QoS 1 subscription each, over two nodes");
    for clients in CLIENT_COUNTS {
        let nats = nats::start().await;
        let a = node(Some(("a", &nats)), None).await;
        let b = node(Some(("b", &nats)), None).await;
        let baseline = nats.monitor("connz").await;
        let baseline = subscriptions(&baseline, "a") + subscriptions(&baseline, "b");
        let started = Instant::now();
        let gate = Arc::new(Semaphore::new(CONNECTING_AT_ONCE));
        let tasks: Vec<_> = (0..clients)
            .map(|i| {
                let gate = gate.clone();
                let addr = if i % 2 == 0 { a.mqtt } else { b.mqtt };
                tokio::spawn(async move {
                    let _turn = gate.acquire_owned().await.unwrap();
                    let mut c = Connection::open(addr, &format!("client-{i}"), false).await;
                    c.subscribe(&format!("assets/{i}/+"), 1).await;
                    c
                })
            })
            .collect();
        let mut connections = Vec::with_capacity(clients);
        for t in tasks {
            connections.push(within("clients to connect and subscribe", t).await.unwrap());
        }
        let connect_s = started.elapsed().as_secs_f64();
        // Each subscription is one NATS subject: wait until both nodes hold them all.
        let (on_a, on_b) = within("the nodes' NATS subscriptions", async {
            loop {
                let connz = nats.monitor("connz").await;
                let counts = (subscriptions(&connz, "a"), subscriptions(&connz, "b"));
                if counts.0 + counts.1 >= baseline + clients as u64 {
                    return counts;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        let jsz = nats.monitor("jsz").await;
        println!(
            "{clients:>6} clients (connected in {connect_s:>5.1} s): JetStream streams {}, consumers {}; NATS subscriptions a {on_a}, b {on_b}",
            jsz["streams"], jsz["consumers"]
        );
        drop(connections);
    }
}

fn main() {
    let part = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let all = part.is_none();
        if all || part.as_deref() == Some("latency") {
            latency_part().await;
        }
        if all || part.as_deref() == Some("throughput") {
            throughput_part().await;
        }
        if all || part.as_deref() == Some("assets") {
            assets_part().await;
        }
    });
}
