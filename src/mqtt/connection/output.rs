//! Encoding what the connection sends: packets, and deliveries with their per-subscriber parts
//! (topic aliases, the remaining message expiry, subscription identifiers, the client's maximum
//! packet size).

use std::sync::Arc;
use std::time::Instant;

use mesgd_core::broker::{DropReason, Stats};
use mesgd_core::model::Delivery;
use mesgd_core::mqtt::{self, Packet, Publish, PublishProperties, ReasonCode};
use mesgd_core::session::Outgoing;
use tokio::io::{AsyncRead, AsyncWrite};

use super::handlers::ack;
use super::{Connection, is_v5};

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    pub(super) fn write_packet(&mut self, packet: &Packet) {
        let version = self.core.version;
        if let Err(e) = mqtt::encode(packet, version, self.out()) {
            tracing::error!(error = %e, "could not encode a packet");
        }
    }

    /// Writes what the session handed out. Returns whether it was a message that went out (to
    /// be counted as sent, [`Connection::count_sent`], once per batch rather than per message:
    /// the counters are shared by every connection).
    pub(super) fn write_outgoing(&mut self, outgoing: Outgoing, now: Instant) -> bool {
        match outgoing {
            Outgoing::PubRel { packet_id } => {
                self.write_packet(&Packet::PubRel(ack(packet_id, ReasonCode::Success)));
                false
            }
            Outgoing::Publish { delivery, packet_id, dup } => {
                self.write_delivery(&delivery, packet_id, dup, now)
            }
        }
    }

    /// Counts `n` messages written to the client.
    pub(super) fn count_sent(&self, n: usize) {
        if n > 0 {
            Stats::add(&self.core.ctx.broker.stats().messages_sent, n as u64);
            Stats::add(&self.traffic().messages_out, n as u64);
        }
    }

    fn write_delivery(
        &mut self,
        delivery: &Delivery,
        packet_id: Option<u16>,
        dup: bool,
        now: Instant,
    ) -> bool {
        let message = &delivery.message;
        let v5 = is_v5(self.core.version);
        let plain = !v5
            || (message.properties.is_empty()
                && message.expires_at.is_none()
                && delivery.subscription_ids.is_empty()
                && self.core.client_topic_alias_maximum == 0);
        if plain {
            // Nothing per-subscriber but the header: written straight from the message.
            let before = self.out().len();
            let version = self.core.version;
            let written = mqtt::encode_plain_publish(
                version,
                dup,
                delivery.qos,
                delivery.retain,
                message.topic.as_str(),
                packet_id,
                &message.payload,
                self.out(),
            );
            if let Err(e) = written {
                tracing::error!(error = %e, "could not encode a PUBLISH");
            }
            return self.check_delivered_size(before, packet_id);
        }
        let mut properties = PublishProperties::default();
        let mut topic: Arc<str> = message.topic.as_arc().clone();
        let mut new_alias = None;
        if v5 {
            properties = PublishProperties::from(&message.properties);
            properties.message_expiry_interval = message.remaining_expiry(now);
            properties.subscription_identifiers = delivery.subscription_ids.to_vec();
            if self.core.client_topic_alias_maximum > 0 {
                let aliases = self.core.aliases.get_or_insert_with(Box::default);
                match aliases.outgoing.get(&message.topic) {
                    Some(&alias) => {
                        properties.topic_alias = Some(alias);
                        topic = Arc::from("");
                    }
                    None if aliases.outgoing.len() < usize::from(self.core.client_topic_alias_maximum) => {
                        let alias = aliases.outgoing.len() as u16 + 1;
                        new_alias = Some(alias);
                        properties.topic_alias = Some(alias);
                    }
                    None => {}
                }
            }
        }
        let publish = Packet::Publish(Publish {
            dup,
            qos: delivery.qos,
            retain: delivery.retain,
            topic,
            packet_id,
            properties,
            payload: message.payload.clone(),
        });
        let before = self.out().len();
        self.write_packet(&publish);
        // The mapping exists only once the client has received the packet that sets it: a
        // dropped packet must not leave later ones referring to an alias the client never saw.
        let stays = self.check_delivered_size(before, packet_id);
        if stays {
            if let Some(alias) = new_alias {
                self.core
                    .aliases
                    .get_or_insert_with(Box::default)
                    .outgoing
                    .insert(message.topic.clone(), alias);
            }
        }
        stays
    }

    /// After a PUBLISH was written from `before` on: takes it back if it is larger than the
    /// client accepts ([MQTT-3.1.2-25]: dropped as if delivered, and counted). Returns whether
    /// it stays.
    fn check_delivered_size(&mut self, before: usize, packet_id: Option<u16>) -> bool {
        let size = self.out().len() - before;
        if size > self.core.client_maximum_packet_size as usize {
            self.out().truncate(before);
            if let Some(id) = packet_id {
                self.core.session.discard_inflight(id);
            }
            self.core.ctx.broker.stats().dropped(DropReason::TooLarge, 1);
            tracing::debug!(
                size,
                max = self.core.client_maximum_packet_size,
                "message dropped: larger than the client's maximum packet size"
            );
            return false;
        }
        true
    }
}
