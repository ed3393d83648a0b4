//! Unit tests of sessions: queue limits, the in-flight window, QoS 2 in both directions, ACL
//! changes, wake-ups and takeover.

use std::task::Wake;

use bytes::Bytes;

use smallvec::SmallVec;

use super::*;
use crate::acl::{Permission, Rule};
use crate::model::{Message, Origin, SharedRoute};
use crate::topic::TopicName;

struct Flag(AtomicBool);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn limits(max_messages: usize) -> QueueLimits {
    QueueLimits { max_messages, max_bytes: 1 << 20, queue_qos0_offline: true, max_inflight_bytes: usize::MAX }
}

fn delivery(topic: &str, qos: QoS) -> Delivery {
    let m = Message::new(
        TopicName::try_from(topic).unwrap(),
        Bytes::from_static(b"x"),
        qos,
        false,
        Origin::BROKER,
    );
    Delivery { message: Arc::new(m), qos, retain: false, subscription_ids: SmallVec::new(), shared: None }
}

fn online(max: usize) -> Session {
    let s = Session::new(SessionId(1), SessionKey::mqtt("c"), SessionExpiry::Never, limits(max));
    s.attach(1, Acl::unrestricted(), SessionExpiry::Never);
    s
}

fn drain_all(s: &Session, window: usize) -> Vec<Outgoing> {
    drain_as(s, 1, window)
}

fn drain_as(s: &Session, generation: u64, window: usize) -> Vec<Outgoing> {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag);
    let mut out = Vec::new();
    s.drain(generation, window, usize::MAX, Instant::now(), &waker, &mut out);
    out
}

fn ids(out: &[Outgoing]) -> Vec<Option<u16>> {
    out.iter()
        .map(|o| match o {
            Outgoing::Publish { packet_id, .. } => *packet_id,
            Outgoing::PubRel { packet_id } => Some(*packet_id),
        })
        .collect()
}

#[test]
fn a_producer_that_can_wait_has_room_in_half_the_queue_only() {
    let s = online(4);
    let d = delivery("a", QoS::AtLeastOnce);
    for _ in 0..2 {
        assert!(s.has_room_to_spare_for(&d));
        assert_eq!(s.enqueue(d.clone(), false), Enqueued::Queued);
    }
    assert!(!s.has_room_to_spare_for(&d), "the other half is left to live messages");
    assert_eq!(s.enqueue(d.clone(), false), Enqueued::Queued, "which still fit");
    let tiny = online(1);
    assert!(tiny.has_room_to_spare_for(&d), "one message at least");
    assert_eq!(tiny.enqueue(d.clone(), false), Enqueued::Queued);
    assert!(!tiny.has_room_to_spare_for(&d));
    let mut bytes = limits(100);
    bytes.max_bytes = 2;
    let by_bytes = Session::new(SessionId(2), SessionKey::mqtt("b"), SessionExpiry::Never, bytes);
    by_bytes.attach(1, Acl::unrestricted(), SessionExpiry::Never);
    assert_eq!(by_bytes.enqueue(d.clone(), false), Enqueued::Queued);
    assert!(!by_bytes.has_room_to_spare_for(&d), "half the bytes: one of the two is queued");
}

/// Whether the session has made its acknowledgement state.
fn has_acks(s: &Session) -> bool {
    s.state().acks.is_some()
}

#[test]
fn the_acknowledgement_state_is_made_only_by_a_qos1_or_qos2_exchange() {
    let s = online(10);
    // QoS 0 traffic, acknowledgements and releases of ids never sent, reconnects, a journal
    // picture, a handover: none of it needs the state.
    s.enqueue(delivery("t", QoS::AtMostOnce), false);
    assert_eq!(ids(&drain_all(&s, 4)), vec![None]);
    assert!(!s.puback(1) && !s.pubcomp(1) && !s.discard_inflight(1));
    assert_eq!(s.pubrec(1, false), PubRecOutcome::Unknown);
    assert_eq!(s.pubrel(1), (false, None));
    assert!(s.resend_inflight().is_empty() && s.take_shared_unacked().is_empty());
    assert!(s.detach(1, Instant::now()));
    s.attach(2, Acl::unrestricted(), SessionExpiry::Never);
    let (entries, incoming) = s.handover_entries();
    assert!(entries.is_empty() && incoming.is_empty());
    assert_eq!((s.inflight_len(), s.incoming_qos2_len(), s.has_pending()), (0, 0, false));
    assert!(!has_acks(&s));

    // The first QoS 1 delivery makes it, and it then works as before.
    s.enqueue(delivery("t", QoS::AtLeastOnce), false);
    assert_eq!(ids(&drain_as(&s, 2, 4)), vec![Some(1)]);
    assert!(has_acks(&s));
    assert!(s.puback(1));
    assert_eq!(s.inflight_len(), 0);

    // So does the first incoming QoS 2 message, on a session of its own.
    let r = online(10);
    assert!(matches!(r.incoming_qos2(7, 42, false, None), IncomingQos2::New { .. }));
    assert!(has_acks(&r));
    assert_eq!(r.pubrel(7), (true, None));
}

#[test]
fn overflow_drops_the_oldest_qos0_first_then_refuses() {
    let s = online(3);
    assert_eq!(s.enqueue(delivery("a", QoS::AtLeastOnce), false), Enqueued::Queued);
    assert_eq!(s.enqueue(delivery("b", QoS::AtMostOnce), false), Enqueued::Queued);
    assert_eq!(s.enqueue(delivery("c", QoS::AtMostOnce), false), Enqueued::Queued);
    assert_eq!(s.enqueue(delivery("d", QoS::AtLeastOnce), false), Enqueued::QueuedDroppingOldest);
    assert_eq!(s.enqueue(delivery("e", QoS::AtLeastOnce), false), Enqueued::QueuedDroppingOldest);
    assert_eq!(s.enqueue(delivery("f", QoS::AtMostOnce), false), Enqueued::Dropped);
    assert_eq!(s.dropped(), 3);
    let topics: Vec<String> = drain_all(&s, 10)
        .iter()
        .map(|o| match o {
            Outgoing::Publish { delivery, .. } => delivery.message.topic.as_str().to_owned(),
            Outgoing::PubRel { .. } => String::new(),
        })
        .collect();
    assert_eq!(topics, ["a", "d", "e"]);
}

#[test]
fn window_limits_inflight_and_acks_release_it() {
    let s = online(100);
    for t in ["a", "b", "c"] {
        s.enqueue(delivery(t, QoS::AtLeastOnce), false);
    }
    let first = drain_all(&s, 2);
    assert_eq!(ids(&first), [Some(1), Some(2)]);
    assert!(drain_all(&s, 2).is_empty(), "window full");
    assert!(s.puback(1));
    assert!(!s.puback(1), "a second PUBACK for the same id is unknown");
    assert_eq!(ids(&drain_all(&s, 2)), [Some(3)]);
}

#[test]
fn packet_ids_are_never_reused_while_in_flight() {
    let s = online(100_000);
    // Fill 65,534 ids, ack all but id 5, then wrap around: id 5 must be skipped.
    for _ in 0..65_535 {
        s.enqueue(delivery("a", QoS::AtLeastOnce), false);
    }
    let out = drain_all(&s, 70_000);
    assert_eq!(out.len(), 65_535);
    for id in 1..=u16::MAX {
        if id != 5 {
            assert!(s.puback(id));
        }
    }
    for _ in 0..6 {
        s.enqueue(delivery("b", QoS::AtLeastOnce), false);
    }
    assert_eq!(ids(&drain_all(&s, 70_000)), [Some(1), Some(2), Some(3), Some(4), Some(6), Some(7)]);
}

#[test]
fn qos2_outbound_flow_and_resend_order() {
    let s = online(100);
    s.enqueue(delivery("a", QoS::ExactlyOnce), false);
    s.enqueue(delivery("b", QoS::AtLeastOnce), false);
    s.enqueue(delivery("c", QoS::ExactlyOnce), false);
    drain_all(&s, 10);
    assert_eq!(s.pubrec(1, false), PubRecOutcome::SendPubRel { durable_seq: None });
    assert_eq!(s.pubrec(1, false), PubRecOutcome::SendPubRel { durable_seq: None }, "repeated PUBREC");
    assert_eq!(s.pubrec(2, false), PubRecOutcome::Unknown, "QoS 1 id");
    // Reconnect: PUBREL for 1, then PUBLISH with DUP for 2 and 3, in send order.
    s.detach(1, Instant::now());
    s.attach(2, Acl::unrestricted(), SessionExpiry::Never);
    let resend = s.resend_inflight();
    assert!(matches!(resend[0], Outgoing::PubRel { packet_id: 1 }));
    assert!(matches!(resend[1], Outgoing::Publish { packet_id: Some(2), dup: true, .. }));
    assert!(matches!(resend[2], Outgoing::Publish { packet_id: Some(3), dup: true, .. }));
    assert!(s.pubcomp(1));
    assert!(!s.pubcomp(1));
    assert_eq!(s.pubrec(3, true), PubRecOutcome::Ended);
    assert_eq!(s.inflight_len(), 1);
}

#[test]
fn incoming_qos2_is_routed_once_until_released() {
    let s = online(10);
    let new = |o| matches!(o, IncomingQos2::New { .. });
    assert!(new(s.incoming_qos2(7, 70, false, Some(4))));
    assert_eq!(s.incoming_qos2(7, 70, true, Some(4)), IncomingQos2::Duplicate, "resent before PUBREL");
    assert_eq!(s.incoming_qos2(7, 70, false, Some(4)), IncomingQos2::Duplicate, "resent without DUP");
    assert!(s.pubrel(7).0);
    assert!(!s.pubrel(7).0);
    assert!(new(s.incoming_qos2(7, 70, false, Some(4))), "the id may be reused after PUBCOMP");
}

#[test]
fn the_receive_window_counts_each_id_once() {
    let s = online(10);
    for id in 1..=3 {
        assert!(matches!(s.incoming_qos2(id, u64::from(id), false, Some(3)), IncomingQos2::New { .. }));
    }
    assert_eq!(s.incoming_qos2(3, 3, true, Some(3)), IncomingQos2::Duplicate, "a resend of a counted id");
    assert_eq!(s.incoming_qos2(4, 4, false, Some(3)), IncomingQos2::WindowFull);
    assert_eq!(
        s.incoming_qos2(4, 4, false, None),
        IncomingQos2::New { seq: None, reused: false, others: 3 },
        "a client without a receive maximum is never refused"
    );
    assert!(s.pubrel(1).0 && s.pubrel(2).0);
    assert!(matches!(s.incoming_qos2(5, 5, false, Some(3)), IncomingQos2::New { others: 2, .. }));
}

#[test]
fn restored_ids_count_only_once_the_client_resends_them() {
    let s = Session::restore(
        SessionId(1),
        SessionKey::mqtt("c"),
        SessionExpiry::Never,
        limits(10),
        QueueBudget::unlimited(),
        Instant::now(),
        Vec::new(),
        vec![(1, Some(10)), (2, Some(20)), (3, None)],
    );
    s.attach(1, Acl::unrestricted(), SessionExpiry::Never);
    // Ids 1-3 are stale unless resent: a window of 2 still takes two new messages.
    assert!(matches!(s.incoming_qos2(9, 90, false, Some(2)), IncomingQos2::New { others: 0, .. }));
    assert_eq!(s.incoming_qos2(1, 10, false, Some(2)), IncomingQos2::Duplicate, "the same message again");
    assert_eq!(s.incoming_qos2(11, 110, false, Some(2)), IncomingQos2::WindowFull, "9 and 1 are in flight");
    assert_eq!(
        s.incoming_qos2(2, 21, false, None),
        IncomingQos2::New { seq: None, reused: true, others: 2 },
        "a stale id with another message is a new message"
    );
    assert_eq!(s.incoming_qos2(3, 30, true, None), IncomingQos2::Duplicate, "no digest: DUP decides");
    assert!(s.pubrel(3).0);
    assert_eq!(s.incoming_qos2_len(), 3);
}

#[test]
fn acl_filters_at_enqueue_and_when_rules_change() {
    let s = online(10);
    let rules = [Rule { pattern: "a/#".into(), permission: Permission::Read }];
    s.set_acl(Acl::compile(Some(&rules), None, "c"));
    assert_eq!(s.enqueue(delivery("b", QoS::AtMostOnce), false), Enqueued::Filtered);
    assert_eq!(s.enqueue(delivery("a/1", QoS::AtMostOnce), false), Enqueued::Queued);
    s.set_acl(Acl::compile(Some(&[]), None, "c"));
    assert!(drain_all(&s, 10).is_empty(), "rules changed while queued");
    assert_eq!(s.queue_len(), 0);
}

#[test]
fn resuming_with_narrower_rules_drops_what_they_hide() {
    let s = online(10);
    let everything = [Rule { pattern: "#".into(), permission: Permission::Read }];
    s.set_acl(Acl::compile(Some(&everything), None, "c"));
    assert!(s.detach(1, Instant::now()));
    assert_eq!(s.enqueue(delivery("a/1", QoS::AtLeastOnce), false), Enqueued::Queued);
    assert_eq!(s.enqueue(delivery("b/1", QoS::AtLeastOnce), false), Enqueued::Queued);
    let only_a = [Rule { pattern: "a/#".into(), permission: Permission::Read }];
    s.attach(2, Acl::compile(Some(&only_a), None, "c"), SessionExpiry::Never);
    let sent: Vec<String> = drain_as(&s, 2, 10)
        .into_iter()
        .filter_map(|o| match o {
            Outgoing::Publish { delivery, .. } => Some(delivery.message.topic.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(sent, ["a/1"]);
}

#[test]
fn offline_qos0_is_not_queued_unless_configured() {
    let s = Session::new(
        SessionId(1),
        SessionKey::mqtt("c"),
        SessionExpiry::Never,
        QueueLimits {
            max_messages: 10,
            max_bytes: 1000,
            queue_qos0_offline: false,
            max_inflight_bytes: usize::MAX,
        },
    );
    assert_eq!(s.enqueue(delivery("a", QoS::AtMostOnce), false), Enqueued::Dropped);
    assert_eq!(s.enqueue(delivery("a", QoS::AtLeastOnce), false), Enqueued::Queued);
}

#[test]
fn push_wakes_the_registered_connection() {
    let s = online(10);
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut out = Vec::new();
    s.drain(1, 10, 10, Instant::now(), &waker, &mut out);
    assert!(!flag.0.load(Ordering::SeqCst));
    s.enqueue(delivery("a", QoS::AtMostOnce), false);
    assert!(flag.0.load(Ordering::SeqCst));
}

#[test]
fn a_kick_right_after_the_check_wakes_the_connection() {
    // The adverse order: the connection finds no kick, and another task (a takeover from
    // another node) kicks before the connection has drained, i.e. before any other waker
    // registration. The check itself registered the waker, so the kick is not lost.
    let s = online(10);
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    assert_eq!(s.poll_kick(1, &waker), None);
    s.kick(Kick::TakenOver);
    assert!(flag.0.load(Ordering::SeqCst), "the kick woke the connection");
    assert_eq!(s.poll_kick(1, &waker), Some(Kick::TakenOver));
    // A connection that was replaced is told so, and registers nothing.
    s.attach(2, Acl::unrestricted(), SessionExpiry::Never);
    assert_eq!(s.poll_kick(1, &waker), Some(Kick::TakenOver));
}

#[test]
fn a_stale_connection_cannot_detach_or_drain_a_taken_over_session() {
    let s = online(10);
    s.kick(Kick::TakenOver);
    assert_eq!(s.take_kick(1), Some(Kick::TakenOver));
    s.attach(2, Acl::unrestricted(), SessionExpiry::Never);
    assert!(!s.detach(1, Instant::now()));
    assert!(s.is_online());
    s.enqueue(delivery("a", QoS::AtMostOnce), false);
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let mut out = Vec::new();
    s.drain(1, 10, 10, Instant::now(), &Waker::from(flag), &mut out);
    assert!(out.is_empty());
}

#[test]
fn shared_unacked_deliveries_are_handed_back() {
    let s = online(10);
    let mut d = delivery("a", QoS::AtLeastOnce);
    d.shared = Some(SharedRoute { group: "g".into(), subscription: "$share/g/a".into() });
    s.enqueue(d.clone(), false);
    s.enqueue(delivery("b", QoS::AtLeastOnce), false);
    drain_all(&s, 10);
    s.enqueue(d, false);
    let back = s.take_shared_unacked();
    assert_eq!(back.len(), 2);
    assert_eq!(s.inflight_len(), 1);
    assert_eq!(s.queue_len(), 0);
}

#[test]
fn a_cached_decision_is_not_reused_for_another_username_with_the_same_rules() {
    let s = online(10);
    let rules = [Rule::new("devices/%u/#", Permission::Read)];
    s.set_acl(Acl::compile(Some(&rules), Some("alice"), "c"));
    let alices = TopicFilter::try_from("devices/alice/#").unwrap();
    let stamp = s.readable_stamp(&alices);
    assert_ne!(stamp, 0, "alice reads all of devices/alice/#");
    let enqueue = |stamp| s.enqueue_journaled(delivery("devices/alice/t", QoS::AtMostOnce), false, stamp).0;
    assert_eq!(enqueue(stamp), Enqueued::Queued);
    // The same client id reconnects as bob: the shared rules, but not alice's decision.
    s.set_acl(Acl::compile(Some(&rules), Some("bob"), "c"));
    assert_eq!(enqueue(stamp), Enqueued::Filtered);
    assert_eq!(s.readable_stamp(&alices), 0);
    // Bob again with the same rules keeps the compilation and its stamp.
    let bobs = TopicFilter::try_from("devices/bob/#").unwrap();
    let bob_stamp = s.readable_stamp(&bobs);
    s.set_acl(Acl::compile(Some(&rules), Some("bob"), "c"));
    assert_eq!(s.readable_stamp(&bobs), bob_stamp);
}
