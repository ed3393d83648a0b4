//! The relay scenarios, mirrors of the MQTT ones so that their rates can be compared on the
//! same broker: `relay-pairs` (pairs), `relay-room` (fanout) and `relay-latency` (latency).
//!
//! - `relay-pairs N`: N receivers register `lg<tag>r<i>`, N senders register `lg<tag>s<i>` and
//!   `send` to their receiver; a window of W per pair.
//! - `relay-room S`: S members and one sender join one room (S + 1 members); each `room_send`
//!   reaches the S others, so it costs S credits of a window of W×S.
//! - `relay-latency N`: as pairs, paced at a fixed total rate, open loop.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Endpoint, Receiver, Sender, join};
use crate::error::SetupError;
use crate::run::{self, Ctx, Pacer, Timing};
use crate::stats::{Meta, Row, percentiles_us, round};
use crate::window::Window;

/// What every relay scenario is given.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The relay listener.
    pub(crate) endpoint: Endpoint,
    /// Characters of `ct` per message (at least the stamp's 24).
    pub(crate) payload: usize,
    /// Warm-up and measured interval.
    pub(crate) timing: Timing,
    /// Stall timeout of the windows.
    pub(crate) stall: Duration,
    /// Who the row is about.
    pub(crate) meta: Meta,
}

fn finish_row(cfg: &Config, scenario: &str, params: Value, interval: &crate::stats::Interval) -> Row {
    let mut row = Row::new(scenario, &cfg.meta, cfg.endpoint.transport.name(), params);
    interval.write(&mut row);
    row
}

/// `relay-pairs`: N senders, each `send`ing to its own receiver, window W per pair.
pub(crate) async fn pairs(cfg: &Config, n: u32, window: u32) -> Result<Value, SetupError> {
    let tag = run::run_tag();
    let windows = (0..n).map(|_| Window::new(u64::from(window))).collect();
    let (ctx, stopper) = Ctx::new(windows, cfg.stall);
    let mut tasks = Vec::new();
    for i in 0..n {
        let link = cfg.endpoint.registered(&format!("lg{tag}r{i}")).await?;
        tasks.push(run::spawn_receiver(link, Receiver, ctx.clone()));
    }
    for i in 0..n {
        let link = cfg.endpoint.registered(&format!("lg{tag}s{i}")).await?;
        let wire = Sender::to_addr(&format!("lg{tag}r{i}"), cfg.payload);
        tasks.push(run::spawn_closed_sender(link, wire, ctx.clone(), i, 1));
    }
    let interval = run::measure(&ctx, cfg.timing, cfg.meta.broker).await;
    let out = run::finish(stopper, tasks, &ctx).await;
    let params = json!({"pairs": n, "window": window, "payload": cfg.payload});
    let mut row = finish_row(cfg, "relay-pairs", params, &interval);
    row.set("latency_us", percentiles_us(&out.latency));
    row.set("latency_from", "send time (closed loop: includes the window's queueing)");
    row.set("errors", ctx.errors.to_json());
    Ok(row.into_value())
}

/// `relay-room`: one sender and S members in one room, window W×S.
pub(crate) async fn room(cfg: &Config, subs: u32, window: u32) -> Result<Value, SetupError> {
    let tag = run::run_tag();
    let room = format!("lg{tag}room");
    let cost = u64::from(subs);
    let (ctx, stopper) = Ctx::new(vec![Window::new(u64::from(window) * cost)], cfg.stall);
    let mut tasks = Vec::new();
    for i in 0..subs {
        let mut link = cfg.endpoint.registered(&format!("lg{tag}m{i}")).await?;
        join(&mut link, &room).await?;
        tasks.push(run::spawn_receiver(link, Receiver, ctx.clone()));
    }
    let mut link = cfg.endpoint.registered(&format!("lg{tag}s0")).await?;
    let members = join(&mut link, &room).await?;
    if members != cost + 1 {
        ctx.errors.add("joined_room: member count is not subs + 1");
    }
    tasks.push(run::spawn_closed_sender(link, Sender::to_room(&room, cfg.payload), ctx.clone(), 0, cost));
    let interval = run::measure(&ctx, cfg.timing, cfg.meta.broker).await;
    let out = run::finish(stopper, tasks, &ctx).await;
    let params = json!({"subs": subs, "window": window, "payload": cfg.payload});
    let mut row = finish_row(cfg, "relay-room", params, &interval);
    row.set("room_members", members);
    row.set("latency_us", percentiles_us(&out.latency));
    row.set("latency_from", "send time (closed loop: includes the window's queueing)");
    row.set("errors", ctx.errors.to_json());
    Ok(row.into_value())
}

/// `relay-latency`: N pairs at `rate` sends per second in all, open loop.
pub(crate) async fn latency(cfg: &Config, n: u32, rate: f64) -> Result<Value, SetupError> {
    let tag = run::run_tag();
    let windows = (0..n).map(|_| Window::new(u64::MAX)).collect();
    let (ctx, stopper) = Ctx::new(windows, cfg.stall);
    let mut tasks = Vec::new();
    for i in 0..n {
        let link = cfg.endpoint.registered(&format!("lg{tag}r{i}")).await?;
        tasks.push(run::spawn_receiver(link, Receiver, ctx.clone()));
    }
    let mut links = Vec::new();
    for i in 0..n {
        links.push(cfg.endpoint.registered(&format!("lg{tag}s{i}")).await?);
    }
    let (pacer, ticks) = Pacer::start(ctx.clock, rate, links.len());
    for (i, (link, ticks)) in links.into_iter().zip(ticks).enumerate() {
        let wire = Sender::to_addr(&format!("lg{tag}r{i}"), cfg.payload);
        tasks.push(run::spawn_paced_sender(link, wire, ctx.clone(), i as u32, ticks));
    }
    let interval = run::measure(&ctx, cfg.timing, cfg.meta.broker).await;
    let skipped = pacer.stop().await;
    let out = run::finish(stopper, tasks, &ctx).await;
    ctx.errors.add_n("pacer: sender too far behind, tick skipped", skipped);
    let params = json!({"pairs": n, "rate": rate, "payload": cfg.payload});
    let mut row = finish_row(cfg, "relay-latency", params, &interval);
    row.set("rate_achieved", round(interval.sent as f64 / (rate * interval.elapsed_s), 3));
    row.set("latency_us", percentiles_us(&out.latency));
    row.set("latency_from", "intended send time (open loop, coordinated-omission safe)");
    row.set("send_lag_us", percentiles_us(&out.send_lag));
    row.set("errors", ctx.errors.to_json());
    Ok(row.into_value())
}
