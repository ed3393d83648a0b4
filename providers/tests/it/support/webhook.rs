//! A real HTTP/1.1 webhook on 127.0.0.1 for the http provider's tests and benchmark.
//!
//! Each request's JSON body and headers are recorded and announced on a channel (so a test can
//! await "the request arrived" instead of guessing), then the test's handler chooses the answer.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How the webhook answers one request.
#[allow(dead_code)] // each user of this module picks the answers it needs
pub(crate) enum Answer {
    /// This status and body.
    Reply(u16, String),
    /// This status with a `Location` header.
    Redirect(u16, String),
    /// Never answer (a webhook that hangs).
    Hang,
}

/// One request as the webhook saw it.
#[derive(Clone, Debug)]
#[allow(dead_code)]
pub(crate) struct Seen {
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: serde_json::Value,
}

impl Seen {
    #[allow(dead_code)]
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

pub(crate) type Handler = Arc<dyn Fn(&serde_json::Value) -> Answer + Send + Sync>;

pub(crate) struct Webhook {
    pub(crate) addr: SocketAddr,
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    #[allow(dead_code)] // the benchmark never awaits arrivals
    pub(crate) arrivals: mpsc::UnboundedReceiver<Seen>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Webhook {
    /// Starts a webhook on an ephemeral port.
    pub(crate) async fn start(handler: Handler) -> Webhook {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (announce, arrivals) = mpsc::unbounded_channel();
        let server = {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else { return };
                    let (handler, seen, announce) =
                        (Arc::clone(&handler), Arc::clone(&seen), announce.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                            let (handler, seen, announce) =
                                (Arc::clone(&handler), Arc::clone(&seen), announce.clone());
                            async move { Ok::<_, Infallible>(respond(request, &*handler, &seen, &announce).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        Webhook { addr, seen, arrivals, server }
    }

    /// `http://127.0.0.1:<port><path>`
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// How many requests arrived so far.
    #[allow(dead_code)]
    pub(crate) fn count(&self) -> usize {
        self.seen.lock().expect("not poisoned").len()
    }
}

async fn respond(
    request: Request<hyper::body::Incoming>,
    handler: &(dyn Fn(&serde_json::Value) -> Answer + Send + Sync),
    seen: &Mutex<Vec<Seen>>,
    announce: &mpsc::UnboundedSender<Seen>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let headers = request
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("<binary>").to_owned()))
        .collect();
    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let record = Seen { path, headers, body };
    seen.lock().expect("not poisoned").push(record.clone());
    let _ = announce.send(record.clone());
    match handler(&record.body) {
        Answer::Reply(status, body) => {
            Response::builder().status(status).body(Full::new(Bytes::from(body))).expect("valid response")
        }
        Answer::Redirect(status, location) => Response::builder()
            .status(status)
            .header("location", location)
            .body(Full::new(Bytes::new()))
            .expect("valid response"),
        Answer::Hang => std::future::pending().await,
    }
}
