//! QoS 2 publishers across a broker crash: the real binary under durability `always` is killed
//! with SIGKILL in the middle of a QoS 2 stream and restarted on the same port, while rumqttc
//! clients (MQTT 3.1.1 and 5.0, persistent sessions) reconnect by themselves and resend what
//! they had in flight.
//!
//! Every message the publisher sent, before the crash and after it, must complete (PUBCOMP),
//! and reach a persistent subscriber exactly once. The subscriber is offline during the stream
//! (its queue is broker state too) and collects everything at the end over a raw socket. The 3.1.1 publisher keeps
//! as many messages in flight as it can send — far more than the broker's `max_inflight` of 32 —
//! as 3.1.1 clients may: that protocol has no Receive Maximum, so the broker must not disconnect
//! it for that.
//!
//! Neither publisher ever reuses a packet id: rumqttc 0.25 picks the next id without looking at
//! the ids whose PUBREL still awaits its PUBCOMP, so after a reconnect it can send a new PUBLISH
//! under the id of a message the broker holds awaiting PUBREL. The broker must take that for a
//! retransmission (MQTT-4.3.3-9: acknowledged with PUBREC, not delivered again), so the new
//! message would be lost by the client, and the second PUBCOMP for that id would end rumqttc's
//! connection with `Unsolicited(id)`. Giving each publisher more packet ids than messages keeps
//! the test about the broker. The MQTT 5 broker therefore advertises a Receive Maximum of 65,535.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::persistent::{connect_persistent, nothing_more, receive, subscribe_persistent};
use daemon::Daemon;
use mesgd_core::mqtt::ProtocolVersion;
use tokio::sync::{mpsc, watch};

/// Messages published before the crash, and how many must have completed when it comes.
const BEFORE: usize = 1500;
const COMPLETED_AT_CRASH: usize = 200;
/// Messages published after the restart.
const AFTER: usize = 500;
/// The longest the whole stream may take (debug build, fsync per batch).
const STREAM: Duration = Duration::from_secs(90);
/// The longest one publish may wait for room in rumqttc's request queue.
const ENQUEUE: Duration = Duration::from_secs(60);

/// What a client's event loop saw.
#[derive(Debug)]
enum Seen {
    Completed,
    Error(String),
}

fn config(dir: &Path, port: u16, max_inflight: u16) -> PathBuf {
    let path = dir.join("mesgd.toml");
    std::fs::write(
        &path,
        format!(
            "[storage]\ndir = \"data\"\ndurability = \"always\"\n\
             [[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:{port}\"\n\
             [auth]\nallow_anonymous = true\n[mqtt]\nsys_interval = 0\n\
             [limits]\nmax_queued_messages = 10000\nmax_inflight = {max_inflight}\n"
        ),
    )
    .unwrap();
    path
}

/// A free loopback port: the broker must come back on the address its clients reconnect to.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until `n` completions were seen, collecting the errors seen meanwhile.
async fn completions(seen: &mut mpsc::UnboundedReceiver<Seen>, count: &mut usize, n: usize) {
    let mut errors = Vec::new();
    let waited = tokio::time::timeout(STREAM, async {
        while *count < n {
            match seen.recv().await {
                Some(Seen::Completed) => *count += 1,
                Some(Seen::Error(e)) => errors.push(e),
                None => return,
            }
        }
    })
    .await;
    assert!(waited.is_ok() && *count >= n, "{count} of {n} QoS 2 messages completed; errors: {errors:?}");
}

fn payload(n: usize) -> Bytes {
    Bytes::from(format!("m{n:06}"))
}

/// Drives an event loop forever, reporting what it saw. After a connection error it polls again
/// (which reconnects) once the broker is up (`up` is true).
macro_rules! driver {
    ($name:ident, $mod:ident) => {
        fn $name(
            mut eventloop: common::$mod::EventLoop,
            tx: mpsc::UnboundedSender<Seen>,
            mut up: watch::Receiver<bool>,
        ) {
            use common::$mod::{Event, Packet};
            tokio::spawn(async move {
                loop {
                    let seen = match eventloop.poll().await {
                        Ok(Event::Incoming(Packet::PubComp(_))) => Seen::Completed,
                        Ok(_) => continue,
                        Err(e) => {
                            let _ = tx.send(Seen::Error(format!("{e:?}")));
                            if up.wait_for(|up| *up).await.is_err() {
                                return;
                            }
                            continue;
                        }
                    };
                    if tx.send(seen).is_err() {
                        return;
                    }
                }
            });
        }
    };
}

driver!(drive_v3, v3);
driver!(drive_v5, v5);

/// One test per protocol version; the rumqttc APIs differ only in their module and options.
macro_rules! crash_test {
    ($name:ident, $mod:ident, $drive:ident, $max_inflight:expr, $persistent:expr, $publisher:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            use common::$mod::{AsyncClient, MqttOptions, QoS};

            fn options(id: &str, port: u16) -> MqttOptions {
                let mut o = MqttOptions::new(id, "127.0.0.1", port);
                o.set_keep_alive(Duration::from_secs(30));
                let persistent: fn(&mut MqttOptions) = $persistent;
                persistent(&mut o);
                o
            }

            let dir = tempfile::tempdir().unwrap();
            let port = free_port();
            let cfg = config(dir.path(), port, $max_inflight);
            let mut d = Daemon::start(&cfg, &["mqtt"]).await;
            let (up_tx, up) = watch::channel(true);

            subscribe_persistent(d.addr("mqtt"), ProtocolVersion::V311, "q2-sink", "q2/#", 2).await;

            let mut publisher_options = options("q2-pub", port);
            let in_flight: fn(&mut MqttOptions) = $publisher;
            in_flight(&mut publisher_options);
            let (publisher, publisher_loop) = AsyncClient::new(publisher_options, 100);
            let (pub_tx, mut pub_seen) = mpsc::unbounded_channel();
            $drive(publisher_loop, pub_tx, up.clone());
            let stream = {
                let publisher = publisher.clone();
                tokio::spawn(async move {
                    for n in 0..BEFORE {
                        let publish = publisher.publish("q2/x", QoS::ExactlyOnce, false, payload(n));
                        tokio::time::timeout(ENQUEUE, publish).await.expect("room to publish").unwrap();
                    }
                })
            };

            let mut completed = 0;
            completions(&mut pub_seen, &mut completed, COMPLETED_AT_CRASH).await;
            up_tx.send_replace(false);
            d.signal("KILL").await;
            d.wait().await;
            let d = Daemon::start(&cfg, &["mqtt"]).await;
            up_tx.send_replace(true);
            tokio::time::timeout(STREAM, stream).await.expect("the stream was sent").unwrap();
            for n in BEFORE..BEFORE + AFTER {
                let publish = publisher.publish("q2/x", QoS::ExactlyOnce, false, payload(n));
                tokio::time::timeout(ENQUEUE, publish).await.expect("room to publish").unwrap();
            }
            completions(&mut pub_seen, &mut completed, BEFORE + AFTER).await;
            let (mut sink, present) =
                connect_persistent(d.addr("mqtt"), ProtocolVersion::V311, "q2-sink").await;
            assert!(present, "the subscriber's session survived the crash");
            let got = receive(&mut sink, BEFORE + AFTER).await;
            let distinct: BTreeSet<Vec<u8>> = got.iter().cloned().collect();
            let all: BTreeSet<Vec<u8>> = (0..BEFORE + AFTER).map(|n| payload(n).to_vec()).collect();
            assert_eq!(distinct, all, "every message reached the subscriber");
            assert_eq!(got.len(), all.len(), "and each exactly once");
            assert!(nothing_more(&mut sink).await.is_empty());
        }
    };
}

crash_test!(
    a_v311_qos2_publisher_completes_every_message_across_a_crash,
    v3,
    drive_v3,
    32,
    |o| {
        o.set_clean_session(false);
    },
    |o| {
        o.set_inflight(u16::MAX);
    }
);

crash_test!(
    a_v5_qos2_publisher_completes_every_message_across_a_crash,
    v5,
    drive_v5,
    u16::MAX,
    |o| {
        o.set_clean_start(false);
        o.set_session_expiry_interval(Some(3600));
    },
    // As many as the broker's Receive Maximum lets it have.
    |o| {
        o.set_outgoing_inflight_upper_limit(u16::MAX);
    }
);
