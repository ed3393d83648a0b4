//! Tests of the offline queues: caps, drop order and counts, TTL, global bounds, restore, and a
//! property test that every accepted message is accounted for exactly once.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;

fn limits() -> QueueLimits {
    QueueLimits {
        max_messages: 3,
        max_bytes: 100,
        ttl: Duration::from_secs(10),
        max_addresses: 2,
        global_bytes: 150,
    }
}

fn payload(len: usize) -> Bytes {
    Bytes::from(vec![b'x'; len])
}

fn ids(entries: &[Entry]) -> Vec<u64> {
    entries.iter().map(|e| e.id.0).collect()
}

#[test]
fn the_defaults_are_the_seed_figures() {
    let d = QueueLimits::default();
    assert_eq!((d.max_messages, d.max_bytes, d.ttl), (100, 1 << 20, Duration::from_secs(86_400)));
}

#[test]
fn flush_returns_the_backlog_in_order() {
    let t0 = Instant::now();
    let mut q = OfflineQueues::new(limits());
    for i in 0..3 {
        let e = q.enqueue("bob", payload(10 + i), t0).unwrap();
        assert!(e.dropped.is_empty());
    }
    assert_eq!((q.queued_for("bob"), q.messages(), q.bytes(), q.addresses()), (3, 3, 33, 1));
    let flushed = q.flush("bob", t0 + Duration::from_secs(1));
    assert_eq!(ids(&flushed.entries), [1, 2, 3]);
    assert_eq!(flushed.entries[2].payload.len(), 12);
    assert!(flushed.expired.is_empty());
    assert_eq!((q.messages(), q.bytes(), q.addresses()), (0, 0, 0));
    assert_eq!(q.flush("bob", t0), Flushed::default());
}

#[test]
fn the_count_cap_drops_the_oldest() {
    let t0 = Instant::now();
    let mut q = OfflineQueues::new(limits());
    for _ in 0..3 {
        q.enqueue("bob", payload(1), t0).unwrap();
    }
    let e = q.enqueue("bob", payload(1), t0).unwrap();
    assert_eq!(e, Enqueued { id: EntryId(4), dropped: vec![(EntryId(1), DropReason::Cap)] });
    assert_eq!(q.drops().cap, 1);
    assert_eq!(ids(&q.flush("bob", t0).entries), [2, 3, 4]);
}

#[test]
fn the_byte_cap_drops_the_oldest_until_it_fits() {
    let t0 = Instant::now();
    let mut q = OfflineQueues::new(limits());
    q.enqueue("bob", payload(40), t0).unwrap();
    q.enqueue("bob", payload(40), t0).unwrap();
    let e = q.enqueue("bob", payload(90), t0).unwrap();
    assert_eq!(e.dropped, [(EntryId(1), DropReason::Bytes), (EntryId(2), DropReason::Bytes)]);
    assert_eq!((q.drops().bytes, q.bytes()), (2, 90));
    assert_eq!(q.enqueue("bob", payload(101), t0), Err(EnqueueError::TooLarge { len: 101, max: 100 }));
    assert_eq!(q.drops().refused_too_large, 1);
    assert_eq!(q.queued_for("bob"), 1, "a refusal changes nothing");
}

#[test]
fn expired_entries_are_skipped_and_counted() {
    let t0 = Instant::now();
    let mut q = OfflineQueues::new(limits());
    q.enqueue("bob", payload(1), t0).unwrap();
    q.enqueue("bob", payload(1), t0 + Duration::from_secs(5)).unwrap();
    let flushed = q.flush("bob", t0 + Duration::from_secs(10));
    assert_eq!(flushed.expired, [EntryId(1)]);
    assert_eq!(ids(&flushed.entries), [2]);
    assert_eq!(q.drops().ttl, 1);
}

#[test]
fn expire_sweeps_every_queue() {
    let t0 = Instant::now();
    let mut q = OfflineQueues::new(limits());
    q.enqueue("a", payload(5), t0).unwrap();
    q.enqueue("b", payload(5), t0 + Duration::from_secs(1)).unwrap();
    q.enqueue("a", payload(5), t0 + Duration::from_secs(2)).unwrap();
    assert!(q.expire(t0 + Duration::from_secs(9)).is_empty());
    let mut swept = q.expire(t0 + Duration::from_secs(11));
    swept.sort();
    assert_eq!(swept, [(Arc::from("a"), EntryId(1)), (Arc::from("b"), EntryId(2))]);
    assert_eq!((q.addresses(), q.messages(), q.bytes(), q.drops().ttl), (1, 1, 5, 2));
}

#[test]
fn global_bounds_refuse() {
    let t0 = Instant::now();
    let mut q = OfflineQueues::new(limits());
    q.enqueue("a", payload(80), t0).unwrap();
    q.enqueue("b", payload(60), t0).unwrap();
    assert_eq!(q.enqueue("c", payload(1), t0), Err(EnqueueError::TooManyAddresses(2)));
    assert_eq!(q.enqueue("a", payload(20), t0), Err(EnqueueError::GlobalBudget(150)));
    // Pushing out a's 80 bytes makes room for 90 within the global budget.
    let e = q.enqueue("a", payload(90), t0).unwrap();
    assert_eq!(e.dropped, [(EntryId(1), DropReason::Bytes)]);
    assert_eq!(q.bytes(), 150);
    let d = q.drops();
    assert_eq!((d.refused_addresses, d.refused_global), (1, 1));
}

#[test]
fn restore_keeps_ids_and_applies_the_caps() {
    let t0 = Instant::now();
    let mut q = OfflineQueues::new(limits());
    let stored: Vec<Entry> = (10..15)
        .map(|i| Entry { id: EntryId(i), payload: payload(10), expires_at: t0 + Duration::from_secs(5) })
        .collect();
    let dropped = q.restore("bob", stored);
    assert_eq!(dropped, [(EntryId(10), DropReason::Cap), (EntryId(11), DropReason::Cap)]);
    assert_eq!(q.queued_for("bob"), 3);
    let next = q.enqueue("alice", payload(1), t0).unwrap();
    assert_eq!(next.id, EntryId(15), "ids continue after the restored ones");
    assert_eq!(ids(&q.flush("bob", t0).entries), [12, 13, 14]);
    assert!(q.restore("carol", Vec::new()).is_empty());
    assert_eq!(q.addresses(), 1, "an empty restore leaves no queue");
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue { addr: usize, len: usize },
    Flush { addr: usize },
    Expire,
    Advance { secs: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..4, 0usize..120).prop_map(|(addr, len)| Op::Enqueue { addr, len }),
        1 => (0usize..4).prop_map(|addr| Op::Flush { addr }),
        1 => Just(Op::Expire),
        2 => (0u64..6).prop_map(|secs| Op::Advance { secs }),
    ]
}

proptest! {
    /// Under any sequence of operations: no cap is ever exceeded, totals match the queues,
    /// every accepted id leaves exactly once (flushed, dropped or expired) or is still queued,
    /// flushes come out oldest first and live, and the drop counters equal the drops reported.
    #[test]
    fn caps_hold_and_every_message_is_accounted_for(ops in proptest::collection::vec(op(), 1..200)) {
        const ADDRS: [&str; 4] = ["a", "b", "c", "d"];
        let limits = QueueLimits { max_addresses: 3, global_bytes: 250, ..limits() };
        let t0 = Instant::now();
        let mut now = t0;
        let mut q = OfflineQueues::new(limits);
        let mut accepted = BTreeSet::new();
        let mut gone = BTreeSet::new();
        let mut reported = HashMap::new();
        let mut expired_seen = 0u64;
        for op in ops {
            match op {
                Op::Enqueue { addr, len } => {
                    if let Ok(e) = q.enqueue(ADDRS[addr], payload(len), now) {
                        prop_assert!(accepted.insert(e.id));
                        for (id, reason) in e.dropped {
                            prop_assert!(gone.insert(id));
                            *reported.entry(reason).or_insert(0u64) += 1;
                        }
                    }
                }
                Op::Flush { addr } => {
                    let f = q.flush(ADDRS[addr], now);
                    prop_assert!(f.entries.windows(2).all(|w| w[0].id < w[1].id));
                    prop_assert!(f.entries.iter().all(|e| e.expires_at > now));
                    for id in f.entries.iter().map(|e| e.id).chain(f.expired.iter().copied()) {
                        prop_assert!(gone.insert(id));
                    }
                    expired_seen += f.expired.len() as u64;
                }
                Op::Expire => {
                    for (_, id) in q.expire(now) {
                        prop_assert!(gone.insert(id));
                        expired_seen += 1;
                    }
                }
                Op::Advance { secs } => now += Duration::from_secs(secs),
            }
            let mut total_bytes = 0;
            let mut total_messages = 0;
            for addr in ADDRS {
                let queue = q.queues.get(addr);
                let (n, bytes) = queue.map_or((0, 0), |q| (q.entries.len(), q.bytes));
                prop_assert!(n <= limits.max_messages);
                prop_assert!(bytes <= limits.max_bytes);
                prop_assert_eq!(bytes, queue.map_or(0, |q| q.entries.iter().map(|e| e.payload.len()).sum()));
                total_bytes += bytes;
                total_messages += n;
            }
            prop_assert_eq!(q.bytes(), total_bytes);
            prop_assert_eq!(q.messages(), total_messages);
            prop_assert!(q.bytes() <= limits.global_bytes);
            prop_assert!(q.addresses() <= limits.max_addresses);
            prop_assert_eq!(accepted.len(), gone.len() + total_messages);
            let d = q.drops();
            prop_assert_eq!(d.cap, reported.get(&DropReason::Cap).copied().unwrap_or(0));
            prop_assert_eq!(d.bytes, reported.get(&DropReason::Bytes).copied().unwrap_or(0));
            prop_assert_eq!(d.ttl, expired_seen);
        }
    }
}
