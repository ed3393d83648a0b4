//! One handler per packet the client may send, over the broker's client operations: the
//! handlers only check what MQTT itself requires and map the broker's answers to reason codes.

use std::sync::Arc;

use mesgd_core::broker::Stats;
use mesgd_core::journal::Atomic;
use mesgd_core::model::{Message, MessageProperties, Origin, SessionExpiry, SubscribeOptions, digest};
use mesgd_core::mqtt::{
    self, AckProperties, Decoded, Disconnect, Packet, PubResponse, Publish, QoS, ReasonCode, SubAck,
    Subscribe, UnsubAck, Unsubscribe,
};
use mesgd_core::session::{IncomingQos2, PubRecOutcome};
use mesgd_core::topic::{SubscriptionFilter, TopicName};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Connection, End, is_v5};
use crate::limits::Tripped;
use crate::mqtt::checks::{self, Fields};

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    /// Handles every complete packet in the input, up to a PUBLISH that must wait for the
    /// queue budget, and counts the messages received.
    pub(super) fn handle_input(&mut self) -> Result<(), End> {
        let handled = self.handle_packets();
        // Counted once per batch: the counters are shared by every connection.
        let received = std::mem::take(&mut self.received);
        if received > 0 {
            self.core.ctx.broker.count_received(received);
            Stats::add(&self.traffic().messages_in, received);
        }
        handled
    }

    fn handle_packets(&mut self) -> Result<(), End> {
        // PUBLISH packets are decoded into this one slot (`mqtt::decode_into`); holding the last
        // topic, it keeps that topic for the next PUBLISH to it.
        let mut publish = Publish::default();
        if let Some(last) = &self.last_topic {
            publish.topic = last.as_arc().clone();
        }
        loop {
            if self.publish_must_wait() {
                return Ok(());
            }
            let decoded = mqtt::decode_into(
                &mut self.inbuf,
                self.core.version,
                self.core.ctx.mqtt.max_packet_size,
                &mut publish,
            );
            match decoded {
                Ok(Some(Decoded::Publish)) => self.on_publish(&mut publish)?,
                Ok(Some(Decoded::Other(packet))) => self.handle_packet(packet)?,
                Ok(None) => return Ok(()),
                Err(e) => return Err(End::protocol(e.reason_code(), e.to_string())),
            }
        }
    }

    fn handle_packet(&mut self, packet: Packet) -> Result<(), End> {
        match packet {
            Packet::Publish(mut p) => self.on_publish(&mut p),
            Packet::PubAck(a) => {
                if !self.core.session.puback(a.packet_id) {
                    tracing::debug!(packet_id = a.packet_id, "PUBACK for an unknown packet id");
                }
                Ok(())
            }
            Packet::PubRec(a) => {
                let reason = match self.core.session.pubrec(a.packet_id, a.reason_code.is_error()) {
                    PubRecOutcome::SendPubRel { durable_seq } => {
                        self.hold_until(durable_seq);
                        ReasonCode::Success
                    }
                    PubRecOutcome::Ended => return Ok(()),
                    PubRecOutcome::Unknown => ReasonCode::PacketIdentifierNotFound,
                };
                self.write_packet(&Packet::PubRel(ack(a.packet_id, reason)));
                Ok(())
            }
            Packet::PubComp(a) => {
                if !self.core.session.pubcomp(a.packet_id) {
                    tracing::debug!(packet_id = a.packet_id, "PUBCOMP for an unknown packet id");
                }
                Ok(())
            }
            Packet::PubRel(a) => {
                let (known, seq) = self.core.session.pubrel(a.packet_id);
                self.hold_until(seq);
                let reason = if known { ReasonCode::Success } else { ReasonCode::PacketIdentifierNotFound };
                self.write_packet(&Packet::PubComp(ack(a.packet_id, reason)));
                Ok(())
            }
            Packet::Subscribe(s) => self.on_subscribe(s),
            Packet::Unsubscribe(u) => {
                self.on_unsubscribe(&u);
                Ok(())
            }
            Packet::PingReq => {
                self.write_packet(&Packet::PingResp);
                Ok(())
            }
            Packet::Disconnect(d) => self.on_disconnect(&d),
            Packet::Connect(_) => Err(End::protocol(ReasonCode::ProtocolError, "second CONNECT")),
            // 0x8C is a CONNACK code only; mid-connection, an AUTH without an authentication
            // method at CONNECT is a protocol error ([MQTT-4.12.0-1] / DISCONNECT codes).
            Packet::Auth(_) => {
                Err(End::protocol(ReasonCode::ProtocolError, "AUTH without an authentication method"))
            }
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => Err(
                End::protocol(ReasonCode::ProtocolError, "a server-to-client packet was sent by the client"),
            ),
        }
    }

    fn on_disconnect(&mut self, d: &Disconnect) -> Result<(), End> {
        if let Some(interval) = d.properties.session_expiry_interval {
            if self.core.session_expiry_was_zero && interval != 0 {
                // [MQTT-3.14.2-2]
                return Err(End::protocol(
                    ReasonCode::ProtocolError,
                    "session expiry set on DISCONNECT after 0 at CONNECT",
                ));
            }
            let granted = interval.min(self.core.ctx.mqtt.max_session_expiry);
            self.core.session.set_expiry(SessionExpiry::from_interval(granted));
        }
        Err(End::ClientDisconnect { with_will: d.reason_code == ReasonCode::DisconnectWithWill })
    }

    /// Resolves an MQTT 5 topic alias and validates the topic name.
    fn resolve_topic(&mut self, topic: &Arc<str>, alias: Option<u16>) -> Result<TopicName, End> {
        let settings = &self.core.ctx.mqtt;
        let name = match alias {
            Some(0) => return Err(End::protocol(ReasonCode::TopicAliasInvalid, "topic alias 0")),
            Some(a) if a > settings.max_topic_alias => {
                return Err(End::protocol(
                    ReasonCode::TopicAliasInvalid,
                    format!("topic alias {a} exceeds the maximum"),
                ));
            }
            Some(a) if topic.is_empty() => {
                match self.core.aliases.as_ref().and_then(|al| al.incoming.get(&a)) {
                    Some(t) => return Ok(t.clone()),
                    None => {
                        return Err(End::protocol(
                            ReasonCode::ProtocolError,
                            format!("topic alias {a} is not set"),
                        ));
                    }
                }
            }
            // The decoder kept the last topic's text: it was checked then.
            _ => match &self.last_topic {
                Some(last) if Arc::ptr_eq(last.as_arc(), topic) => last.clone(),
                _ => {
                    let name = TopicName::try_from(topic.clone()).map_err(|e| {
                        End::protocol(ReasonCode::TopicNameInvalid, format!("invalid topic name: {e}"))
                    })?;
                    self.last_topic = Some(name.clone());
                    name
                }
            },
        };
        if let Some(a) = alias {
            self.core.aliases.get_or_insert_with(Box::default).incoming.insert(a, name.clone());
        }
        Ok(name)
    }

    fn on_publish(&mut self, p: &mut Publish) -> Result<(), End> {
        let v5 = is_v5(self.core.version);
        if !p.properties.subscription_identifiers.is_empty() {
            // [MQTT-3.3.4-6]: only the server sends subscription identifiers.
            return Err(End::protocol(
                ReasonCode::ProtocolError,
                "a PUBLISH from a client carries a subscription identifier",
            ));
        }
        let topic = self.resolve_topic(&p.topic, p.properties.topic_alias)?;
        let packet_id = p.packet_id.unwrap_or(0);
        let fields = Fields {
            topic: &topic,
            qos: p.qos,
            retain: p.retain,
            payload_format_indicator: p.properties.payload_format_indicator,
            payload: &p.payload,
            response_topic: p.properties.response_topic.as_ref(),
        };
        if let Err(broken) = checks::check(&self.core.ctx.mqtt, &fields) {
            if topic.as_str().len() > self.core.ctx.mqtt.max_topic_length {
                self.limit_tripped(Tripped::TopicLength, topic.as_str());
            }
            // A payload that is not the UTF-8 it claims is refused for itself when it can be
            // acknowledged; everything else breaks the protocol.
            if broken.code != ReasonCode::PayloadFormatInvalid || p.qos == QoS::AtMostOnce {
                return Err(End::protocol(broken.code, broken.message));
            }
            self.ack_publish(p.qos, packet_id, ReasonCode::PayloadFormatInvalid);
            return Ok(());
        }
        let permit = match self.core.ctx.broker.authorize_publish(&self.core.acl, &topic) {
            Ok(permit) => permit,
            Err(refused) => {
                tracing::debug!(topic = topic.as_str(), reason = %refused, "publish refused");
                // MQTT 5 is told; 3.x is silently dropped, but its QoS 2 flow completes (the
                // client will send PUBREL) so that it is not stuck.
                if p.qos == QoS::ExactlyOnce && !v5 {
                    self.accept_qos2(packet_id, digest(topic.as_str(), &p.payload), p.dup)?;
                }
                let reason = if v5 { ReasonCode::NotAuthorized } else { ReasonCode::Success };
                self.ack_publish(p.qos, packet_id, reason);
                return Ok(());
            }
        };
        // The packet id and the copies routing queues go to disk together (see `Atomic`). The
        // journal has a reference of its own here, held across `accept_qos2` (QoS 2 only: a
        // reference count is two atomic operations per message).
        let journal = (p.qos == QoS::ExactlyOnce).then(|| self.core.ctx.broker.journal().cloned()).flatten();
        let _atomic = Atomic::begin(journal.as_ref());
        let first_time = p.qos != QoS::ExactlyOnce
            || self.accept_qos2(packet_id, digest(topic.as_str(), &p.payload), p.dup)?;
        let mut reason = ReasonCode::Success;
        if first_time {
            let origin = Origin::client(Some(self.core.session.id()), self.core.session.client_id().clone());
            // Kept only to name it in a log line, should the retained store refuse it.
            let retained_topic = p.retain.then(|| topic.clone());
            let mut message = Message::new(topic, std::mem::take(&mut p.payload), p.qos, p.retain, origin);
            if v5 {
                message.properties = MessageProperties::from(&p.properties);
                message = message.with_expiry_interval(p.properties.message_expiry_interval, self.now);
            }
            let routed = self.core.ctx.broker.route_permitted(permit, message);
            self.received += 1;
            self.hold_until(routed.durable_seq);
            self.hold_until_stored(routed.stored_seq);
            self.routed |= routed.delivered > 0;
            if routed.over_budget > 0 {
                self.log_budget_drop();
            }
            if let (true, Some(topic)) = (routed.retain_refused, &retained_topic) {
                let ctx = &self.core.ctx;
                ctx.limits.log_retained_refused(topic.as_str(), ctx.broker.retained(), self.now);
            }
            if v5 && routed.delivered == 0 && p.qos != QoS::AtMostOnce {
                reason = ReasonCode::NoMatchingSubscribers;
            }
        }
        self.ack_publish(p.qos, packet_id, reason);
        Ok(())
    }

    /// Records an incoming QoS 2 message; returns whether it is new (to be routed) rather than
    /// a retransmission. MQTT 5 clients must keep within the Receive Maximum we advertised
    /// ([MQTT-3.3.4-8]: 0x93 otherwise); MQTT 3.x has no such limit, so a 3.x client is never
    /// disconnected for it — only its packet ids, at most 65,535, are kept per message.
    fn accept_qos2(&mut self, packet_id: u16, digest: u64, dup: bool) -> Result<bool, End> {
        let window = usize::from(self.core.ctx.mqtt.max_inflight);
        let enforced = is_v5(self.core.version).then_some(window);
        match self.core.session.incoming_qos2(packet_id, digest, dup, enforced) {
            IncomingQos2::Duplicate => Ok(false),
            IncomingQos2::WindowFull => Err(End::protocol(
                ReasonCode::ReceiveMaximumExceeded,
                "more QoS 2 messages in flight than the receive maximum",
            )),
            IncomingQos2::New { seq, reused, others } => {
                self.hold_until(seq);
                if reused {
                    tracing::debug!(packet_id, "packet id reused without DUP: a new message");
                }
                if others == window && !is_v5(self.core.version) {
                    tracing::info!(
                        window,
                        "an MQTT 3.x client has more QoS 2 messages awaiting release than max_inflight; \
                         accepted, as 3.x has no receive maximum"
                    );
                }
                Ok(true)
            }
        }
    }

    fn ack_publish(&mut self, qos: QoS, packet_id: u16, reason: ReasonCode) {
        let mut response = ack(packet_id, reason);
        // Reason strings only when the client did not turn problem information off
        // ([MQTT-3.1.2-29]) and only for errors: successes need no explanation.
        if reason.is_error() && self.core.request_problem_information {
            response.properties.reason_string = Some(
                match reason {
                    ReasonCode::NotAuthorized => "not authorized to publish to this topic",
                    ReasonCode::PayloadFormatInvalid => {
                        "payload is not valid UTF-8 as its format indicator says"
                    }
                    _ => "publish refused",
                }
                .to_owned(),
            );
        }
        match qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.write_packet(&Packet::PubAck(response)),
            QoS::ExactlyOnce => self.write_packet(&Packet::PubRec(response)),
        }
    }

    fn on_subscribe(&mut self, s: Subscribe) -> Result<(), End> {
        let v5 = is_v5(self.core.version);
        let settings = self.core.ctx.mqtt.clone();
        if s.properties.subscription_identifier.is_some() && !settings.subscription_identifiers {
            return Err(End::protocol(
                ReasonCode::SubscriptionIdentifiersNotSupported,
                "subscription identifiers are not supported",
            ));
        }
        let now = crate::clock::now();
        let mut codes = Vec::with_capacity(s.filters.len());
        for (text, options) in s.filters {
            let filter = match SubscriptionFilter::parse(&text) {
                Ok(f) => f,
                Err(e) => {
                    tracing::debug!(filter = %text, error = %e, "invalid topic filter");
                    codes.push(ReasonCode::TopicFilterInvalid);
                    continue;
                }
            };
            let shared = matches!(filter, SubscriptionFilter::Shared { .. });
            if shared && options.no_local && v5 {
                // [MQTT-3.8.3-4]
                return Err(End::protocol(ReasonCode::ProtocolError, "no-local on a shared subscription"));
            }
            let code = if shared && !settings.shared_subscriptions {
                ReasonCode::SharedSubscriptionsNotSupported
            } else if filter.filter().has_wildcards() && !settings.wildcard_subscriptions {
                ReasonCode::WildcardSubscriptionsNotSupported
            } else if filter.filter().level_count() > settings.max_topic_levels {
                ReasonCode::TopicFilterInvalid
            } else if text.len() > settings.max_topic_length {
                self.limit_tripped(Tripped::TopicLength, &text);
                ReasonCode::TopicFilterInvalid
            } else if self.core.session.subscription_count() >= settings.max_subscriptions_per_client
                && !self.core.session.has_subscription(&text)
            {
                self.limit_tripped(Tripped::Subscriptions, &text);
                ReasonCode::QuotaExceeded
            } else {
                let qos = options.qos.min(settings.max_qos);
                let subscribe_options = SubscribeOptions {
                    qos,
                    no_local: options.no_local,
                    retain_as_published: options.retain_as_published,
                    retain_handling: options.retain_handling,
                    subscription_id: s.properties.subscription_identifier,
                };
                match self.core.ctx.broker.subscribe_as(
                    &self.core.acl,
                    &self.core.session,
                    filter,
                    subscribe_options,
                    now,
                ) {
                    Ok(_) => granted_code(qos),
                    Err(refused) => {
                        tracing::debug!(filter = %text, reason = %refused, "subscription refused");
                        ReasonCode::NotAuthorized
                    }
                }
            };
            codes.push(code);
        }
        // On a clustered node, the SUBACK leaves once the node's new subscriptions are in
        // place in NATS.
        if let Some(interest) = self.core.ctx.broker.router().interest() {
            self.hold_until_interest(interest.generation());
        }
        self.write_packet(&Packet::SubAck(SubAck {
            packet_id: s.packet_id,
            reason_codes: codes,
            properties: AckProperties::default(),
        }));
        Ok(())
    }

    fn on_unsubscribe(&mut self, u: &Unsubscribe) {
        let codes = u
            .filters
            .iter()
            .map(|text| {
                if self.core.ctx.broker.unsubscribe(&self.core.session, text) {
                    ReasonCode::Success
                } else {
                    ReasonCode::NoSubscriptionExisted
                }
            })
            .collect();
        let reason_codes = if is_v5(self.core.version) { codes } else { Vec::new() };
        self.write_packet(&Packet::UnsubAck(UnsubAck {
            packet_id: u.packet_id,
            reason_codes,
            properties: AckProperties::default(),
        }));
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    /// Counts a refusal by `limit` and logs it, once per interval.
    fn limit_tripped(&self, limit: Tripped, topic: &str) {
        if let Some(more) = self.core.ctx.limits.trip(limit, crate::clock::now()) {
            let shown: String = topic.chars().take(64).collect();
            tracing::info!(
                ?limit,
                topic = %shown,
                topic_bytes = topic.len(),
                more_since_last_line = more,
                "refused by a limit"
            );
        }
    }
}

fn granted_code(qos: QoS) -> ReasonCode {
    match qos {
        QoS::AtMostOnce => ReasonCode::Success,
        QoS::AtLeastOnce => ReasonCode::GrantedQoS1,
        QoS::ExactlyOnce => ReasonCode::GrantedQoS2,
    }
}

pub(super) fn ack(packet_id: u16, reason_code: ReasonCode) -> PubResponse {
    PubResponse { packet_id, reason_code, properties: AckProperties::default() }
}
