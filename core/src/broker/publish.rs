//! Publishing: the checks every client publish passes (the `$SYS` reservation, the write ACL),
//! routing with the retained store, wills, and the seam through which a cluster layer receives
//! every message published here.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use super::{Broker, DropReason, Stats};
use crate::acl::{Access, Acl};
use crate::journal::Change;
use crate::model::{Message, Will};
use crate::retained::RetainChange;
use crate::router::RouteStats;
use crate::topic::{TopicFilter, TopicName};

/// Why a client's publish was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishRefused {
    /// `$SYS/...` is the broker's own and `$relay/...` names relay resources for the ACL: no
    /// client publishes there, whatever its ACL says (an unrestricted client would otherwise
    /// forge broker statistics).
    #[error("the topic is reserved for the broker")]
    Reserved,
    /// The publisher's ACL does not let it write the topic.
    #[error("not authorized to publish to this topic")]
    NotAuthorized,
}

/// Topics no client may publish to: `$SYS` (the broker's statistics) and `$relay` (the names
/// ACL rules give relay addresses, rooms and games, see [`crate::relay::resources`]), and
/// everything under them.
pub fn is_reserved_topic(topic: &TopicName) -> bool {
    let t = topic.as_str();
    t == "$SYS" || t.starts_with("$SYS/") || crate::relay::is_relay_topic(t)
}

/// Where messages published on this node go besides local subscribers: the cluster seam. A
/// cluster layer forwards each one to the nodes that have an interest in it; a message that
/// came from another node ([`crate::model::Origin::node`] set) is never forwarded again.
pub trait Forward: Send + Sync + fmt::Debug {
    /// Called once per message published here, after local routing. `keep_retained` is false
    /// for a retained message that this node's retained store refused at its caps: it still goes
    /// to the other nodes' subscribers, but not into the cluster's retained state.
    fn forward(&self, message: &Arc<Message>, keep_retained: bool);
    /// Called when an operator cleared the retained message of `topic` here (the REST API), so
    /// that it is cleared on every node.
    fn clear_retained(&self, topic: &TopicName) {
        let _ = topic;
    }
}

/// Proof that a client may publish to a topic: only [`Broker::authorize_publish`] makes one,
/// and [`Broker::publish_permitted`] takes one, so no front end can route a client's message
/// without the checks.
#[derive(Debug)]
#[must_use = "a permit does nothing until the message is published with it"]
pub struct PublishPermit {
    /// The topic it is for, checked against the message's in debug builds only (a reference
    /// count taken and dropped per message otherwise).
    #[cfg(debug_assertions)]
    topic: TopicName,
}

impl Broker {
    /// Publishes `message` on behalf of a client whose ACL is `acl`: refused for the broker's
    /// own topics and without write permission (counted), else routed (counted as received).
    pub fn publish_as(&self, acl: &Acl, message: Message) -> Result<RouteStats, PublishRefused> {
        let permit = self.authorize_publish(acl, &message.topic)?;
        Ok(self.publish_permitted(permit, message))
    }

    /// The checks of [`Broker::publish_as`] alone, for a front end that must know the verdict
    /// before it records anything of the message (an MQTT QoS 2 packet id). A refusal is
    /// counted.
    pub fn authorize_publish(&self, acl: &Acl, topic: &TopicName) -> Result<PublishPermit, PublishRefused> {
        let refused = if is_reserved_topic(topic) {
            PublishRefused::Reserved
        } else if !acl.allows(Access::Write, topic) {
            PublishRefused::NotAuthorized
        } else {
            return Ok(PublishPermit {
                #[cfg(debug_assertions)]
                topic: topic.clone(),
            });
        };
        Stats::add(&self.stats.publishes_denied, 1);
        Err(refused)
    }

    /// Routes a client's message that [`Broker::authorize_publish`] allowed (counted as
    /// received). The permit must be for the message's topic.
    pub fn publish_permitted(&self, permit: PublishPermit, message: Message) -> RouteStats {
        self.count_received(1);
        self.route_permitted(permit, message)
    }

    /// [`Broker::publish_permitted`] for a front end that counts the messages it received
    /// itself, a batch at a time ([`Broker::count_received`]): the counter is shared by every
    /// connection, and one atomic addition per message showed in profiles of the publish path.
    // Taken by value so that a permit publishes one message, though in a release build it
    // holds nothing to consume.
    #[allow(clippy::needless_pass_by_value)]
    pub fn route_permitted(&self, permit: PublishPermit, message: Message) -> RouteStats {
        let PublishPermit {
            #[cfg(debug_assertions)]
            topic,
        } = permit;
        #[cfg(debug_assertions)]
        assert_eq!(topic, message.topic, "a permit is for one topic");
        self.publish(message)
    }

    /// Counts `n` messages received from clients (see [`Broker::route_permitted`]).
    pub fn count_received(&self, n: u64) {
        if n > 0 {
            Stats::add(&self.stats.messages_received, n);
        }
    }

    /// Publishes a message with no checks (the broker's own, or one that passed
    /// [`Broker::publish_as`]): updates the retained store if it is retained, then routes it.
    pub fn publish(&self, message: Message) -> RouteStats {
        // Numbered by the durable store before routing, so that every copy (local queues, the
        // other nodes) carries its identity in the stream.
        let (message, stored_seq) = match self.message_store.get() {
            Some(store) if crate::cluster::durable::stores(&message) => {
                let (message, seq) = store.store(message);
                (message, Some(seq))
            }
            _ => (Arc::new(message), None),
        };
        let mut retained_seq = None;
        let mut retain_refused = false;
        if message.retain {
            match self.retained.set(&message) {
                RetainChange::Unchanged => {}
                RetainChange::Refused => {
                    Stats::add(&self.stats.retained_refused, 1);
                    retain_refused = true;
                }
                _ => {
                    let kept = (!message.payload.is_empty()).then(|| message.clone());
                    retained_seq =
                        self.record(|| Change::Retained { topic: message.topic.clone(), message: kept });
                }
            }
        }
        let mut stats = self.router.route(&message);
        stats.retain_refused = retain_refused;
        if stats.dropped > 0 {
            self.stats.dropped(DropReason::QueueFull, stats.dropped as u64);
        }
        if stats.filtered > 0 {
            Stats::add(&self.stats.deliveries_filtered, stats.filtered as u64);
        }
        stats.durable_seq = stats.durable_seq.max(retained_seq);
        stats.stored_seq = stored_seq;
        if message.origin.node.is_none() {
            if let Some(forward) = self.forward.get() {
                forward.forward(&message, !retain_refused);
            }
        }
        stats
    }

    /// Removes the retained message of `topic`, as an operator asks (the REST API): journalled
    /// like a client's empty retained publish, but delivered to no subscriber, and cleared on
    /// every node of a cluster. Returns whether there was one here.
    pub fn clear_retained(&self, topic: &TopicName) -> bool {
        if !self.retained.remove(topic) {
            return false;
        }
        self.record(|| Change::Retained { topic: topic.clone(), message: None });
        if let Some(forward) = self.forward.get() {
            forward.clear_retained(topic);
        }
        true
    }

    /// Routes a message that another cluster node published (its [`crate::model::Origin::node`]
    /// set) to this node's subscribers: the publishing node already checked it, and the
    /// cluster-wide retained store, not this message, updates the retained messages, so it is
    /// only routed, never stored or forwarded again.
    pub fn publish_remote(&self, message: Message) -> RouteStats {
        debug_assert!(message.origin.node.is_some(), "a remote message names its node");
        let stats = self.router.route_direct(&Arc::new(message));
        self.count_routing(stats)
    }

    /// Routes a message that another node (or this one) published to one member of this
    /// node's shared group `group` on `filter`: the cluster chose this node for it.
    pub fn publish_remote_shared(&self, message: Message, group: &str, filter: &TopicFilter) -> RouteStats {
        let stats = self.router.route_to_group(&Arc::new(message), group, filter);
        self.count_routing(stats)
    }

    fn count_routing(&self, stats: RouteStats) -> RouteStats {
        if stats.dropped > 0 {
            self.stats.dropped(DropReason::QueueFull, stats.dropped as u64);
        }
        if stats.filtered > 0 {
            Stats::add(&self.stats.deliveries_filtered, stats.filtered as u64);
        }
        stats
    }

    /// Sets (or, for an empty payload, removes) the retained message of a topic as the
    /// cluster-wide retained store says, delivering it to no one: journalled like a local
    /// retained publish, and never forwarded. Returns what changed.
    pub fn apply_retained(&self, message: Message) -> RetainChange {
        let message = Arc::new(message);
        let change = self.retained.set(&message);
        if change == RetainChange::Refused {
            Stats::add(&self.stats.retained_refused, 1);
        } else if change != RetainChange::Unchanged {
            let kept = (!message.payload.is_empty()).then(|| message.clone());
            self.record(|| Change::Retained { topic: message.topic.clone(), message: kept });
        }
        change
    }

    /// Installs the cluster's store of QoS 1/2 messages (once).
    pub fn set_message_store(&self, store: Arc<dyn crate::cluster::durable::MessageStore>) {
        let _ = self.message_store.set(store);
    }

    /// The cluster's store of QoS 1/2 messages, if this node is in a cluster.
    pub fn message_store(&self) -> Option<&Arc<dyn crate::cluster::durable::MessageStore>> {
        self.message_store.get()
    }

    /// Installs the cluster forwarder (once).
    pub fn set_forward(&self, forward: Arc<dyn Forward>) {
        let _ = self.forward.set(forward);
    }

    /// Publishes a will now, with the checks of any client publish.
    pub fn publish_will(&self, will: Will, now: Instant) -> Option<RouteStats> {
        let topic = will.message.topic.clone();
        match self.publish_as(&will.acl, will.message.with_expiry_interval(will.expiry_interval, now)) {
            Ok(stats) => Some(stats),
            Err(why) => {
                tracing::info!(topic = topic.as_str(), reason = %why, "will not published");
                None
            }
        }
    }
}
