//! One content connection, from the upgrade to the close.
//!
//! The task reads and writes at once, as two futures over the two halves of the WebSocket:
//! the reader scans each text frame and hands it to the registry (which queues it for every
//! matching listener, never waiting); the writer takes everything queued for this connection
//! and writes it as one batch, with one flush. Whichever ends first ends the connection:
//!
//! | what happened | close code and reason |
//! |---|---|
//! | the peer closed | its own code, echoed (after the listener is removed) |
//! | invalid JSON, a JSON scalar, invalid UTF-8 | 1007, the scanner's message ("invalid JSON at byte 3: …") |
//! | a binary frame | 1003, "binary frames are not accepted: send each JSON message as a text frame" |
//! | a message over `max_message_bytes` | 1009, "message over the N-byte limit" |
//! | the listener's queue passed its cap | 1008, "too slow: …" (counted in `slow_disconnects`) |
//! | the server shuts down | 1001, "server shutting down" |
//! | the account of a grant or login session is disabled or deleted, or the token expired | 1008, "the account is disabled" (…) |
//!
//! A refused frame reaches no one. The listener is removed from the registry before the close
//! frame goes out, so a peer that sees its close acknowledged is no longer registered. Sending
//! the close and waiting for the peer's reply are bounded by [`CLOSE_GRACE`].

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, Stream, StreamExt};
use mesgd_core::content::{MatcherFull, Message as Json};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

use super::grant::Bound;
use super::outbox::{Ended, Outbox};
use super::registry::{Entry, Role};
use super::stats;
use crate::context::ServerContext;
use crate::http::HttpConnection;
use crate::http::ws::WebSocket;

/// How long sending a close frame, and then waiting for the peer's, may take.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The longest close reason a close frame can carry (125 bytes of payload less the code).
const MAX_REASON: usize = 123;

/// Why a connection ends.
#[derive(Debug)]
enum End {
    /// The peer sent a close frame.
    PeerClosed,
    /// The peer went away without one, or the socket failed.
    Gone(Option<WsError>),
    /// We close it, with this code and reason.
    Close(CloseCode, String),
    /// We close it, and the socket is in no state to be read any more (an oversized frame).
    CloseNow(CloseCode, String),
}

/// A connection's place in the registry, taken before the upgrade is answered (so a client
/// that has its `101` is already a listener) and given back when this is dropped: at the end
/// of [`run`], or with the upgrade task if the upgrade never completes.
pub(crate) struct Registered {
    ctx: Arc<ServerContext>,
    entry: Entry,
    /// The live checks of a connection that speaks for an account.
    bound: Option<Bound>,
}

impl Registered {
    /// Registers a connection of `role`; refused when the registry is full.
    pub(crate) fn open(
        ctx: &Arc<ServerContext>,
        role: Role,
        bound: Option<Bound>,
    ) -> Result<Registered, MatcherFull> {
        let entry = ctx.content.registry.open(role)?;
        Ok(Registered { ctx: ctx.clone(), entry, bound })
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.ctx.content.registry.close(&self.entry);
    }
}

/// Runs a content connection until it ends.
pub(crate) async fn run(socket: WebSocket, mut registered: Registered, connection: HttpConnection) {
    let ctx = registered.ctx.clone();
    let mut bound = registered.bound.take();
    let content = &ctx.content;
    let mut stopping = content.stopping();
    let (mut sink, mut stream) = socket.split();
    let end = if *stopping.borrow_and_update() {
        End::Close(CloseCode::Away, "server shutting down".into())
    } else {
        let entry = &registered.entry;
        let mut scratch = Vec::new();
        // The account's standing is watched by a copy of the checks; the reader keeps its own.
        let watched = bound.as_ref().map(Bound::watcher);
        let account_ended = async {
            match &watched {
                Some(w) => w.ended().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            end = read_loop(&mut stream, &ctx, entry, bound.as_mut(), &mut scratch) => end,
            end = write_loop(&mut sink, &entry.outbox, &ctx) => end,
            reason = account_ended => End::Close(CloseCode::Policy, reason.into()),
            _ = stopping.changed() => End::Close(CloseCode::Away, "server shutting down".into()),
        }
    };
    // Removed before anything more is written: a peer whose close is acknowledged is gone.
    drop(registered);
    let peer = connection.peer;
    match end {
        End::PeerClosed => {
            tracing::debug!(%peer, "content connection closed by the peer");
            // Writes the reply tungstenite queued to the peer's close.
            let _ = tokio::time::timeout(CLOSE_GRACE, sink.close()).await;
        }
        End::Gone(error) => tracing::debug!(%peer, ?error, "content connection lost"),
        End::Close(code, reason) => {
            tracing::info!(%peer, code = u16::from(code), %reason, "closing a content connection");
            if close(&mut sink, code, reason).await {
                // The peer's answering close (or the end of the stream); anything else is dropped.
                let _ =
                    tokio::time::timeout(CLOSE_GRACE, async { while stream.next().await.is_some() {} }).await;
            }
        }
        End::CloseNow(code, reason) => {
            tracing::info!(%peer, code = u16::from(code), %reason, "closing a content connection");
            close(&mut sink, code, reason).await;
        }
    }
    drop(connection);
}

/// Sends a close frame, within [`CLOSE_GRACE`]; whether it went out.
async fn close<S>(sink: &mut S, code: CloseCode, mut reason: String) -> bool
where
    S: futures_util::Sink<Message> + Unpin,
{
    if reason.len() > MAX_REASON {
        let mut cut = MAX_REASON;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
    }
    let frame = CloseFrame { code, reason: Utf8Bytes::from(reason) };
    matches!(tokio::time::timeout(CLOSE_GRACE, sink.send(Message::Close(Some(frame)))).await, Ok(Ok(())))
}

/// Reads frames and routes each JSON message, until the connection must end.
async fn read_loop<S>(
    stream: &mut S,
    ctx: &ServerContext,
    entry: &Entry,
    mut bound: Option<&mut Bound>,
    scratch: &mut Vec<u64>,
) -> End
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let content = &ctx.content;
    loop {
        let frame = match stream.next().await {
            Some(Ok(frame)) => frame,
            None | Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => return End::Gone(None),
            Some(Err(e)) => {
                stats::add(&content.stats().messages_refused, 1);
                return refused_frame(e, content.config.max_message_bytes);
            }
        };
        match frame {
            Message::Text(text) => match Json::scan(text.as_bytes()) {
                Ok(message) => {
                    // Checked at every message, against the state after every change so far.
                    let reach = match bound.as_deref_mut() {
                        Some(b) => match b.reach().await {
                            Ok(patterns) => patterns,
                            Err(reason) => return End::Close(CloseCode::Policy, reason.into()),
                        },
                        None => &[],
                    };
                    content.registry.deliver(entry, reach, &message, &text, scratch);
                }
                Err(e) => {
                    stats::add(&content.stats().messages_refused, 1);
                    return End::Close(CloseCode::Invalid, e.to_string());
                }
            },
            Message::Binary(_) => {
                stats::add(&content.stats().messages_refused, 1);
                return End::Close(
                    CloseCode::Unsupported,
                    "binary frames are not accepted: send each JSON message as a text frame".into(),
                );
            }
            Message::Close(_) => return End::PeerClosed,
            // Pings are answered by the WebSocket layer.
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }
}

/// How a frame the WebSocket layer refused ends the connection.
fn refused_frame(error: WsError, max: usize) -> End {
    match error {
        WsError::Capacity(_) => End::CloseNow(CloseCode::Size, format!("message over the {max}-byte limit")),
        WsError::Utf8(_) => End::CloseNow(CloseCode::Invalid, "a text frame that is not UTF-8".into()),
        WsError::Protocol(e) => End::CloseNow(CloseCode::Protocol, format!("WebSocket protocol error: {e}")),
        other => End::Gone(Some(other)),
    }
}

/// Writes what is queued for this connection, batch by batch, until it must end.
async fn write_loop<S>(sink: &mut S, outbox: &Outbox, ctx: &ServerContext) -> End
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    let content = &ctx.content;
    let mut batch = VecDeque::new();
    let slow = || {
        let c = &content.config;
        End::CloseNow(
            CloseCode::Policy,
            format!(
                "too slow: more than {} messages or {} bytes waiting to be read",
                c.max_queued_messages, c.max_queued_bytes
            ),
        )
    };
    loop {
        match outbox.take(&mut batch).await {
            Ok(()) => {}
            Err(Ended::Overflowed) => return slow(),
            Err(Ended::Closed) => return End::Gone(None),
        }
        let n = batch.len() as u64;
        for text in batch.drain(..) {
            match unless_overflowed(outbox, sink.feed(Message::Text(text))).await {
                Some(Ok(())) => {}
                Some(Err(e)) => return End::Gone(Some(e)),
                None => return slow(),
            }
        }
        match unless_overflowed(outbox, sink.flush()).await {
            Some(Ok(())) => {}
            Some(Err(e)) => return End::Gone(Some(e)),
            None => return slow(),
        }
        stats::add(&content.stats().messages_out, n);
    }
}

/// Runs `write` unless the outbox overflows first (a listener that does not read blocks the
/// write for good; the overflow is what ends it).
async fn unless_overflowed<F: Future>(outbox: &Outbox, write: F) -> Option<F::Output> {
    let mut write = std::pin::pin!(write);
    loop {
        tokio::select! {
            biased;
            done = &mut write => return Some(done),
            () = outbox.woken() => {
                if outbox.overflowed() {
                    return None;
                }
            }
        }
    }
}
