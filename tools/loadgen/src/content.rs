//! `content-fanout`: content-based routing over WebSocket (docs/content.md, seed 000).
//!
//! S listeners open a WebSocket on the URL path `PREFIX/kind=lg/run=TAG`; one sender opens its
//! own on `PREFIX/lg_sender=TAG`, a path its messages never match (they have no `lg_sender`
//! field), and sends `{"kind":"lg","run":TAG,"ts":STAMP}`, which every listener's path matches.
//! A message costs S credits of a window of W×S, as in the MQTT fan-out; each delivered message
//! gives one back.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::SetupError;
use crate::link::{Link, Writer};
use crate::mqtt::Credentials;
use crate::run::{self, Ctx, Incoming, Timing, Wire};
use crate::stamp::{self, Stamp};
use crate::stats::{Errors, Meta, Row, percentiles_us};
use crate::window::Window;

/// What the scenario is given.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The HTTP listener serving content routing.
    pub(crate) addr: SocketAddr,
    /// URL path prefix of the routing endpoint ("" when paths are served at the root).
    pub(crate) prefix: String,
    /// Characters of the `ts` field per message (at least the stamp's 24).
    pub(crate) payload: usize,
    /// `Authorization: Bearer` for every connection.
    pub(crate) creds: Credentials,
    /// Warm-up and measured interval.
    pub(crate) timing: Timing,
    /// Stall timeout of the window.
    pub(crate) stall: Duration,
    /// Who the row is about.
    pub(crate) meta: Meta,
}

#[derive(Deserialize)]
struct Routed<'a> {
    #[serde(borrow, default)]
    ts: Option<Cow<'a, str>>,
}

/// The stamp of a routed message, if it is one of ours.
fn routed_stamp(body: &[u8]) -> Option<Option<Stamp>> {
    let msg = serde_json::from_slice::<Routed<'_>>(body).ok()?;
    Some(msg.ts.as_deref().and_then(|ts| stamp::read_text(ts.as_bytes())))
}

struct Sender {
    head: Vec<u8>,
    payload: usize,
}

impl Wire for Sender {
    fn put(&mut self, w: &mut Writer, stamp: Stamp) {
        let (head, len) = (&self.head, self.payload);
        w.message(|b| {
            b.extend_from_slice(head);
            stamp::put_text(b, stamp, len);
            b.extend_from_slice(b"\"}");
        });
    }

    fn read(&mut self, _msg: &[u8], _w: &mut Writer, errors: &Errors) -> Incoming {
        errors.add("message to the sender");
        Incoming::Ignored
    }
}

struct Listener;

impl Wire for Listener {
    fn put(&mut self, _w: &mut Writer, _stamp: Stamp) {}

    fn read(&mut self, msg: &[u8], _w: &mut Writer, errors: &Errors) -> Incoming {
        match routed_stamp(msg) {
            Some(stamp) => Incoming::Delivery(stamp),
            None => {
                errors.add("listener got a message that is not a JSON object");
                Incoming::Ignored
            }
        }
    }
}

fn headers(creds: &Credentials) -> Vec<(String, String)> {
    creds.token.iter().map(|t| ("Authorization".to_owned(), format!("Bearer {t}"))).collect()
}

/// Runs the fan-out to `subs` listeners with a window of `window` messages.
pub(crate) async fn fanout(cfg: &Config, subs: u32, window: u32) -> Result<Value, SetupError> {
    let tag = run::run_tag();
    let cost = u64::from(subs);
    let (ctx, stopper) = Ctx::new(vec![Window::new(u64::from(window) * cost)], cfg.stall);
    let headers = headers(&cfg.creds);
    let prefix = cfg.prefix.trim_end_matches('/');
    let mut tasks = Vec::new();
    for _ in 0..subs {
        let link = Link::websocket(cfg.addr, &format!("{prefix}/kind=lg/run={tag}"), &headers).await?;
        tasks.push(run::spawn_receiver(link, Listener, ctx.clone()));
    }
    let link = Link::websocket(cfg.addr, &format!("{prefix}/lg_sender={tag}"), &headers).await?;
    let head = format!(r#"{{"kind":"lg","run":"{tag}","ts":""#).into_bytes();
    tasks.push(run::spawn_closed_sender(link, Sender { head, payload: cfg.payload }, ctx.clone(), 0, cost));
    let interval = run::measure(&ctx, cfg.timing, cfg.meta.broker).await;
    let out = run::finish(stopper, tasks, &ctx).await;
    let params = json!({"subs": subs, "window": window, "payload": cfg.payload});
    let mut row = Row::new("content-fanout", &cfg.meta, "ws", params);
    interval.write(&mut row);
    row.set("latency_us", percentiles_us(&out.latency));
    row.set("latency_from", "send time (closed loop: includes the window's queueing)");
    row.set("errors", ctx.errors.to_json());
    Ok(row.into_value())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_messages() {
        let s = stamp::Stamp { sent_ns: 99, source: 0 };
        let mut text = br#"{"kind":"lg","run":"r","ts":""#.to_vec();
        stamp::put_text(&mut text, s, 40);
        text.extend_from_slice(b"\"}");
        assert_eq!(routed_stamp(&text), Some(Some(s)));
        assert_eq!(routed_stamp(br#"{"kind":"other"}"#), Some(None));
        assert_eq!(routed_stamp(b"[1,2]"), None);
        assert_eq!(routed_stamp(b"not json"), None);
    }
}
