//! The subjects this node wants from NATS: the router reports each filter that gains its first
//! or loses its last local subscriber ([`mesgd_core::cluster::Interest`]); each filter stands
//! for one or two subjects, counted here, so that filters sharing a subject (`a` and `a/#` both
//! need `mq.a`) hold one NATS subscription between them.
//!
//! Shared groups (`$share/<group>/<filter>`) with an online member here need a NATS queue
//! subscription each (queue group named after group and filter, see
//! [`mesgd_core::cluster::subject::queue_name`]), so NATS gives each message to one node of
//! those that have members, and that node to one of its members.
//!
//! The table is the desired state; the live task subscribes and unsubscribes until NATS
//! matches it, after every change (woken by [`InterestTable::changed`]). Nothing here blocks:
//! it runs under the router's shard lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mesgd_core::cluster::Interest;
use mesgd_core::cluster::subject::{LIVE, queue_name};
use mesgd_core::sync::lock;
use mesgd_core::topic::{TopicFilter, TopicName};
use tokio::sync::Notify;

use crate::stats::ClusterStats;

/// One NATS queue subscription a shared group needs: subject and queue group.
pub(crate) type QueueSub = (String, String);

/// The shared group (name and filter) a queue subscription delivers to.
pub(crate) type GroupTarget = (Arc<str>, TopicFilter);

/// Subjects with the number of local filters that need each, and the queue subscriptions of
/// the shared groups that have an online member here.
#[derive(Debug)]
pub(crate) struct InterestTable {
    subjects: Mutex<HashMap<String, usize>>,
    groups: Mutex<HashMap<QueueSub, GroupTarget>>,
    generation: AtomicU64,
    /// Woken after every change (for the plain subscriptions' task).
    pub(crate) changed: Notify,
    /// Woken after every change (for the shared groups' task).
    pub(crate) changed_groups: Notify,
    stats: Arc<ClusterStats>,
}

impl InterestTable {
    pub(crate) fn new(stats: Arc<ClusterStats>) -> Self {
        InterestTable {
            subjects: Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            changed: Notify::new(),
            changed_groups: Notify::new(),
            stats,
        }
    }

    /// The subjects wanted now, with the generation they belong to (it rises with every
    /// change).
    pub(crate) fn snapshot(&self) -> (u64, Vec<String>) {
        let subjects = lock(&self.subjects);
        (self.generation.load(Ordering::Acquire), subjects.keys().cloned().collect())
    }

    /// The queue subscriptions wanted now, with the generation they belong to.
    pub(crate) fn group_snapshot(&self) -> (u64, Vec<(QueueSub, GroupTarget)>) {
        let groups = lock(&self.groups);
        let all = groups.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        (self.generation.load(Ordering::Acquire), all)
    }

    /// The generation of the latest change.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
        self.changed_groups.notify_one();
    }
}

impl Interest for InterestTable {
    fn filter_added(&self, filter: &TopicFilter) {
        let Ok(wanted) = LIVE.filter(filter) else {
            ClusterStats::add(&self.stats.unmappable_filters, 1);
            return;
        };
        let mut subjects = lock(&self.subjects);
        let mut changed = false;
        for s in wanted {
            let count = subjects.entry(s).or_insert(0);
            *count += 1;
            changed |= *count == 1;
        }
        drop(subjects);
        if changed {
            self.bump();
        }
    }

    fn group_added(&self, group: &str, filter: &TopicFilter) {
        let Ok(wanted) = LIVE.filter(filter) else {
            ClusterStats::add(&self.stats.unmappable_filters, 1);
            return;
        };
        let queue = queue_name(group, filter);
        let mut groups = lock(&self.groups);
        for subject in wanted {
            groups.insert((subject, queue.clone()), (Arc::from(group), filter.clone()));
        }
        drop(groups);
        self.bump();
    }

    fn group_removed(&self, group: &str, filter: &TopicFilter) {
        let Ok(wanted) = LIVE.filter(filter) else { return };
        let queue = queue_name(group, filter);
        let mut groups = lock(&self.groups);
        for subject in wanted {
            groups.remove(&(subject, queue.clone()));
        }
        drop(groups);
        self.bump();
    }

    fn routes_groups(&self, topic: &TopicName) -> bool {
        !crate::live::node_local(topic)
    }

    fn filter_removed(&self, filter: &TopicFilter) {
        let Ok(wanted) = LIVE.filter(filter) else { return };
        let mut subjects = lock(&self.subjects);
        let mut changed = false;
        for s in wanted {
            if let Some(count) = subjects.get_mut(&s) {
                *count -= 1;
                if *count == 0 {
                    subjects.remove(&s);
                    changed = true;
                }
            }
        }
        drop(subjects);
        if changed {
            self.bump();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_subjects_are_counted() {
        let t = InterestTable::new(Arc::default());
        let f = |s: &str| TopicFilter::try_from(s).unwrap();
        t.filter_added(&f("a/#"));
        t.filter_added(&f("a"));
        let (g1, mut s) = t.snapshot();
        s.sort();
        assert_eq!(s, ["mq.a", "mq.a.>"]);
        t.filter_removed(&f("a/#"));
        let (g2, s) = t.snapshot();
        assert_eq!(s, ["mq.a"]);
        assert!(g2 > g1);
        t.filter_removed(&f("a"));
        assert!(t.snapshot().1.is_empty());
    }
}
