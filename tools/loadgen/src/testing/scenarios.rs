//! Every scenario end to end against the in-process fakes (and, ignored by default, against a
//! real Mosquitto).

use std::time::Duration;

use serde_json::Value;

use super::{TIMING, fake_content, fake_mqtt, fake_relay, meta};
use crate::mqtt::Credentials;
use crate::mqtt::load::{self, Shape};
use crate::relay::{Endpoint, Transport};
use crate::{content, echo, idle, relay};

fn mqtt_cfg(addr: std::net::SocketAddr, qos: u8) -> load::Config {
    load::Config {
        addr,
        qos,
        payload: 64,
        creds: Credentials::default(),
        timing: TIMING,
        stall: Duration::from_secs(1),
        meta: meta(),
    }
}

fn f(row: &Value, key: &str) -> f64 {
    row[key].as_f64().unwrap_or_else(|| panic!("no {key} in {row}"))
}

/// Messages the interval's rates stand for.
fn count(row: &Value, key: &str) -> f64 {
    f(row, key) * f(row, "elapsed_s")
}

/// A closed loop: deliveries over the interval are `per_message` × messages sent, up to what
/// the windows let be in flight at either end of the interval.
fn assert_closed_loop(row: &Value, per_message: f64, in_flight: f64) {
    let (sent, delivered) = (count(row, "published_msgs_per_s"), count(row, "delivered_msgs_per_s"));
    assert!(delivered > 0.0, "{row}");
    let slack = 2.0 * in_flight + 2.0 * per_message;
    assert!((delivered - sent * per_message).abs() <= slack, "sent {sent} delivered {delivered}: {row}");
    assert!(row["latency_us"]["count"].as_u64().unwrap() > 0, "{row}");
    assert!(row.get("broker_cpu_us_per_delivery").is_some() && row.get("gen_cpu_util").is_some(), "{row}");
}

fn assert_no_errors(row: &Value) {
    assert_eq!(row["errors"], serde_json::json!({}), "{row}");
}

#[tokio::test]
async fn mqtt_closed_loops_at_qos_0_and_1() {
    let broker = fake_mqtt::start(fake_mqtt::Options::default()).await;
    for qos in [0, 1] {
        let cfg = mqtt_cfg(broker.addr, qos);
        let row = load::throughput(&cfg, Shape::Pairs(4), 8).await.unwrap();
        assert_eq!((row["scenario"].as_str(), row["params"]["pairs"].as_u64()), (Some("pairs"), Some(4)));
        assert_closed_loop(&row, 1.0, 4.0 * 8.0);
        assert_no_errors(&row);
        assert_eq!(row.get("acks_per_s").is_some(), qos == 1, "{row}");

        let row = load::throughput(&cfg, Shape::Fanout(5), 4).await.unwrap();
        assert_closed_loop(&row, 5.0, 5.0 * 4.0);
        assert_no_errors(&row);

        let row = load::throughput(&cfg, Shape::Fanin(6), 4).await.unwrap();
        assert_closed_loop(&row, 1.0, 6.0 * 4.0);
        assert_no_errors(&row);
    }
}

#[tokio::test]
async fn mqtt_latency_is_paced_and_stamped_from_the_intended_time() {
    let broker = fake_mqtt::start(fake_mqtt::Options::default()).await;
    let row = load::latency(&mqtt_cfg(broker.addr, 1), 3, 2000.0).await.unwrap();
    let achieved = f(&row, "rate_achieved");
    assert!((0.7..=1.3).contains(&achieved), "{row}");
    let samples = row["latency_us"]["count"].as_f64().unwrap();
    assert!(samples >= 0.5 * 2000.0 * f(&row, "elapsed_s"), "{row}");
    assert!(row["send_lag_us"]["count"].as_u64().unwrap() > 0, "{row}");
    assert!(f(&row["latency_us"], "p999") >= f(&row["latency_us"], "p50"), "{row}");
    assert_no_errors(&row);
}

#[tokio::test]
async fn a_dropped_message_is_written_off_not_waited_for() {
    let broker = fake_mqtt::start(fake_mqtt::Options { drop_every: Some(7), ..Default::default() }).await;
    let cfg = load::Config { stall: Duration::from_millis(20), ..mqtt_cfg(broker.addr, 0) };
    let row = load::throughput(&cfg, Shape::Pairs(1), 4).await.unwrap();
    assert!(broker.dropped() > 0);
    let written_off =
        row["errors"]["no delivery within the stall timeout: written off"].as_u64().unwrap_or(0);
    assert!(written_off > 0, "{row}");
    assert!(f(&row, "delivered_msgs_per_s") > 0.0, "{row}");
}

#[tokio::test]
async fn credentials_are_presented() {
    let creds = ("bench".to_owned(), "bench-secret".to_owned());
    let broker =
        fake_mqtt::start(fake_mqtt::Options { credentials: Some(creds), ..Default::default() }).await;
    let refused = load::throughput(&mqtt_cfg(broker.addr, 0), Shape::Pairs(1), 4).await.unwrap_err();
    assert_eq!(refused.kind(), "connect refused: return code 4");
    let creds =
        Credentials { username: Some("bench".into()), password: Some("bench-secret".into()), token: None };
    let cfg = load::Config { creds, ..mqtt_cfg(broker.addr, 0) };
    let row = load::throughput(&cfg, Shape::Pairs(1), 4).await.unwrap();
    assert_no_errors(&row);
}

#[tokio::test]
async fn mqtt_idle_connections_are_held_and_counted() {
    let broker = fake_mqtt::start(fake_mqtt::Options::default()).await;
    let kind = idle::Kind::Mqtt { addr: broker.addr, creds: Credentials::default(), subscribe: true };
    let plan = idle::Plan { conns: 300, conc: 50, hold: Duration::from_millis(50) };
    let row = idle::idle(kind, plan, &meta()).await;
    assert_eq!((row["connected"].as_u64(), row["open_after_hold"].as_u64()), (Some(300), Some(300)), "{row}");
    assert!(row.get("broker_kib_per_conn").is_some() && f(&row, "conn_per_s") > 0.0, "{row}");
    assert_no_errors(&row);
}

#[tokio::test]
async fn idle_counts_refused_connections_by_kind() {
    // a port with nobody listening: every attempt fails the same way
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let kind = idle::Kind::Mqtt { addr, creds: Credentials::default(), subscribe: false };
    let plan = idle::Plan { conns: 20, conc: 5, hold: Duration::ZERO };
    let row = idle::idle(kind, plan, &meta()).await;
    assert_eq!(row["connected"], 0);
    assert_eq!(row["errors"]["connect: ConnectionRefused"], 20, "{row}");
}

fn relay_cfg(addr: std::net::SocketAddr, transport: Transport) -> relay::load::Config {
    relay::load::Config {
        endpoint: Endpoint { addr, transport, path: "/relay".into(), creds: Credentials::default() },
        payload: 64,
        timing: TIMING,
        stall: Duration::from_secs(1),
        meta: meta(),
    }
}

fn relay_addr(r: &fake_relay::FakeRelay, t: Transport) -> std::net::SocketAddr {
    match t {
        Transport::Tcp => r.tcp,
        Transport::Ws => r.ws,
        Transport::Udp => r.udp,
    }
}

#[tokio::test]
async fn relay_pairs_and_rooms_over_every_transport() {
    let fake = fake_relay::start(None).await;
    for t in [Transport::Tcp, Transport::Ws, Transport::Udp] {
        let cfg = relay_cfg(relay_addr(&fake, t), t);
        let row = relay::load::pairs(&cfg, 3, 8).await.unwrap();
        assert_eq!(row["transport"], t.name());
        assert_closed_loop(&row, 1.0, 3.0 * 8.0);
        assert_no_errors(&row);

        let row = relay::load::room(&cfg, 4, 4).await.unwrap();
        assert_eq!(row["room_members"], 5, "{row}");
        assert_closed_loop(&row, 4.0, 4.0 * 4.0);
        assert_no_errors(&row);
    }
}

#[tokio::test]
async fn relay_backlog_flushes_are_timed_and_checked_over_every_transport() {
    let fake = fake_relay::start(None).await;
    for t in [Transport::Tcp, Transport::Ws, Transport::Udp] {
        let row = relay::backlog::backlog(&relay_cfg(relay_addr(&fake, t), t), 20, 3).await.unwrap();
        assert_eq!(row["scenario"], "relay-backlog");
        assert_eq!(row["flush_us"]["count"], 3, "{row}");
        assert!(row["flush_us"]["max"].as_f64().unwrap() > 0.0, "{row}");
        assert_no_errors(&row);
    }
}

#[tokio::test]
async fn relay_latency_over_tcp_and_ws() {
    let fake = fake_relay::start(None).await;
    for t in [Transport::Tcp, Transport::Ws] {
        let row = relay::load::latency(&relay_cfg(relay_addr(&fake, t), t), 2, 1000.0).await.unwrap();
        assert!((0.7..=1.3).contains(&f(&row, "rate_achieved")), "{row}");
        assert!(row["latency_us"]["count"].as_u64().unwrap() > 0, "{row}");
        assert_no_errors(&row);
    }
}

#[tokio::test]
async fn relay_refusals_are_counted_and_give_their_credits_back() {
    let fake = fake_relay::start(Some(5)).await;
    let row = relay::load::pairs(&relay_cfg(fake.tcp, Transport::Tcp), 2, 4).await.unwrap();
    let refused = row["errors"]["rate limit exceeded"].as_u64().unwrap_or(0);
    assert!(refused > 0, "{row}");
    // refusals returned their credits: nothing was left to the stall timeout
    assert!(row["errors"].get("no delivery within the stall timeout: written off").is_none(), "{row}");
    assert!(f(&row, "delivered_msgs_per_s") > 0.0, "{row}");
}

#[tokio::test]
async fn relay_idle_over_every_transport_and_address_conflicts() {
    let fake = fake_relay::start(None).await;
    for t in [Transport::Tcp, Transport::Ws, Transport::Udp] {
        let endpoint = relay_cfg(relay_addr(&fake, t), t).endpoint;
        let plan = idle::Plan { conns: 100, conc: 20, hold: Duration::from_millis(20) };
        let row = idle::idle(idle::Kind::Relay(endpoint.clone()), plan, &meta()).await;
        assert_eq!(
            (row["scenario"].as_str(), row["connected"].as_u64()),
            (Some("relay-idle"), Some(100)),
            "{row}"
        );
        assert_no_errors(&row);
        // an address already held is refused with the relay's own error text
        let _held = endpoint.registered("taken").await.unwrap();
        let e = endpoint.registered("taken").await.err().expect("second register refused");
        assert_eq!(e.kind(), "registered refused: address in use");
    }
}

#[tokio::test]
async fn content_fanout_reaches_every_matching_listener() {
    let addr = fake_content::start("/c").await;
    let cfg = content::Config {
        addr,
        prefix: "/c/".into(),
        payload: 48,
        creds: Credentials::default(),
        timing: TIMING,
        stall: Duration::from_secs(1),
        meta: meta(),
    };
    let row = content::fanout(&cfg, 4, 4).await.unwrap();
    assert_closed_loop(&row, 4.0, 4.0 * 4.0);
    assert_no_errors(&row);
}

#[tokio::test]
async fn echo_ceiling() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    tokio::spawn(echo::serve(addr, 100, Duration::from_secs(30)));
    let mut row = None;
    for _ in 0..50 {
        match echo::client(addr, 3, 8, 80, TIMING, Duration::from_secs(1), &meta()).await {
            Ok(r) => {
                row = Some(r);
                break;
            }
            // the server task may not be listening yet
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let row = row.expect("echo server reachable");
    let (sent, got) = (count(&row, "published_msgs_per_s"), count(&row, "delivered_msgs_per_s"));
    assert!(got > 0.0 && (sent - got).abs() <= 2.0 * 3.0 * 8.0 + 2.0, "{row}");
    assert_no_errors(&row);
}

/// The generator against a real broker: `cargo test -- --ignored against_mosquitto` with
/// `mosquitto` on the PATH.
#[tokio::test]
#[ignore = "needs mosquitto on the PATH"]
async fn against_mosquitto() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = std::process::Command::new("mosquitto")
        .args(["-p", &port.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mosquitto on the PATH");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(up, "mosquitto did not start");
    let mut cfg = mqtt_cfg(addr, 1);
    cfg.meta.broker = Some(crate::procfs::Proc::Pid(child.id()));
    for shape in [Shape::Pairs(4), Shape::Fanout(10), Shape::Fanin(10)] {
        let row = load::throughput(&cfg, shape, 8).await.unwrap();
        assert_closed_loop(&row, if shape == Shape::Fanout(10) { 10.0 } else { 1.0 }, 10.0 * 8.0);
        assert_no_errors(&row);
        assert!(f(&row, "broker_cpu_util") > 0.0, "{row}");
    }
    let row = load::latency(&cfg, 2, 1000.0).await.unwrap();
    assert_no_errors(&row);
    let plan = idle::Plan { conns: 500, conc: 50, hold: Duration::from_millis(200) };
    let kind = idle::Kind::Mqtt { addr, creds: Credentials::default(), subscribe: false };
    let row = idle::idle(kind, plan, &cfg.meta).await;
    assert_eq!(row["connected"], 500, "{row}");
    let _ = child.kill();
    let _ = child.wait();
}
