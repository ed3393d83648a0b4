//! Benchmarks of the session hot path every delivery takes: push into the queue, drain into
//! the connection's output, and (QoS 1) the acknowledgement, alone and with two threads whose
//! sessions share the broker-wide queue budget. Run with `cargo bench -p mesgd-core --bench
//! session`.

use std::hint::black_box;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use mesgd_core::acl::Acl;
use mesgd_core::broker::{Broker, BrokerLimits};
use mesgd_core::model::{Delivery, Message, Origin, QoS, SessionExpiry, SessionKey};
use mesgd_core::session::{BudgetLimits, Outgoing, QueueLimits, Session};
use mesgd_core::topic::TopicName;
use smallvec::SmallVec;

fn broker() -> Broker {
    let limits = BrokerLimits {
        queue: QueueLimits {
            max_messages: 1000,
            max_bytes: 16 << 20,
            queue_qos0_offline: false,
            max_inflight_bytes: 4 << 20,
        },
        budget: BudgetLimits::new(1 << 30, 90),
        retained: mesgd_core::retained::RetainedLimits::UNLIMITED,
        max_sessions: usize::MAX,
    };
    Broker::new(limits, Instant::now(), std::time::SystemTime::now())
}

fn online(broker: &Broker, id: &str) -> Arc<Session> {
    let opened =
        broker.open_session(&SessionKey::mqtt(id), true, SessionExpiry::OnDisconnect, Instant::now());
    opened.session.attach(1, Acl::unrestricted(), SessionExpiry::OnDisconnect);
    opened.session
}

fn delivery(qos: QoS) -> Delivery {
    let topic = TopicName::try_from("sensors/room1/temperature").unwrap();
    let message = Message::new(topic, Bytes::from_static(&[b'x'; 64]), qos, false, Origin::BROKER);
    Delivery {
        message: Arc::new(message),
        qos,
        retain: false,
        subscription_ids: SmallVec::new(),
        shared: None,
    }
}

/// One delivery through `session`: queued, drained, and acknowledged if QoS 1.
fn cycle(session: &Session, d: &Delivery, out: &mut Vec<Outgoing>) {
    session.enqueue(d.clone(), false);
    session.drain(1, 32, 256, Instant::now(), Waker::noop(), out);
    for o in out.drain(..) {
        if let Outgoing::Publish { packet_id: Some(id), .. } = o {
            session.puback(id);
        }
    }
}

fn bench_cycle(c: &mut Criterion) {
    let broker = broker();
    let session = online(&broker, "bench");
    let mut group = c.benchmark_group("session");
    for (name, qos) in [("enqueue_drain_qos0", QoS::AtMostOnce), ("enqueue_drain_ack_qos1", QoS::AtLeastOnce)]
    {
        let d = delivery(qos);
        let mut out = Vec::new();
        group.bench_function(name, |b| b.iter(|| cycle(black_box(&session), &d, &mut out)));
    }
    // Two threads, each with its own session, both counting against the one budget: the cost
    // of sharing it shows here if anywhere.
    let sessions = [online(&broker, "a"), online(&broker, "b")];
    let d = delivery(QoS::AtLeastOnce);
    group.bench_function("two_threads_1000_qos1_each", |b| {
        b.iter(|| {
            std::thread::scope(|scope| {
                for session in &sessions {
                    let d = &d;
                    scope.spawn(move || {
                        let mut out = Vec::new();
                        for _ in 0..1000 {
                            cycle(session, d, &mut out);
                        }
                    });
                }
            })
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! { name = benches; config = config(); targets = bench_cycle }
criterion_main!(benches);
