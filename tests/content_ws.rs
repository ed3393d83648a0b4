//! Content routing end to end: tokio-tungstenite clients against a real server's `http`
//! listener. Routing by JSON path (objects, arrays, URL-encoded paths, no echo), refused
//! frames (invalid JSON, scalars, binary, oversized) that end only their own connection,
//! bounded outboxes that drop and count, and shutdown.

#[path = "common/content.rs"]
mod content;

use content::{Carrier, Client, ContentServer, Ended};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const OPEN: &str = "[content]\ndisable_auth = true\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listener_receives_what_its_path_matches_in_order() {
    let s = ContentServer::start(OPEN).await;
    let mut chat = s.open("/kind=chat").await;
    let mut lobby = s.open("/kind=chat/room=lobby").await;
    let mut news = s.open("/kind=news").await;
    let mut encoded_news = s.open("/kind%3Dnews").await;
    let mut first_foo = s.open("/0=foo").await;
    let mut spaced = s.open("/room=the%20lobby").await;
    let mut all = s.open("/").await;
    let mut sender = s.open("/role=sender").await;

    let m1 = r#"{"kind":"chat","room":"lobby","text":"hi"}"#;
    let m2 = r#"{"kind":"news"}"#;
    let m3 = r#"["foo","bar"]"#;
    let m4 = r#"["bar","foo"]"#;
    let m5 = r#"{"room":"the lobby"}"#;
    let m6 = r#"{ "room" : "kitchen", "kind" : "chat" }"#;
    // One last message for each listener, matching it (and maybe others): what a listener got
    // before its own marker is everything it will get from this sender.
    let end_lobby = r#"{"kind":"chat","room":"lobby","end":"lobby"}"#;
    let end_chat = r#"{"kind":"chat","end":"chat"}"#;
    let end_news = r#"{"kind":"news","end":"news"}"#;
    let end_foo = r#"["foo","end"]"#;
    let end_spaced = r#"{"room":"the lobby","end":"spaced"}"#;
    let sent = [m1, m2, m3, m4, m5, m6, end_lobby, end_chat, end_news, end_foo, end_spaced];
    for m in sent {
        sender.send(m).await;
    }

    assert_eq!(chat.recv_n(4).await, [m1, m6, end_lobby, end_chat]);
    assert_eq!(lobby.recv_n(2).await, [m1, end_lobby]);
    assert_eq!(news.recv_n(2).await, [m2, end_news]);
    assert_eq!(encoded_news.recv_n(2).await, [m2, end_news], "%3D is `=` once decoded");
    assert_eq!(first_foo.recv_n(2).await, [m3, end_foo], "/0=foo is the array's first element");
    assert_eq!(spaced.recv_n(2).await, [m5, end_spaced], "the listener path is URL-decoded");
    assert_eq!(all.recv_n(sent.len()).await, sent, "`/` matches everything, as sent, in order");
    assert_eq!(s.count(|c| &c.messages_in), sent.len() as u64);
    assert_eq!(s.count(|c| &c.matches), 4 + 2 + 2 + 2 + 2 + 2 + sent.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_is_not_echoed_its_own_message() {
    let s = ContentServer::start(OPEN).await;
    let mut a = s.open("/room=lobby").await;
    let mut b = s.open("/room=lobby").await;
    a.send(r#"{"room":"lobby","from":"a"}"#).await;
    b.send(r#"{"room":"lobby","from":"b"}"#).await;
    assert_eq!(b.recv().await, r#"{"room":"lobby","from":"a"}"#);
    // `a` matched its own first message; what it gets first is b's.
    assert_eq!(a.recv().await, r#"{"room":"lobby","from":"b"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_delivers_to_the_sender_too() {
    let s = ContentServer::start("[content]\ndisable_auth = true\necho = true\n").await;
    let mut a = s.open("/room=lobby").await;
    a.send(r#"{"room":"lobby","n":1}"#).await;
    assert_eq!(a.recv().await, r#"{"room":"lobby","n":1}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_listener_is_unregistered_before_its_close_is_answered() {
    let s = ContentServer::start(OPEN).await;
    let gone = s.open("/k").await;
    let mut stays = s.open("/k").await;
    let mut sender = s.open("/sender").await;
    let ctx = s.server.as_ref().unwrap().context();
    assert_eq!(ctx.content_listeners(), 3, "registered once the 101 is received");
    gone.close().await;
    assert_eq!(ctx.content_listeners(), 2);
    sender.send(r#"{"k":1}"#).await;
    assert_eq!(stays.recv().await, r#"{"k":1}"#);
    assert_eq!(s.count(|c| &c.matches), 1, "the closed listener was not matched");
}

/// Sends `bad` from its own connection and checks how that connection ends, and that a
/// listener and another sender go on as before.
async fn refused_frame_ends_only_its_connection(
    s: &ContentServer,
    bad: impl AsyncFnOnce(&mut Client),
    code: CloseCode,
    reason: &str,
) {
    let mut listener = s.open("/k").await;
    let mut good = s.open("/good").await;
    let mut culprit = s.open("/bad").await;
    good.send(r#"{"k":"before"}"#).await;
    assert_eq!(listener.recv().await, r#"{"k":"before"}"#);
    let refused = s.count(|c| &c.messages_refused);
    bad(&mut culprit).await;
    match culprit.ended().await {
        Ended::Closed(c, r) => {
            assert_eq!(c, code, "{r}");
            assert!(r.contains(reason), "close reason {r:?} should say {reason:?}");
        }
        Ended::Gone => panic!("closed without a close frame; expected {code:?} {reason:?}"),
    }
    assert_eq!(s.count(|c| &c.messages_refused), refused + 1);
    good.send(r#"{"k":"after"}"#).await;
    assert_eq!(listener.recv().await, r#"{"k":"after"}"#, "nothing of the bad frame reached anyone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_json_and_scalars_are_refused_with_1007() {
    let s = ContentServer::start(OPEN).await;
    for (text, words) in [
        (r#"{"k":"x""#, "invalid JSON"),
        (r#"{"k" "x"}"#, "invalid JSON"),
        ("hello", "invalid JSON"),
        ("5", "a JSON number is not a message"),
        (r#""k""#, "a JSON string is not a message"),
        ("true", "is not a message: send a JSON object or array"),
    ] {
        let send = async |c: &mut Client| c.send(text).await;
        refused_frame_ends_only_its_connection(&s, send, CloseCode::Invalid, words).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_frames_are_refused_with_1003() {
    let s = ContentServer::start(OPEN).await;
    let send = async |c: &mut Client| c.send_binary(br#"{"k":1}"#).await;
    refused_frame_ends_only_its_connection(&s, send, CloseCode::Unsupported, "text frame").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_refused_with_1009() {
    let s = ContentServer::start("[content]\ndisable_auth = true\nmax_message_bytes = 1024\n").await;
    let big = format!(r#"{{"k":"{}"}}"#, "x".repeat(2000));
    let send = async |c: &mut Client| c.send(&big).await;
    refused_frame_ends_only_its_connection(&s, send, CloseCode::Size, "over the 1024-byte limit").await;
    // Exactly at the limit is fine.
    let mut listener = s.open("/k").await;
    let mut sender = s.open("/s").await;
    let fits = format!(r#"{{"k":"{}"}}"#, "x".repeat(1024 - 8));
    assert_eq!(fits.len(), 1024);
    sender.send(&fits).await;
    assert_eq!(listener.recv().await, fits);
}

/// A listener that never reads: its queue passes the cap once the socket buffers are full,
/// the messages are dropped and counted, it is disconnected as too slow, and a listener that
/// reads gets every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_does_not_read_is_dropped_and_counted_without_slowing_others() {
    let s = ContentServer::start(
        "[content]\ndisable_auth = true\nmax_message_bytes = 65536\nmax_queued_messages = 8\nmax_queued_bytes = 262144\n",
    )
    .await;
    let mut slow = s.open("/k").await;
    let mut reader = s.open("/k").await;
    let mut sender = s.open("/s").await;
    let body = "x".repeat(60_000);
    // In step with the reading listener, so that only the one that does not read falls behind.
    // Bounded: 2,000 messages of 60 kB (120 MB) is far more than any socket buffer holds.
    let mut sent = 0u64;
    while s.count(|c| &c.slow_disconnects) == 0 {
        assert!(sent < 2000, "the slow listener was never disconnected");
        let m = format!(r#"{{"k":{sent},"b":"{body}"}}"#);
        sender.send(&m).await;
        assert!(reader.recv().await == m, "the reading listener gets every message, in order");
        sent += 1;
    }
    sender.send(r#"{"k":"x","end":true}"#).await;
    assert_eq!(reader.recv().await, r#"{"k":"x","end":true}"#);
    assert_eq!(s.count(|c| &c.slow_disconnects), 1);
    assert!(s.count(|c| &c.dropped) >= 1, "the overflowing message was counted as dropped");
    // The slow listener sees what was written before the overflow, then the end.
    match slow.ended().await {
        Ended::Closed(code, reason) => {
            assert_eq!(code, CloseCode::Policy);
            assert!(reason.starts_with("too slow"), "{reason}");
        }
        // Its socket was full: the close frame may not have fitted within the grace period.
        Ended::Gone => {}
    }
    let ctx = s.server.as_ref().unwrap().context();
    assert_eq!(ctx.content_listeners(), 2, "the slow listener was unregistered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_content_connections_with_1001() {
    let mut s = ContentServer::start(OPEN).await;
    let mut a = s.open("/k").await;
    let stop = s.stop();
    let ended = a.ended();
    let ((), ended) = tokio::join!(stop, ended);
    assert_eq!(ended, Ended::Closed(CloseCode::Away, "server shutting down".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_at_invalid_or_reserved_paths_and_plain_requests_are_refused() {
    let s = ContentServer::start(OPEN).await;
    let r = s.connect("/a=b=c", Carrier::None).await.err().expect("refused");
    assert_eq!(r.status, 400);
    assert!(r.body.contains("a=b=c"), "names the segment: {}", r.body);
    let r = s.connect("/room=lo*bby", Carrier::None).await.err().expect("refused");
    assert_eq!(r.status, 400, "{}", r.body);
    for reserved in ["/api/x", "/auth", "/auth/x"] {
        let r = s.connect(reserved, Carrier::None).await.err().expect("refused");
        assert_eq!(r.status, 404, "{reserved}: {}", r.body);
    }
    // `/account` is the accounts front end's: it wants a login session, and is never a listener.
    let r = s.connect("/account", Carrier::None).await.err().expect("not upgraded");
    assert_eq!(r.status, 401, "{}", r.body);
    // A reserved path another front end serves answers as that front end: /metrics is the
    // metrics page, never a content listener.
    let r = s.connect("/metrics", Carrier::None).await.err().expect("not upgraded");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.starts_with("# HELP mesgd_"), "{}", r.body);
    // ... and every /console path is the web console's page.
    let r = s.connect("/console/x", Carrier::None).await.err().expect("not upgraded");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.starts_with("<!doctype html>"), "{}", r.body);
    // A path that only starts like a reserved word is a content path.
    let mut author = s.open("/author=ann").await;
    let mut sender = s.open("/s").await;
    sender.send(r#"{"author":"ann"}"#).await;
    assert_eq!(author.recv().await, r#"{"author":"ann"}"#);
    let (status, body) = s.http("GET", "/kind=chat", "", "").await;
    assert_eq!(status, 426, "{body}");
}
