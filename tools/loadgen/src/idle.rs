//! `idle` and `relay-idle`: many connections held open, and what they cost the broker.
//!
//! Connections are opened `--conc` at a time; each counts once the broker has accepted it
//! (CONNACK, or `registered` for the relay). The row reports connects per second, the broker's
//! CPU per connect over the connecting phase, and its resident memory per connection: the
//! growth of `VmRSS` from before the first connect to after `--hold` seconds. Run it on a
//! freshly started broker — after heavy traffic, freed memory is reused and hides the cost.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::error::SetupError;
use crate::link::Link;
use crate::mqtt::{self, Credentials};
use crate::procfs::Proc;
use crate::relay::Endpoint;
use crate::run;
use crate::stats::{Errors, Meta, Row, round};

/// How long one connection may take to be accepted.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(20);

/// What kind of connection to hold.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    /// MQTT CONNECT, and a SUBSCRIBE to a topic of its own if `subscribe`.
    Mqtt {
        /// The broker.
        addr: SocketAddr,
        /// Credentials for CONNECT.
        creds: Credentials,
        /// Whether each connection also subscribes.
        subscribe: bool,
    },
    /// A relay `register`.
    Relay(Endpoint),
}

/// Counts and limits of the run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Connections to open.
    pub(crate) conns: u32,
    /// Connection attempts in flight at most.
    pub(crate) conc: u32,
    /// Seconds to hold them before reading memory.
    pub(crate) hold: Duration,
}

/// Lifts the open-files limit to its hard maximum: ten thousand sockets need it.
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

async fn open(kind: &Kind, tag: &str, i: u32) -> Result<Link, SetupError> {
    match kind {
        Kind::Mqtt { addr, creds, subscribe } => {
            let mut link = mqtt::connect(*addr, &format!("lg{tag}i{i}"), creds).await?;
            if *subscribe {
                mqtt::subscribe(&mut link, &format!("lg/{tag}/idle/{i}"), 0).await?;
            }
            Ok(link)
        }
        Kind::Relay(endpoint) => endpoint.registered(&format!("lg{tag}i{i}")).await,
    }
}

/// Opens and holds the connections, then reports.
pub(crate) async fn idle(kind: Kind, plan: Plan, meta: &Meta) -> Value {
    raise_fd_limit();
    let tag = run::run_tag();
    let errors = Arc::new(Errors::default());
    let broker = meta.broker;
    let rss_before = broker.and_then(Proc::rss_kib);
    let cpu_before = broker.and_then(Proc::cpu_seconds);
    let gen_before = Proc::Own.cpu_seconds();
    let started = Instant::now();

    let kind = Arc::new(kind);
    let gate = Arc::new(Semaphore::new(plan.conc as usize));
    let mut attempts = JoinSet::new();
    for i in 0..plan.conns {
        let permit = gate.clone().acquire_owned().await.expect("the semaphore is never closed");
        let (kind, tag) = (kind.clone(), tag.clone());
        attempts.spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(ACCEPT_TIMEOUT, open(&kind, &tag, i)).await {
                Ok(r) => r,
                Err(_) => Err(SetupError::Timeout { what: "accept", after: ACCEPT_TIMEOUT }),
            }
        });
    }
    let mut links = Vec::with_capacity(plan.conns as usize);
    while let Some(r) = attempts.join_next().await {
        match r {
            Ok(Ok(link)) => links.push(link),
            Ok(Err(e)) => errors.add(&e.kind()),
            Err(_) => errors.add("task failed"),
        }
    }
    let connect_s = started.elapsed().as_secs_f64();
    let cpu_after = broker.and_then(Proc::cpu_seconds);
    let gen_after = Proc::Own.cpu_seconds();
    tokio::time::sleep(plan.hold).await;
    let rss_after = broker.and_then(Proc::rss_kib);
    let open = links.iter_mut().map(|l| !l.reader.peer_closed()).filter(|&open| open).count();

    let (transport, scenario, mut params) = match &*kind {
        Kind::Mqtt { subscribe, .. } => ("tcp", "idle", json!({"subscribe": subscribe})),
        Kind::Relay(e) => (e.transport.name(), "relay-idle", json!({})),
    };
    params["conns"] = json!(plan.conns);
    params["conc"] = json!(plan.conc);
    params["hold_s"] = json!(plan.hold.as_secs_f64());
    let mut row = Row::new(scenario, meta, transport, params);
    let ok = links.len();
    row.set("connected", ok);
    row.set("open_after_hold", open);
    row.set("connect_s", round(connect_s, 3));
    row.set("conn_per_s", round(ok as f64 / connect_s.max(1e-9), 0));
    if let (Some(a), Some(b)) = (rss_before, rss_after) {
        row.set("broker_rss_before_kib", a);
        row.set("broker_rss_after_kib", b);
        if ok > 0 {
            row.set("broker_kib_per_conn", round((b as f64 - a as f64) / ok as f64, 3));
        }
    }
    if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
        row.set("broker_cpu_util", round((b - a) / connect_s.max(1e-9), 3));
        if ok > 0 {
            row.set("broker_cpu_us_per_connect", round((b - a) * 1e6 / ok as f64, 1));
        }
    }
    if let (Some(a), Some(b)) = (gen_before, gen_after) {
        row.set("gen_cpu_util", round((b - a) / connect_s.max(1e-9), 3));
    }
    row.set("errors", errors.to_json());
    row.into_value()
}
