//! The http provider against a real local webhook (hyper on 127.0.0.1:0).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mesgd_core::acl::Permission::Read;
use mesgd_core::auth::{Authenticator, Chain, DenyReason, Outcome, ProviderError, Verdict};
use mesgd_providers::{BuildContext, Registry};
use serde_json::json;

use crate::support::webhook::{Answer, Handler, Webhook};
use crate::support::{allowed, decide, denied, info, next, providers, rule, within};

fn handler() -> Handler {
    Arc::new(|question: &serde_json::Value| {
        let reply = |status: u16, body: serde_json::Value| Answer::Reply(status, body.to_string());
        match question["username"].as_str() {
            Some("alice") => {
                reply(200, json!({"allow": true, "acl": [{"pattern": "a/%u/#", "permission": "read"}]}))
            }
            Some("open") => {
                reply(200, json!({"allow": true, "reason": "fields the provider does not know are ignored"}))
            }
            Some("null-acl") => reply(200, json!({"allow": true, "acl": null})),
            Some("mapped") => reply(200, json!({"allow": true, "username": "bob", "acl": []})),
            Some("refused") => reply(200, json!({"allow": false})),
            Some("unknown401") => Answer::Reply(401, String::new()),
            Some("unknown404") => Answer::Reply(404, "no such user".into()),
            Some("forbidden") => Answer::Reply(403, String::new()),
            Some("broken") => Answer::Reply(500, "oops".into()),
            Some("redirect") => Answer::Redirect(307, "/followed".into()),
            Some("garbage") => Answer::Reply(200, "<html>not json</html>".into()),
            Some("no-allow") => reply(200, json!({"acl": []})),
            Some("allow-string") => reply(200, json!({"allow": "yes"})),
            Some("bad-acl") => {
                reply(200, json!({"allow": true, "acl": [{"pattern": "a/#/b", "permission": "read"}]}))
            }
            Some("empty-username") => reply(200, json!({"allow": true, "username": ""})),
            Some("huge") => reply(200, json!({"allow": true, "padding": "x".repeat(100 * 1024)})),
            Some("slow") => Answer::Hang,
            _ => reply(200, json!({"allow": true})),
        }
    })
}

fn chain(webhook: &Webhook, extra: &str, allow_anonymous: bool) -> Chain {
    let text = format!("[[auth.providers]]\ntype = \"http\"\nurl = \"{}\"\n{extra}", webhook.url("/auth"));
    Registry::with_builtin_providers()
        .build_chain(&providers(&text), allow_anonymous, &mut BuildContext::new("/nonexistent"))
        .expect("builds")
}

fn provider(webhook: &Webhook, extra: &str) -> Arc<dyn Authenticator> {
    Arc::clone(&chain(webhook, extra, false).entries()[0].provider)
}

async fn ask(provider: &dyn Authenticator, username: &str) -> Result<Outcome, ProviderError> {
    provider.authenticate(&info(Some(username), Some(b"pw"))).await
}

#[tokio::test]
async fn answers_map_to_outcomes() {
    let webhook = Webhook::start(handler()).await;
    let http = provider(&webhook, "");

    let alice = allowed(ask(&*http, "alice").await.expect("decides"));
    assert_eq!(alice.username.as_deref(), Some("alice"));
    assert_eq!(alice.provider, "http");
    assert_eq!(alice.acl, Some(vec![rule("a/%u/#", Read)]));
    assert_eq!(allowed(ask(&*http, "open").await.expect("decides")).acl, None, "no acl = unrestricted");
    assert_eq!(allowed(ask(&*http, "null-acl").await.expect("decides")).acl, None);
    let mapped = allowed(ask(&*http, "mapped").await.expect("decides"));
    assert_eq!((mapped.username.as_deref(), mapped.acl), (Some("bob"), Some(vec![])));
    allowed(decide(&*http, &info(None, None)).await);

    for username in ["refused", "forbidden", "broken", "redirect"] {
        let denial = denied(ask(&*http, username).await.expect("decides"));
        assert_eq!(denial.reason, DenyReason::BadCredentials, "{username}");
    }
    assert_eq!(webhook.count(), 9, "the redirect was not followed");
    next(ask(&*http, "unknown401").await.expect("decides"));
    next(ask(&*http, "unknown404").await.expect("decides"));

    for username in ["garbage", "no-allow", "allow-string", "bad-acl", "empty-username", "huge"] {
        let error = ask(&*http, username).await.expect_err(username);
        assert!(matches!(error, ProviderError::Failed(_)), "{username}: {error:?}");
    }
}

#[tokio::test]
async fn the_question_carries_every_field() {
    let webhook = Webhook::start(handler()).await;
    let http = provider(&webhook, "headers = { \"x-api-key\" = \"k3y\" }");
    let with_peer =
        info(Some("alice"), Some(b"hunter2")).with_peer_addr(Some("192.0.2.7:51234".parse().expect("addr")));
    allowed(decide(&*http, &with_peer).await);
    allowed(decide(&*http, &info(None, None)).await);
    next(decide(&*http, &info(Some("unknown401"), Some(&[0, 159, 146, 150]))).await);

    let seen = webhook.seen.lock().expect("not poisoned").clone();
    assert_eq!(seen[0].path, "/auth");
    assert_eq!(seen[0].header("x-api-key"), Some("k3y"));
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    assert_eq!(
        seen[0].body,
        json!({"client_id": "c1", "username": "alice", "password": "aHVudGVyMg==", "peer_addr": "192.0.2.7:51234",
               "listener": "mqtt", "protocol": "mqtt-3.1.1"})
    );
    assert_eq!(
        seen[1].body,
        json!({"client_id": "c1", "username": null, "password": null, "peer_addr": null, "listener": "mqtt",
               "protocol": "mqtt-3.1.1"})
    );
    assert_eq!(seen[2].body["password"], "AJ+Slg==", "binary passwords are standard base64");
}

#[tokio::test]
async fn a_malformed_answer_fails_the_chain_closed() {
    let webhook = Webhook::start(handler()).await;
    let closed = chain(&webhook, "", true);
    match closed.authenticate(&info(Some("garbage"), Some(b"pw"))).await {
        Verdict::Denied(denial) => {
            assert_eq!(denial.reason, DenyReason::NotAuthorized);
            assert!(denial.message.contains("provider http failed"), "{}", denial.message);
        }
        Verdict::Allowed(identity) => panic!("admitted {identity:?}"),
    }
    let open = chain(&webhook, "on_error = \"next\"", true);
    match open.authenticate(&info(Some("garbage"), Some(b"pw"))).await {
        Verdict::Denied(denial) => {
            assert_eq!(denial.reason, DenyReason::BadCredentials, "nobody admitted the username")
        }
        Verdict::Allowed(identity) => panic!("admitted {identity:?}"),
    }
}

#[tokio::test]
async fn a_hanging_webhook_times_out() {
    let webhook = Webhook::start(handler()).await;
    let http = provider(&webhook, "timeout_ms = 300");
    let started = Instant::now();
    let error = ask(&*http, "slow").await.expect_err("no answer");
    assert!(
        matches!(error, ProviderError::Timeout(limit) if limit == Duration::from_millis(300)),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());

    let chain = chain(&webhook, "timeout_ms = 300", true);
    let started = Instant::now();
    match chain.authenticate(&info(Some("slow"), Some(b"pw"))).await {
        Verdict::Denied(denial) => assert!(denial.message.contains("timed out"), "{}", denial.message),
        Verdict::Allowed(identity) => panic!("admitted {identity:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_hanging_request_does_not_hold_up_others() {
    let mut webhook = Webhook::start(handler()).await;
    let http = provider(&webhook, "timeout_ms = 30000");
    let slow = {
        let http = Arc::clone(&http);
        tokio::spawn(async move { ask(&*http, "slow").await })
    };
    loop {
        let seen = within("the slow request to arrive", webhook.arrivals.recv()).await.expect("server alive");
        if seen.body["username"] == "slow" {
            break;
        }
    }
    let started = Instant::now();
    allowed(ask(&*http, "alice").await.expect("decides"));
    assert!(started.elapsed() < Duration::from_secs(2), "the fast request took {:?}", started.elapsed());
    assert!(!slow.is_finished(), "the slow request is still waiting for its answer");
    slow.abort();
}

#[tokio::test]
async fn answers_are_cached_for_their_ttl() {
    let webhook = Webhook::start(handler()).await;

    let uncached = provider(&webhook, "");
    allowed(ask(&*uncached, "alice").await.expect("decides"));
    allowed(ask(&*uncached, "alice").await.expect("decides"));
    assert_eq!(webhook.count(), 2, "no cache unless configured");

    let cached = provider(&webhook, "cache_ttl_ms = 60000");
    let alice = info(Some("alice"), Some(b"pw"));
    allowed(decide(&*cached, &alice).await);
    let again = allowed(decide(&*cached, &alice).await);
    assert_eq!(again.acl, Some(vec![rule("a/%u/#", Read)]), "a cached answer keeps its ACL");
    assert_eq!(webhook.count(), 3);
    allowed(decide(&*cached, &info(Some("alice"), Some(b"other"))).await);
    allowed(decide(&*cached, &info(Some("alice"), None)).await);
    let mut other_client = alice.clone();
    other_client.client_id = "c2".into();
    assert_eq!(allowed(decide(&*cached, &other_client).await).client_id, "c2");
    assert_eq!(webhook.count(), 6, "password, absent password and client id are part of the key");

    denied(ask(&*cached, "refused").await.expect("decides"));
    denied(ask(&*cached, "refused").await.expect("decides"));
    next(ask(&*cached, "unknown401").await.expect("decides"));
    next(ask(&*cached, "unknown401").await.expect("decides"));
    assert_eq!(webhook.count(), 8, "refusals and unknowns are cached briefly");
    ask(&*cached, "garbage").await.expect_err("malformed");
    ask(&*cached, "garbage").await.expect_err("malformed");
    assert_eq!(webhook.count(), 10, "failures are never cached");

    let short = provider(&webhook, "cache_ttl_ms = 60000\ndeny_cache_ttl_ms = 100");
    denied(ask(&*short, "refused").await.expect("decides"));
    denied(ask(&*short, "refused").await.expect("decides"));
    assert_eq!(webhook.count(), 11);
    // The TTL itself is what is under test here, so time has to pass.
    tokio::time::sleep(Duration::from_millis(250)).await;
    denied(ask(&*short, "refused").await.expect("decides"));
    assert_eq!(webhook.count(), 12, "an expired refusal is asked again");
}

#[test]
fn bad_settings_are_refused() {
    let cases = [
        ("url = \"not a url\"", "`url` is not a valid URL: relative URL without a base"),
        ("url = \"ftp://127.0.0.1/x\"", "`url` must be an http:// or https:// URL"),
        (
            "url = \"http://127.0.0.1/\"\nheaders = { \"bad header\" = \"x\" }",
            "`headers`: \"bad header\" is not a valid header name",
        ),
        (
            "url = \"http://127.0.0.1/\"\nheaders = { \"Content-Type\" = \"text/plain\" }",
            "`headers`: \"Content-Type\" is set by mesgd itself",
        ),
        (
            "url = \"http://127.0.0.1/\"\nheaders = { \"x-key\" = \"a\\nb\" }",
            "`headers`: the value of \"x-key\" is not a valid header value",
        ),
        (
            "url = \"http://127.0.0.1/\"\ncache_ttl_ms = 86400001",
            "`cache_ttl_ms` must be at most 86400000, found 86400001",
        ),
        (
            "url = \"http://127.0.0.1/\"\ncache_ttl_ms = 10\ncache_size = 0",
            "`cache_size` must be 1 to 1000000, found 0",
        ),
        (
            "url = \"http://127.0.0.1/\"\nurl_path = \"x\"",
            "unknown field `url_path`, expected one of `url`, `headers`, `cache_ttl_ms`, `deny_cache_ttl_ms`, `cache_size`",
        ),
        ("", "missing field `url`"),
    ];
    for (settings, expected) in cases {
        let text = format!("[[auth.providers]]\ntype = \"http\"\n{settings}");
        let error = Registry::with_builtin_providers()
            .build_chain(&providers(&text), false, &mut BuildContext::new("/nonexistent"))
            .expect_err(settings);
        assert_eq!(error.to_string(), format!("auth.providers[1] (type = \"http\"): {expected}"));
    }
}
