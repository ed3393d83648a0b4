//! The router: subscriptions in, deliveries out.
//!
//! Filters live in a [`SubscriptionTrie`] split into shards so that no single lock sits on the
//! publish path: a filter whose first level is literal goes to the shard chosen by hashing that
//! level; a filter that starts with `+` or `#` goes to the wildcard shard. A publish reads (under
//! a shared lock, one shard at a time) its own first level's shard and, unless its topic starts
//! with `$`, the wildcard shard. Subscribes to different first levels never block each other or
//! publishes elsewhere.
//!
//! Matches are collected first and the locks released before any session is touched, then
//! overlapping subscriptions of one session are merged (one delivery at the highest granted QoS
//! with every subscription identifier), shared groups pick one online member round-robin, and
//! each delivery is pushed into its session, which applies the receiver's ACL and queue limits.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::cluster::Interest;
use crate::model::{Delivery, Message, QoS, SessionId, SharedRoute, SubscribeOptions, SubscriptionIds};
use crate::session::{Enqueued, Session};
use crate::sync::{read, write};
use crate::topic::{SubscriptionFilter, TopicFilter, TopicName};
use crate::trie::SubscriptionTrie;

/// How many literal shards the trie is split into.
const SHARDS: usize = 16;

#[derive(Debug)]
struct Subscriber {
    session: Arc<Session>,
    options: SubscribeOptions,
    /// The session's [`Session::readable_stamp`] for the filter, taken when it subscribed.
    readable: u64,
}

#[derive(Debug)]
struct SharedGroup {
    name: Arc<str>,
    subscription: Arc<str>,
    members: Vec<Subscriber>,
    /// Round-robin position; advanced under the shard's read lock, hence atomic.
    cursor: AtomicUsize,
    /// Whether the cluster layer was told the group has an online member here (it holds the
    /// group's queue subscription only then). Changed under the shard's write lock.
    held: AtomicBool,
}

impl SharedGroup {
    /// Tells `interest` when the group gains its first online member or loses its last one.
    /// Called under the shard's write lock after every change of the members or of their
    /// sessions' presence: each call reads the presence as it is now, so the last one after a
    /// change leaves the cluster layer right.
    fn update_held(&self, interest: Option<&Arc<dyn Interest>>, filter: &TopicFilter) {
        let Some(interest) = interest else { return };
        let online = self.members.iter().any(|m| m.session.is_online());
        if self.held.swap(online, Ordering::AcqRel) == online {
            return;
        }
        if online {
            interest.group_added(&self.name, filter);
        } else {
            interest.group_removed(&self.name, filter);
        }
    }
}

/// Everything subscribed to one filter.
#[derive(Debug, Default)]
struct FilterSubscribers {
    direct: Vec<Subscriber>,
    groups: Vec<SharedGroup>,
}

impl FilterSubscribers {
    fn is_empty(&self) -> bool {
        self.direct.is_empty() && self.groups.is_empty()
    }
}

/// One session's merged share of a publish.
struct Target {
    session: Arc<Session>,
    qos: QoS,
    retain_as_published: bool,
    no_local: bool,
    subscription_ids: SubscriptionIds,
    shared: Option<SharedRoute>,
    /// A stamp under which the message is known to be readable (0: check it).
    readable: u64,
}

thread_local! {
    /// Per-thread scratch space for the targets of one publish, so routing does not allocate.
    static TARGETS: RefCell<Vec<Target>> = const { RefCell::new(Vec::new()) };
}

/// Which subscriptions one routing reaches.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// Plain subscriptions and shared groups.
    All,
    /// Plain subscriptions only.
    Direct,
    /// One member of one shared group: its name and filter.
    Group(&'a str, &'a TopicFilter),
}

/// What routing one message did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteStats {
    /// Sessions that accepted the message into their queue.
    pub delivered: usize,
    /// Sessions whose ACL or no-local option filtered it out.
    pub filtered: usize,
    /// Sessions whose queue limits dropped it (or dropped an older message for it).
    pub dropped: usize,
    /// Sessions that dropped it because the broker-wide queue budget was used up (counted by
    /// the budget, [`crate::session::QueueBudget::dropped`]).
    pub over_budget: usize,
    /// The highest journal sequence number recorded while routing (a persistent session queued
    /// it): under durability `always` the publisher's acknowledgement waits for it.
    pub durable_seq: Option<u64>,
    /// The cluster store's sequence number of the message, when it was handed to one
    /// ([`crate::cluster::durable`]): the publisher's acknowledgement waits for it.
    pub stored_seq: Option<u64>,
    /// A retained message that the retained store's caps kept from being stored (it was
    /// routed all the same; counted in [`crate::broker::Stats::retained_refused`]).
    pub retain_refused: bool,
}

/// The subscription index and delivery fan-out.
#[derive(Debug)]
pub struct Router {
    shards: Box<[RwLock<SubscriptionTrie<FilterSubscribers>>]>,
    wildcard: RwLock<SubscriptionTrie<FilterSubscribers>>,
    /// How many subscriptions the wildcard shard holds: a publish skips that shard (its lock
    /// and its walk) while there are none. Changed under the shard's write lock, before the
    /// subscribe or unsubscribe returns.
    wildcard_count: AtomicUsize,
    count: AtomicUsize,
    /// The cluster layer, told when a filter gains its first or loses its last subscriber;
    /// unset on a single node.
    interest: OnceLock<Arc<dyn Interest>>,
}

impl Default for Router {
    fn default() -> Self {
        Router::new()
    }
}

/// The first level of a topic or filter: what picks its shard.
fn first_level(text: &str) -> &str {
    text.split('/').next().unwrap_or("")
}

/// Whether a filter starts with `+` or `#`: it lives in the wildcard shard.
fn starts_with_wildcard(filter: &TopicFilter) -> bool {
    matches!(first_level(filter.as_str()), "+" | "#")
}

/// FNV-1a: a fast hash for short strings, good enough to spread first levels over shards.
fn shard_of(level: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in level.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % SHARDS as u64) as usize
}

impl Router {
    /// An empty router.
    pub fn new() -> Self {
        Router {
            shards: (0..SHARDS).map(|_| RwLock::new(SubscriptionTrie::new())).collect(),
            wildcard: RwLock::new(SubscriptionTrie::new()),
            wildcard_count: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
            interest: OnceLock::new(),
        }
    }

    fn shard_for_filter(&self, filter: &TopicFilter) -> &RwLock<SubscriptionTrie<FilterSubscribers>> {
        if starts_with_wildcard(filter) {
            &self.wildcard
        } else {
            &self.shards[shard_of(first_level(filter.as_str()))]
        }
    }

    /// How many subscriptions (filter × session, shared members included) exist.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether there are no subscriptions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds or replaces `session`'s subscription. Returns true if it replaced an existing one
    /// (MQTT 5 retain handling 1 sends retained messages only for new subscriptions).
    pub fn subscribe(
        &self,
        session: &Arc<Session>,
        filter: &SubscriptionFilter,
        options: SubscribeOptions,
    ) -> bool {
        let mut trie = write(self.shard_for_filter(filter.filter()));
        let entry = trie.entry(filter.filter());
        // The cluster layer holds a plain NATS subscription for a filter while it has direct
        // subscribers here; shared groups have their queue subscriptions instead.
        let first_direct = matches!(filter, SubscriptionFilter::Plain(_)) && entry.direct.is_empty();
        let list = match filter {
            SubscriptionFilter::Plain(_) => &mut entry.direct,
            SubscriptionFilter::Shared { group, .. } => {
                let position = entry.groups.iter().position(|g| g.name == *group);
                let index = match position {
                    Some(i) => i,
                    None => {
                        entry.groups.push(SharedGroup {
                            name: group.clone(),
                            subscription: Arc::from(filter.as_str()),
                            members: Vec::new(),
                            cursor: AtomicUsize::new(0),
                            held: AtomicBool::new(false),
                        });
                        entry.groups.len() - 1
                    }
                };
                &mut entry.groups[index].members
            }
        };
        let readable = session.readable_stamp(filter.filter());
        let replaced = if let Some(existing) = list.iter_mut().find(|s| s.session.id() == session.id()) {
            existing.options = options;
            existing.session = session.clone();
            existing.readable = readable;
            true
        } else {
            list.push(Subscriber { session: session.clone(), options, readable });
            self.count.fetch_add(1, Ordering::Relaxed);
            if starts_with_wildcard(filter.filter()) {
                self.wildcard_count.fetch_add(1, Ordering::Release);
            }
            if first_direct {
                if let Some(interest) = self.interest.get() {
                    interest.filter_added(filter.filter());
                }
            }
            false
        };
        if let SubscriptionFilter::Shared { group, .. } = filter {
            let entry = trie.entry(filter.filter());
            if let Some(g) = entry.groups.iter().find(|g| g.name == *group) {
                g.update_held(self.interest.get(), filter.filter());
            }
        }
        replaced
    }

    /// `session` was attached to a connection or detached from one: each shared group it is a
    /// member of here may have gained its first online member or lost its last, which decides
    /// whether this node holds the group's NATS queue subscription (an offline member must
    /// not take messages from the members online on other nodes).
    pub fn presence_changed(&self, session: &Session) {
        let Some(interest) = self.interest.get() else { return };
        for (_, record) in session.subscriptions() {
            let SubscriptionFilter::Shared { group, .. } = &record.filter else { continue };
            let trie = write(self.shard_for_filter(record.filter.filter()));
            let Some(entry) = trie.get(record.filter.filter()) else { continue };
            if let Some(g) = entry.groups.iter().find(|g| g.name == *group) {
                g.update_held(Some(interest), record.filter.filter());
            }
        }
    }

    /// Removes `session`'s subscription; returns whether it existed.
    pub fn unsubscribe(&self, session: SessionId, filter: &SubscriptionFilter) -> bool {
        let mut removed = false;
        let mut last_direct = false;
        let mut trie = write(self.shard_for_filter(filter.filter()));
        trie.remove_if(filter.filter(), |entry| {
            match filter {
                SubscriptionFilter::Plain(_) => {
                    removed = remove_member(&mut entry.direct, session);
                    last_direct = removed && entry.direct.is_empty();
                }
                SubscriptionFilter::Shared { group, .. } => {
                    if let Some(i) = entry.groups.iter().position(|g| g.name == *group) {
                        removed = remove_member(&mut entry.groups[i].members, session);
                        // The group's last (online) member gone: its queue subscription too.
                        entry.groups[i].update_held(self.interest.get(), filter.filter());
                        if entry.groups[i].members.is_empty() {
                            entry.groups.swap_remove(i);
                        }
                    }
                }
            }
            entry.is_empty()
        });
        if last_direct {
            if let Some(interest) = self.interest.get() {
                interest.filter_removed(filter.filter());
            }
        }
        if removed && starts_with_wildcard(filter.filter()) {
            self.wildcard_count.fetch_sub(1, Ordering::Release);
        }
        drop(trie);
        if removed {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// The cluster layer's [`Interest`], once installed.
    pub fn interest(&self) -> Option<&Arc<dyn Interest>> {
        self.interest.get()
    }

    /// Installs the cluster layer's [`Interest`] (once; later calls do nothing): it is told of
    /// every filter that has subscribers now, then of every change. All shards are locked while
    /// it is installed, so no change falls between the two.
    pub fn set_interest(&self, interest: &Arc<dyn Interest>) {
        let shards: Vec<_> = self.shards.iter().chain(std::iter::once(&self.wildcard)).map(write).collect();
        if self.interest.set(interest.clone()).is_err() {
            return;
        }
        for shard in &shards {
            shard.for_each(|text, entry| {
                if let Ok(filter) = TopicFilter::try_from(text) {
                    if !entry.direct.is_empty() {
                        interest.filter_added(&filter);
                    }
                    for group in &entry.groups {
                        group.update_held(Some(interest), &filter);
                    }
                }
            });
        }
    }

    /// Delivers `message` to every matching subscription. When a cluster layer delivers shared
    /// subscriptions itself ([`Interest::routes_groups`]), shared groups are left out: the
    /// message reaches them through [`Router::route_to_group`], once in the whole cluster.
    pub fn route(&self, message: &Arc<Message>) -> RouteStats {
        let groups = !self.interest.get().is_some_and(|i| i.routes_groups(&message.topic));
        self.route_scoped(message, if groups { Scope::All } else { Scope::Direct })
    }

    /// Delivers a message from another node to this node's matching plain subscriptions only
    /// (shared groups get theirs through [`Router::route_to_group`]).
    pub fn route_direct(&self, message: &Arc<Message>) -> RouteStats {
        self.route_scoped(message, Scope::Direct)
    }

    /// Delivers a message to one member of this node's shared group `group` on `filter`, as
    /// a cluster layer decided (a NATS queue group picked this node).
    pub fn route_to_group(&self, message: &Arc<Message>, group: &str, filter: &TopicFilter) -> RouteStats {
        self.route_scoped(message, Scope::Group(group, filter))
    }

    fn route_scoped(&self, message: &Arc<Message>, scope: Scope<'_>) -> RouteStats {
        TARGETS.with(|cell| {
            let Ok(mut targets) = cell.try_borrow_mut() else {
                // Re-entered from inside a delivery (cannot happen today): use a fresh buffer.
                return self.route_with(message, &mut Vec::new(), scope);
            };
            let stats = self.route_with(message, &mut targets, scope);
            targets.clear();
            stats
        })
    }

    fn route_with(&self, message: &Arc<Message>, targets: &mut Vec<Target>, scope: Scope<'_>) -> RouteStats {
        let topic = &message.topic;
        let groups = matches!(scope, Scope::All);
        let mut filters = 0;
        if let Scope::Group(name, filter) = scope {
            let trie = read(self.shard_for_filter(filter));
            let group = trie.get(filter).and_then(|e| e.groups.iter().find(|g| &*g.name == name));
            if let Some(member) = group
                .filter(|_| filter.matches(topic))
                .and_then(|g| pick_member(g, None, false).map(|m| (m, g)))
            {
                let (m, g) = member;
                let route = SharedRoute { group: g.name.clone(), subscription: g.subscription.clone() };
                targets.push(target(m, message.qos, Some(route)));
            }
        } else {
            let shard = &self.shards[shard_of(first_level(topic.as_str()))];
            filters = collect(&read(shard), topic, message.qos, groups, targets);
            // A subscribe that returned before this publish began is counted already.
            if !topic.is_dollar() && self.wildcard_count.load(Ordering::Acquire) > 0 {
                filters += collect(&read(&self.wildcard), topic, message.qos, groups, targets);
            }
        }
        // A session appears at most once among one filter's direct subscribers, so a publish
        // that matched a single filter (a 1:1 topic, or a fan-out to its many subscribers)
        // needs no merging.
        if filters > 1 {
            merge_overlapping(targets);
        }
        let mut stats = RouteStats::default();
        for t in targets.drain(..) {
            let delivery = Delivery {
                message: message.clone(),
                qos: t.qos,
                retain: t.retain_as_published && message.retain,
                subscription_ids: t.subscription_ids,
                shared: t.shared,
            };
            let refused = delivery.shared.is_some().then(|| delivery.clone());
            let (mut outcome, mut seq) = t.session.enqueue_journaled(delivery, t.no_local, t.readable);
            if let (Enqueued::Filtered, Some(delivery)) = (outcome, refused) {
                (outcome, seq) = self.offer_to_group(&delivery, t.session.id());
            }
            stats.durable_seq = stats.durable_seq.max(seq);
            count(&mut stats, outcome);
        }
        stats
    }

    /// Offers a shared-group message that the chosen member may not read to the group's other
    /// members, online ones first, until one takes it. The topic does not exist for that
    /// member, but it does for the group: one member's ACL must not make the message vanish for
    /// members that may read it.
    fn offer_to_group(&self, delivery: &Delivery, refused_by: SessionId) -> (Enqueued, Option<u64>) {
        let Some(route) = &delivery.shared else { return (Enqueued::Filtered, None) };
        let Ok(filter) = SubscriptionFilter::parse(&route.subscription) else {
            return (Enqueued::Filtered, None);
        };
        let mut others: Vec<(Arc<Session>, SubscribeOptions)> = {
            let trie = read(self.shard_for_filter(filter.filter()));
            trie.get(filter.filter())
                .and_then(|entry| entry.groups.iter().find(|g| g.name == route.group))
                .map(|group| {
                    group
                        .members
                        .iter()
                        .filter(|m| m.session.id() != refused_by)
                        .map(|m| (m.session.clone(), m.options))
                        .collect()
                })
                .unwrap_or_default()
        };
        others.sort_by_key(|(session, _)| !session.is_online());
        for (session, options) in others {
            let message = &delivery.message;
            let offer = Delivery {
                message: message.clone(),
                qos: message.qos.min(options.qos),
                retain: options.retain_as_published && message.retain,
                subscription_ids: options.subscription_id.into_iter().collect(),
                shared: delivery.shared.clone(),
            };
            let (outcome, seq) = session.enqueue_journaled(offer, false, 0);
            if outcome != Enqueued::Filtered {
                return (outcome, seq);
            }
        }
        (Enqueued::Filtered, None)
    }

    /// Hands a delivery that a leaving shared-group member did not acknowledge to another
    /// online member of the same group. Returns the delivery back if there is none.
    pub fn redispatch(&self, delivery: Delivery, leaving: SessionId) -> Result<(), Delivery> {
        let Some(route) = delivery.shared.clone() else { return Err(delivery) };
        let Ok(filter) = SubscriptionFilter::parse(&route.subscription) else { return Err(delivery) };
        let chosen = {
            let trie = read(self.shard_for_filter(filter.filter()));
            trie.get(filter.filter())
                .and_then(|entry| entry.groups.iter().find(|g| g.name == route.group))
                .and_then(|group| pick_member(group, Some(leaving), true))
                .map(|m| (m.session.clone(), m.options))
        };
        match chosen {
            Some((session, options)) => {
                let qos = delivery.message.qos.min(options.qos);
                session.enqueue(Delivery { qos, ..delivery }, false);
                Ok(())
            }
            None => Err(delivery),
        }
    }

    /// Visits every subscription (for statistics and persistence).
    pub fn for_each_subscription(&self, mut f: impl FnMut(&Session, &SubscribeOptions)) {
        for shard in self.shards.iter().chain(std::iter::once(&self.wildcard)) {
            read(shard).for_each(|_, entry| {
                for s in &entry.direct {
                    f(&s.session, &s.options);
                }
                for g in &entry.groups {
                    for s in &g.members {
                        f(&s.session, &s.options);
                    }
                }
            });
        }
    }
}

fn remove_member(list: &mut Vec<Subscriber>, session: SessionId) -> bool {
    match list.iter().position(|s| s.session.id() == session) {
        Some(i) => {
            list.swap_remove(i);
            true
        }
        None => false,
    }
}

fn count(stats: &mut RouteStats, outcome: Enqueued) {
    match outcome {
        Enqueued::Queued => stats.delivered += 1,
        Enqueued::QueuedDroppingOldest => {
            stats.delivered += 1;
            stats.dropped += 1;
        }
        Enqueued::Filtered => stats.filtered += 1,
        Enqueued::Dropped => stats.dropped += 1,
        // Counted by the budget itself, under its own reason.
        Enqueued::OverBudget => stats.over_budget += 1,
    }
}

/// Collects the subscribers of every filter in `trie` that matches `topic`.
/// Returns how many filters matched.
fn collect(
    trie: &SubscriptionTrie<FilterSubscribers>,
    topic: &TopicName,
    qos: QoS,
    groups: bool,
    out: &mut Vec<Target>,
) -> usize {
    let mut filters = 0;
    trie.for_each_match(topic, |entry| {
        filters += 1;
        for s in &entry.direct {
            out.push(target(s, qos, None));
        }
        if !groups {
            return;
        }
        for group in &entry.groups {
            if let Some(member) = pick_member(group, None, false) {
                let route =
                    SharedRoute { group: group.name.clone(), subscription: group.subscription.clone() };
                out.push(target(member, qos, Some(route)));
            }
        }
    });
    filters
}

fn target(s: &Subscriber, qos: QoS, shared: Option<SharedRoute>) -> Target {
    Target {
        session: s.session.clone(),
        qos: qos.min(s.options.qos),
        retain_as_published: s.options.retain_as_published,
        no_local: s.options.no_local,
        subscription_ids: s.options.subscription_id.into_iter().collect(),
        shared,
        readable: s.readable,
    }
}

/// Round-robin over the group's online members. Without an online member, a plain publish
/// still goes to one member (its session queues it until it returns), but a redispatch
/// (`online_only`) does not bounce a message between offline sessions.
fn pick_member(group: &SharedGroup, except: Option<SessionId>, online_only: bool) -> Option<&Subscriber> {
    let n = group.members.len();
    if n == 0 {
        return None;
    }
    // The cursor moves past the member chosen, so offline members are skipped without giving
    // their turn to the next online one. Two publishers racing may pick the same member; the
    // rotation stays fair over time, which is all round-robin promises.
    let start = group.cursor.load(Ordering::Relaxed);
    let eligible = |s: &Subscriber| Some(s.session.id()) != except;
    let choose = |want_online: bool| {
        (0..n).find(|i| {
            let m = &group.members[(start + i) % n];
            eligible(m) && (!want_online || m.session.is_online())
        })
    };
    let offset = match choose(true) {
        Some(i) => i,
        None if online_only => return None,
        None => choose(false)?,
    };
    group.cursor.store(start.wrapping_add(offset + 1), Ordering::Relaxed);
    Some(&group.members[(start + offset) % n])
}

/// Merges the targets of one session into one delivery: highest QoS, every subscription id.
/// Deliveries through shared groups stay separate (a shared subscription is independent of the
/// session's other subscriptions).
fn merge_overlapping(targets: &mut Vec<Target>) {
    if targets.len() < 2 {
        return;
    }
    targets.sort_by_key(|t| (t.shared.is_some(), t.session.id()));
    let mut write = 0;
    for read in 0..targets.len() {
        if write > 0 {
            let (done, rest) = targets.split_at_mut(read);
            let (prev, cur) = (&mut done[write - 1], &mut rest[0]);
            if prev.shared.is_none() && cur.shared.is_none() && prev.session.id() == cur.session.id() {
                prev.qos = prev.qos.max(cur.qos);
                prev.retain_as_published |= cur.retain_as_published;
                // no-local applies if every overlapping subscription asks for it.
                prev.no_local &= cur.no_local;
                let ids = std::mem::take(&mut cur.subscription_ids);
                prev.subscription_ids.extend(ids);
                // The message is readable if any of the filters it came through says so.
                if prev.readable == 0 {
                    prev.readable = cur.readable;
                }
                continue;
            }
        }
        targets.swap(write, read);
        write += 1;
    }
    targets.truncate(write);
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bytes::Bytes;

    use super::*;
    use crate::acl::Acl;
    use crate::model::{Origin, SessionExpiry, SessionKey};
    use crate::session::{Outgoing, QueueLimits};

    fn session(id: u64) -> Arc<Session> {
        let s = Session::new(
            SessionId(id),
            SessionKey::mqtt(format!("c{id}")),
            SessionExpiry::Never,
            QueueLimits {
                max_messages: 100,
                max_bytes: 1 << 20,
                queue_qos0_offline: true,
                max_inflight_bytes: usize::MAX,
            },
        );
        s.attach(1, Acl::unrestricted(), SessionExpiry::Never);
        Arc::new(s)
    }

    /// Records what the router tells the cluster layer.
    #[derive(Debug, Default)]
    struct Recorder(std::sync::Mutex<Vec<String>>);

    impl Interest for Recorder {
        fn filter_added(&self, filter: &TopicFilter) {
            self.0.lock().unwrap().push(format!("+{filter}"));
        }
        fn filter_removed(&self, filter: &TopicFilter) {
            self.0.lock().unwrap().push(format!("-{filter}"));
        }
    }

    #[test]
    fn interest_hears_first_subscriber_and_last_unsubscriber_of_each_filter() {
        let router = Router::new();
        let (a, b) = (session(1), session(2));
        let q0 = SubscribeOptions::with_qos(QoS::AtMostOnce);
        router.subscribe(&a, &sub("x/+"), q0);
        let recorder = Arc::new(Recorder::default());
        let installed: Arc<dyn Interest> = recorder.clone();
        router.set_interest(&installed);
        // What existed before is reported at installation.
        router.subscribe(&b, &sub("x/+"), q0);
        router.subscribe(&a, &sub("$share/g/y/#"), q0);
        router.subscribe(&b, &sub("y/#"), q0);
        router.subscribe(&a, &sub("x/+"), q0);
        router.unsubscribe(a.id(), &sub("x/+"));
        router.unsubscribe(b.id(), &sub("x/+"));
        router.unsubscribe(a.id(), &sub("$share/g/y/#"));
        router.unsubscribe(b.id(), &sub("y/#"));
        router.unsubscribe(b.id(), &sub("y/#"));
        assert_eq!(*recorder.0.lock().unwrap(), ["+x/+", "+y/#", "-x/+", "-y/#"]);
    }

    #[test]
    fn interest_follows_direct_subscribers_only_a_shared_only_filter_is_left_to_its_groups() {
        let router = Router::new();
        let (a, b) = (session(1), session(2));
        let q0 = SubscribeOptions::with_qos(QoS::AtMostOnce);
        let recorder = Arc::new(Recorder::default());
        let installed: Arc<dyn Interest> = recorder.clone();
        // A shared-only filter held before the installation is not reported either.
        router.subscribe(&a, &sub("$share/g/old"), q0);
        router.set_interest(&installed);
        router.subscribe(&a, &sub("$share/g/z"), q0);
        router.unsubscribe(a.id(), &sub("$share/g/z"));
        // Direct first, then a group: the direct subscriber's leaving is reported while the
        // group stays, and a direct one coming back is reported again.
        router.subscribe(&b, &sub("w"), q0);
        router.subscribe(&a, &sub("$share/g/w"), q0);
        router.unsubscribe(b.id(), &sub("w"));
        router.subscribe(&b, &sub("w"), q0);
        router.unsubscribe(a.id(), &sub("$share/g/w"));
        router.unsubscribe(b.id(), &sub("w"));
        assert_eq!(*recorder.0.lock().unwrap(), ["+w", "-w", "+w", "-w"]);
    }

    #[test]
    fn scoped_routing_reaches_plain_subscribers_or_one_group_member() {
        let router = Router::new();
        let (a, b, c) = (session(1), session(2), session(3));
        let q0 = SubscribeOptions::with_qos(QoS::AtMostOnce);
        router.subscribe(&a, &sub("t/+"), q0);
        router.subscribe(&b, &sub("$share/g/t/+"), q0);
        router.subscribe(&c, &sub("$share/g/t/+"), q0);
        let m = msg("t/1", QoS::AtMostOnce, None);
        assert_eq!(router.route(&m).delivered, 2, "the plain subscriber and one member");
        assert_eq!(router.route_direct(&m).delivered, 1, "the plain subscriber only");
        let f = TopicFilter::try_from("t/+").unwrap();
        assert_eq!(router.route_to_group(&m, "g", &f).delivered, 1, "one member");
        assert_eq!(router.route_to_group(&m, "other", &f).delivered, 0);
        let elsewhere = msg("u/1", QoS::AtMostOnce, None);
        assert_eq!(router.route_to_group(&elsewhere, "g", &f).delivered, 0, "the filter must match");
    }

    fn sub(f: &str) -> SubscriptionFilter {
        SubscriptionFilter::parse(f).unwrap()
    }

    fn msg(topic: &str, qos: QoS, origin: Option<u64>) -> Arc<Message> {
        let origin = Origin { session: origin.map(SessionId), client_id: None, node: None };
        Arc::new(Message::new(
            TopicName::try_from(topic).unwrap(),
            Bytes::from_static(b"p"),
            qos,
            true,
            origin,
        ))
    }

    fn taken(s: &Session) -> Vec<(QoS, Vec<u32>, bool)> {
        let waker = std::task::Waker::noop();
        let mut out = Vec::new();
        s.drain(1, 100, 100, Instant::now(), waker, &mut out);
        out.into_iter()
            .filter_map(|o| match o {
                Outgoing::Publish { delivery, .. } => {
                    Some((delivery.qos, delivery.subscription_ids.to_vec(), delivery.retain))
                }
                Outgoing::PubRel { .. } => None,
            })
            .collect()
    }

    fn opts(qos: QoS, id: Option<u32>) -> SubscribeOptions {
        SubscribeOptions { subscription_id: id, ..SubscribeOptions::with_qos(qos) }
    }

    #[test]
    fn overlapping_subscriptions_deliver_once_at_highest_qos_with_all_ids() {
        let r = Router::new();
        let a = session(1);
        r.subscribe(&a, &sub("x/+"), opts(QoS::AtMostOnce, Some(1)));
        r.subscribe(&a, &sub("#"), opts(QoS::ExactlyOnce, Some(2)));
        r.subscribe(&a, &sub("x/y"), opts(QoS::AtLeastOnce, None));
        let stats = r.route(&msg("x/y", QoS::ExactlyOnce, None));
        assert_eq!(stats.delivered, 1);
        let got = taken(&a);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, QoS::ExactlyOnce);
        let mut ids = got[0].1.clone();
        ids.sort();
        assert_eq!(ids, [1, 2]);
        assert!(!got[0].2, "retain cleared for established subscriptions");
    }

    #[test]
    fn qos_is_downgraded_to_the_granted_qos() {
        let r = Router::new();
        let a = session(1);
        r.subscribe(&a, &sub("t"), opts(QoS::AtMostOnce, None));
        r.route(&msg("t", QoS::ExactlyOnce, None));
        assert_eq!(taken(&a)[0].0, QoS::AtMostOnce);
    }

    #[test]
    fn dollar_topics_are_not_matched_by_leading_wildcards() {
        let r = Router::new();
        let a = session(1);
        let b = session(2);
        r.subscribe(&a, &sub("#"), opts(QoS::AtMostOnce, None));
        r.subscribe(&a, &sub("+/broker/x"), opts(QoS::AtMostOnce, None));
        r.subscribe(&b, &sub("$SYS/#"), opts(QoS::AtMostOnce, None));
        assert_eq!(r.route(&msg("$SYS/broker/x", QoS::AtMostOnce, None)).delivered, 1);
        assert!(taken(&a).is_empty());
        assert_eq!(taken(&b).len(), 1);
    }

    #[test]
    fn no_local_and_retain_as_published() {
        let r = Router::new();
        let a = session(1);
        r.subscribe(
            &a,
            &sub("t"),
            SubscribeOptions {
                no_local: true,
                retain_as_published: true,
                ..SubscribeOptions::with_qos(QoS::AtLeastOnce)
            },
        );
        assert_eq!(r.route(&msg("t", QoS::AtMostOnce, Some(1))).filtered, 1);
        r.route(&msg("t", QoS::AtMostOnce, Some(2)));
        assert!(taken(&a)[0].2, "retain kept as published");
    }

    #[test]
    fn shared_groups_round_robin_over_online_members() {
        let r = Router::new();
        let (a, b, c) = (session(1), session(2), session(3));
        for s in [&a, &b, &c] {
            r.subscribe(s, &sub("$share/g/t/#"), opts(QoS::AtLeastOnce, None));
        }
        c.detach(1, Instant::now());
        for _ in 0..10 {
            assert_eq!(r.route(&msg("t/1", QoS::AtLeastOnce, None)).delivered, 1);
        }
        assert_eq!((a.queue_len(), b.queue_len(), c.queue_len()), (5, 5, 0));
        assert_eq!(r.len(), 3);
        assert!(r.unsubscribe(SessionId(1), &sub("$share/g/t/#")));
        assert!(!r.unsubscribe(SessionId(1), &sub("$share/g/t/#")));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn a_shared_message_the_chosen_member_may_not_read_goes_to_one_that_may() {
        let r = Router::new();
        let (a, b, c) = (session(1), session(2), session(3));
        let no_secrets = [
            crate::acl::Rule::new("secret/#", crate::acl::Permission::Deny),
            crate::acl::Rule::new("#", crate::acl::Permission::Read),
        ];
        a.set_acl(Acl::compile(Some(&no_secrets), None, "c1"));
        for s in [&a, &b, &c] {
            r.subscribe(s, &sub("$share/g/#"), opts(QoS::AtLeastOnce, None));
        }
        c.detach(1, Instant::now());
        for _ in 0..4 {
            assert_eq!(r.route(&msg("secret/x", QoS::AtLeastOnce, None)).delivered, 1);
        }
        assert_eq!((a.queue_len(), b.queue_len(), c.queue_len()), (0, 4, 0), "online members first");
        b.set_acl(Acl::compile(Some(&no_secrets), None, "c2"));
        assert_eq!(r.route(&msg("secret/x", QoS::AtLeastOnce, None)).delivered, 1);
        assert_eq!(c.queue_len(), 1, "an offline member that may read it keeps it for later");
        c.set_acl(Acl::compile(Some(&no_secrets), None, "c3"));
        let stats = r.route(&msg("secret/x", QoS::AtLeastOnce, None));
        assert_eq!((stats.delivered, stats.filtered), (0, 1), "nobody may read it");
    }

    #[test]
    fn a_decision_cached_at_subscribe_time_ends_when_the_rules_change() {
        use crate::acl::{Permission, Rule};
        let r = Router::new();
        let a = session(1);
        a.set_acl(Acl::compile(
            Some(&[Rule::new("admin/#", Permission::Deny), Rule::new("b/#", Permission::Read)]),
            None,
            "c1",
        ));
        // Covered entirely by `b/#`: messages through it skip the per-message check.
        r.subscribe(&a, &sub("b/in/#"), opts(QoS::AtLeastOnce, None));
        // Reaches `admin/`: each message is checked.
        r.subscribe(&a, &sub("#"), opts(QoS::AtLeastOnce, None));
        assert_eq!(r.route(&msg("b/in/1", QoS::AtLeastOnce, None)).delivered, 1);
        assert_eq!(r.route(&msg("admin/x", QoS::AtLeastOnce, None)).filtered, 1);
        assert_eq!(r.route(&msg("c/x", QoS::AtLeastOnce, None)).filtered, 1);
        a.set_acl(Acl::compile(
            Some(&[Rule::new("b/in/secret", Permission::Deny), Rule::new("b/#", Permission::Read)]),
            None,
            "c1",
        ));
        assert_eq!(r.route(&msg("b/in/secret", QoS::AtLeastOnce, None)).filtered, 1, "new rules, new check");
        assert_eq!(r.route(&msg("b/in/2", QoS::AtLeastOnce, None)).delivered, 1);
        a.set_acl(Acl::compile(Some(&[]), None, "c1"));
        assert_eq!(r.route(&msg("b/in/3", QoS::AtLeastOnce, None)).filtered, 1);
        assert_eq!(a.queue_len(), 0, "and what was queued is hidden too");
    }

    #[test]
    fn a_leaving_members_unacked_messages_go_to_another_member() {
        let r = Router::new();
        let (a, b) = (session(1), session(2));
        r.subscribe(&a, &sub("$share/g/t"), opts(QoS::AtLeastOnce, None));
        r.subscribe(&b, &sub("$share/g/t"), opts(QoS::AtLeastOnce, None));
        for _ in 0..4 {
            r.route(&msg("t", QoS::AtLeastOnce, None));
        }
        taken(&a); // two in flight, unacknowledged
        a.detach(1, Instant::now());
        for d in a.take_shared_unacked() {
            assert!(r.redispatch(d, a.id()).is_ok());
        }
        assert_eq!(b.queue_len(), 4);
        assert_eq!(a.inflight_len(), 0);
    }

    #[test]
    fn unsubscribe_prunes_and_resubscribe_replaces() {
        let r = Router::new();
        let a = session(1);
        assert!(!r.subscribe(&a, &sub("a/b"), opts(QoS::AtMostOnce, None)));
        assert!(r.subscribe(&a, &sub("a/b"), opts(QoS::AtLeastOnce, None)));
        assert_eq!(r.len(), 1);
        assert!(r.unsubscribe(a.id(), &sub("a/b")));
        assert_eq!(r.route(&msg("a/b", QoS::AtMostOnce, None)).delivered, 0);
        assert!(r.is_empty());
    }

    /// A publish skips the wildcard shard while it holds no subscription: every way in and out
    /// of it must be counted, or a wildcard subscriber would stop hearing anything.
    #[test]
    fn wildcard_subscribers_hear_publishes_through_every_change_of_the_wildcard_shard() {
        let r = Router::new();
        let (a, b, c, d) = (session(1), session(2), session(3), session(4));
        let q0 = opts(QoS::AtMostOnce, None);
        let route = |topic: &str| r.route(&msg(topic, QoS::AtMostOnce, None)).delivered;
        r.subscribe(&d, &sub("x/y"), q0);
        assert_eq!(route("x/y"), 1, "literal subscribers only");
        r.subscribe(&a, &sub("#"), q0);
        r.subscribe(&b, &sub("+/y"), q0);
        assert_eq!(route("x/y"), 3);
        // A replaced subscription is not a second one; unsubscribing what does not exist
        // (again, or another session's) removes nothing.
        r.subscribe(&a, &sub("#"), opts(QoS::AtLeastOnce, None));
        assert!(r.unsubscribe(a.id(), &sub("#")));
        assert!(!r.unsubscribe(a.id(), &sub("#")));
        assert_eq!(route("x/y"), 2, "b's +/y is still there");
        assert!(!r.unsubscribe(c.id(), &sub("+/y")));
        assert_eq!(route("x/y"), 2);
        // A shared group on a wildcard filter lives in the wildcard shard too.
        r.subscribe(&c, &sub("$share/g/+/y"), q0);
        assert!(r.unsubscribe(b.id(), &sub("+/y")));
        assert_eq!(route("x/y"), 2, "d and the group's member");
        assert!(r.unsubscribe(c.id(), &sub("$share/g/+/y")));
        assert_eq!(route("x/y"), 1, "the wildcard shard is empty again");
        r.subscribe(&a, &sub("x/#"), q0);
        assert_eq!(route("x/y"), 2, "a literal first level is not the wildcard shard");
        r.subscribe(&b, &sub("#"), q0);
        assert_eq!(route("x/y"), 3, "a new wildcard subscriber after the shard was empty");
        for s in [&a, &b, &c, &d] {
            taken(s);
        }
    }
}
