//! The MQTT scenarios: `pairs`, `fanout`, `fanin` (closed loop) and `latency` (open loop).
//!
//! | scenario | receivers | senders | windows |
//! |---|---|---|---|
//! | pairs N | N, each on its own topic | N, one per topic | one of W per pair |
//! | fanout S | S on one topic | 1 | one of W×S: a message costs S credits |
//! | fanin P | 1 on `…/#` | P, each on its own topic | one of W per publisher |
//! | latency N | as pairs | as pairs, paced at a total rate | none |
//!
//! Receivers are connected and subscribed before any sender exists, so every message sent has
//! its receivers.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Credentials, Publisher, Subscriber, connect, subscribe};
use crate::error::SetupError;
use crate::run::{self, Ctx, Pacer, Timing};
use crate::stats::{Meta, Row, percentiles_us};
use crate::window::Window;

/// What every MQTT scenario is given.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The broker.
    pub(crate) addr: SocketAddr,
    /// QoS of subscriptions and publishes (0 or 1).
    pub(crate) qos: u8,
    /// Payload bytes per message.
    pub(crate) payload: usize,
    /// Credentials for every connection.
    pub(crate) creds: Credentials,
    /// Warm-up and measured interval.
    pub(crate) timing: Timing,
    /// Stall timeout of the windows.
    pub(crate) stall: Duration,
    /// Who the row is about.
    pub(crate) meta: Meta,
}

/// The shape of a closed-loop scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// N publisher → subscriber pairs.
    Pairs(u32),
    /// One publisher, S subscribers of its topic.
    Fanout(u32),
    /// P publishers, one subscriber of `…/#`.
    Fanin(u32),
}

impl Shape {
    fn scenario(self) -> &'static str {
        match self {
            Shape::Pairs(_) => "pairs",
            Shape::Fanout(_) => "fanout",
            Shape::Fanin(_) => "fanin",
        }
    }
}

/// Topics and windows of a shape: (receiver filters, sender topics, credits per message).
fn topology(shape: Shape, tag: &str) -> (Vec<String>, Vec<String>, u64) {
    match shape {
        Shape::Pairs(n) => {
            let topics: Vec<String> = (0..n).map(|i| format!("lg/{tag}/p/{i}")).collect();
            (topics.clone(), topics, 1)
        }
        Shape::Fanout(s) => {
            (vec![format!("lg/{tag}/f"); s as usize], vec![format!("lg/{tag}/f")], u64::from(s))
        }
        Shape::Fanin(p) => {
            (vec![format!("lg/{tag}/i/#")], (0..p).map(|i| format!("lg/{tag}/i/{i}")).collect(), 1)
        }
    }
}

async fn receivers(
    cfg: &Config,
    tag: &str,
    filters: &[String],
    ctx: &std::sync::Arc<Ctx>,
) -> Result<Vec<tokio::task::JoinHandle<run::TaskOut>>, SetupError> {
    let mut tasks = Vec::with_capacity(filters.len());
    for (i, filter) in filters.iter().enumerate() {
        let mut link = connect(cfg.addr, &format!("lg{tag}s{i}"), &cfg.creds).await?;
        subscribe(&mut link, filter, cfg.qos).await?;
        tasks.push(run::spawn_receiver(link, Subscriber, ctx.clone()));
    }
    Ok(tasks)
}

/// Runs a closed-loop scenario with a window of `window` deliveries per sender.
pub(crate) async fn throughput(cfg: &Config, shape: Shape, window: u32) -> Result<Value, SetupError> {
    let tag = run::run_tag();
    let (filters, topics, cost) = topology(shape, &tag);
    let windows = topics.iter().map(|_| Window::new(u64::from(window) * cost)).collect();
    let (ctx, stopper) = Ctx::new(windows, cfg.stall);
    let mut tasks = receivers(cfg, &tag, &filters, &ctx).await?;
    for (i, topic) in topics.into_iter().enumerate() {
        let link = connect(cfg.addr, &format!("lg{tag}p{i}"), &cfg.creds).await?;
        let wire = Publisher::new(topic, cfg.qos, cfg.payload);
        tasks.push(run::spawn_closed_sender(link, wire, ctx.clone(), i as u32, cost));
    }
    let interval = run::measure(&ctx, cfg.timing, cfg.meta.broker).await;
    let out = run::finish(stopper, tasks, &ctx).await;

    let mut params = json!({"qos": cfg.qos, "window": window, "payload": cfg.payload});
    match shape {
        Shape::Pairs(n) => params["pairs"] = json!(n),
        Shape::Fanout(s) => params["subs"] = json!(s),
        Shape::Fanin(p) => params["pubs"] = json!(p),
    }
    let mut row = Row::new(shape.scenario(), &cfg.meta, "tcp", params);
    interval.write(&mut row);
    row.set("latency_us", percentiles_us(&out.latency));
    row.set("latency_from", "send time (closed loop: includes the window's queueing)");
    row.set("errors", ctx.errors.to_json());
    Ok(row.into_value())
}

/// Runs `pairs` publisher → subscriber pairs at `rate` messages per second in all.
pub(crate) async fn latency(cfg: &Config, pairs: u32, rate: f64) -> Result<Value, SetupError> {
    let tag = run::run_tag();
    let (filters, topics, _) = topology(Shape::Pairs(pairs), &tag);
    // Windows exist only to map a delivery's source; a paced sender never waits on them.
    let windows = topics.iter().map(|_| Window::new(u64::MAX)).collect();
    let (ctx, stopper) = Ctx::new(windows, cfg.stall);
    let mut tasks = receivers(cfg, &tag, &filters, &ctx).await?;
    let mut links = Vec::with_capacity(topics.len());
    for i in 0..topics.len() {
        links.push(connect(cfg.addr, &format!("lg{tag}p{i}"), &cfg.creds).await?);
    }
    let (pacer, ticks) = Pacer::start(ctx.clock, rate, links.len());
    for (i, ((link, topic), ticks)) in links.into_iter().zip(topics).zip(ticks).enumerate() {
        let wire = Publisher::new(topic, cfg.qos, cfg.payload);
        tasks.push(run::spawn_paced_sender(link, wire, ctx.clone(), i as u32, ticks));
    }
    let interval = run::measure(&ctx, cfg.timing, cfg.meta.broker).await;
    let skipped = pacer.stop().await;
    let out = run::finish(stopper, tasks, &ctx).await;
    ctx.errors.add_n("pacer: sender too far behind, tick skipped", skipped);

    let params = json!({"qos": cfg.qos, "pairs": pairs, "rate": rate, "payload": cfg.payload});
    let mut row = Row::new("latency", &cfg.meta, "tcp", params);
    interval.write(&mut row);
    row.set("rate_achieved", crate::stats::round(interval.sent as f64 / (rate * interval.elapsed_s), 3));
    row.set("latency_us", percentiles_us(&out.latency));
    row.set("latency_from", "intended send time (open loop, coordinated-omission safe)");
    row.set("send_lag_us", percentiles_us(&out.send_lag));
    row.set("errors", ctx.errors.to_json());
    Ok(row.into_value())
}
