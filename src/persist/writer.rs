//! The journal writer: changes are queued in memory by whichever task makes them and written to
//! `state.db` by one thread, many per transaction (group commit).
//!
//! `always`: the writer wakes as soon as a change is queued and commits with `synchronous=FULL`;
//! while it waits for the disk, new changes pile up and go together in the next commit, so one
//! fsync carries many messages. Connections waiting to acknowledge are woken when their sequence
//! number is durable. `periodic`: the writer commits every `flush_interval_ms` with
//! `synchronous=NORMAL`, and nobody waits.
//!
//! Within one batch, a message queued and then acknowledged (or a relay message queued and then
//! flushed to its recipient) never touches the disk: under load, online persistent sessions
//! cost almost nothing to persist.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use mesgd_core::histogram::LatencyHistogram;
use mesgd_core::journal::{Change, Journal};
use mesgd_core::model::Message;
use mesgd_core::model::{Delivery, SessionExpiry};
use mesgd_core::mqtt::RetainHandling;
use mesgd_core::sync::lock;
use rusqlite::{Connection, params};

use super::record::{acl_to_json, ids_to_json, instant_to_ms, properties_to_json, system_to_ms};

/// How often the writer retries after a failed commit.
const RETRY_AFTER: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
struct Pending {
    changes: Vec<(u64, Change)>,
    next_seq: u64,
    /// Open atomic groups by the first sequence number they may contain (with a count, as two
    /// groups may open at the same point): nothing from there on is taken for writing.
    atomic: std::collections::BTreeMap<u64, usize>,
    closed: bool,
}

impl Pending {
    /// How many of the pending changes may be written now: those before the first open group.
    fn committable(&self) -> usize {
        match self.atomic.first_key_value() {
            None => self.changes.len(),
            Some((&from, _)) => self.changes.partition_point(|(seq, _)| *seq < from),
        }
    }
}

/// The journal handed to the broker.
#[derive(Debug)]
pub struct SqliteJournal {
    pending: Mutex<Pending>,
    wake_writer: Condvar,
    durable: AtomicU64,
    /// Connections waiting for a sequence number to be durable: one entry per task.
    waiters: Mutex<Vec<(u64, Waker)>>,
    /// Unwritten changes at most before [`Journal::poll_room`] says no.
    max_unwritten: usize,
    /// Connections waiting for the backlog to shrink, and how often one had to.
    room_waiters: Mutex<Vec<Waker>>,
    backpressure: AtomicU64,
    wait_for_disk: bool,
    failed: AtomicBool,
    /// How long each successful commit took, the fsync included (for metrics).
    commit_latency: LatencyHistogram,
}

impl Journal for SqliteJournal {
    fn record(&self, change: Change) -> u64 {
        let mut p = lock(&self.pending);
        p.next_seq += 1;
        let seq = p.next_seq;
        p.changes.push((seq, change));
        drop(p);
        if self.wait_for_disk {
            self.wake_writer.notify_one();
        }
        seq
    }

    fn acks_wait_for_disk(&self) -> bool {
        self.wait_for_disk
    }

    fn poll_durable(&self, seq: u64, waker: &Waker) -> bool {
        if self.durable.load(Ordering::Acquire) >= seq {
            return true;
        }
        {
            // A connection polls again and again while it waits: keep one entry per task, at
            // the newest (highest) sequence number it waits for.
            let mut waiters = lock(&self.waiters);
            match waiters.iter_mut().find(|(_, w)| w.will_wake(waker)) {
                Some(entry) => entry.0 = entry.0.max(seq),
                None => waiters.push((seq, waker.clone())),
            }
        }
        // The writer may have advanced between the check and the registration.
        self.durable.load(Ordering::Acquire) >= seq
    }

    fn poll_room(&self, waker: &Waker) -> bool {
        if lock(&self.pending).changes.len() < self.max_unwritten {
            return true;
        }
        let mut waiters = lock(&self.room_waiters);
        if !waiters.iter().any(|w| w.will_wake(waker)) {
            waiters.push(waker.clone());
        }
        drop(waiters);
        self.backpressure.fetch_add(1, Ordering::Relaxed);
        // The writer may have taken a batch since the check.
        lock(&self.pending).changes.len() < self.max_unwritten
    }

    fn begin_atomic(&self) -> u64 {
        let mut p = lock(&self.pending);
        let from = p.next_seq + 1;
        *p.atomic.entry(from).or_default() += 1;
        from
    }

    fn end_atomic(&self, token: u64) {
        let mut p = lock(&self.pending);
        if let std::collections::btree_map::Entry::Occupied(mut open) = p.atomic.entry(token) {
            *open.get_mut() -= 1;
            if *open.get() == 0 {
                open.remove();
            }
        }
        let writable = p.committable() > 0;
        drop(p);
        if writable && self.wait_for_disk {
            self.wake_writer.notify_one();
        }
    }
}

impl SqliteJournal {
    fn take_batch(&self, interval: Option<Duration>) -> (Vec<(u64, Change)>, bool) {
        let mut p = lock(&self.pending);
        match interval {
            None => {
                while p.committable() == 0 && !p.closed {
                    p = self.wake_writer.wait(p).unwrap_or_else(|e| e.into_inner());
                }
            }
            Some(every) => {
                let deadline = Instant::now() + every;
                while !p.closed {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    p = self.wake_writer.wait_timeout(p, left).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
        let take = if p.closed { p.changes.len() } else { p.committable() };
        let batch = p.changes.drain(..take).collect();
        let left = p.changes.len();
        let closed = p.closed;
        drop(p);
        if left <= self.max_unwritten / 2 {
            for w in std::mem::take(&mut *lock(&self.room_waiters)) {
                w.wake();
            }
        }
        (batch, closed)
    }

    /// How many changes wait to be written (for metrics).
    pub fn unwritten(&self) -> usize {
        lock(&self.pending).changes.len()
    }

    /// How long commits took (a transaction of one batch, its fsync included).
    pub fn commit_latency(&self) -> &LatencyHistogram {
        &self.commit_latency
    }

    /// How many times a connection had to wait for the backlog to shrink.
    pub fn backpressure_events(&self) -> u64 {
        self.backpressure.load(Ordering::Relaxed)
    }

    fn mark_durable(&self, seq: u64) {
        self.durable.fetch_max(seq, Ordering::AcqRel);
        let durable = self.durable.load(Ordering::Acquire);
        let ready: Vec<Waker> = {
            let mut w = lock(&self.waiters);
            let (ready, waiting): (Vec<_>, Vec<_>) = w.drain(..).partition(|(s, _)| *s <= durable);
            *w = waiting;
            ready.into_iter().map(|(_, w)| w).collect()
        };
        for w in ready {
            w.wake();
        }
    }

    /// Whether the last commit failed (for `$SYS` and tests).
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
}

/// Stops the writer after it has written everything recorded so far.
#[derive(Debug)]
pub struct WriterHandle {
    journal: Arc<SqliteJournal>,
    thread: Option<JoinHandle<()>>,
}

impl WriterHandle {
    /// Writes what is pending and stops the writer thread.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        lock(&self.journal.pending).closed = true;
        self.journal.wake_writer.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for WriterHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the writer knows of stored messages, so each message is written once however many
/// sessions queue it, and deleted when its last queue entry goes.
#[derive(Default)]
struct MessageIndex {
    /// Live messages already stored: address → (weak handle to check the address is still that
    /// message, row id).
    by_address: HashMap<usize, (Weak<Message>, i64)>,
    /// Row id → number of queue entries referring to it.
    refs: HashMap<i64, u64>,
    /// Queue entry → row id.
    entries: HashMap<(Arc<str>, u64), i64>,
}

/// Starts the writer thread on `conn`. `interval` is `None` for `always`.
pub(crate) fn start(
    conn: Connection,
    interval: Option<Duration>,
    max_unwritten: usize,
    entries: Vec<((Arc<str>, u64), i64)>,
) -> (Arc<SqliteJournal>, WriterHandle) {
    let journal = Arc::new(SqliteJournal {
        pending: Mutex::new(Pending::default()),
        wake_writer: Condvar::new(),
        durable: AtomicU64::new(0),
        waiters: Mutex::new(Vec::new()),
        max_unwritten,
        room_waiters: Mutex::new(Vec::new()),
        backpressure: AtomicU64::new(0),
        wait_for_disk: interval.is_none(),
        failed: AtomicBool::new(false),
        commit_latency: LatencyHistogram::new(),
    });
    let mut index = MessageIndex::default();
    for (key, id) in entries {
        *index.refs.entry(id).or_default() += 1;
        index.entries.insert(key, id);
    }
    let writer = journal.clone();
    let thread = std::thread::Builder::new()
        .name("mesgd-journal".into())
        .spawn(move || run(&writer, conn, interval, index))
        .ok();
    if thread.is_none() {
        tracing::error!("could not start the journal writer thread; state will not be saved");
    }
    (journal.clone(), WriterHandle { journal, thread })
}

fn run(journal: &SqliteJournal, mut conn: Connection, interval: Option<Duration>, mut index: MessageIndex) {
    let mut carry: Vec<(u64, Change)> = Vec::new();
    loop {
        let (mut batch, closed) = journal.take_batch(interval);
        if !carry.is_empty() {
            carry.append(&mut batch);
            batch = std::mem::take(&mut carry);
        }
        if let Some(&(last, _)) = batch.last() {
            let started = Instant::now();
            match write_batch(&mut conn, &batch, &mut index) {
                Ok(()) => {
                    journal.commit_latency.record(started.elapsed());
                    journal.failed.store(false, Ordering::Relaxed);
                    journal.mark_durable(last);
                }
                Err(e) => {
                    // Keep the changes and try again: nothing acknowledged under `always` is
                    // lost, the acknowledgements just wait.
                    if !journal.failed.swap(true, Ordering::Relaxed) {
                        tracing::error!(error = %e, "writing broker state failed; retrying");
                    }
                    carry = batch;
                    if closed {
                        tracing::error!("stopping with unwritten broker state");
                        return;
                    }
                    std::thread::sleep(RETRY_AFTER);
                    continue;
                }
            }
        }
        if closed {
            return;
        }
    }
}

fn expiry_s(e: SessionExpiry) -> i64 {
    match e {
        SessionExpiry::OnDisconnect => 0,
        SessionExpiry::After(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        SessionExpiry::Never => -1,
    }
}

fn retain_handling_code(r: RetainHandling) -> i64 {
    match r {
        RetainHandling::SendAtSubscribe => 0,
        RetainHandling::SendIfNew => 1,
        RetainHandling::DoNotSend => 2,
    }
}

fn write_batch(
    conn: &mut Connection,
    batch: &[(u64, Change)],
    index: &mut MessageIndex,
) -> rusqlite::Result<()> {
    // Entries queued and finished within this batch never need to be written.
    let mut queued_here: HashSet<(&str, u64)> = HashSet::new();
    let mut short_lived: HashSet<(&str, u64)> = HashSet::new();
    // Relay entries flushed to a recipient within the batch that queued them, likewise.
    let mut relay_queued_here: HashSet<u64> = HashSet::new();
    let mut relay_short_lived: HashSet<u64> = HashSet::new();
    for (_, change) in batch {
        match change {
            Change::RelayQueued { entry, .. } => {
                relay_queued_here.insert(*entry);
            }
            Change::RelayDone { entry, .. } if relay_queued_here.contains(entry) => {
                relay_short_lived.insert(*entry);
            }
            Change::Queued { client_id, entry, .. } => {
                queued_here.insert((client_id, *entry));
            }
            Change::Done { client_id, entry } if queued_here.contains(&(&**client_id, *entry)) => {
                short_lived.insert((client_id, *entry));
            }
            // A session that ends drops its entries; they were not short-lived on their own.
            _ => {}
        }
    }
    let now = Instant::now();
    let wall = SystemTime::now();
    let tx = conn.transaction()?;
    for (_, change) in batch {
        if let Change::RelayQueued { entry, .. } | Change::RelayDone { entry, .. } = change
            && relay_short_lived.contains(entry)
        {
            continue;
        }
        apply(&tx, change, index, &short_lived, now, wall)?;
    }
    tx.commit()?;
    // Forget addresses of messages that are gone, now and then.
    if index.by_address.len() > 4096 {
        index.by_address.retain(|_, (weak, _)| weak.strong_count() > 0);
    }
    Ok(())
}

fn apply(
    tx: &rusqlite::Transaction<'_>,
    change: &Change,
    index: &mut MessageIndex,
    short_lived: &HashSet<(&str, u64)>,
    now: Instant,
    wall: SystemTime,
) -> rusqlite::Result<()> {
    let entry_key = match change {
        Change::Queued { client_id, entry, .. }
        | Change::InFlight { client_id, entry, .. }
        | Change::Released { client_id, entry }
        | Change::Done { client_id, entry } => Some((&**client_id, *entry)),
        _ => None,
    };
    if entry_key.is_some_and(|key| short_lived.contains(&key)) {
        return Ok(());
    }
    match change {
        Change::SessionOpened { client_id, expiry } => {
            delete_session(tx, client_id, index)?;
            tx.execute(
                "INSERT INTO sessions (client_id, expiry_s, disconnected_at_ms) VALUES (?1, ?2, NULL)",
                params![&**client_id, expiry_s(*expiry)],
            )?;
        }
        Change::SessionResumed { client_id, expiry } => {
            tx.execute(
                "INSERT INTO sessions (client_id, expiry_s, disconnected_at_ms) VALUES (?1, ?2, NULL)
                 ON CONFLICT (client_id) DO UPDATE SET expiry_s = ?2, disconnected_at_ms = NULL",
                params![&**client_id, expiry_s(*expiry)],
            )?;
        }
        Change::SessionDisconnected { client_id, at, expiry } => {
            tx.execute(
                "UPDATE sessions SET disconnected_at_ms = ?2, expiry_s = ?3 WHERE client_id = ?1",
                params![&**client_id, system_to_ms(*at), expiry_s(*expiry)],
            )?;
        }
        Change::SessionEnded { client_id } => delete_session(tx, client_id, index)?,
        Change::Subscribed { client_id, filter, options } => {
            tx.execute(
                "INSERT OR REPLACE INTO subscriptions
                 (client_id, filter, qos, no_local, retain_as_published, retain_handling, subscription_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    &**client_id,
                    &**filter,
                    options.qos as u8,
                    options.no_local,
                    options.retain_as_published,
                    retain_handling_code(options.retain_handling),
                    options.subscription_id,
                ],
            )?;
        }
        Change::Unsubscribed { client_id, filter } => {
            tx.execute(
                "DELETE FROM subscriptions WHERE client_id = ?1 AND filter = ?2",
                params![&**client_id, &**filter],
            )?;
        }
        Change::Queued { client_id, entry, delivery } => {
            queue(tx, client_id, *entry, delivery, index, now, wall)?;
        }
        Change::InFlight { client_id, entry, packet_id } => {
            tx.execute(
                "UPDATE queue SET packet_id = ?3, state = 1 WHERE client_id = ?1 AND entry = ?2",
                params![&**client_id, *entry as i64, packet_id],
            )?;
        }
        Change::Released { client_id, entry } => {
            tx.execute(
                "UPDATE queue SET state = 2 WHERE client_id = ?1 AND entry = ?2",
                params![&**client_id, *entry as i64],
            )?;
        }
        Change::Done { client_id, entry } => {
            tx.execute(
                "DELETE FROM queue WHERE client_id = ?1 AND entry = ?2",
                params![&**client_id, *entry as i64],
            )?;
            if let Some(id) = index.entries.remove(&(client_id.clone(), *entry)) {
                release_message(tx, id, index)?;
            }
        }
        Change::IncomingQos2 { client_id, packet_id, digest: Some(digest) } => {
            // Stored as the signed integer of the same 64 bits (SQLite integers are signed).
            tx.execute(
                "INSERT OR REPLACE INTO incoming_qos2 (client_id, packet_id, digest) VALUES (?1, ?2, ?3)",
                params![&**client_id, packet_id, *digest as i64],
            )?;
        }
        Change::IncomingQos2 { client_id, packet_id, digest: None } => {
            tx.execute(
                "DELETE FROM incoming_qos2 WHERE client_id = ?1 AND packet_id = ?2",
                params![&**client_id, packet_id],
            )?;
        }
        Change::Retained { topic, message } => match message {
            Some(m) => {
                tx.execute(
                    "INSERT OR REPLACE INTO retained (topic, payload, qos, properties, expires_at_ms, origin)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        topic.as_str(),
                        &m.payload[..],
                        m.qos as u8,
                        properties_to_json(&m.properties),
                        m.expires_at.map(|at| instant_to_ms(at, now, wall)),
                        m.origin.client_id.as_deref(),
                    ],
                )?;
            }
            None => {
                tx.execute("DELETE FROM retained WHERE topic = ?1", params![topic.as_str()])?;
            }
        },
        Change::WillScheduled { client_id, will, at } => {
            let m = &will.message;
            let acl = match will.acl.source() {
                Some(s) => acl_to_json(s.rules.as_deref(), s.username.as_deref(), &s.client_id),
                None => acl_to_json(None, None, client_id),
            };
            tx.execute(
                "INSERT OR REPLACE INTO wills
                 (client_id, topic, payload, qos, retain, properties, expiry_interval, fire_at_ms, acl)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    &**client_id,
                    m.topic.as_str(),
                    &m.payload[..],
                    m.qos as u8,
                    m.retain,
                    properties_to_json(&m.properties),
                    will.expiry_interval,
                    system_to_ms(*at),
                    acl,
                ],
            )?;
        }
        Change::WillCancelled { client_id } => {
            tx.execute("DELETE FROM wills WHERE client_id = ?1", params![&**client_id])?;
        }
        Change::RelayQueued { addr, entry, payload, expires_at } => {
            tx.execute(
                "INSERT OR REPLACE INTO relay_queue (entry, addr, payload, expires_at_ms) VALUES (?1, ?2, ?3, ?4)",
                params![*entry as i64, &**addr, &payload[..], system_to_ms(*expires_at)],
            )?;
        }
        Change::RelayDone { entry, .. } => {
            tx.execute("DELETE FROM relay_queue WHERE entry = ?1", params![*entry as i64])?;
        }
        Change::AliasBound { alias, key_digest } => {
            tx.execute(
                "INSERT OR REPLACE INTO relay_aliases (alias, key_digest) VALUES (?1, ?2)",
                params![&**alias, &key_digest[..]],
            )?;
        }
        _ => {}
    }
    Ok(())
}

fn delete_session(
    tx: &rusqlite::Transaction<'_>,
    client_id: &Arc<str>,
    index: &mut MessageIndex,
) -> rusqlite::Result<()> {
    for table in ["sessions", "subscriptions", "incoming_qos2"] {
        tx.execute(&format!("DELETE FROM {table} WHERE client_id = ?1"), params![&**client_id])?;
    }
    tx.execute("DELETE FROM queue WHERE client_id = ?1", params![&**client_id])?;
    let gone: Vec<(Arc<str>, u64)> = index.entries.keys().filter(|(c, _)| c == client_id).cloned().collect();
    for key in gone {
        if let Some(id) = index.entries.remove(&key) {
            release_message(tx, id, index)?;
        }
    }
    Ok(())
}

/// Drops one reference to a stored message; the row goes with the last one.
fn release_message(
    tx: &rusqlite::Transaction<'_>,
    id: i64,
    index: &mut MessageIndex,
) -> rusqlite::Result<()> {
    let left = index.refs.get_mut(&id).map(|n| {
        *n = n.saturating_sub(1);
        *n
    });
    if left == Some(0) || left.is_none() {
        index.refs.remove(&id);
        index.by_address.retain(|_, (_, stored)| *stored != id);
        tx.execute("DELETE FROM messages WHERE id = ?1", params![id])?;
    }
    Ok(())
}

fn queue(
    tx: &rusqlite::Transaction<'_>,
    client_id: &Arc<str>,
    entry: u64,
    d: &Delivery,
    index: &mut MessageIndex,
    now: Instant,
    wall: SystemTime,
) -> rusqlite::Result<()> {
    let address = Arc::as_ptr(&d.message) as usize;
    let known = index
        .by_address
        .get(&address)
        .filter(|(weak, _)| weak.upgrade().is_some_and(|m| Arc::ptr_eq(&m, &d.message)))
        .map(|(_, id)| *id)
        .filter(|id| index.refs.contains_key(id));
    let id = match known {
        Some(id) => id,
        None => {
            let m = &d.message;
            tx.execute(
                "INSERT INTO messages (topic, payload, qos, retain, properties, expires_at_ms, origin)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    m.topic.as_str(),
                    &m.payload[..],
                    m.qos as u8,
                    m.retain,
                    properties_to_json(&m.properties),
                    m.expires_at.map(|at| instant_to_ms(at, now, wall)),
                    m.origin.client_id.as_deref(),
                ],
            )?;
            let id = tx.last_insert_rowid();
            index.by_address.insert(address, (Arc::downgrade(&d.message), id));
            id
        }
    };
    let (group, subscription) = match &d.shared {
        Some(s) => (Some(&*s.group), Some(&*s.subscription)),
        None => (None, None),
    };
    tx.execute(
        "INSERT OR REPLACE INTO queue
         (client_id, entry, message_id, qos, retain, subscription_ids, shared_group, shared_subscription)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            &**client_id,
            entry as i64,
            id,
            d.qos as u8,
            d.retain,
            ids_to_json(&d.subscription_ids),
            group,
            subscription,
        ],
    )?;
    *index.refs.entry(id).or_default() += 1;
    index.entries.insert((client_id.clone(), entry), id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal() -> SqliteJournal {
        SqliteJournal {
            pending: Mutex::new(Pending::default()),
            wake_writer: Condvar::new(),
            durable: AtomicU64::new(0),
            waiters: Mutex::new(Vec::new()),
            max_unwritten: 4,
            room_waiters: Mutex::new(Vec::new()),
            backpressure: AtomicU64::new(0),
            wait_for_disk: false,
            failed: AtomicBool::new(false),
            commit_latency: LatencyHistogram::new(),
        }
    }

    fn change(n: u16) -> Change {
        Change::IncomingQos2 { client_id: "c".into(), packet_id: n, digest: None }
    }

    fn seqs(batch: &[(u64, Change)]) -> Vec<u64> {
        batch.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn an_open_atomic_group_holds_back_its_changes_and_everything_after() {
        let j = journal();
        j.record(change(1));
        let first = j.begin_atomic();
        j.record(change(2));
        let second = j.begin_atomic();
        j.record(change(3));
        j.end_atomic(second);
        let (batch, _) = j.take_batch(Some(Duration::ZERO));
        assert_eq!(seqs(&batch), [1], "the first group is still open");
        j.end_atomic(first);
        let (batch, _) = j.take_batch(Some(Duration::ZERO));
        assert_eq!(seqs(&batch), [2, 3]);
    }

    #[test]
    fn closing_takes_everything_even_with_a_group_open() {
        let j = journal();
        let _open = j.begin_atomic();
        j.record(change(1));
        lock(&j.pending).closed = true;
        let (batch, closed) = j.take_batch(Some(Duration::ZERO));
        assert!(closed);
        assert_eq!(seqs(&batch), [1]);
    }

    struct Flag(std::sync::atomic::AtomicBool);
    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_backlog_past_the_bound_holds_clients_until_it_has_halved() {
        let j = journal();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        for n in 0..3 {
            j.record(change(n));
        }
        assert!(j.poll_room(&waker), "3 of 4");
        j.record(change(3));
        assert!(!j.poll_room(&waker), "4 of 4: no room");
        assert!(!j.poll_room(&waker), "asked twice");
        assert_eq!(lock(&j.room_waiters).len(), 1, "one entry per task");
        assert_eq!(j.backpressure_events(), 2);
        let (batch, _) = j.take_batch(Some(Duration::ZERO));
        assert_eq!(batch.len(), 4);
        assert!(flag.0.load(Ordering::SeqCst), "the writer woke the waiting client");
        assert!(j.poll_room(&waker));
    }

    #[test]
    fn a_task_waiting_for_durability_is_registered_once() {
        let j = journal();
        let waker = Waker::from(Arc::new(Flag(AtomicBool::new(false))));
        for seq in [3, 5, 4] {
            assert!(!j.poll_durable(seq, &waker));
        }
        let waiters = lock(&j.waiters);
        assert_eq!(waiters.len(), 1, "one entry per task");
        assert_eq!(waiters[0].0, 5, "at the highest sequence number it waits for");
    }
}
