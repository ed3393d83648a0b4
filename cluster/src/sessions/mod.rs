//! Persistent sessions copied into the cluster, so that a session whose node died resumes on
//! the node its client reconnects to.
//!
//! - **What is copied**: the session as the node's journal changes it, snapshotted into one
//!   record per client id ([`SessionRecord`]) in one KV bucket (`sessions_bucket`): one asset
//!   whatever the number of clients. The broker's journal on a clustered node is
//!   [`SessionCopies`], which records into the disk journal when there is one (its sequence
//!   numbers and durability count) and marks the sessions that changed.
//! - **When** (`store`): a session that changed is written within `session_write_delay_ms`;
//!   a change that exactly-once rests on ([`CopyFirst`]: the packet id a QoS 2
//!   message is sent with, a PUBREC received, an incoming QoS 2 id, a subscription) is written
//!   at once, and the connection's gate holds the packet that depends on it until the record is
//!   stored ([`Journal::poll_durable`], as the disk journal does under durability `always`).
//! - **Fencing**: a record carries the registry revision at which its writer holds the client
//!   id; a write finds the stored record first (or knows its revision from its own last write)
//!   and is refused when that record comes from a newer claim.
//! - **Recovery** (`store::SessionStore::recover`): on a CONNECT with clean start 0 whose
//!   previous owner does not answer the takeover (no responders: the node is gone), the claiming
//!   node reads the record, writes it back as its own at once (fencing the old owner), and takes
//!   the subscriptions, queued and in-flight messages and incoming QoS 2 ids into the new
//!   session as a live takeover does.

pub(crate) mod replay;
pub(crate) mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use mesgd_core::cluster::replay::Delivered;
use mesgd_core::cluster::session_record::{CopyFirst, session_of};
use mesgd_core::journal::{Change, Journal};
use mesgd_core::model::MessageId;
use mesgd_core::sync::lock;
use tokio::sync::Notify;

/// The journal of a clustered node: the disk journal, if any, plus the marks of which sessions
/// must be written to the cluster, and when.
#[derive(Debug)]
pub struct SessionCopies {
    primary: Option<Arc<dyn Journal>>,
    /// The sequence numbers when there is no disk journal.
    next: AtomicU64,
    state: Mutex<Marks>,
    /// Wakes the writer: a change to write at once, or the first change of a batch.
    wake: Notify,
}

#[derive(Debug, Default)]
struct Marks {
    /// Sessions changed since their last write, and whether one must be written at once.
    dirty: HashMap<Arc<str>, bool>,
    /// Changes the record must hold before the packets that follow them leave: sequence
    /// number → client id.
    first: BTreeMap<u64, Arc<str>>,
    /// Connections waiting for such changes, with the sequence number each waits for.
    waiters: Vec<(u64, Waker)>,
    /// Which changes are such changes.
    copy_first: CopyFirst,
    /// The ids of the messages each session holds and finished, for its record's checkpoint.
    delivered: Delivered,
}

/// The sessions to write in one round, with the sequence numbers each one's write lets go.
pub(crate) type Batch = Vec<(Arc<str>, Vec<u64>)>;

impl SessionCopies {
    /// Copies over `primary` (the disk journal, when sessions are persisted).
    pub fn new(primary: Option<Arc<dyn Journal>>) -> Self {
        SessionCopies {
            primary,
            next: AtomicU64::new(1),
            state: Mutex::new(Marks::default()),
            wake: Notify::new(),
        }
    }

    /// Waits until some session changed.
    pub(crate) async fn changed(&self) {
        self.wake.notified().await;
    }

    /// Whether a session waits to be written at once.
    pub(crate) fn urgent(&self) -> bool {
        lock(&self.state).dirty.values().any(|urgent| *urgent)
    }

    /// Takes every changed session, with the sequence numbers its write lets go.
    pub(crate) fn take(&self) -> Batch {
        let mut marks = lock(&self.state);
        let dirty = std::mem::take(&mut marks.dirty);
        let mut seqs: HashMap<Arc<str>, Vec<u64>> = HashMap::new();
        for (seq, id) in &marks.first {
            if dirty.contains_key(id) {
                seqs.entry(id.clone()).or_default().push(*seq);
            }
        }
        dirty
            .into_keys()
            .map(|id| {
                let waiting = seqs.remove(&id).unwrap_or_default();
                (id, waiting)
            })
            .collect()
    }

    /// The session `id` was written (or will never be: not this node's, fenced, too large):
    /// the packets behind `seqs` may go.
    pub(crate) fn written(&self, seqs: &[u64]) {
        if seqs.is_empty() {
            return;
        }
        let mut marks = lock(&self.state);
        for seq in seqs {
            marks.first.remove(seq);
        }
        let lowest = marks.first.keys().next().copied().unwrap_or(u64::MAX);
        marks.waiters.retain(|(seq, waker)| {
            if *seq < lowest {
                waker.wake_by_ref();
                false
            } else {
                true
            }
        });
    }

    /// The write of `id` failed: it is tried again in the next round.
    pub(crate) fn retry(&self, id: Arc<str>) {
        let mut marks = lock(&self.state);
        let urgent = marks.first.values().any(|f| *f == id);
        marks.dirty.insert(id, urgent);
    }

    /// How many changes wait for their session's write before a packet may leave.
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.state).first.len()
    }

    /// The checkpoint of a record of `id` written now, and the ids it finished since.
    pub(crate) fn checkpoint(&self, id: &str) -> (u64, Vec<MessageId>) {
        lock(&self.state).delivered.checkpoint(id, store::now_ms())
    }

    /// Whether session `id` holds or finished message `message` on this node.
    pub(crate) fn has(&self, id: &str, message: MessageId) -> bool {
        lock(&self.state).delivered.has(id, message)
    }

    /// Takes in the finished ids of session `id`'s recovered record.
    pub(crate) fn adopt_finished(&self, id: &Arc<str>, finished: &[MessageId]) {
        lock(&self.state).delivered.adopt(id, finished, store::now_ms());
    }
}

impl Journal for SessionCopies {
    fn record(&self, change: Change) -> u64 {
        let Some(id) = session_of(&change).cloned() else {
            return match &self.primary {
                Some(p) => p.record(change),
                None => self.next.fetch_add(1, Ordering::Relaxed),
            };
        };
        let first = {
            let mut marks = lock(&self.state);
            marks.delivered.learn(&change, store::now_ms());
            marks.copy_first.must_be_copied_first(&change)
        };
        let seq = match &self.primary {
            Some(p) => p.record(change),
            None => self.next.fetch_add(1, Ordering::Relaxed),
        };
        {
            let mut marks = lock(&self.state);
            if first {
                marks.first.insert(seq, id.clone());
            }
            let was_idle = marks.dirty.is_empty();
            let urgent = marks.dirty.entry(id).or_insert(false);
            let wake = (first && !*urgent) || was_idle;
            *urgent |= first;
            drop(marks);
            if wake {
                self.wake.notify_one();
            }
        }
        seq
    }

    fn acks_wait_for_disk(&self) -> bool {
        true
    }

    fn poll_durable(&self, seq: u64, waker: &Waker) -> bool {
        if let Some(p) = &self.primary {
            if p.acks_wait_for_disk() && !p.poll_durable(seq, waker) {
                return false;
            }
        }
        let mut marks = lock(&self.state);
        if marks.first.keys().next().is_none_or(|lowest| *lowest > seq) {
            return true;
        }
        match marks.waiters.iter_mut().find(|(_, w)| w.will_wake(waker)) {
            Some(entry) => entry.0 = entry.0.max(seq),
            None => marks.waiters.push((seq, waker.clone())),
        }
        false
    }

    fn begin_atomic(&self) -> u64 {
        self.primary.as_ref().map_or(0, |p| p.begin_atomic())
    }

    fn end_atomic(&self, token: u64) {
        if let Some(p) = &self.primary {
            p.end_atomic(token);
        }
    }

    fn poll_room(&self, waker: &Waker) -> bool {
        self.primary.as_ref().is_none_or(|p| p.poll_room(waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::task::Wake;

    use super::*;

    #[derive(Default)]
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn in_flight(id: &str) -> Change {
        Change::InFlight { client_id: Arc::from(id), entry: 1, packet_id: 1 }
    }

    #[test]
    fn a_packet_waits_for_the_write_of_the_changes_before_it_and_no_other() {
        let copies = SessionCopies::new(None);
        let flag = Arc::new(Flag::default());
        let waker = Waker::from(flag.clone());
        let queued = copies.record(Change::Done { client_id: Arc::from("q"), entry: 1 });
        assert!(copies.poll_durable(queued, &waker), "a completion does not hold packets");
        let first = copies.record(in_flight("a"));
        let second = copies.record(in_flight("b"));
        assert!(copies.poll_durable(queued, &waker), "nor do later changes hold earlier packets");
        assert!(!copies.poll_durable(second, &waker));
        assert!(copies.urgent());
        let mut batch = copies.take();
        batch.sort();
        let ids: Vec<(&str, &[u64])> = batch.iter().map(|(id, s)| (&**id, s.as_slice())).collect();
        assert_eq!(ids, [("a", &[first][..]), ("b", &[second][..]), ("q", &[][..])]);
        copies.written(&[second]);
        assert!(!flag.0.load(Ordering::SeqCst), "a's change still holds the packet");
        assert!(!copies.poll_durable(second, &waker));
        copies.retry(Arc::from("a"));
        assert!(copies.urgent(), "a failed write of a change packets wait for is urgent again");
        copies.written(&[first]);
        assert!(flag.0.load(Ordering::SeqCst), "woken once every change before it is written");
        assert!(copies.poll_durable(second, &waker));
        assert_eq!(copies.waiting(), 0);
    }
}
