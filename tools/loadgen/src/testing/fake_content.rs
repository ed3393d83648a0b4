//! A small content router after docs/content.md: a WebSocket connection listens on its URL path
//! (`/key=value/…`, every segment must equal a top-level field of the message, compared as
//! text), and every JSON text message any connection sends reaches every other connection
//! whose path it matches.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

struct Listener {
    id: u64,
    segments: Vec<(String, String)>,
    out: mpsc::UnboundedSender<String>,
}

fn matches(segments: &[(String, String)], msg: &Value) -> bool {
    segments.iter().all(|(k, v)| match &msg[k.as_str()] {
        Value::String(s) => s == v,
        Value::Null => false,
        other => serde_json::to_string(other).is_ok_and(|text| text == *v),
    })
}

/// Starts the router, serving paths under `prefix` (e.g. `/c`); returns its address.
pub(crate) async fn start(prefix: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listeners: Arc<Mutex<Vec<Listener>>> = Arc::default();
    tokio::spawn(async move {
        let mut next_id = 0;
        while let Ok((sock, _)) = listener.accept().await {
            next_id += 1;
            let (id, listeners) = (next_id, listeners.clone());
            tokio::spawn(async move {
                let mut path = String::new();
                // The signature is tungstenite's callback's, large error type and all.
                #[allow(clippy::result_large_err)]
                let capture = |req: &Request, resp: Response| {
                    path = req.uri().path().to_owned();
                    Ok(resp)
                };
                let Ok(ws) = tokio_tungstenite::accept_hdr_async(sock, capture).await else { return };
                let Some(path) = path.strip_prefix(prefix) else { return };
                let segments = path
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        s.split_once('=').map_or((s.to_owned(), String::new()), |(k, v)| (k.into(), v.into()))
                    })
                    .collect();
                let (mut sink, mut stream) = ws.split();
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                listeners.lock().unwrap().push(Listener { id, segments, out: tx });
                tokio::spawn(async move {
                    while let Some(m) = rx.recv().await {
                        if sink.send(Message::text(m)).await.is_err() {
                            break;
                        }
                    }
                });
                while let Some(Ok(Message::Text(t))) = stream.next().await {
                    let Ok(v) = serde_json::from_str::<Value>(t.as_str()) else { continue };
                    for l in
                        listeners.lock().unwrap().iter().filter(|l| l.id != id && matches(&l.segments, &v))
                    {
                        let _ = l.out.send(t.as_str().to_owned());
                    }
                }
                listeners.lock().unwrap().retain(|l| l.id != id);
            });
        }
    });
    addr
}
