//! A small MQTT 3.1.1 broker: CONNECT, SUBSCRIBE to exact filters and `prefix/#`, PUBLISH at
//! QoS 0 and 1 (PUBACK to the publisher, delivery at the lower of the two QoS), and optionally
//! a username and password it insists on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::mqtt::codec::{self, Packet};

struct Sub {
    filter: String,
    qos: u8,
    out: mpsc::UnboundedSender<Vec<u8>>,
}

#[derive(Default)]
struct State {
    subs: Mutex<Vec<Sub>>,
    published: AtomicU64,
    dropped: AtomicU64,
}

/// Options of the fake.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    /// Drop every n-th published message instead of routing it.
    pub(crate) drop_every: Option<u64>,
    /// Refuse CONNECTs without this username and password (return code 4).
    pub(crate) credentials: Option<(String, String)>,
}

/// A running fake broker.
pub(crate) struct FakeBroker {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    state: Arc<State>,
}

impl FakeBroker {
    /// Messages dropped on purpose so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.state.dropped.load(Relaxed)
    }
}

fn matches(filter: &str, topic: &str) -> bool {
    match filter.strip_suffix("/#") {
        Some(prefix) => {
            topic.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        }
        None => filter == topic,
    }
}

/// Starts a fake broker.
pub(crate) async fn start(options: Options) -> FakeBroker {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(State::default());
    let st = state.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(connection(sock, st.clone(), options.clone()));
        }
    });
    FakeBroker { addr, state }
}

fn str_at(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = usize::from(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]));
    Some((b.get(at + 2..at + 2 + len)?, at + 2 + len))
}

/// The username and password of a CONNECT body (after the fixed header).
fn connect_credentials(body: &[u8]) -> Option<(Option<String>, Option<String>)> {
    let (_, at) = str_at(body, 0)?; // "MQTT"
    let flags = *body.get(at + 1)?;
    let (_, mut at) = str_at(body, at + 4)?; // client id
    let mut take = |on: bool| -> Option<Option<String>> {
        if !on {
            return Some(None);
        }
        let (s, next) = str_at(body, at)?;
        at = next;
        Some(Some(String::from_utf8_lossy(s).into_owned()))
    };
    let user = take(flags & 0x80 != 0)?;
    let pass = take(flags & 0x40 != 0)?;
    Some((user, pass))
}

async fn connection(sock: TcpStream, state: Arc<State>, options: Options) {
    let (mut rd, mut wr) = sock.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(bytes) = rx.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let mut buf = Vec::new();
    let mut connected = false;
    let mut next_id: u16 = 0;
    loop {
        let mut chunk = [0u8; 16 * 1024];
        let Ok(n @ 1..) = rd.read(&mut chunk).await else { break };
        buf.extend_from_slice(&chunk[..n]);
        while let Ok(Some(len)) = codec::packet_len(&buf) {
            let packet: Vec<u8> = buf.drain(..len).collect();
            let head = 1 + packet[1..].iter().position(|b| b & 0x80 == 0).unwrap() + 1;
            let body = &packet[head..];
            match packet[0] >> 4 {
                1 => {
                    let creds = connect_credentials(body);
                    let ok = match &options.credentials {
                        None => creds.is_some(),
                        Some((u, p)) => creds == Some((Some(u.clone()), Some(p.clone()))),
                    };
                    let _ = tx.send(vec![0x20, 2, 0, if ok { 0 } else { 4 }]);
                    if !ok {
                        return;
                    }
                    connected = true;
                }
                8 if connected => {
                    let pid = [body[0], body[1]];
                    let (filter, at) = str_at(body, 2).unwrap();
                    let qos = body[at];
                    let filter = String::from_utf8(filter.to_vec()).unwrap();
                    state.subs.lock().unwrap().push(Sub { filter, qos, out: tx.clone() });
                    let _ = tx.send(vec![0x90, 3, pid[0], pid[1], qos]);
                }
                3 if connected => {
                    let Ok(Packet::Publish { qos, packet_id, topic, payload }) = codec::parse(&packet) else {
                        return;
                    };
                    if let Some(pid) = packet_id {
                        let mut ack = Vec::new();
                        codec::put_puback(&mut ack, pid);
                        let _ = tx.send(ack);
                    }
                    let nth = state.published.fetch_add(1, Relaxed) + 1;
                    if options.drop_every.is_some_and(|n| nth % n == 0) {
                        state.dropped.fetch_add(1, Relaxed);
                        continue;
                    }
                    let topic = std::str::from_utf8(topic).unwrap();
                    for sub in state.subs.lock().unwrap().iter().filter(|s| matches(&s.filter, topic)) {
                        let q = qos.min(sub.qos);
                        next_id = next_id.checked_add(1).unwrap_or(1);
                        let mut out = Vec::new();
                        let at = codec::put_publish(&mut out, topic.as_bytes(), q, next_id, payload.len());
                        out[at..].copy_from_slice(payload);
                        let _ = sub.out.send(out);
                    }
                }
                4 | 12 | 14 if connected => {}
                _ => return,
            }
        }
    }
}

#[test]
fn filters() {
    assert!(matches("a/b", "a/b"));
    assert!(matches("a/#", "a/b/c"));
    assert!(matches("a/#", "a"));
    assert!(!matches("a/#", "ab/c"));
    assert!(!matches("a/b", "a/bc"));
}
