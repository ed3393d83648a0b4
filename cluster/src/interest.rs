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
//!
//! The table also knows which generation NATS has confirmed (both tasks mark it, after their
//! server answered a round trip that followed their SUB and UNSUB), so that a SUBACK can wait
//! for the node's subscription to be in place ([`Interest::poll_synced`]): a client that
//! subscribes here and then has a message published on another node gets it. While the NATS
//! connection is down nothing is waited for (the subscription is local until NATS is back).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Waker;
use std::time::Duration;

use async_nats::connection::State;

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
    /// The generation NATS has confirmed, per task ([`Synced`]).
    synced: [AtomicU64; 2],
    /// Who waits in [`Interest::poll_synced`].
    waiters: Mutex<Vec<Waker>>,
    /// The connection whose state says whether NATS can be waited for at all (unset in unit
    /// tests: always waited for).
    nats: OnceLock<async_nats::Client>,
    stats: Arc<ClusterStats>,
}

/// Which of the two subscribing tasks confirmed a generation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Synced {
    /// The plain subscriptions' task.
    Plain = 0,
    /// The shared groups' task.
    Groups = 1,
}

/// How often waiters are woken while the NATS connection is down (they then wait no more).
const UNREACHABLE_TICK: Duration = Duration::from_millis(200);

impl InterestTable {
    pub(crate) fn new(stats: Arc<ClusterStats>) -> Self {
        InterestTable {
            subjects: Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            changed: Notify::new(),
            changed_groups: Notify::new(),
            synced: [AtomicU64::new(0), AtomicU64::new(0)],
            waiters: Mutex::new(Vec::new()),
            nats: OnceLock::new(),
            stats,
        }
    }

    /// Marks `generation` confirmed by `task`'s server, and wakes whoever waits for it.
    pub(crate) fn mark_synced(&self, task: Synced, generation: u64) {
        self.synced[task as usize].fetch_max(generation, Ordering::AcqRel);
        self.wake_waiters();
    }

    fn wake_waiters(&self) {
        let waiters = std::mem::take(&mut *lock(&self.waiters));
        for waker in waiters {
            waker.wake();
        }
    }

    fn reachable(&self) -> bool {
        self.nats.get().is_none_or(|c| c.connection_state() == State::Connected)
    }

    /// Watches `client` for as long as the node runs: while it is down, whoever waits for a
    /// generation is woken (and waits no more) every [`UNREACHABLE_TICK`].
    pub(crate) async fn watch_reachability(self: Arc<Self>, client: async_nats::Client) {
        let _ = self.nats.set(client);
        let mut tick = tokio::time::interval(UNREACHABLE_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !self.reachable() && !lock(&self.waiters).is_empty() {
                self.wake_waiters();
            }
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

    fn generation(&self) -> u64 {
        InterestTable::generation(self)
    }

    fn poll_synced(&self, generation: u64, waker: &Waker) -> bool {
        let mut waiters = lock(&self.waiters);
        let confirmed = self.synced.iter().map(|s| s.load(Ordering::Acquire)).min().unwrap_or(0);
        if confirmed >= generation || !self.reachable() {
            return true;
        }
        if !waiters.iter().any(|w| w.will_wake(waker)) {
            waiters.push(waker.clone());
        }
        false
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

    struct Count(std::sync::atomic::AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_generation_is_synced_once_both_tasks_confirmed_it() {
        let t = InterestTable::new(Arc::default());
        let count = Arc::new(Count(Default::default()));
        let waker = Waker::from(count.clone());
        assert!(Interest::poll_synced(&t, Interest::generation(&t), &waker), "nothing changed yet");
        t.filter_added(&TopicFilter::try_from("a/+").unwrap());
        let g = Interest::generation(&t);
        assert!(!Interest::poll_synced(&t, g, &waker));
        t.mark_synced(Synced::Plain, g);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken to look again");
        assert!(!Interest::poll_synced(&t, g, &waker), "the groups' task has not confirmed it");
        t.mark_synced(Synced::Groups, g + 1);
        assert!(Interest::poll_synced(&t, g, &waker));
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }
}
