//! What each message of a registered client does, over the hub (direct messages, pipes, rooms,
//! matchmaking) and the broker's client operations (pub/sub). Every access to an address, a
//! room or a game is first checked against the client's ACL under its `$relay/…` topic (see
//! `mesgd_core::relay::resources`); topics are checked by the broker itself.

use std::time::Instant;

use bytes::Bytes;
use mesgd_core::acl::Access;
use mesgd_core::model::{Message, Origin, QoS, SubscribeOptions};
use mesgd_core::relay::client::Send;
use mesgd_core::relay::server::{Deliver, DeliverKind};
use mesgd_core::relay::{ClientMessage, Limit, RelayError, Resource, ServerMessage, mqtt_payload};
use mesgd_core::topic::{SubscriptionFilter, TopicName};

use super::client::Client;
use super::hub::Sent;

impl Client {
    /// Handles a message that needs a registered address.
    pub(super) fn on_message(&mut self, message: ClientMessage<'_>, frame: &Bytes, now: Instant) {
        if let Err(e) = self.dispatch(message, frame, now) {
            self.error(e);
        }
    }

    fn dispatch(
        &mut self,
        message: ClientMessage<'_>,
        frame: &Bytes,
        now: Instant,
    ) -> Result<(), RelayError> {
        let ctx = self.ctx.clone();
        let hub = &ctx.relay;
        let Some(reg) = self.registered() else { return Err(RelayError::RegisterFirst) };
        let addr = reg.addr.clone();
        match message {
            ClientMessage::Send(send) => {
                if !reg.may(Access::Write, Resource::Address(&send.to)) {
                    return Err(RelayError::NotAuthorized);
                }
                self.send(&send, &addr, now)
            }
            ClientMessage::Ack { to, id } => {
                if !reg.may(Access::Write, Resource::Address(&to)) {
                    return Err(RelayError::NotAuthorized);
                }
                let encode = |b: &mut bytes::BytesMut, _| ServerMessage::Ack { id, from: &addr }.encode(b);
                // A confirmation for an offline sender is queued without a `queued` reply.
                hub.deliver(&self.outbox, &mut self.target, &to, &encode, false, now).map(|_| ())
            }
            ClientMessage::TurnCredentials => {
                let _ = self.outbox.push_with(|b| hub.turn_credentials(&addr, now, b));
                Ok(())
            }
            ClientMessage::OpenPipe { to } => {
                if !reg.may(Access::Write, Resource::Address(&to)) {
                    return Err(RelayError::NotAuthorized);
                }
                hub.open_pipe(&self.outbox, &to)
            }
            ClientMessage::PipeData(data) => hub.pipe_data(&self.outbox, &data),
            ClientMessage::ClosePipe { pipe_id } => {
                hub.close_pipe(&self.outbox, &pipe_id);
                Ok(())
            }
            ClientMessage::FindMatch { game } => {
                if !reg.may(Access::Write, Resource::Game(&game)) {
                    return Err(RelayError::NotAuthorized);
                }
                hub.find_match(&self.outbox, &game)
            }
            ClientMessage::JoinRoom { room } => {
                if !reg.may(Access::Read, Resource::Room(&room)) {
                    return Err(RelayError::NotAuthorized);
                }
                if let Some(cluster) = hub.cluster() {
                    // `joined_room{members}` counts the members on every node.
                    let elsewhere = cluster.room_members(&room);
                    self.join_later(room.into_owned(), elsewhere);
                    return Ok(());
                }
                let members = hub.join_room(&self.outbox, &room)?;
                self.reply(&ServerMessage::JoinedRoom { room: &room, members: members as u64 });
                Ok(())
            }
            ClientMessage::RoomSend { room, ct } => {
                if !reg.may(Access::Write, Resource::Room(&room)) {
                    return Err(RelayError::NotAuthorized);
                }
                hub.room_send(&self.outbox, &room, ct)
            }
            ClientMessage::Subscribe { topic } => self.subscribe(&topic, now),
            ClientMessage::Unsubscribe { topic } => {
                ctx.broker.unsubscribe(&reg.session, &topic);
                self.reply(&ServerMessage::Unsubscribed { topic: &topic });
                Ok(())
            }
            ClientMessage::Publish { topic, ct, retain } => {
                let settings = hub.settings();
                let topic = TopicName::try_from(&*topic).map_err(|_| RelayError::InvalidTopic)?;
                if topic.level_count() > settings.max_topic_levels {
                    return Err(RelayError::InvalidTopic);
                }
                if retain && !settings.retain_available {
                    return Err(RelayError::InvalidField("retain"));
                }
                let origin = Origin::client(Some(reg.session.id()), addr);
                // Kept only to name it in a log line, should the retained store refuse it.
                let retained_topic = retain.then(|| topic.clone());
                let message = Message::new(topic, mqtt_payload(frame, &ct), QoS::AtMostOnce, retain, origin);
                let routed =
                    ctx.broker.publish_as(&reg.acl, message).map_err(|_| RelayError::NotAuthorized)?;
                if let (true, Some(topic)) = (routed.retain_refused, &retained_topic) {
                    ctx.limits.log_retained_refused(topic.as_str(), ctx.broker.retained(), now);
                }
                Ok(())
            }
            ClientMessage::Register(_) => Err(RelayError::AlreadyRegistered),
            _ => Err(RelayError::UnknownMessageType),
        }
    }

    /// `send`: live to a connected address, queued (and answered `queued`) for an offline one.
    fn send(&mut self, send: &Send<'_>, from: &str, now: Instant) -> Result<(), RelayError> {
        let deliver = send.deliver(from, DeliverKind::Live);
        let encode =
            |b: &mut bytes::BytesMut, kind| ServerMessage::Deliver(Deliver { kind, ..deliver }).encode(b);
        match self.ctx.relay.deliver(&self.outbox, &mut self.target, &send.to, &encode, true, now)? {
            Sent::Live | Sent::Remote => {}
            Sent::Queued { seq } => {
                self.gate_on(seq);
                self.reply(&ServerMessage::Queued { to: &send.to });
            }
        }
        Ok(())
    }

    /// `subscribe`: a plain filter (no `$share/`), at QoS 0, replaying retained messages.
    fn subscribe(&mut self, text: &str, now: Instant) -> Result<(), RelayError> {
        let ctx = self.ctx.clone();
        let settings = ctx.relay.settings();
        let filter = SubscriptionFilter::parse(text).map_err(|_| RelayError::InvalidTopic)?;
        if filter.is_shared() || filter.filter().level_count() > settings.max_topic_levels {
            return Err(RelayError::InvalidTopic);
        }
        let Some(reg) = self.registered() else { return Err(RelayError::RegisterFirst) };
        let session = reg.session.clone();
        if session.subscription_count() >= settings.max_subscriptions
            && !session.subscriptions().iter().any(|(t, _)| **t == *text)
        {
            return Err(RelayError::LimitReached(Limit::Subscriptions));
        }
        // The retained replay waits in the session's mailbox, which is drained after this
        // frame: `subscribed` goes out before it.
        let options = SubscribeOptions::with_qos(QoS::AtMostOnce);
        ctx.broker
            .subscribe_as(&reg.acl, &session, filter, options, now)
            .map_err(|_| RelayError::NotAuthorized)?;
        // On a clustered node, `subscribed` leaves once the node's subscriptions are in place
        // in NATS.
        self.gate_on_interest();
        self.reply(&ServerMessage::Subscribed { topic: text });
        Ok(())
    }
}
