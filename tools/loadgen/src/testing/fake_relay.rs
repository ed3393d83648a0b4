//! A small JSON relay after docs/relay.md: `register` (`address in use` when taken),
//! `send` → `deliver`, or `queued` and the delivery kept until the address registers, `join_room` → `joined_room`, `room_send` → `room_deliver` to
//! every other member (`join a room first` otherwise), over TCP (length-prefixed), WebSocket
//! (tokio-tungstenite) and UDP, all in one address space. It can refuse every n-th send with
//! `rate limit exceeded`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

type Out = mpsc::UnboundedSender<String>;

#[derive(Default)]
struct State {
    addrs: Mutex<HashMap<String, Out>>,
    rooms: Mutex<HashMap<String, Vec<String>>>,
    /// Deliveries waiting for an address nobody holds, flushed before `registered`.
    queues: Mutex<HashMap<String, Vec<String>>>,
    sends: AtomicU64,
    refuse_every: Option<u64>,
}

/// The three listeners of a running fake relay.
pub(crate) struct FakeRelay {
    /// TCP listener.
    pub(crate) tcp: SocketAddr,
    /// WebSocket listener.
    pub(crate) ws: SocketAddr,
    /// UDP socket.
    pub(crate) udp: SocketAddr,
}

/// One client's session.
struct Session {
    addr: Option<String>,
    out: Out,
}

impl Session {
    fn reply(&self, v: &Value) {
        let _ = self.out.send(v.to_string());
    }

    fn close(&mut self, state: &State) {
        if let Some(a) = self.addr.take() {
            state.addrs.lock().unwrap().remove(&a);
            for members in state.rooms.lock().unwrap().values_mut() {
                members.retain(|m| m != &a);
            }
        }
    }

    fn handle(&mut self, state: &State, text: &str) {
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return self.reply(&json!({"t": "error", "msg": "invalid json"}));
        };
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
        match (v["t"].as_str(), &self.addr) {
            (Some("register"), None) => {
                let addr = s("addr");
                let mut addrs = state.addrs.lock().unwrap();
                if addrs.contains_key(&addr) {
                    drop(addrs);
                    return self.reply(&json!({"t": "error", "msg": "address in use"}));
                }
                addrs.insert(addr.clone(), self.out.clone());
                self.addr = Some(addr.clone());
                let backlog = state.queues.lock().unwrap().remove(&addr).unwrap_or_default();
                for d in &backlog {
                    let _ = self.out.send(d.clone());
                }
                self.reply(&json!({"t": "registered", "addr": addr, "queued": backlog.len()}));
            }
            (Some(_), None) => self.reply(&json!({"t": "error", "msg": "register first"})),
            (Some("send"), Some(me)) => {
                let nth = state.sends.fetch_add(1, Relaxed) + 1;
                if state.refuse_every.is_some_and(|n| nth % n == 0) {
                    return self.reply(&json!({"t": "error", "msg": "rate limit exceeded"}));
                }
                let to = s("to");
                match state.addrs.lock().unwrap().get(&to) {
                    Some(out) => {
                        let d = json!({"t": "deliver", "from": me, "ct": v["ct"], "pub": null, "nonce": null, "kind": "live"});
                        let _ = out.send(d.to_string());
                    }
                    None => {
                        let d = json!({"t": "deliver", "from": me, "ct": v["ct"], "pub": null, "nonce": null, "kind": "queued"});
                        state.queues.lock().unwrap().entry(to.clone()).or_default().push(d.to_string());
                        self.reply(&json!({"t": "queued", "to": to}));
                    }
                }
            }
            (Some("join_room"), Some(me)) => {
                let room = s("room");
                let mut rooms = state.rooms.lock().unwrap();
                let members = rooms.entry(room.clone()).or_default();
                if !members.contains(me) {
                    members.push(me.clone());
                }
                let n = members.len();
                drop(rooms);
                self.reply(&json!({"t": "joined_room", "room": room, "members": n}));
            }
            (Some("room_send"), Some(me)) => {
                let room = s("room");
                let rooms = state.rooms.lock().unwrap();
                let Some(members) = rooms.get(&room).filter(|m| m.contains(me)) else {
                    drop(rooms);
                    return self.reply(&json!({"t": "error", "msg": "join a room first"}));
                };
                let d = json!({"t": "room_deliver", "room": room, "from": me, "ct": v["ct"]}).to_string();
                let addrs = state.addrs.lock().unwrap();
                for m in members.iter().filter(|m| *m != me) {
                    if let Some(out) = addrs.get(m) {
                        let _ = out.send(d.clone());
                    }
                }
            }
            _ => self.reply(&json!({"t": "error", "msg": "unknown message type"})),
        }
    }
}

/// Starts the fake relay; `refuse_every` refuses every n-th send.
pub(crate) async fn start(refuse_every: Option<u64>) -> FakeRelay {
    let state = Arc::new(State { refuse_every, ..State::default() });
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ws = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let relay = FakeRelay {
        tcp: tcp.local_addr().unwrap(),
        ws: ws.local_addr().unwrap(),
        udp: udp.local_addr().unwrap(),
    };

    let st = state.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = tcp.accept().await {
            let st = st.clone();
            tokio::spawn(async move {
                let _ = sock.set_nodelay(true);
                let (mut rd, mut wr) = sock.into_split();
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                tokio::spawn(async move {
                    while let Some(m) = rx.recv().await {
                        let mut f = (m.len() as u32).to_be_bytes().to_vec();
                        f.extend_from_slice(m.as_bytes());
                        if wr.write_all(&f).await.is_err() {
                            break;
                        }
                    }
                });
                let mut session = Session { addr: None, out: tx };
                loop {
                    let mut len = [0u8; 4];
                    if rd.read_exact(&mut len).await.is_err() {
                        break;
                    }
                    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                    if rd.read_exact(&mut body).await.is_err() {
                        break;
                    }
                    session.handle(&st, &String::from_utf8_lossy(&body));
                }
                session.close(&st);
            });
        }
    });

    let st = state.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = ws.accept().await {
            let st = st.clone();
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(sock).await else { return };
                let (mut sink, mut stream) = ws.split();
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                tokio::spawn(async move {
                    while let Some(m) = rx.recv().await {
                        if sink.send(Message::text(m)).await.is_err() {
                            break;
                        }
                    }
                });
                let mut session = Session { addr: None, out: tx };
                while let Some(Ok(msg)) = stream.next().await {
                    match msg {
                        Message::Text(t) => session.handle(&st, t.as_str()),
                        Message::Close(_) => break,
                        _ => {}
                    }
                }
                session.close(&st);
            });
        }
    });

    let udp = Arc::new(udp);
    tokio::spawn(async move {
        let mut sessions: HashMap<SocketAddr, Session> = HashMap::new();
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = udp.recv_from(&mut buf).await {
            let session = sessions.entry(from).or_insert_with(|| {
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                let sock = udp.clone();
                tokio::spawn(async move {
                    while let Some(m) = rx.recv().await {
                        let _ = sock.send_to(m.as_bytes(), from).await;
                    }
                });
                Session { addr: None, out: tx }
            });
            session.handle(&state, &String::from_utf8_lossy(&buf[..n]));
        }
    });
    relay
}
