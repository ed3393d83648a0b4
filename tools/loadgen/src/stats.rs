//! What a run counts and how it becomes one JSON row.
//!
//! Tasks bump shared [`Counters`]; the measured interval is the difference of two
//! [`Snapshot`]s taken `--duration` apart after `--warmup`, together with the broker's and the
//! generator's CPU seconds over the same interval. Everything unexpected is counted in
//! [`Errors`] by kind and lands in the row, so a refused, stalled or dropped message is visible
//! instead of silently lowering a rate.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};

use crate::procfs::Proc;

/// Counters shared by every task of a run.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Load messages written to the broker.
    pub(crate) sent: AtomicU64,
    /// Load messages received by a receiver (one per receiver per message).
    pub(crate) delivered: AtomicU64,
    /// Acknowledgements received by senders (MQTT PUBACK).
    pub(crate) acks: AtomicU64,
    /// Set during the measured interval; latency samples are recorded only then.
    pub(crate) measuring: AtomicBool,
}

impl Counters {
    /// Whether the measured interval is running.
    pub(crate) fn measuring(&self) -> bool {
        self.measuring.load(Relaxed)
    }
}

/// Counts of what went wrong, by kind (an error frame's text, "connect refused", …).
#[derive(Debug, Default)]
pub(crate) struct Errors(Mutex<BTreeMap<String, u64>>);

impl Errors {
    /// Counts one occurrence of `kind`.
    pub(crate) fn add(&self, kind: &str) {
        self.add_n(kind, 1);
    }

    /// Counts `n` occurrences of `kind`.
    pub(crate) fn add_n(&self, kind: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(kind) {
            Some(count) => *count += n,
            None => {
                map.insert(kind.to_owned(), n);
            }
        }
    }

    /// The count of `kind` so far.
    #[cfg(test)]
    pub(crate) fn count(&self, kind: &str) -> u64 {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(kind).copied().unwrap_or(0)
    }

    /// Every kind seen, with its count, as a JSON object.
    pub(crate) fn to_json(&self) -> Value {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Value::Object(map.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
    }
}

/// A latency histogram in nanoseconds, 1 ns to 60 s at three significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Percentiles of a nanosecond histogram, in microseconds with one decimal; `null`s when empty.
pub(crate) fn percentiles_us(h: &Histogram<u64>) -> Value {
    let at = |q: f64| {
        if h.is_empty() { Value::Null } else { json!(round(h.value_at_quantile(q) as f64 / 1000.0, 1)) }
    };
    json!({"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "p999": at(0.999), "max": at(1.0), "count": h.len()})
}

/// `x` rounded to `digits` decimals (NaN and infinities become 0, which JSON can hold).
pub(crate) fn round(x: f64, digits: i32) -> f64 {
    if !x.is_finite() {
        return 0.0;
    }
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// Counters and CPU clocks at one moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot {
    at: Instant,
    sent: u64,
    delivered: u64,
    acks: u64,
    broker_cpu_s: Option<f64>,
    gen_cpu_s: Option<f64>,
}

impl Snapshot {
    /// Reads the counters and both processes' CPU seconds now.
    pub(crate) fn take(counters: &Counters, broker: Option<Proc>) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            sent: counters.sent.load(Relaxed),
            delivered: counters.delivered.load(Relaxed),
            acks: counters.acks.load(Relaxed),
            broker_cpu_s: broker.and_then(Proc::cpu_seconds),
            gen_cpu_s: Proc::Own.cpu_seconds(),
        }
    }
}

/// What happened between two snapshots.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Interval {
    /// Seconds between the snapshots.
    pub(crate) elapsed_s: f64,
    /// Messages sent.
    pub(crate) sent: u64,
    /// Messages delivered.
    pub(crate) delivered: u64,
    /// Acknowledgements received.
    pub(crate) acks: u64,
    /// The broker's CPU seconds, when a broker process was given and readable.
    pub(crate) broker_cpu_s: Option<f64>,
    /// The generator's CPU seconds.
    pub(crate) gen_cpu_s: Option<f64>,
}

impl Interval {
    /// The interval from `a` to `b`.
    pub(crate) fn between(a: Snapshot, b: Snapshot) -> Interval {
        Interval {
            elapsed_s: b.at.duration_since(a.at).as_secs_f64(),
            sent: b.sent - a.sent,
            delivered: b.delivered - a.delivered,
            acks: b.acks - a.acks,
            broker_cpu_s: a.broker_cpu_s.zip(b.broker_cpu_s).map(|(x, y)| y - x),
            gen_cpu_s: a.gen_cpu_s.zip(b.gen_cpu_s).map(|(x, y)| y - x),
        }
    }

    /// Writes the rates and CPU figures every throughput row has.
    pub(crate) fn write(&self, row: &mut Row) {
        let el = self.elapsed_s.max(1e-9);
        row.set("elapsed_s", round(el, 3));
        row.set("published_msgs_per_s", round(self.sent as f64 / el, 0));
        row.set("delivered_msgs_per_s", round(self.delivered as f64 / el, 0));
        if self.acks > 0 {
            row.set("acks_per_s", round(self.acks as f64 / el, 0));
        }
        if let Some(cpu) = self.broker_cpu_s {
            row.set("broker_cpu_util", round(cpu / el, 3));
            if self.delivered > 0 {
                row.set("broker_cpu_us_per_delivery", round(cpu * 1e6 / self.delivered as f64, 3));
            }
        }
        if let Some(cpu) = self.gen_cpu_s {
            row.set("gen_cpu_util", round(cpu / el, 3));
        }
    }
}

/// Who a row is about: the label and round given on the command line, and the broker process.
#[derive(Clone, Debug)]
pub(crate) struct Meta {
    /// The broker's name in the table (`mosquitto`, `mesgd`, …).
    pub(crate) label: String,
    /// The runner's round number.
    pub(crate) round: Option<u32>,
    /// The broker process whose CPU and memory are read.
    pub(crate) broker: Option<Proc>,
}

/// One JSON result row under construction. Keys come out sorted.
#[derive(Debug)]
pub(crate) struct Row(Map<String, Value>);

impl Row {
    /// A row for `scenario` over `transport` with its parameters.
    pub(crate) fn new(scenario: &str, meta: &Meta, transport: &str, params: Value) -> Row {
        let mut row = Row(Map::new());
        row.set("scenario", scenario);
        row.set("label", meta.label.as_str());
        if let Some(round) = meta.round {
            row.set("round", round);
        }
        row.set("transport", transport);
        row.set("params", params);
        if let Some(rss) = meta.broker.and_then(Proc::rss_kib) {
            row.set("broker_rss_kib", rss);
        }
        row
    }

    /// Sets `key`.
    pub(crate) fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.0.insert(key.to_owned(), value.into());
    }

    /// The finished row.
    pub(crate) fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_count_by_kind() {
        let e = Errors::default();
        e.add("rate limit exceeded");
        e.add_n("rate limit exceeded", 2);
        e.add("queued");
        e.add_n("never", 0);
        assert_eq!(e.to_json(), json!({"queued": 1, "rate limit exceeded": 3}));
        assert_eq!(e.count("rate limit exceeded"), 3);
    }

    #[test]
    fn percentiles_in_microseconds() {
        let mut h = histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let p = percentiles_us(&h);
        assert_eq!(p["count"], 1000);
        let p50 = p["p50"].as_f64().unwrap();
        let p99 = p["p99"].as_f64().unwrap();
        assert!((499.0..=501.0).contains(&p50), "{p}");
        assert!((989.0..=991.0).contains(&p99), "{p}");
        assert_eq!(percentiles_us(&histogram())["p50"], Value::Null);
    }

    #[test]
    fn interval_rates() {
        let counters = Counters::default();
        let a = Snapshot::take(&counters, None);
        counters.sent.store(500, Relaxed);
        counters.delivered.store(1000, Relaxed);
        let mut b = Snapshot::take(&counters, None);
        b.at = a.at + std::time::Duration::from_millis(500);
        let i = Interval::between(a, Snapshot { broker_cpu_s: Some(0.25), ..b });
        let mut row =
            Row::new("x", &Meta { label: "l".into(), round: Some(2), broker: None }, "tcp", json!({}));
        i.write(&mut row);
        let v = row.into_value();
        assert_eq!(v["published_msgs_per_s"], 1000.0);
        assert_eq!(v["delivered_msgs_per_s"], 2000.0);
        assert_eq!(v["round"], 2);
        // no broker CPU at the first snapshot: no broker figures rather than wrong ones
        assert!(v.get("broker_cpu_util").is_none());
    }
}
