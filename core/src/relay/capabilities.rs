//! The load computation and the `capabilities` reply.
//!
//! `load_factor = max(connections / max_connections, queued bytes / global queue budget)`,
//! clamped to 0..=1 (a bound of 0 means "unbounded" and contributes 0). `load_tier` is `low`
//! below 0.5, `medium` from 0.5 and below 0.8, `high` from 0.8. Above 0.95 a new `register`
//! is refused with `relay overloaded, retry later`; clients already registered go on.
//!
//! Beyond the seed's `transports`, `load_tier` and `load_factor`, the reply lists the limits a
//! client must respect, as extra flat keys, so that no client has to discover them by being
//! refused: frame sizes per transport, the rate budget, the offline-queue caps and whether key
//! proof is required.

use bytes::{BufMut, BytesMut};

use super::json::{write_bool, write_fraction, write_key, write_str, write_u64};
use super::limits::{ABUSE_MULTIPLE, RateLimits};
use super::store::QueueLimits;

/// The load factor above which a new `register` is refused.
pub const REFUSE_REGISTER_ABOVE: f64 = 0.95;

/// The inputs of the load computation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Relay connections now.
    pub connections: u64,
    /// The connection cap (0: none).
    pub max_connections: u64,
    /// Bytes in the offline queues now.
    pub queued_bytes: u64,
    /// The queues' global byte budget (0: none).
    pub queue_budget: u64,
}

/// The coarse load level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LoadTier {
    /// Below 0.5.
    Low,
    /// From 0.5, below 0.8.
    Medium,
    /// From 0.8.
    High,
}

impl LoadTier {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadTier::Low => "low",
            LoadTier::Medium => "medium",
            LoadTier::High => "high",
        }
    }
}

fn ratio(used: u64, bound: u64) -> f64 {
    if bound == 0 {
        return 0.0;
    }
    // Precision loss above 2^53 is irrelevant for a load figure.
    (used as f64 / bound as f64).min(1.0)
}

impl Load {
    /// The load factor, in 0..=1.
    pub fn factor(&self) -> f64 {
        ratio(self.connections, self.max_connections).max(ratio(self.queued_bytes, self.queue_budget))
    }

    /// The tier of [`Load::factor`].
    pub fn tier(&self) -> LoadTier {
        let factor = self.factor();
        if factor < 0.5 {
            LoadTier::Low
        } else if factor < 0.8 {
            LoadTier::Medium
        } else {
            LoadTier::High
        }
    }

    /// Whether a new `register` gets `relay overloaded, retry later`.
    pub fn refuses_register(&self) -> bool {
        self.factor() > REFUSE_REGISTER_ABOVE
    }
}

/// The limits listed in `capabilities`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// The largest TCP frame body (`max_frame_tcp`).
    pub max_frame_tcp: usize,
    /// The largest WebSocket message (`max_frame_ws`).
    pub max_frame_ws: usize,
    /// The largest UDP datagram (`max_frame_udp`).
    pub max_frame_udp: usize,
    /// The rate budget (`rate_messages_per_s`, `rate_message_burst`, `rate_bytes_per_s`,
    /// `rate_byte_burst`, and `abuse_multiple`).
    pub rate: RateLimits,
    /// The offline-queue caps (`queue_max_messages`, `queue_max_bytes`, `queue_ttl_s`).
    pub queue: QueueLimits,
    /// Whether a `register` with a `pubkey` must prove it (`key_proof_required`).
    pub key_proof_required: bool,
}

/// A `capabilities` reply.
#[derive(Clone, Copy, Debug)]
pub struct Capabilities<'a> {
    /// Transport name (`tcp`, `ws`, `wss`, `udp`, …) and port, one per name; a later entry with
    /// a name already listed is left out so the object has unique keys.
    pub transports: &'a [(String, u16)],
    /// The load now.
    pub load: Load,
    /// The limits.
    pub limits: ClientLimits,
}

impl Capabilities<'_> {
    /// Appends the reply's JSON object.
    pub fn encode(&self, buf: &mut BytesMut) {
        buf.put_slice(b"{\"t\":\"capabilities\",\"transports\":{");
        for (i, (name, port)) in self.transports.iter().enumerate() {
            if self.transports[..i].iter().any(|(earlier, _)| earlier == name) {
                continue;
            }
            if buf.last() != Some(&b'{') {
                buf.put_u8(b',');
            }
            write_str(buf, name);
            buf.put_u8(b':');
            write_u64(buf, u64::from(*port));
        }
        buf.put_u8(b'}');
        write_key(buf, "load_tier");
        write_str(buf, self.load.tier().as_str());
        write_key(buf, "load_factor");
        write_fraction(buf, self.load.factor());
        let l = &self.limits;
        let numbers = [
            ("max_frame_tcp", l.max_frame_tcp as u64),
            ("max_frame_ws", l.max_frame_ws as u64),
            ("max_frame_udp", l.max_frame_udp as u64),
            ("rate_messages_per_s", l.rate.messages_per_s),
            ("rate_message_burst", l.rate.message_burst),
            ("rate_bytes_per_s", l.rate.bytes_per_s),
            ("rate_byte_burst", l.rate.byte_burst),
            ("abuse_multiple", ABUSE_MULTIPLE),
            ("queue_max_messages", l.queue.max_messages as u64),
            ("queue_max_bytes", l.queue.max_bytes as u64),
            ("queue_ttl_s", l.queue.ttl.as_secs()),
        ];
        for (key, value) in numbers {
            write_key(buf, key);
            write_u64(buf, value);
        }
        write_key(buf, "key_proof_required");
        write_bool(buf, l.key_proof_required);
        buf.put_u8(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::frame::{MAX_TCP_FRAME, MAX_UDP_DATAGRAM, MAX_WS_FRAME};

    fn load(connections: u64, queued_bytes: u64) -> Load {
        Load { connections, max_connections: 100, queued_bytes, queue_budget: 1_000 }
    }

    #[test]
    fn factor_is_the_larger_ratio() {
        assert_eq!(load(10, 0).factor(), 0.1);
        assert_eq!(load(10, 500).factor(), 0.5);
        assert_eq!(load(300, 0).factor(), 1.0, "clamped");
        assert_eq!(Load { connections: 5, ..Load::default() }.factor(), 0.0, "no bounds, no load");
    }

    #[test]
    fn tier_boundaries() {
        let cases = [
            (0, LoadTier::Low),
            (49, LoadTier::Low),
            (50, LoadTier::Medium),
            (79, LoadTier::Medium),
            (80, LoadTier::High),
            (100, LoadTier::High),
        ];
        for (connections, tier) in cases {
            assert_eq!(load(connections, 0).tier(), tier, "{connections}");
        }
    }

    #[test]
    fn register_refused_above_095() {
        assert!(!load(95, 0).refuses_register());
        assert!(load(96, 0).refuses_register());
        assert!(load(0, 951).refuses_register());
    }

    #[test]
    fn reply_is_a_flat_object_with_the_seed_fields() {
        let transports = [("tcp".to_string(), 7001), ("ws".to_string(), 7002), ("tcp".to_string(), 7003)];
        let caps = Capabilities {
            transports: &transports,
            load: load(60, 0),
            limits: ClientLimits {
                max_frame_tcp: MAX_TCP_FRAME,
                max_frame_ws: MAX_WS_FRAME,
                max_frame_udp: MAX_UDP_DATAGRAM,
                rate: RateLimits::default(),
                queue: QueueLimits::default(),
                key_proof_required: true,
            },
        };
        let mut buf = BytesMut::new();
        caps.encode(&mut buf);
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["t"], "capabilities");
        assert_eq!(v["transports"], serde_json::json!({"tcp": 7001, "ws": 7002}));
        assert_eq!(v["load_tier"], "medium");
        assert_eq!(v["load_factor"].as_f64(), Some(0.6));
        assert_eq!(v["max_frame_tcp"], 65_536);
        assert_eq!(v["max_frame_udp"], 16_384);
        assert_eq!(v["rate_messages_per_s"], 500);
        assert_eq!(v["queue_max_messages"], 100);
        assert_eq!(v["queue_ttl_s"], 86_400);
        assert_eq!(v["key_proof_required"], true);

        let mut buf = BytesMut::new();
        Capabilities { transports: &[], ..caps }.encode(&mut buf);
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["transports"], serde_json::json!({}));
    }
}
