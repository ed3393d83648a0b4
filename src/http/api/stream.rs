//! `GET /api/v1/stats/stream`: broker statistics as server-sent events, one `sample` event a
//! second, for the console's live chart.
//!
//! Each sample carries the gauges (connections, sessions, subscriptions, retained messages) and
//! the rates since the previous sample (messages in and out, deliveries dropped, per second).
//! The stream is authenticated like every API route (the guard runs first), and bounded:
//!
//! - at most [`MAX_STREAMS`] are open on a server at once; one more is `503 too_many_streams`;
//! - a stream opened under a browser session ends at the first tick after that session ends
//!   (log out, idle timeout, eviction);
//! - each ends after [`EVENTS_PER_STREAM`] samples (ten minutes). `EventSource` reconnects by
//!   itself (the first event says `retry: 1000`), and a reconnection is authenticated again, so
//!   a revoked token's or a removed administrator's stream stops within ten minutes at most;
//! - every stream ends when the server shuts down.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use futures_util::Stream;
use mesgd_core::broker::Stats;
use serde::Serialize;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::ApiError;
use super::auth::Principal;
use crate::context::ServerContext;

/// How many statistics streams may be open on one server at once.
pub(crate) const MAX_STREAMS: usize = 16;

/// How many samples one stream sends before it ends (the browser reconnects).
pub(crate) const EVENTS_PER_STREAM: u32 = 600;

/// The time between samples.
const TICK: Duration = Duration::from_secs(1);

/// How long the browser waits before reconnecting a stream that ended.
const RETRY: Duration = Duration::from_millis(1000);

/// One sample of the broker's statistics (the `data` of a `sample` event).
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Sample {
    /// When it was taken, in Unix milliseconds.
    t: u64,
    /// Connected clients.
    connections: u64,
    sessions: usize,
    subscriptions: usize,
    retained: usize,
    /// Messages received per second since the previous sample.
    messages_in_per_s: f64,
    /// Messages sent per second since the previous sample.
    messages_out_per_s: f64,
    /// Deliveries dropped per second since the previous sample.
    dropped_per_s: f64,
}

/// The counters a rate is computed from.
#[derive(Clone, Copy)]
struct Totals {
    at: Instant,
    received: u64,
    sent: u64,
    dropped: u64,
}

impl Totals {
    fn read(ctx: &ServerContext) -> Totals {
        let s = ctx.broker.stats();
        Totals {
            at: Instant::now(),
            received: Stats::get(&s.messages_received),
            sent: Stats::get(&s.messages_sent),
            dropped: Stats::get(&s.messages_dropped),
        }
    }
}

/// The per-second rate of a counter between two readings (0 over no time).
fn rate(now: u64, before: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    // Counters only grow, but a reading may race a reset-free add: never report a negative.
    (now.saturating_sub(before) as f64 / seconds * 10.0).round() / 10.0
}

fn sample(ctx: &ServerContext, now: Totals, before: Totals) -> Sample {
    let b = &ctx.broker;
    let seconds = now.at.duration_since(before.at).as_secs_f64();
    Sample {
        t: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
        connections: Stats::get(&b.stats().clients_connected),
        sessions: b.session_count(),
        subscriptions: b.router().len(),
        retained: b.retained().len(),
        messages_in_per_s: rate(now.received, before.received, seconds),
        messages_out_per_s: rate(now.sent, before.sent, seconds),
        dropped_per_s: rate(now.dropped, before.dropped, seconds),
    }
}

/// What a stream carries from one sample to the next.
struct Ticker {
    ctx: Arc<ServerContext>,
    interval: Interval,
    stopping: tokio::sync::watch::Receiver<bool>,
    last: Totals,
    sent: u32,
    /// The browser session the stream was opened under, if any.
    session: Option<String>,
    /// Held for the stream's life: the stream's place among [`MAX_STREAMS`].
    _permit: OwnedSemaphorePermit,
}

impl Ticker {
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Ticker)> {
        if self.sent >= EVENTS_PER_STREAM || *self.stopping.borrow() {
            return None;
        }
        tokio::select! {
            _ = self.interval.tick() => {}
            _ = self.stopping.changed() => return None,
        }
        if let Some(id) = &self.session {
            if !self.ctx.api.sessions.is_open(id, crate::clock::now()) {
                return None;
            }
        }
        let now = Totals::read(&self.ctx);
        let data = sample(&self.ctx, now, self.last);
        self.last = now;
        let mut event = Event::default().event("sample").json_data(&data).unwrap_or_default();
        if self.sent == 0 {
            event = event.retry(RETRY);
        }
        self.sent += 1;
        Some((Ok(event), self))
    }
}

/// `GET /api/v1/stats/stream`
#[utoipa::path(
    get,
    path = "/stats/stream",
    tag = "broker",
    responses(
        (status = 200, description = "Server-sent events: a `sample` event (a Sample as JSON) every second, 600 of them, then the stream ends", content_type = "text/event-stream", body = Sample),
        (status = 503, description = "Too many statistics streams are open", body = super::ErrorBody),
    )
)]
pub(crate) async fn stats_stream(
    State(ctx): State<Arc<ServerContext>>,
    Extension(principal): Extension<Principal>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let permit = ctx.api.streams.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            format!("{MAX_STREAMS} statistics streams are open already: close one (or wait for one to end)"),
        )
    })?;
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let ticker = Ticker {
        stopping: ctx.content.stopping(),
        last: Totals::read(&ctx),
        ctx,
        interval,
        sent: 0,
        session: match principal {
            Principal::Session { id, .. } => Some(id),
            Principal::Token { .. } => None,
        },
        _permit: permit,
    };
    Ok(Sse::new(futures_util::stream::unfold(ticker, Ticker::next)))
}

#[cfg(test)]
mod tests {
    use super::rate;

    #[test]
    fn rates_are_per_second_and_never_negative() {
        assert_eq!(rate(150, 50, 2.0), 50.0);
        assert_eq!(rate(10, 10, 1.0), 0.0);
        assert_eq!(rate(5, 9, 1.0), 0.0);
        assert_eq!(rate(9, 5, 0.0), 0.0);
        assert_eq!(rate(1, 0, 3.0), 0.3);
    }
}
