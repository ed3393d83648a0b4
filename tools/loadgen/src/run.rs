//! The machinery every load scenario shares: the tasks that drive links, the pacer of the open
//! loop, the measured interval, and stopping.
//!
//! A scenario builds its links, hands each to a task — a receiver, a closed-loop sender or a
//! paced sender — together with a [`Wire`] that knows the protocol, lets them run through
//! `--warmup`, measures over `--duration`, and stops them. The tasks only count; what a message
//! means is the wire's business.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::link::{Event, Link, Writer};
use crate::procfs::Proc;
use crate::stamp::{Clock, Stamp};
use crate::stats::{Counters, Errors, Interval, Snapshot, histogram};
use crate::window::Window;

/// Messages a closed-loop sender writes in one batch at most.
const MAX_BATCH: u64 = 64;
/// Ticks a paced sender may fall behind before the pacer skips (and counts) ticks for it.
const MAX_PACED_BACKLOG: u64 = 100_000;
/// How long stopped tasks get to finish before they are aborted.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// What an incoming message means for the load.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// A load message arrived, with its stamp if it could be read.
    Delivery(Option<Stamp>),
    /// A sender's message was acknowledged (MQTT PUBACK).
    Ack,
    /// A sender's message was refused or parked (a relay `error` or `queued`): it will not be
    /// delivered, so its credits go back to the window.
    Refused,
    /// Nothing for the counters (already counted in the errors if unexpected).
    Ignored,
}

/// A protocol's view of load messages.
pub(crate) trait Wire: Send + 'static {
    /// Queues one load message carrying `stamp`.
    fn put(&mut self, w: &mut Writer, stamp: Stamp);
    /// Says what `msg` means, counting anything unexpected in `errors`; may queue an answer.
    fn read(&mut self, msg: &[u8], w: &mut Writer, errors: &Errors) -> Incoming;
}

/// What every task of a run shares.
pub(crate) struct Ctx {
    /// The run's clock.
    pub(crate) clock: Clock,
    /// Message counters.
    pub(crate) counters: Counters,
    /// Error counts by kind.
    pub(crate) errors: Errors,
    /// One window per sender, indexed by the sender's stamp source.
    pub(crate) windows: Vec<Window>,
    /// How long a window waits for credits before writing them off.
    pub(crate) stall: Duration,
    stop: watch::Receiver<bool>,
}

/// Stops a run's tasks.
pub(crate) struct Stopper(watch::Sender<bool>);

impl Ctx {
    /// A context with the given windows, and the handle that stops its tasks.
    pub(crate) fn new(windows: Vec<Window>, stall: Duration) -> (Arc<Ctx>, Stopper) {
        let (tx, rx) = watch::channel(false);
        let ctx = Ctx {
            clock: Clock::new(),
            counters: Counters::default(),
            errors: Errors::default(),
            windows,
            stall,
            stop: rx,
        };
        (Arc::new(ctx), Stopper(tx))
    }

    /// Resolves once the run is stopped.
    pub(crate) async fn stopped(&self) {
        let _ = self.stop.clone().wait_for(|s| *s).await;
    }

    /// Adds the windows' written-off credits to the errors.
    pub(crate) fn count_written_off(&self) {
        let lost: u64 = self.windows.iter().map(Window::written_off).sum();
        self.errors.add_n("no delivery within the stall timeout: written off", lost);
    }
}

/// What a task measured.
pub(crate) struct TaskOut {
    /// End-to-end latency samples (receivers).
    pub(crate) latency: Histogram<u64>,
    /// How late the paced sender wrote, against the intended time (paced senders).
    pub(crate) send_lag: Histogram<u64>,
}

impl TaskOut {
    /// No samples.
    pub(crate) fn empty() -> TaskOut {
        TaskOut { latency: histogram(), send_lag: histogram() }
    }
}

/// Credits to give back when a sender's message is refused: (window, credits).
type Refund = Option<(usize, u64)>;

/// Handles everything read so far; `false` if the link cannot go on.
fn drain(link: &mut Link, wire: &mut impl Wire, ctx: &Ctx, refund: Refund, out: &mut TaskOut) -> bool {
    let now = ctx.clock.now_ns();
    let measuring = ctx.counters.measuring();
    let (mut delivered, mut acks) = (0, 0);
    let ok = loop {
        let event = match link.reader.next() {
            Ok(Some(event)) => event,
            Ok(None) => break true,
            Err(e) => {
                ctx.errors.add(&e.to_string());
                break false;
            }
        };
        match event {
            Event::Message(msg) => match wire.read(msg, &mut link.writer, &ctx.errors) {
                Incoming::Delivery(Some(stamp)) => {
                    match ctx.windows.get(stamp.source as usize) {
                        Some(w) => w.give_back(1),
                        None => ctx.errors.add("delivery from an unknown sender"),
                    }
                    delivered += 1;
                    if measuring {
                        out.latency.saturating_record(now.saturating_sub(stamp.sent_ns).max(1));
                    }
                }
                Incoming::Delivery(None) => ctx.errors.add("delivery without a readable stamp"),
                Incoming::Ack => acks += 1,
                Incoming::Refused => {
                    if let Some((w, credits)) = refund {
                        ctx.windows[w].give_back(credits);
                    }
                }
                Incoming::Ignored => {}
            },
            Event::Ping(payload) => link.writer.pong(payload),
            Event::Close(code) => {
                ctx.errors.add(&format!("websocket closed by the broker (code {})", code.unwrap_or(1005)));
                break false;
            }
        }
    };
    ctx.counters.delivered.fetch_add(delivered, Relaxed);
    ctx.counters.acks.fetch_add(acks, Relaxed);
    ok
}

/// Reads more; `false` (counted) when the link is closed or broken.
fn filled(r: std::io::Result<bool>, ctx: &Ctx) -> bool {
    match r {
        Ok(true) => true,
        Ok(false) => {
            ctx.errors.add("connection closed by the broker");
            false
        }
        Err(e) => {
            ctx.errors.add(&format!("read: {:?}", e.kind()));
            false
        }
    }
}

async fn flushed(link: &mut Link, ctx: &Ctx) -> bool {
    match link.writer.flush().await {
        Ok(()) => true,
        Err(e) => {
            ctx.errors.add(&format!("write: {:?}", e.kind()));
            false
        }
    }
}

/// A receiver: counts deliveries, gives their credits back, records latency while measuring.
pub(crate) fn spawn_receiver(mut link: Link, mut wire: impl Wire, ctx: Arc<Ctx>) -> JoinHandle<TaskOut> {
    tokio::spawn(async move {
        let mut out = TaskOut::empty();
        loop {
            tokio::select! {
                biased;
                _ = ctx.stopped() => break,
                r = link.reader.fill() => if !filled(r, &ctx) { break },
            }
            if !drain(&mut link, &mut wire, &ctx, None, &mut out) {
                break;
            }
            if link.writer.has_pending() && !flushed(&mut link, &ctx).await {
                break;
            }
        }
        out
    })
}

/// A closed-loop sender with window `source`; each message costs `cost` credits.
pub(crate) fn spawn_closed_sender(
    mut link: Link,
    mut wire: impl Wire,
    ctx: Arc<Ctx>,
    source: u32,
    cost: u64,
) -> JoinHandle<TaskOut> {
    tokio::spawn(async move {
        let mut out = TaskOut::empty();
        let refund = Some((source as usize, cost));
        loop {
            tokio::select! {
                biased;
                _ = ctx.stopped() => break,
                r = link.reader.fill() => {
                    if !filled(r, &ctx) || !drain(&mut link, &mut wire, &ctx, refund, &mut out) {
                        break;
                    }
                    if link.writer.has_pending() && !flushed(&mut link, &ctx).await {
                        break;
                    }
                }
                n = ctx.windows[source as usize].take(cost, MAX_BATCH, ctx.stall) => {
                    let stamp = Stamp { sent_ns: ctx.clock.now_ns(), source };
                    for _ in 0..n {
                        wire.put(&mut link.writer, stamp);
                    }
                    if !flushed(&mut link, &ctx).await {
                        break;
                    }
                    ctx.counters.sent.fetch_add(n, Relaxed);
                }
            }
        }
        out
    })
}

/// The pacer's side of a paced sender: intended send times, and how many are waiting.
pub(crate) struct Ticks {
    rx: mpsc::UnboundedReceiver<u64>,
    backlog: Arc<AtomicU64>,
}

/// A paced (open-loop) sender: writes one message per tick of the pacer, stamped with the
/// tick's intended time, so that a broker (or generator) stall shows up in the latency of
/// every message it delayed instead of in fewer samples (no coordinated omission).
pub(crate) fn spawn_paced_sender(
    mut link: Link,
    mut wire: impl Wire,
    ctx: Arc<Ctx>,
    source: u32,
    mut ticks: Ticks,
) -> JoinHandle<TaskOut> {
    tokio::spawn(async move {
        let mut out = TaskOut::empty();
        loop {
            tokio::select! {
                biased;
                _ = ctx.stopped() => break,
                tick = ticks.rx.recv() => {
                    let Some(mut intended) = tick else { break };
                    let now = ctx.clock.now_ns();
                    let mut n = 0;
                    loop {
                        if ctx.counters.measuring() {
                            out.send_lag.saturating_record(now.saturating_sub(intended).max(1));
                        }
                        wire.put(&mut link.writer, Stamp { sent_ns: intended, source });
                        n += 1;
                        match ticks.rx.try_recv() {
                            Ok(next) => intended = next,
                            Err(_) => break,
                        }
                    }
                    ticks.backlog.fetch_sub(n, Relaxed);
                    if !flushed(&mut link, &ctx).await {
                        break;
                    }
                    ctx.counters.sent.fetch_add(n, Relaxed);
                }
                r = link.reader.fill() => {
                    if !filled(r, &ctx) || !drain(&mut link, &mut wire, &ctx, None, &mut out) {
                        break;
                    }
                    if link.writer.has_pending() && !flushed(&mut link, &ctx).await {
                        break;
                    }
                }
            }
        }
        out
    })
}

/// Paces ticks on an OS thread of its own: `rate` ticks per second in all, dealt round-robin to
/// the senders. Sleeping there (with the timer slack at its minimum) is precise to tens of
/// microseconds, where Tokio's timer rounds to milliseconds.
pub(crate) struct Pacer {
    stop: Arc<AtomicBool>,
    skipped: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pacer {
    /// Starts pacing for `senders` paced senders; returns the pacer and each sender's ticks.
    pub(crate) fn start(clock: Clock, rate: f64, senders: usize) -> (Pacer, Vec<Ticks>) {
        let mut txs = Vec::with_capacity(senders);
        let mut ticks = Vec::with_capacity(senders);
        for _ in 0..senders {
            let (tx, rx) = mpsc::unbounded_channel();
            let backlog = Arc::new(AtomicU64::new(0));
            txs.push((tx, backlog.clone()));
            ticks.push(Ticks { rx, backlog });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let skipped = Arc::new(AtomicU64::new(0));
        let (stop2, skipped2) = (stop.clone(), skipped.clone());
        let thread = std::thread::Builder::new()
            .name("pacer".into())
            .spawn(move || {
                // 1 ns: wake when asked, not up to 50 µs later as the default slack allows.
                let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
                let period = 1e9 / rate;
                let start = clock.now_ns() + 1_000_000;
                for j in 0u64.. {
                    if stop2.load(Relaxed) {
                        break;
                    }
                    let intended = start + (j as f64 * period) as u64;
                    let now = clock.now_ns();
                    if intended > now {
                        std::thread::sleep(Duration::from_nanos(intended - now));
                    }
                    let (tx, backlog) = &txs[(j % txs.len() as u64) as usize];
                    if backlog.load(Relaxed) >= MAX_PACED_BACKLOG {
                        skipped2.fetch_add(1, Relaxed);
                        continue;
                    }
                    backlog.fetch_add(1, Relaxed);
                    if tx.send(intended).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn the pacer thread");
        (Pacer { stop, skipped, thread: Some(thread) }, ticks)
    }

    /// Stops the thread and returns how many ticks it skipped because a sender was too far
    /// behind.
    pub(crate) async fn stop(mut self) -> u64 {
        self.stop.store(true, Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.skipped.load(Relaxed)
    }
}

/// Warm-up and measured interval lengths.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    /// Seconds of load before measuring.
    pub(crate) warmup: Duration,
    /// Seconds measured.
    pub(crate) duration: Duration,
}

/// Lets the load run through the warm-up, then measures one interval.
pub(crate) async fn measure(ctx: &Ctx, timing: Timing, broker: Option<Proc>) -> Interval {
    tokio::time::sleep(timing.warmup).await;
    let a = Snapshot::take(&ctx.counters, broker);
    ctx.counters.measuring.store(true, Relaxed);
    tokio::time::sleep(timing.duration).await;
    ctx.counters.measuring.store(false, Relaxed);
    let b = Snapshot::take(&ctx.counters, broker);
    Interval::between(a, b)
}

/// Stops every task, waits (bounded) for them, and merges their histograms.
pub(crate) async fn finish(stopper: Stopper, tasks: Vec<JoinHandle<TaskOut>>, ctx: &Ctx) -> TaskOut {
    let _ = stopper.0.send(true);
    let deadline = tokio::time::Instant::now() + STOP_GRACE;
    let mut all = TaskOut::empty();
    for mut task in tasks {
        match tokio::time::timeout_at(deadline, &mut task).await {
            Ok(Ok(out)) => {
                let _ = all.latency.add(&out.latency);
                let _ = all.send_lag.add(&out.send_lag);
            }
            Ok(Err(_)) => ctx.errors.add("task failed"),
            Err(_) => {
                task.abort();
                ctx.errors.add("task did not stop in time");
            }
        }
    }
    ctx.count_written_off();
    all
}

/// A tag that keeps this run's topics, client ids and addresses apart from any other run's.
pub(crate) fn run_tag() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    format!("{:x}", (u64::from(std::process::id()) << 32 | u64::from(nanos)) % 0xffff_ffff)
}
