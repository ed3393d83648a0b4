//! `relay-backlog`: how long a `register` takes to flush a store-and-forward backlog.
//!
//! Each round, a registered sender `send`s M messages to an address nobody holds (each answered
//! `queued`); then a new connection registers that address, and the time from writing the
//! `register` to reading `registered` is the flush time: the relay sends the backlog as
//! `deliver` frames strictly before `registered{queued: M}` (docs/relay.md). The round checks
//! that exactly M deliveries came, in order, and that `registered` says M. Rounds run one after
//! another, so each flush has the relay to itself.

use std::time::Instant;

use serde_json::{Value, json};

use super::load::Config;
use super::{REPLY_TIMEOUT, Reply, message_head, reply};
use crate::error::SetupError;
use crate::link::Link;
use crate::run;
use crate::stamp::{self, Stamp};
use crate::stats::{Errors, Row, histogram, percentiles_us};

/// `relay-backlog`: `rounds` rounds of an M-message backlog flushed by a `register`.
pub(crate) async fn backlog(cfg: &Config, messages: u32, rounds: u32) -> Result<Value, SetupError> {
    let tag = run::run_tag();
    let errors = Errors::default();
    let mut sender = cfg.endpoint.registered(&format!("lg{tag}s")).await?;
    let mut flush = histogram();
    for round in 0..rounds {
        let to = format!("lg{tag}b{round}");
        queue(&mut sender, &to, messages, cfg.payload, &errors).await?;
        let mut link = cfg.endpoint.open().await?;
        let body = json!({"t": "register", "addr": to}).to_string();
        let started = Instant::now();
        link.writer.message(|b| b.extend_from_slice(body.as_bytes()));
        link.writer.flush().await.map_err(SetupError::io("register"))?;
        let mut delivered = 0u32;
        let registered = loop {
            let msg = link.next_message("registered", REPLY_TIMEOUT).await?;
            match reply(&msg) {
                Reply::Delivery(Some(Stamp { source, .. })) => {
                    if source != delivered {
                        errors.add("backlog out of order");
                    }
                    delivered += 1;
                }
                Reply::Other(t) if t == "registered" => {
                    break serde_json::from_slice::<Value>(&msg).unwrap_or(Value::Null);
                }
                Reply::Error(m) => return Err(SetupError::Refused { what: "registered", reason: m }),
                other => errors.add(&format!("unexpected {other:?} before registered")),
            }
        };
        flush.saturating_record(started.elapsed().as_nanos() as u64);
        if delivered != messages {
            errors.add("backlog incomplete before registered");
        }
        if registered["queued"].as_u64() != Some(u64::from(messages)) {
            errors.add("registered.queued is not the backlog's size");
        }
    }
    let params = json!({"messages": messages, "rounds": rounds, "payload": cfg.payload});
    let mut row = Row::new("relay-backlog", &cfg.meta, cfg.endpoint.transport.name(), params);
    row.set("flush_us", percentiles_us(&flush));
    row.set("flush_from", "register written → registered read (the backlog comes before it)");
    row.set("errors", errors.to_json());
    Ok(row.into_value())
}

/// Sends `messages` messages to the offline address `to`, the i-th stamped with source i, and
/// waits for every `queued` answer.
async fn queue(
    link: &mut Link,
    to: &str,
    messages: u32,
    payload: usize,
    errors: &Errors,
) -> Result<(), SetupError> {
    let head = message_head("send", "to", to);
    for i in 0..messages {
        link.writer.message(|b| {
            b.extend_from_slice(&head);
            stamp::put_text(b, Stamp { sent_ns: 0, source: i }, payload);
            b.extend_from_slice(b"\"}");
        });
    }
    link.writer.flush().await.map_err(SetupError::io("queued"))?;
    let mut answered = 0;
    while answered < messages {
        match reply(&link.next_message("queued", REPLY_TIMEOUT).await?) {
            Reply::Queued => answered += 1,
            Reply::Error(m) => return Err(SetupError::Refused { what: "queued", reason: m }),
            other => errors.add(&format!("unexpected {other:?} while queueing")),
        }
    }
    Ok(())
}
