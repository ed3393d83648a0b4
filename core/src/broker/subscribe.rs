//! Subscribing: the intersecting-read check, the subscription itself with its retained replay,
//! and unsubscribing.

use std::sync::Arc;
use std::time::Instant;

use super::{Broker, Stats};
use crate::acl::Acl;
use crate::journal::Change;
use crate::model::{Delivery, RetainHandling, SubscribeOptions};
use crate::session::{Session, SubscriptionRecord};
use crate::topic::SubscriptionFilter;

/// Why a subscription was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubscribeRefused {
    /// The filter intersects no topic the subscriber may read: for it, the topics do not exist.
    #[error("not authorized to subscribe to this filter")]
    NotAuthorized,
}

impl Broker {
    /// Subscribes `session` on behalf of a client whose ACL is `acl`: refused (counted) when the
    /// filter intersects no readable rule, else as [`Broker::subscribe`]. Every message it later
    /// brings is still checked for read at delivery, unless the ACL grants the whole filter.
    pub fn subscribe_as(
        &self,
        acl: &Acl,
        session: &Arc<Session>,
        filter: SubscriptionFilter,
        options: SubscribeOptions,
        now: Instant,
    ) -> Result<bool, SubscribeRefused> {
        if !acl.allows_subscribe(filter.filter()) {
            Stats::add(&self.stats.subscribes_denied, 1);
            return Err(SubscribeRefused::NotAuthorized);
        }
        Ok(self.subscribe(session, filter, options, now))
    }

    /// Adds a subscription to `session` and queues the retained messages it should receive
    /// (per retain handling; never for shared subscriptions). Returns whether it replaced an
    /// existing subscription with the same filter.
    pub fn subscribe(
        &self,
        session: &Arc<Session>,
        filter: SubscriptionFilter,
        options: SubscribeOptions,
        now: Instant,
    ) -> bool {
        let existed = self.router.subscribe(session, &filter, options);
        let text: Arc<str> = Arc::from(filter.as_str());
        let shared = filter.is_shared();
        let topic_filter = filter.filter().clone();
        session.record(|client_id| Change::Subscribed {
            client_id: client_id.clone(),
            filter: text.clone(),
            options,
        });
        session.add_subscription(text, SubscriptionRecord { filter, options });
        let send_retained = match options.retain_handling {
            RetainHandling::SendAtSubscribe => true,
            RetainHandling::SendIfNew => !existed,
            RetainHandling::DoNotSend => false,
        };
        if send_retained && !shared {
            for message in self.retained.matching(&topic_filter, now) {
                let delivery = Delivery {
                    qos: message.qos.min(options.qos),
                    retain: true,
                    subscription_ids: options.subscription_id.into_iter().collect(),
                    shared: None,
                    message,
                };
                session.enqueue(delivery, false);
            }
        }
        existed
    }

    /// Gives `session` the subscriptions another node handed over with it (see
    /// [`Handover`](crate::cluster::registry::Handover)): each checked against the new
    /// connection's ACL as a SUBSCRIBE would be (refused ones are dropped and counted), and
    /// without a retained replay, as for any resumed session.
    pub fn adopt_subscriptions(
        &self,
        session: &Arc<Session>,
        acl: &Acl,
        subscriptions: Vec<(SubscriptionFilter, SubscribeOptions)>,
    ) {
        for (filter, options) in subscriptions {
            if !acl.allows_subscribe(filter.filter()) {
                Stats::add(&self.stats.subscribes_denied, 1);
                continue;
            }
            self.router.subscribe(session, &filter, options);
            let text: Arc<str> = Arc::from(filter.as_str());
            session.record(|client_id| Change::Subscribed {
                client_id: client_id.clone(),
                filter: text.clone(),
                options,
            });
            session.add_subscription(text, SubscriptionRecord { filter, options });
        }
    }

    /// Removes a subscription by its text (as the client sent it). Returns whether it existed.
    pub fn unsubscribe(&self, session: &Session, text: &str) -> bool {
        match session.remove_subscription(text) {
            Some(record) => {
                session.record(|client_id| Change::Unsubscribed {
                    client_id: client_id.clone(),
                    filter: text.into(),
                });
                self.router.unsubscribe(session.id(), &record.filter)
            }
            None => false,
        }
    }
}
