//! The broker-wide budget for queued messages (`limits.max_queued_bytes_total`,
//! `limits.queue_pause_percent`) and the per-client in-flight byte cap
//! (`limits.max_inflight_bytes`): their validation and how they become the core's limits.
//!
//! The budget itself ([`mesgd_core::session::QueueBudget`]) counts the bytes every session
//! holds. What the MQTT front end does with it:
//!
//! - From `queue_pause_percent` % of the budget on, a connection stops at the next PUBLISH it
//!   reads, **unless its own session has deliveries queued or in flight**: reading the PUBACK,
//!   PUBREC and PUBCOMP of such a connection is what frees the budget, so it must never wait
//!   for the budget. Every other packet (SUBSCRIBE, PINGREQ, acknowledgements) is read as
//!   usual up to that PUBLISH; the PUBLISH and what follows it stay unread, so TCP pushes
//!   back on the client. The connection reads again when the total falls 10 % below the pause
//!   threshold (a tokio `Notify` wakes every paused reader at once) or when a delivery is
//!   queued for its own session.
//! - Not reading rather than withholding PUBACK/PUBREC: it is the one mechanism that works for
//!   every publisher — QoS 0 has no acknowledgement to withhold and MQTT 3.x has no Receive
//!   Maximum, so a client that ignores the window would keep sending — and it keeps no extra
//!   state (a withheld acknowledgement is a promise to remember). An MQTT 5 client at QoS 1/2
//!   sees the same as a withheld acknowledgement: its PUBACKs stop coming.
//! - A paused connection is not closed for keep-alive: the broker, not the client, stopped the
//!   conversation.
//! - The relay and content-routing front ends are not paused: their messages are QoS 0, the
//!   relay has its own per-connection rate buckets and content routing its own per-connection
//!   outbox caps. What they route into MQTT sessions counts against the budget all the same, and
//!   the hard cap drops it (oldest QoS 0 of the receiving session first).

use mesgd_core::session::BudgetLimits;

use crate::config::Limits;

/// The core's budget limits for `[limits]`.
pub fn broker_budget(l: &Limits) -> BudgetLimits {
    BudgetLimits::new(l.max_queued_bytes_total, l.queue_pause_percent)
}

/// Checks the budget keys: the key at fault and what is wrong with it.
pub(crate) fn validate(l: &Limits) -> Result<(), (&'static str, String)> {
    if l.max_queued_bytes_total < l.max_queued_bytes as u64 {
        return Err((
            "limits.max_queued_bytes_total",
            format!(
                "must be at least limits.max_queued_bytes ({} bytes): one session's queue must fit in the \
                 budget of all of them",
                l.max_queued_bytes
            ),
        ));
    }
    if !(1..=99).contains(&l.queue_pause_percent) {
        return Err((
            "limits.queue_pause_percent",
            format!(
                "must be between 1 and 99 (percent of max_queued_bytes_total), not {}: publishers must \
                 be paused before the budget is full",
                l.queue_pause_percent
            ),
        ));
    }
    if l.max_inflight_bytes == 0 {
        return Err(("limits.max_inflight_bytes", "must be at least 1 byte".to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn refusal(limits: &str) -> String {
        let text = format!("[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[limits]\n{limits}");
        match Config::from_toml(&text, None) {
            Ok(_) => panic!("accepted: {limits}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_budget_values_are_refused_naming_the_key() {
        let cases = [
            (
                "max_queued_bytes_total = 1000",
                "limits.max_queued_bytes_total",
                "at least limits.max_queued_bytes",
            ),
            ("queue_pause_percent = 0", "limits.queue_pause_percent", "between 1 and 99"),
            ("queue_pause_percent = 100", "limits.queue_pause_percent", "between 1 and 99"),
            ("max_inflight_bytes = 0", "limits.max_inflight_bytes", "at least 1 byte"),
        ];
        for (line, key, why) in cases {
            let message = refusal(line);
            assert!(message.contains(key) && message.contains(why), "{line}: {message}");
        }
        assert!(refusal("queue_pause_percent = 300").contains("queue_pause_percent"), "not a u8");
    }

    #[test]
    fn the_defaults_are_documented_values() {
        let c = Config::embedded_default();
        let l = &c.limits;
        assert_eq!(
            (l.max_queued_bytes_total, l.queue_pause_percent, l.max_inflight_bytes),
            (1 << 30, 90, 4 << 20)
        );
        let b = super::broker_budget(l);
        assert_eq!((b.max_bytes, b.pause_at), (1 << 30, (1u64 << 30) * 9 / 10));
        let small = "[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n[limits]\nmax_queued_bytes = 100\nmax_queued_bytes_total = 100\nqueue_pause_percent = 99\nmax_inflight_bytes = 1\n";
        assert!(Config::from_toml(small, None).is_ok(), "the smallest values are accepted");
    }
}
