//! Answering takeover requests: another node claimed a client id this node held, and asks it
//! to close its connection to that client.
//!
//! The request carries the new owner's revision; only a claim newer than this node's own
//! makes it act ([`Verdict::Superseded`]), so a late request never closes a connection that
//! reconnected here since. Acting means: kick the live connection (the MQTT front end sends v5
//! DISCONNECT 0x8E Session taken over, or closes a 3.x connection), wait for it to let go
//! (bounded), answer — with a persistent session's subscriptions when the new connection
//! asked to resume — then end the session here, with the client lock held, unless the client
//! came back meanwhile. The handler never waits for the client lock before answering: two
//! nodes claiming one id at once each hold their lock while they wait for the other's answer.

use async_nats::Subscriber;
use bytes::Bytes;
use futures_util::StreamExt;
use mesgd_core::cluster::registry::{TakeoverOutcome, TakeoverReply, TakeoverRequest};
use mesgd_core::model::{Kick, SessionExpiry, SessionKey};

use super::holdings::Verdict;
use super::{Registry, handover};
use crate::stats::ClusterStats;

/// Answers every request on this node's takeover subject, each in its own task, until
/// [`Registry::stop_serving`]; then unsubscribes, so that other nodes' requests find no
/// responder at once.
pub(super) async fn serve(registry: Registry, mut requests: Subscriber) {
    loop {
        tokio::select! {
            next = requests.next() => {
                let Some(message) = next else { return };
                let registry = registry.clone();
                tokio::spawn(async move { registry.answer(message).await });
            }
            () = registry.inner.stop.notified() => {
                let _ = requests.unsubscribe().await;
                return;
            }
        }
    }
}

impl Registry {
    async fn answer(&self, message: async_nats::Message) {
        let me = &self.inner;
        let Some(reply_to) = message.reply else { return };
        let request = match TakeoverRequest::decode(&message.payload) {
            Ok(request) => request,
            Err(e) => {
                ClusterStats::add(&me.stats.decode_errors, 1);
                tracing::debug!(error = %e, "cluster: unreadable takeover request");
                return;
            }
        };
        let Some(broker) = me.broker.upgrade() else { return };
        let key = SessionKey::mqtt(request.client_id.as_str());
        let mut handed = None;
        let verdict = me.holdings.supersede(&request.client_id, request.revision);
        // No claim here but a session: one restored from storage at start, whose record
        // named this node from before the restart. It goes to the new owner as well.
        let restored = verdict == Verdict::Unknown && broker.session(&key).is_some();
        let outcome = match verdict {
            Verdict::Unknown if !restored => TakeoverOutcome::Unknown,
            Verdict::Stale => {
                ClusterStats::add(&me.stats.registry_stale_requests, 1);
                TakeoverOutcome::Stale
            }
            Verdict::Unknown | Verdict::Superseded => {
                ClusterStats::add(&me.stats.registry_taken_over, 1);
                tracing::info!(client_id = %key.id, by = request.node, "cluster: client taken over by another node");
                let outcome = match broker.session(&key) {
                    Some(session) if session.is_online() => {
                        session.kick(Kick::TakenOver);
                        // Half the bound: the answer must still reach the requester in time.
                        let _ = tokio::time::timeout(me.timeout / 2, session.wait_detached()).await;
                        TakeoverOutcome::Closed
                    }
                    _ => TakeoverOutcome::Offline,
                };
                if request.resume {
                    // A persistent session that let go (one that ends with its connection is
                    // gone, or going): its subscriptions go with the client.
                    handed = broker
                        .session(&key)
                        .filter(|s| {
                            !s.is_online() && !s.is_ended() && s.expiry() != SessionExpiry::OnDisconnect
                        })
                        .map(|s| (handover::handed_subscriptions(&s), handover::handed_messages(&s)));
                }
                outcome
            }
        };
        let mut reply = TakeoverReply::without_session(outcome);
        if let Some((subscriptions, (messages, incoming_qos2))) = handed {
            // Taken with the connection let go: nothing finishes here after it. What reaches
            // this node's copy from now on (before the session ends here) or no node (until the
            // new owner's subscriptions are in place) comes to the new owner from the stream.
            let (checkpoint_ms, finished) = self.checkpoint(&key.id);
            reply = TakeoverReply {
                resumed: true,
                subscriptions,
                messages,
                incoming_qos2,
                checkpoint_ms,
                finished: finished.iter().map(ToString::to_string).collect(),
                ..reply
            };
        }
        let resumed = reply.resumed;
        let bytes = handover::fit(&mut reply, &me.stats);
        if resumed && reply.resumed {
            ClusterStats::add(&me.stats.registry_sessions_handed, 1);
        }
        if let Err(e) = me.client.publish(reply_to, Bytes::from(bytes)).await {
            tracing::debug!(error = %e, "cluster: cannot answer a takeover request");
        }
        if matches!(outcome, TakeoverOutcome::Closed | TakeoverOutcome::Offline) {
            // The session lives on the new owner now (with its subscriptions when it was handed
            // over), so its copy here ends.
            let _held = broker.lock_client(&key).await;
            // Unless this node claimed the id again meanwhile.
            let gone = if restored {
                me.holdings.is_unknown(&key.id)
            } else {
                me.holdings.forget_superseded(&key.id)
            };
            if gone {
                if let Some(session) = broker.session(&key) {
                    // A connection attached after the request came was kicked by the broker
                    // (`still_owner`); let it close before the session ends.
                    let _ = tokio::time::timeout(me.timeout, session.wait_detached()).await;
                    if !session.is_online() {
                        broker.end_session(&session);
                    }
                }
            }
        }
    }
}
