//! One message on its way to one subscriber, and a will waiting to be published.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use super::{Message, QoS};
use crate::acl::Acl;

/// The subscription identifiers that travel with one delivery; almost always zero or one.
pub type SubscriptionIds = SmallVec<[u32; 1]>;

/// A shared-subscription group a delivery was chosen through, so that it can be handed to
/// another member if this one leaves before acknowledging it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedRoute {
    /// The group name.
    pub group: Arc<str>,
    /// The full subscription text (`$share/{group}/{filter}`).
    pub subscription: Arc<str>,
}

/// One message on its way to one subscriber.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The message, shared with every other subscriber.
    pub message: Arc<Message>,
    /// The QoS for this subscriber: `min(published, granted)`.
    pub qos: QoS,
    /// The retain flag to send.
    pub retain: bool,
    /// Subscription identifiers of every matching subscription (MQTT 5).
    pub subscription_ids: SubscriptionIds,
    /// Set when the message came through a shared subscription.
    pub shared: Option<SharedRoute>,
}

impl Delivery {
    pub(crate) fn weight(&self) -> usize {
        self.message.weight()
    }
}

/// A will message with what is needed to publish it later.
#[derive(Clone, Debug)]
pub struct Will {
    /// The message (its `expires_at` is set when it is published).
    pub message: Message,
    /// MQTT 5 message expiry interval, counted from the moment the will is published.
    pub expiry_interval: Option<u32>,
    /// MQTT 5 will delay interval.
    pub delay: Duration,
    /// The publisher's ACL at the time the will is published (checked for write then).
    pub acl: Acl,
}
