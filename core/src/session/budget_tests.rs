//! Unit tests of the broker-wide budget as sessions use it: what is charged and released when,
//! the hard cap, the in-flight byte cap, and (proptest) that the total always equals what the
//! sessions hold, against a simple oracle that sums their queues and windows.

use std::task::Waker;

use bytes::Bytes;
use proptest::prelude::*;
use smallvec::SmallVec;

use super::*;
use crate::model::{Message, Origin};
use crate::topic::TopicName;

fn limits(max_inflight_bytes: usize) -> QueueLimits {
    QueueLimits { max_messages: 100, max_bytes: 1 << 20, queue_qos0_offline: true, max_inflight_bytes }
}

/// A delivery on topic `t` (1 byte) whose weight is `1 + payload`.
fn delivery(qos: QoS, payload: usize) -> Delivery {
    let m = Message::new(
        TopicName::try_from("t").unwrap(),
        Bytes::from(vec![b'x'; payload]),
        qos,
        false,
        Origin::BROKER,
    );
    Delivery { message: Arc::new(m), qos, retain: false, subscription_ids: SmallVec::new(), shared: None }
}

fn session(id: u64, budget: &Arc<QueueBudget>, max_inflight_bytes: usize) -> Session {
    let s = Session::with_budget(
        SessionId(id),
        SessionKey::mqtt(format!("c{id}")),
        SessionExpiry::Never,
        limits(max_inflight_bytes),
        budget.clone(),
    );
    s.attach(1, Acl::unrestricted(), SessionExpiry::Never);
    s
}

fn drain(s: &Session, window: usize) -> Vec<Outgoing> {
    let mut out = Vec::new();
    s.drain(1, window, usize::MAX, Instant::now(), Waker::noop(), &mut out);
    out
}

fn packet_ids(out: &[Outgoing]) -> Vec<u16> {
    out.iter()
        .filter_map(|o| match o {
            Outgoing::Publish { packet_id, .. } => *packet_id,
            Outgoing::PubRel { .. } => None,
        })
        .collect()
}

#[test]
fn bytes_count_from_queueing_until_written_or_acknowledged() {
    let budget = Arc::new(QueueBudget::new(BudgetLimits::new(1 << 20, 90)));
    let s = session(1, &budget, usize::MAX);
    s.enqueue(delivery(QoS::AtMostOnce, 9), false);
    s.enqueue(delivery(QoS::AtLeastOnce, 99), false);
    assert_eq!(budget.used(), 10 + 100);
    let out = drain(&s, 32);
    assert_eq!(out.len(), 2);
    assert_eq!(budget.used(), 100, "QoS 0 is gone once written; QoS 1 stays until acknowledged");
    assert!(s.puback(packet_ids(&out)[0]));
    assert_eq!(budget.used(), 0);

    s.enqueue(delivery(QoS::AtLeastOnce, 49), false);
    let other = session(2, &budget, usize::MAX);
    other.enqueue(delivery(QoS::AtLeastOnce, 19), false);
    assert_eq!(budget.used(), 50 + 20);
    assert_eq!(s.end().len(), 1);
    assert_eq!(budget.used(), 20, "an ended session gives its bytes back");
    drop(other);
    assert_eq!(budget.used(), 0, "so does a dropped one");
}

#[test]
fn the_hard_cap_drops_the_sessions_oldest_qos0_first_then_the_new_message() {
    let budget = Arc::new(QueueBudget::new(BudgetLimits::new(300, 50)));
    let a = session(1, &budget, usize::MAX);
    let b = session(2, &budget, usize::MAX);
    assert_eq!(a.enqueue(delivery(QoS::AtLeastOnce, 99), false), Enqueued::Queued);
    assert_eq!(b.enqueue(delivery(QoS::AtMostOnce, 99), false), Enqueued::Queued);
    assert_eq!(b.enqueue(delivery(QoS::AtLeastOnce, 99), false), Enqueued::Queued);
    assert!(budget.under_pressure());
    // Full: b gives up its QoS 0 message for a new one.
    assert_eq!(b.enqueue(delivery(QoS::AtLeastOnce, 99), false), Enqueued::Queued);
    assert_eq!((budget.used(), budget.dropped(), b.queue_len()), (300, 1, 2));
    // a has no QoS 0 message to give up: its new one is dropped.
    assert_eq!(a.enqueue(delivery(QoS::AtMostOnce, 0), false), Enqueued::OverBudget);
    assert_eq!((budget.used(), budget.dropped(), a.queue_len()), (300, 2, 1));
}

#[test]
fn the_inflight_byte_cap_lets_one_large_message_go_at_a_time() {
    let budget = QueueBudget::unlimited();
    let s = session(1, &budget, 250);
    for _ in 0..3 {
        s.enqueue(delivery(QoS::AtLeastOnce, 199), false);
    }
    let first = drain(&s, 32);
    assert_eq!(first.len(), 1, "two would be 400 bytes in flight");
    assert!(drain(&s, 32).is_empty(), "the next waits for the acknowledgement");
    assert!(s.puback(packet_ids(&first)[0]));
    assert_eq!(drain(&s, 32).len(), 1);

    let big = session(2, &budget, 10);
    big.enqueue(delivery(QoS::AtLeastOnce, 999), false);
    assert_eq!(drain(&big, 32).len(), 1, "larger than the cap, alone, it still goes");

    let small = session(3, &budget, 250);
    for _ in 0..10 {
        small.enqueue(delivery(QoS::AtLeastOnce, 9), false);
    }
    assert_eq!(drain(&small, 4).len(), 4, "small messages fill the count window");
    assert_eq!(drain(&small, 32).len(), 10 - 4, "a larger window takes them all (100 bytes)");
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue { session: usize, qos0: bool, payload: usize },
    Drain { session: usize, window: usize },
    AckOldest { session: usize },
    Detach { session: usize },
    End { session: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, any::<bool>(), 0..200usize)
            .prop_map(|(session, qos0, payload)| Op::Enqueue { session, qos0, payload }),
        2 => (0..3usize, 0..5usize).prop_map(|(session, window)| Op::Drain { session, window }),
        2 => (0..3usize).prop_map(|session| Op::AckOldest { session }),
        1 => (0..3usize).prop_map(|session| Op::Detach { session }),
        1 => (0..3usize).prop_map(|session| Op::End { session }),
    ]
}

proptest! {
    /// The budget's total is always the sum of what the sessions hold (queue + window, by
    /// weight), never above the hard cap, and the pressure flag follows its thresholds.
    #[test]
    fn the_total_is_what_the_sessions_hold(ops in proptest::collection::vec(op(), 1..80)) {
        let budget = Arc::new(QueueBudget::new(BudgetLimits::new(1000, 60)));
        let sessions: Vec<Session> = (0..3).map(|i| session(i as u64 + 1, &budget, 300)).collect();
        let mut sent: Vec<Vec<u16>> = vec![Vec::new(); 3];
        let mut pressure = false;
        for op in ops {
            match op {
                Op::Enqueue { session, qos0, payload } => {
                    let qos = if qos0 { QoS::AtMostOnce } else { QoS::AtLeastOnce };
                    sessions[session].enqueue(delivery(qos, payload), false);
                }
                Op::Drain { session, window } => {
                    sent[session].extend(packet_ids(&drain(&sessions[session], window)));
                }
                Op::AckOldest { session } => {
                    if !sent[session].is_empty() {
                        let id = sent[session].remove(0);
                        sessions[session].puback(id);
                    }
                }
                Op::Detach { session } => {
                    sessions[session].detach(1, Instant::now());
                    sessions[session].attach(1, Acl::unrestricted(), SessionExpiry::Never);
                }
                Op::End { session } => {
                    sessions[session].end();
                    sent[session].clear();
                }
            }
            let held: u64 = sessions.iter().map(|s| s.state().held_bytes()).sum();
            let oracle: u64 = sessions
                .iter()
                .map(|s| {
                    let st = s.state();
                    let queued: usize = st.mailbox.iter().map(|q| q.delivery.weight()).sum();
                    let flying: usize = st.outbound().in_send_order().iter().map(|(_, f)| f.delivery.weight()).sum();
                    (queued + flying) as u64
                })
                .sum();
            prop_assert_eq!(held, oracle);
            prop_assert_eq!(budget.used(), oracle);
            prop_assert!(budget.used() <= 1000);
            let used = budget.used();
            if used >= 600 {
                pressure = true;
            } else if used < 540 {
                pressure = false;
            }
            prop_assert_eq!(budget.under_pressure(), pressure, "used {}", used);
        }
    }
}
