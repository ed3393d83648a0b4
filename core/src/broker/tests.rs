//! Unit tests of the broker: sessions across connections, expiry, retained replay, wills,
//! takeover and the connect lock.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use super::*;
use crate::acl::{Acl, Permission, Rule};
use crate::model::{Kick, Message, Origin, QoS, RetainHandling, SessionExpiry, SubscribeOptions, Will};
use crate::session::{QueueLimits, Session};
use crate::topic::{SubscriptionFilter, TopicName};

fn broker() -> Broker {
    Broker::new(
        BrokerLimits {
            queue: QueueLimits {
                max_messages: 100,
                max_bytes: 1 << 20,
                queue_qos0_offline: false,
                max_inflight_bytes: usize::MAX,
            },
            budget: crate::session::BudgetLimits::UNLIMITED,
            retained: crate::retained::RetainedLimits::UNLIMITED,
            max_sessions: usize::MAX,
        },
        Instant::now(),
        SystemTime::now(),
    )
}

fn message(topic: &str, retain: bool) -> Message {
    Message::new(
        TopicName::try_from(topic).unwrap(),
        Bytes::from_static(b"m"),
        QoS::AtLeastOnce,
        retain,
        Origin::BROKER,
    )
}

fn connect(
    b: &Broker,
    id: &str,
    clean: bool,
    expiry: SessionExpiry,
    now: Instant,
) -> (Arc<Session>, bool, u64) {
    let opened = b.open_session(&SessionKey::mqtt(id), clean, expiry, now);
    let generation = b.next_generation();
    opened.session.attach(generation, Acl::unrestricted(), expiry);
    (opened.session, opened.present, generation)
}

fn filter(f: &str) -> SubscriptionFilter {
    SubscriptionFilter::parse(f).unwrap()
}

fn will(topic: &str, delay_s: u64) -> Will {
    Will {
        message: message(topic, false),
        expiry_interval: None,
        delay: Duration::from_secs(delay_s),
        acl: Acl::unrestricted(),
    }
}

#[test]
fn persistent_session_is_resumed_and_clean_start_discards_it() {
    let b = broker();
    let now = Instant::now();
    let (s, present, g) = connect(&b, "c", false, SessionExpiry::Never, now);
    assert!(!present);
    b.subscribe(&s, filter("t"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    b.connection_closed(&s, g, None, now);
    b.publish(message("t", false));
    let (s2, present, _) = connect(&b, "c", false, SessionExpiry::Never, now);
    assert!(present);
    assert!(Arc::ptr_eq(&s, &s2));
    assert_eq!(s2.queue_len(), 1);
    let (s3, present, _) = connect(&b, "c", true, SessionExpiry::Never, now);
    assert!(!present);
    assert_eq!(s3.queue_len(), 0);
    assert_eq!(b.router().len(), 0, "the old session's subscriptions are gone");
}

#[test]
fn clean_session_ends_on_disconnect() {
    let b = broker();
    let now = Instant::now();
    let (s, _, g) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&s, filter("t/#"), SubscribeOptions::with_qos(QoS::AtMostOnce), now);
    b.connection_closed(&s, g, None, now);
    assert_eq!(b.session_count(), 0);
    assert_eq!(b.router().len(), 0);
}

#[test]
fn session_expiry_interval_is_honoured() {
    let b = broker();
    let now = Instant::now();
    let expiry = SessionExpiry::After(Duration::from_secs(5));
    let (s, _, g) = connect(&b, "c", false, expiry, now);
    b.connection_closed(&s, g, None, now);
    assert_eq!(b.tick(now + Duration::from_secs(4)), Some(now + Duration::from_secs(5)));
    assert_eq!(b.session_count(), 1);
    b.tick(now + Duration::from_secs(5));
    assert_eq!(b.session_count(), 0);
}

#[test]
fn an_expired_session_is_not_resumed_even_before_the_timer_runs() {
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    let expiry = SessionExpiry::After(Duration::from_secs(1));
    let (s, _, g) = connect(&b, "c", false, expiry, now);
    b.subscribe(&s, filter("t"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    b.connection_closed(&s, g, Some(will("will/c", 60)), now);
    // No tick between the expiry and the reconnect.
    let (s2, present, _) = connect(&b, "c", false, expiry, now + Duration::from_secs(2));
    assert!(!present && !Arc::ptr_eq(&s, &s2));
    assert_eq!(s2.subscription_count(), 0);
    assert_eq!(b.router().len(), 1, "only the watcher's subscription is left");
    assert_eq!(watcher.queue_len(), 1, "the session ended before the will delay: the will went out");
}

#[test]
fn retained_replay_follows_retain_handling() {
    let b = broker();
    let now = Instant::now();
    b.publish(message("r/1", true));
    let (s, _, _) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
    let mut o = SubscribeOptions::with_qos(QoS::AtLeastOnce);
    o.retain_handling = RetainHandling::SendIfNew;
    b.subscribe(&s, filter("r/+"), o, now);
    assert_eq!(s.queue_len(), 1);
    b.subscribe(&s, filter("r/+"), o, now);
    assert_eq!(s.queue_len(), 1, "not again for an existing subscription");
    o.retain_handling = RetainHandling::DoNotSend;
    b.subscribe(&s, filter("r/#"), o, now);
    assert_eq!(s.queue_len(), 1);
    b.subscribe(&s, filter("$share/g/r/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    assert_eq!(s.queue_len(), 1, "never for shared subscriptions");
}

#[test]
fn delayed_will_fires_after_delay_and_is_cancelled_by_reconnect() {
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);

    let (s, _, g) = connect(&b, "c", false, SessionExpiry::Never, now);
    b.connection_closed(&s, g, Some(will("will/c", 10)), now);
    b.tick(now + Duration::from_secs(9));
    assert_eq!(watcher.queue_len(), 0);
    b.tick(now + Duration::from_secs(10));
    assert_eq!(watcher.queue_len(), 1);

    let (s, _, g) = connect(&b, "d", false, SessionExpiry::Never, now);
    b.connection_closed(&s, g, Some(will("will/d", 10)), now);
    connect(&b, "d", false, SessionExpiry::Never, now + Duration::from_secs(5));
    b.tick(now + Duration::from_secs(20));
    assert_eq!(watcher.queue_len(), 1, "reconnect within the delay cancels the will");
}

#[test]
fn will_goes_out_when_the_session_ends_before_the_delay() {
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    let expiry = SessionExpiry::After(Duration::from_secs(3));
    let (s, _, g) = connect(&b, "c", false, expiry, now);
    b.connection_closed(&s, g, Some(will("will/c", 60)), now);
    b.tick(now + Duration::from_secs(3));
    assert_eq!(watcher.queue_len(), 1);
}

#[test]
fn will_is_checked_for_write_when_sent() {
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    let read_only = [Rule { pattern: "#".into(), permission: Permission::Read }];
    let mut w = will("will/c", 0);
    w.acl = Acl::compile(Some(&read_only), None, "c");
    let (s, _, g) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
    b.connection_closed(&s, g, Some(w), now);
    assert_eq!(watcher.queue_len(), 0);
    assert_eq!(Stats::get(&b.stats().publishes_denied), 1);
}

#[test]
fn takeover_keeps_the_session_and_sends_only_an_immediate_will() {
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    let (old, _, g1) = connect(&b, "c", false, SessionExpiry::Never, now);
    let (new, present, _) = connect(&b, "c", false, SessionExpiry::Never, now);
    assert!(present && Arc::ptr_eq(&old, &new));
    b.connection_closed(&old, g1, Some(will("will/c", 5)), now);
    assert!(new.is_online(), "the stale connection did not detach the new one");
    b.tick(now + Duration::from_secs(10));
    assert_eq!(watcher.queue_len(), 0);
}

#[test]
fn an_immediate_will_goes_out_at_the_close_even_if_the_session_is_resumed_right_after() {
    // A takeover whose old connection detaches before the new one opens the session: the will
    // has no delay, so the resume must not cancel it.
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    for expiry in [SessionExpiry::Never, SessionExpiry::After(Duration::from_secs(60))] {
        let (old, _, g) = connect(&b, "c", false, expiry, now);
        b.connection_closed(&old, g, Some(will("will/c", 0)), now);
        let (_, present, _) = connect(&b, "c", false, expiry, now);
        assert!(present);
        b.tick(now);
    }
    assert_eq!(watcher.queue_len(), 2, "both wills went out");
}

#[test]
fn a_clean_start_sends_the_pending_will_of_the_session_it_ends() {
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("will/#"), SubscribeOptions::with_qos(QoS::AtLeastOnce), now);
    let (old, _, g) = connect(&b, "c", false, SessionExpiry::Never, now);
    b.connection_closed(&old, g, Some(will("will/c", 60)), now);
    assert_eq!(watcher.queue_len(), 0, "waiting for its delay");
    let (_, present, _) = connect(&b, "c", true, SessionExpiry::Never, now + Duration::from_secs(1));
    assert!(!present);
    assert_eq!(watcher.queue_len(), 1, "the session ended before the delay: the will went out");
    b.tick(now + Duration::from_secs(120));
    assert_eq!(watcher.queue_len(), 1, "and only once");
}

#[tokio::test]
async fn client_lock_serialises_connects_of_one_id() {
    let b = Arc::new(broker());
    let id = SessionKey::mqtt("c");
    let first = b.lock_client(&id).await;
    let b2 = b.clone();
    let id2 = id.clone();
    let waiter = tokio::spawn(async move {
        let _second = b2.lock_client(&id2).await;
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    drop(first);
    waiter.await.unwrap();
    assert!(lock(&b.connect_locks).is_empty(), "no lock left behind");
}

fn admission(key: SessionKey, on_conflict: OnConflict) -> Admission {
    Admission {
        key,
        clean_start: false,
        expiry: SessionExpiry::Never,
        acl: Acl::unrestricted(),
        on_conflict,
        client: None,
    }
}

#[tokio::test]
async fn admit_takes_over_a_live_mqtt_session_and_refuses_a_live_relay_address() {
    let b = broker();
    let now = Instant::now();
    let first = b.admit(admission(SessionKey::mqtt("c"), OnConflict::TakeOver), now).await.unwrap();
    assert!(!first.present);
    // The old connection detaches when it sees its kick, as a front end does.
    let old = first.session.clone();
    let closing = tokio::spawn(async move {
        loop {
            if old.take_kick(first.generation) == Some(Kick::TakenOver) {
                old.detach(first.generation, Instant::now());
                return;
            }
            tokio::task::yield_now().await;
        }
    });
    let second = b.admit(admission(SessionKey::mqtt("c"), OnConflict::TakeOver), now).await.unwrap();
    closing.await.unwrap();
    assert!(second.present && Arc::ptr_eq(&second.session, &b.session(&SessionKey::mqtt("c")).unwrap()));

    let relay = b.admit(admission(SessionKey::relay("c"), OnConflict::Refuse), now).await.unwrap();
    assert!(!relay.present, "namespaces never collide: relay address c is not MQTT client c");
    assert_eq!(
        b.admit(admission(SessionKey::relay("c"), OnConflict::Refuse), now).await.unwrap_err(),
        AdmitError::InUse
    );
    b.connection_closed(&relay.session, relay.generation, None, now);
    assert!(b.admit(admission(SessionKey::relay("c"), OnConflict::Refuse), now).await.is_ok(), "released");
}

#[test]
fn publish_as_reserves_sys_and_checks_write() {
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("#"), SubscribeOptions::with_qos(QoS::AtMostOnce), now);
    b.subscribe(&watcher, filter("$SYS/#"), SubscribeOptions::with_qos(QoS::AtMostOnce), now);
    b.subscribe(&watcher, filter("$SYSTEM/#"), SubscribeOptions::with_qos(QoS::AtMostOnce), now);
    let all = Acl::unrestricted();
    assert_eq!(
        b.publish_as(&all, message("$SYS/broker/uptime", false)).unwrap_err(),
        PublishRefused::Reserved
    );
    assert!(b.publish_as(&all, message("$SYSTEM/x", false)).is_ok(), "only $SYS itself is reserved");
    for relay in ["$relay", "$relay/addr/alice", "$relay/room/lobby"] {
        assert_eq!(
            b.publish_as(&all, message(relay, true)).unwrap_err(),
            PublishRefused::Reserved,
            "{relay}"
        );
    }
    assert!(b.retained().is_empty(), "a refused retained publish to $relay keeps nothing");
    let read_only = Acl::compile(Some(&[Rule::new("#", Permission::Read)]), None, "c");
    assert_eq!(b.publish_as(&read_only, message("t", false)).unwrap_err(), PublishRefused::NotAuthorized);
    assert_eq!(b.publish_as(&all, message("t", false)).unwrap().delivered, 1);
    assert_eq!(Stats::get(&b.stats().publishes_denied), 5);
    assert_eq!(Stats::get(&b.stats().messages_received), 2);
    assert_eq!(watcher.queue_len(), 2);
}

#[test]
fn a_will_on_sys_is_refused_like_a_publish() {
    let b = broker();
    let now = Instant::now();
    let (watcher, _, _) = connect(&b, "w", true, SessionExpiry::OnDisconnect, now);
    b.subscribe(&watcher, filter("$SYS/#"), SubscribeOptions::with_qos(QoS::AtMostOnce), now);
    let (s, _, g) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
    b.connection_closed(&s, g, Some(will("$SYS/broker/clients/connected", 0)), now);
    assert_eq!(watcher.queue_len(), 0);
    assert_eq!(Stats::get(&b.stats().publishes_denied), 1);
}

#[test]
fn subscribe_as_refuses_a_filter_that_reaches_nothing_readable() {
    let b = broker();
    let now = Instant::now();
    let (s, _, _) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
    let acl = Acl::compile(Some(&[Rule::new("a/#", Permission::Read)]), None, "c");
    let opts = SubscribeOptions::with_qos(QoS::AtMostOnce);
    assert_eq!(b.subscribe_as(&acl, &s, filter("b/#"), opts, now), Err(SubscribeRefused::NotAuthorized));
    assert_eq!(b.subscribe_as(&acl, &s, filter("#"), opts, now), Ok(false), "# intersects a/#");
    assert_eq!(Stats::get(&b.stats().subscribes_denied), 1);
    assert_eq!(s.subscription_count(), 1);
}

#[test]
fn a_live_identity_change_installs_new_rules_or_revokes() {
    use crate::auth::{IdentityState, Revocation};
    let b = broker();
    let now = Instant::now();
    let (s, _, _) = connect(&b, "dev", true, SessionExpiry::OnDisconnect, now);
    let rules: Arc<[Rule]> = Arc::from(vec![Rule::new("d/%u/#", Permission::ReadWrite)]);
    let IdentityUpdate::Rules(acl) = b.refresh_identity(&s, IdentityState::Active(Some(rules)), Some("u1"))
    else {
        panic!("rules expected");
    };
    assert!(acl.allows(crate::acl::Access::Write, &TopicName::try_from("d/u1/x").unwrap()));
    assert!(!acl.allows(crate::acl::Access::Write, &TopicName::try_from("d/u2/x").unwrap()));
    assert_eq!(
        s.enqueue(
            crate::model::Delivery {
                qos: QoS::AtMostOnce,
                retain: false,
                subscription_ids: Default::default(),
                shared: None,
                message: Arc::new(message("d/u2/x", false))
            },
            false
        ),
        crate::session::Enqueued::Filtered,
        "the session filters with the new rules"
    );
    assert!(matches!(
        b.refresh_identity(&s, IdentityState::Revoked(Revocation::Deleted), Some("u1")),
        IdentityUpdate::Revoked(Kick::Revoked(Revocation::Deleted))
    ));
}

#[tokio::test]
async fn max_sessions_refuses_only_a_new_session_that_outlives_its_connection() {
    let mut limits = broker().limits();
    limits.max_sessions = 2;
    let b = Broker::new(limits, Instant::now(), SystemTime::now());
    let now = Instant::now();
    let persistent = |id: &str| admission(SessionKey::mqtt(id), OnConflict::TakeOver);
    let first = b.admit(persistent("p1"), now).await.unwrap();
    b.admit(persistent("p2"), now).await.unwrap();
    assert_eq!(b.session_count(), 2);
    // A third persistent one is refused, and nothing of it is kept.
    assert!(matches!(b.admit(persistent("p3"), now).await, Err(AdmitError::SessionsFull)));
    assert_eq!(b.session_count(), 2);
    assert!(b.session(&SessionKey::mqtt("p3")).is_none());
    // A clean one still connects (its session ends with it), and so does a resumed one.
    let clean = Admission { expiry: SessionExpiry::OnDisconnect, clean_start: true, ..persistent("c1") };
    b.admit(clean, now).await.unwrap();
    assert!(first.session.detach(first.generation, now));
    let again = b.admit(persistent("p1"), now).await.unwrap();
    assert!(again.present, "resumed");
}

#[test]
fn wall_time_is_derived_from_the_instant_passed_in() {
    let mono = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let b = Broker::new(
        BrokerLimits {
            queue: QueueLimits {
                max_messages: 1,
                max_bytes: 1,
                queue_qos0_offline: false,
                max_inflight_bytes: usize::MAX,
            },
            budget: crate::session::BudgetLimits::UNLIMITED,
            retained: crate::retained::RetainedLimits::UNLIMITED,
            max_sessions: usize::MAX,
        },
        mono,
        wall,
    );
    assert_eq!(b.wall_time(mono + Duration::from_secs(5)), wall + Duration::from_secs(5));
    assert_eq!(b.instant_of(wall + Duration::from_secs(7)), mono + Duration::from_secs(7));
}

/// A journal that keeps what it is given.
#[derive(Debug, Default)]
struct Recorded(std::sync::Mutex<Vec<Change>>);

impl Journal for Recorded {
    fn record(&self, change: Change) -> u64 {
        let mut changes = self.0.lock().unwrap();
        changes.push(change);
        changes.len() as u64
    }

    fn acks_wait_for_disk(&self) -> bool {
        false
    }

    fn poll_durable(&self, _seq: u64, _waker: &std::task::Waker) -> bool {
        true
    }
}

#[test]
fn clear_retained_is_journalled_and_reaches_no_subscriber() {
    let b = broker();
    let now = Instant::now();
    let journal = Arc::new(Recorded::default());
    let as_journal: Arc<dyn Journal> = journal.clone();
    b.set_journal(&as_journal);
    b.publish(message("r/1", true));
    let (s, _, _) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
    let opts = SubscribeOptions {
        retain_handling: RetainHandling::DoNotSend,
        ..SubscribeOptions::with_qos(QoS::AtMostOnce)
    };
    b.subscribe_as(&Acl::unrestricted(), &s, filter("r/#"), opts, now).unwrap();
    let topic = TopicName::try_from("r/1").unwrap();
    assert!(b.clear_retained(&topic));
    assert!(!b.clear_retained(&topic), "nothing left to clear");
    assert!(b.retained().is_empty());
    assert_eq!(s.queue_len(), 0, "an operator's delete is not a message");
    let changes = journal.0.lock().unwrap();
    let retained: Vec<_> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Retained { topic, message } => Some((topic.to_string(), message.is_some())),
            _ => None,
        })
        .collect();
    assert_eq!(retained, [("r/1".to_string(), true), ("r/1".to_string(), false)]);
}

#[test]
fn routing_counts_filtered_deliveries_and_drops_by_reason() {
    let b = broker();
    let now = Instant::now();
    let (s, _, _) = connect(&b, "c", true, SessionExpiry::OnDisconnect, now);
    let opts = SubscribeOptions::with_qos(QoS::AtMostOnce);
    b.subscribe_as(&Acl::unrestricted(), &s, filter("t/#"), opts, now).unwrap();
    s.set_acl(Acl::compile(Some(&[Rule::new("t/ok", Permission::Read)]), None, "c"));
    b.publish(message("t/ok", false));
    b.publish(message("t/hidden", false));
    assert_eq!(Stats::get(&b.stats().deliveries_filtered), 1);
    b.stats().dropped(DropReason::Expired, 2);
    assert_eq!(Stats::get(&b.stats().messages_dropped), 2);
    assert_eq!(Stats::get(&b.stats().dropped_expired), 2);
    let mqtt5 = b.stats().traffic(crate::auth::Protocol::Mqtt5);
    Stats::add(&mqtt5.bytes_in, 7);
    let by_protocol: Vec<_> =
        b.stats().traffic_by_protocol().map(|(p, t)| (p.as_str(), Stats::get(&t.bytes_in))).collect();
    assert!(by_protocol.contains(&("mqtt-5", 7)) && by_protocol.contains(&("mqtt-3.1.1", 0)));
}

#[test]
fn a_pubrel_waits_for_its_release_to_be_journalled() {
    let b = broker();
    let now = Instant::now();
    let journal = Arc::new(Recorded::default());
    let as_journal: Arc<dyn Journal> = journal.clone();
    b.set_journal(&as_journal);
    let (s, _, generation) = connect(&b, "r", false, SessionExpiry::Never, now);
    b.subscribe_as(
        &Acl::unrestricted(),
        &s,
        filter("q/#"),
        SubscribeOptions::with_qos(QoS::ExactlyOnce),
        now,
    )
    .unwrap();
    let mut m = message("q/1", false);
    m.qos = QoS::ExactlyOnce;
    b.publish(m);
    let mut out = Vec::new();
    s.drain(generation, 10, usize::MAX, now, std::task::Waker::noop(), &mut out);
    let Some(crate::session::Outgoing::Publish { packet_id: Some(id), .. }) = out.first() else {
        panic!("expected a QoS 2 PUBLISH, got {out:?}");
    };
    let outcome = s.pubrec(*id, false);
    let changes = journal.0.lock().unwrap();
    assert!(matches!(changes.last(), Some(Change::Released { .. })), "{changes:?}");
    assert_eq!(
        outcome,
        crate::session::PubRecOutcome::SendPubRel { durable_seq: Some(changes.len() as u64) }
    );
    drop(changes);
    assert_eq!(
        s.pubrec(*id, false),
        crate::session::PubRecOutcome::SendPubRel { durable_seq: None },
        "a repeated PUBREC adds nothing to wait for"
    );
}
