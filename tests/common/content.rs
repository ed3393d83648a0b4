//! A server with one `http` listener, content-routing WebSocket clients over tokio-tungstenite,
//! the server's own token keys for forging credentials, and a raw HTTP/1.1 request helper.
//!
//! Every wait is bounded (`WAIT`), and tests wait for events, never for time to pass.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use mesgd::Server;
use mesgd::config::Config;
use mesgd::content::ContentStats;
use mesgd_providers::builtin::{Store, UserDirectory, config_db_path};
use mesgd_providers::tokens::{KeyStore, Pairs, keys_dir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// The longest any single expected event may take.
pub const WAIT: Duration = Duration::from_secs(10);

/// Awaits `fut` for at most [`WAIT`], panicking with `what` on timeout.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// A running server with an `http` listener named "http".
pub struct ContentServer {
    pub server: Option<Server>,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
}

/// How an upgrade carries its token.
#[derive(Clone, Copy, Debug)]
pub enum Carrier<'a> {
    /// No credential at all.
    None,
    /// `Authorization: Bearer T`.
    Bearer(&'a str),
    /// `Authorization: Basic base64(T)`.
    Basic(&'a str),
    /// `Sec-WebSocket-Protocol: json, T`.
    Subprotocol(&'a str),
    /// `?token=T`.
    Query(&'a str),
}

/// A refused upgrade: the HTTP status and body.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub body: String,
    pub www_authenticate: Option<String>,
}

/// An open content connection.
pub struct Client {
    pub ws: WebSocketStream<TcpStream>,
    /// The subprotocol the server answered with, if any.
    pub protocol: Option<String>,
}

impl ContentServer {
    /// Starts a server whose config is storage, the listener, and `extra` (TOML) verbatim.
    /// Failed logins are not slowed down unless `extra` has an `[auth.failed_login]` table.
    pub async fn start(extra: &str) -> ContentServer {
        // Log as the binary does (captured per test, shown when one fails): a log line's
        // fields are evaluated only when it is enabled, and they must be safe to evaluate.
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().expect("temp dir");
        let guard = if extra.contains("[auth.failed_login]") {
            ""
        } else {
            "[auth.failed_login]\nmax_failures = 0\n"
        };
        let text = format!(
            "[storage]\ndir = {:?}\n[mqtt]\nsys_interval = 0\n{guard}[[listeners]]\nname = \"http\"\nkind = \"http\"\nbind = \"127.0.0.1:0\"\n{extra}",
            dir.path().join("data").display().to_string()
        );
        let config = Config::from_toml(&text, None).expect("test config");
        let server = Server::start(config).await.expect("server starts");
        let addr = server.local_addr("http").expect("listener");
        ContentServer { server: Some(server), addr, dir }
    }

    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's builtin store, opened as another process (the command line) would.
    pub fn store(&self) -> Store {
        Store::open(&config_db_path(&self.storage())).expect("store")
    }

    /// The server's builtin user directory (the store's copy it runs on).
    pub fn directory(&self) -> Arc<UserDirectory> {
        let server = self.server.as_ref().expect("running");
        server.context().services().get::<UserDirectory>().expect("the builtin store is open")
    }

    /// The server's key store (made at start), opened again as `mesgd forge` would.
    pub fn keys(&self) -> KeyStore {
        KeyStore::open(&keys_dir(&self.storage()), std::time::SystemTime::now()).expect("key store")
    }

    /// A claim token for `words` (`k v k v…`), as `mesgd forge` makes it.
    pub fn forge(&self, words: &[&str]) -> String {
        let pairs = Pairs::from_words(words).expect("pairs");
        mesgd_providers::tokens::forge_claim(&self.keys(), &pairs, std::time::SystemTime::now())
            .expect("forge")
    }

    pub fn stats(&self) -> &ContentStats {
        self.server.as_ref().expect("running").context().content_stats()
    }

    /// A counter's value.
    pub fn count(&self, pick: impl FnOnce(&ContentStats) -> &std::sync::atomic::AtomicU64) -> u64 {
        ContentStats::get(pick(self.stats()))
    }

    /// Upgrades at `path` (raw: as it goes on the request line) with `carrier`.
    pub async fn connect(&self, path: &str, carrier: Carrier<'_>) -> Result<Client, Refused> {
        let path = match carrier {
            Carrier::Query(t) => {
                let sep = if path.contains('?') { '&' } else { '?' };
                format!("{path}{sep}token={t}")
            }
            _ => path.to_owned(),
        };
        let mut request = format!("ws://{}{path}", self.addr).into_client_request().expect("request");
        let h = request.headers_mut();
        match carrier {
            Carrier::Bearer(t) => {
                h.insert("authorization", HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
            }
            Carrier::Basic(t) => {
                let b = base64::engine::general_purpose::STANDARD.encode(t);
                h.insert("authorization", HeaderValue::from_str(&format!("Basic {b}")).unwrap());
            }
            Carrier::Subprotocol(t) => {
                h.insert("sec-websocket-protocol", HeaderValue::from_str(&format!("json, {t}")).unwrap());
            }
            Carrier::None | Carrier::Query(_) => {}
        }
        let stream = TcpStream::connect(self.addr).await.expect("tcp connect");
        match within("the upgrade", tokio_tungstenite::client_async(request, stream)).await {
            Ok((ws, response)) => {
                let protocol = response
                    .headers()
                    .get("sec-websocket-protocol")
                    .map(|v| v.to_str().expect("ascii").to_owned());
                Ok(Client { ws, protocol })
            }
            Err(WsError::Http(response)) => Err(Refused {
                status: response.status().as_u16(),
                body: String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned(),
                www_authenticate: response
                    .headers()
                    .get("www-authenticate")
                    .map(|v| v.to_str().unwrap().to_owned()),
            }),
            Err(e) => panic!("upgrade at {path} failed without an HTTP answer: {e}"),
        }
    }

    /// Upgrades at `path` with authentication off or on a public path.
    pub async fn open(&self, path: &str) -> Client {
        match self.connect(path, Carrier::None).await {
            Ok(c) => c,
            Err(r) => panic!("upgrade at {path} refused: {r:?}"),
        }
    }

    /// Sends a raw HTTP/1.1 request and returns the status and body.
    pub async fn http(&self, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
        let (status, _, body) = self.http_with_headers(method, path, headers, body).await;
        (status, body)
    }

    /// Sends a raw HTTP/1.1 request and returns the status, the response's header lines
    /// (lower-cased names) and the body.
    pub async fn http_with_headers(
        &self,
        method: &str,
        path: &str,
        headers: &str,
        body: &str,
    ) -> (u16, Vec<(String, String)>, String) {
        let mut stream = TcpStream::connect(self.addr).await.expect("tcp connect");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n{headers}\r\n{body}",
            self.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = Vec::new();
        within("the HTTP response", stream.read_to_end(&mut response)).await.expect("read");
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status line");
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let headers = head
            .split("\r\n")
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        (status, headers, body.to_owned())
    }

    pub async fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }
}

/// How a connection ended, as its peer saw it.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// A close frame with this code and reason.
    Closed(CloseCode, String),
    /// The stream ended without one (or failed).
    Gone,
}

impl Client {
    pub async fn send(&mut self, text: &str) {
        within("a send", self.ws.send(Message::text(text))).await.expect("send");
    }

    pub async fn send_binary(&mut self, bytes: &[u8]) {
        within("a send", self.ws.send(Message::binary(bytes.to_vec()))).await.expect("send");
    }

    /// The next text message; panics on anything else.
    pub async fn recv(&mut self) -> String {
        let ws = &mut self.ws;
        within("a message", async {
            loop {
                match ws.next().await {
                    Some(Ok(Message::Text(t))) => return t.to_string(),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    other => panic!("expected a text message, got {other:?}"),
                }
            }
        })
        .await
    }

    /// The next `n` text messages.
    pub async fn recv_n(&mut self, n: usize) -> Vec<String> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.recv().await);
        }
        out
    }

    /// Reads until the connection ends, skipping messages; how it ended.
    pub async fn ended(&mut self) -> Ended {
        let ws = &mut self.ws;
        within("the end of the connection", async {
            loop {
                match ws.next().await {
                    Some(Ok(Message::Close(Some(frame)))) => {
                        return Ended::Closed(frame.code, frame.reason.to_string());
                    }
                    Some(Ok(Message::Close(None))) | None | Some(Err(_)) => return Ended::Gone,
                    Some(Ok(_)) => continue,
                }
            }
        })
        .await
    }

    pub async fn close(mut self) {
        let _ = within("a close", self.ws.close(None)).await;
        while let Ok(Some(Ok(_))) = tokio::time::timeout(WAIT, self.ws.next()).await {}
    }
}
