//! The relay's counters and the sizes of its structures as `$SYS/broker/relay/…` topics,
//! published (retained) with the broker's own `$SYS` statistics every `[mqtt] sys_interval`,
//! so every cap the relay enforces and every drop it counts can be watched with any MQTT
//! client (or a relay client subscribed under the same ACL).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesgd_core::model::{Message, Origin, QoS};
use mesgd_core::topic::TopicName;
use tokio::sync::watch;

use super::hub::Hub;
use super::stats::RelayStats;
use crate::context::ServerContext;

/// Every counter and size, by its name under `$SYS/broker/relay/`.
pub(crate) fn values(hub: &Hub) -> Vec<(&'static str, u64)> {
    let s = hub.stats();
    let z = hub.sizes();
    let get = RelayStats::get;
    vec![
        ("connections", get(&s.connections)),
        ("udp/sources", get(&s.udp_sources)),
        ("udp/registered", get(&s.udp_registered)),
        ("frames/received", get(&s.frames_received)),
        ("frames/sent", get(&s.frames_sent)),
        ("bytes/received", get(&s.bytes_received)),
        ("bytes/sent", get(&s.bytes_sent)),
        ("registrations", get(&s.registrations)),
        ("registers/overloaded", get(&s.registers_overloaded)),
        ("registers/denied", get(&s.registers_denied)),
        ("sends/live", get(&s.sends_live)),
        ("sends/queued", get(&s.sends_queued)),
        ("sends/refused", get(&s.sends_refused)),
        ("queue/flushed", get(&s.queue_flushed)),
        ("queue/flush_too_large", get(&s.queue_flush_too_large)),
        ("rate_limited", get(&s.rate_limited)),
        ("disconnects/abuse", get(&s.abuse_disconnects)),
        ("disconnects/slow_consumer", get(&s.slow_consumer_disconnects)),
        ("disconnects/dead_peer", get(&s.dead_peer_releases)),
        ("oversize/tcp", get(&s.oversize_tcp)),
        ("oversize/ws", get(&s.oversize_ws)),
        ("oversize/udp", get(&s.oversize_udp)),
        ("dropped/too_large", get(&s.too_large_to_forward)),
        ("dropped/gone", get(&s.dropped_gone)),
        ("dropped/udp_amplification", get(&s.udp_amplification_drops)),
        ("dropped/udp_sources", get(&s.udp_sources_refused)),
        ("udp/send_errors", get(&s.udp_send_errors)),
        ("addresses", z.addresses as u64),
        ("rooms", z.rooms as u64),
        ("rooms/memberships", z.memberships as u64),
        ("pipes", z.pipes as u64),
        ("match/waiters", z.waiters as u64),
        ("queue/addresses", z.queues as u64),
        ("queue/messages", z.queued_messages as u64),
        ("queue/bytes", z.queued_bytes as u64),
        ("aliases", z.aliases as u64),
        ("queue/dropped/count_cap", z.queue_drops.0),
        ("queue/dropped/byte_cap", z.queue_drops.1),
        ("queue/dropped/expired", z.queue_drops.2),
        ("refused/rooms", z.refused.0),
        ("refused/pipes", z.refused.1),
        ("refused/match", z.refused.2),
        ("refused/aliases", z.refused.3),
    ]
}

/// Publishes [`values`] every `interval` until `stop` changes.
pub(crate) async fn sys_loop(ctx: Arc<ServerContext>, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = ticker.tick() => {}
        }
        for (name, value) in values(&ctx.relay) {
            let Ok(topic) = TopicName::try_from(format!("$SYS/broker/relay/{name}")) else { continue };
            let message =
                Message::new(topic, Bytes::from(value.to_string()), QoS::AtMostOnce, true, Origin::BROKER);
            ctx.broker.publish(message);
        }
    }
}
