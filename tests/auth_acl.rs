//! ACL enforcement end to end, in MQTT 3.1.1 and 5.0: the three enforcement points (subscribe,
//! publish, delivery — retained replay, wildcard and shared subscriptions included), wills,
//! `$SYS`, `%u` / `%c` substitution, the examples of the specification, and changes to a
//! builtin user made through the `mesgd` command line while its client is connected.
//!
//! Rules reach clients through signed JWTs (their `acl` claim) or the builtin store. "Not
//! delivered" is always shown the same way: the publisher sends the forbidden message and then
//! an allowed marker over the same connection, so the marker is routed after it; the receiver's
//! next message must be the marker.

mod common;

use common::TestServer;
use common::auth::{BOTH, Login, Msg, Proto, Storage, disconnect_reason, jwt_provider, raw_login, token};
use mesgd_core::broker::Stats;
use mesgd_core::mqtt::ReasonCode;
use serde_json::{Value, json};

/// A server whose clients get their ACL from a JWT, and whose clients without a username are
/// anonymous (unrestricted).
async fn jwt_server(sys_interval: u64) -> TestServer {
    TestServer::start_with(&format!(
        "[auth]\nallow_anonymous = true\n{}[mqtt]\nsys_interval = {sys_interval}\n",
        jwt_provider("")
    ))
    .await
}

/// A JSON rule list from (pattern, permission) pairs.
fn rules(pairs: &[(&str, &str)]) -> Value {
    Value::Array(pairs.iter().map(|(p, perm)| json!({"pattern": p, "permission": perm})).collect())
}

/// A client `id` logged in as `user` with a token carrying `acl`.
fn with_acl(proto: Proto, server: &TestServer, id: &str, user: &str, acl: Value) -> Login {
    Login::new(proto, server.port(), &format!("{id}-{proto:?}")).user(user, &token(user, Some(acl)))
}

fn anonymous(proto: Proto, server: &TestServer, id: &str) -> Login {
    Login::new(proto, server.port(), &format!("{id}-{proto:?}"))
}

fn denied_publishes(server: &TestServer) -> u64 {
    Stats::get(&server.broker().stats().publishes_denied)
}

/// Asserts that the next message `client` receives is `topic` with `payload`.
async fn expect_next(client: &mut common::auth::Client, topic: &str, payload: &[u8]) {
    let got = client.next_publish().await;
    assert_eq!(
        (got.topic.as_str(), got.payload.as_slice()),
        (topic, payload),
        "expected {topic} next, got {got:?}"
    );
}

// ------------------------------------------------------------------------- subscribe

#[tokio::test]
async fn a_refused_subscription_is_not_added_and_receives_nothing() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let mut reader =
            with_acl(proto, &server, "reader", "reader", rules(&[("public/#", "read")])).connect().await;
        assert_eq!(reader.subscribe("secret/#").await, proto.sub_refused());
        assert_eq!(reader.subscribe("secret/x").await, proto.sub_refused());
        reader.subscribe_ok("public/#").await;
        let session = server
            .broker()
            .session(&mesgd_core::model::SessionKey::mqtt(format!("reader-{proto:?}")))
            .expect("session");
        assert_eq!(session.subscription_count(), 1, "only the granted filter was added");

        let mut publisher = anonymous(proto, &server, "pub").connect().await;
        publisher.publish("secret/x", 1, false, b"hidden").await;
        publisher.publish("public/x", 1, false, b"marker").await;
        expect_next(&mut reader, "public/x", b"marker").await;
    }
}

#[tokio::test]
async fn a_wildcard_filter_is_granted_when_it_intersects_a_readable_rule() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let acl = rules(&[("sensors/+/temp", "read")]);
        let mut reader = with_acl(proto, &server, "reader", "reader", acl).connect().await;
        reader.subscribe_ok("sensors/#").await;
        reader.subscribe_ok("+/+/temp").await;
        assert_eq!(reader.subscribe("sensors/+/humidity").await, proto.sub_refused());
        assert_eq!(reader.subscribe("other/#").await, proto.sub_refused());
    }
}

// ------------------------------------------------------------------------- publish

#[tokio::test]
async fn a_publish_without_write_permission_is_refused_at_every_qos() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let mut watcher = anonymous(proto, &server, "watcher").connect().await;
        watcher.subscribe_ok("#").await;
        let acl = rules(&[("out/#", "write"), ("#", "read")]);
        let mut writer = with_acl(proto, &server, "writer", "writer", acl).connect().await;
        let denied_before = denied_publishes(&server);

        assert_eq!(writer.publish("secret/q0", 0, false, b"no").await, None);
        assert_eq!(writer.publish("secret/q1", 1, false, b"no").await, Some(proto.pub_refused()));
        assert_eq!(writer.publish("secret/q2", 2, false, b"no").await, Some(proto.pub_refused()));
        assert_eq!(writer.publish("secret/retained", 1, true, b"no").await, Some(proto.pub_refused()));
        assert_eq!(writer.publish("out/marker", 1, false, b"yes").await, Some(0));

        expect_next(&mut watcher, "out/marker", b"yes").await;
        assert_eq!(denied_publishes(&server) - denied_before, 4, "every refusal is counted");
        assert_eq!(server.broker().retained().len(), 0, "a refused retained publish stores nothing");
    }
}

#[tokio::test]
async fn a_refused_retained_publish_leaves_the_stored_message_alone() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let topic = format!("config/{proto:?}");
        let mut admin = anonymous(proto, &server, "admin").connect().await;
        admin.publish(&topic, 1, true, b"original").await;
        let acl = rules(&[("config/#", "read")]);
        let mut intruder = with_acl(proto, &server, "intruder", "intruder", acl).connect().await;
        // An empty retained payload would delete the stored message if it were accepted.
        assert_eq!(intruder.publish(&topic, 1, true, b"").await, Some(proto.pub_refused()));
        assert_eq!(intruder.publish(&topic, 1, true, b"forged").await, Some(proto.pub_refused()));

        let mut reader = anonymous(proto, &server, "reader").connect().await;
        reader.subscribe_ok(&topic).await;
        let got = reader.next_publish().await;
        assert_eq!((got.payload.as_slice(), got.retain), (&b"original"[..], true));
    }
}

#[tokio::test]
async fn clients_cannot_publish_to_sys_topics() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let mut watcher = anonymous(proto, &server, "watcher").connect().await;
        watcher.subscribe_ok("$SYS/#").await;
        watcher.subscribe_ok("marker").await;
        // Unrestricted, and still refused: $SYS belongs to the broker.
        let mut client = anonymous(proto, &server, "client").connect().await;
        assert_eq!(client.publish("$SYS/broker/version", 1, false, b"fake").await, Some(proto.pub_refused()));
        client.publish("marker", 1, false, b"m").await;
        expect_next(&mut watcher, "marker", b"m").await;
    }
}

// ------------------------------------------------------------------------- delivery

#[tokio::test]
async fn wildcard_deliveries_skip_topics_the_receiver_may_not_read() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let acl = rules(&[("secret/#", "deny"), ("#", "read")]);
        let mut reader = with_acl(proto, &server, "reader", "reader", acl).connect().await;
        reader.subscribe_ok("#").await;
        assert_eq!(reader.subscribe("secret/#").await, proto.sub_refused(), "no readable topic under it");

        let mut publisher = anonymous(proto, &server, "pub").connect().await;
        for qos in 0..=2 {
            publisher.publish("secret/x", qos, false, b"hidden").await;
            publisher.publish("public/x", qos, false, &[qos]).await;
            expect_next(&mut reader, "public/x", &[qos]).await;
        }
    }
}

#[tokio::test]
async fn retained_messages_are_filtered_when_a_subscription_replays_them() {
    let server = jwt_server(0).await;
    let mut publisher = anonymous(Proto::V5, &server, "pub").connect().await;
    for topic in ["secret/a", "public/a", "secret/b/c"] {
        publisher.publish(topic, 1, true, topic.as_bytes()).await;
    }
    for proto in BOTH {
        let acl = rules(&[("secret/#", "deny"), ("#", "read")]);
        let mut reader = with_acl(proto, &server, "reader", "reader", acl).connect().await;
        reader.subscribe_ok("#").await;
        // Retained messages are queued during the subscribe, so before this live marker.
        publisher.publish("marker", 1, false, b"live").await;
        let first = reader.next_publish().await;
        assert_eq!(first, Msg { topic: "public/a".into(), payload: b"public/a".to_vec(), retain: true });
        expect_next(&mut reader, "marker", b"live").await;
    }
}

#[tokio::test]
async fn shared_subscription_deliveries_are_filtered() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let acl = rules(&[("secret/#", "deny"), ("#", "read")]);
        let mut member = with_acl(proto, &server, "member", "member", acl).connect().await;
        member.subscribe_ok(&format!("$share/g{proto:?}/#")).await;
        let mut publisher = anonymous(proto, &server, "pub").connect().await;
        publisher.publish("secret/x", 1, false, b"hidden").await;
        publisher.publish("public/x", 1, false, b"shown").await;
        expect_next(&mut member, "public/x", b"shown").await;
    }
}

#[tokio::test]
async fn a_shared_group_message_goes_to_a_member_that_may_read_it() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let group = format!("$share/mixed{proto:?}/#");
        let acl = rules(&[("secret/#", "deny"), ("#", "read")]);
        let mut restricted = with_acl(proto, &server, "restricted", "r", acl).connect().await;
        restricted.subscribe_ok(&group).await;
        let mut cleared = anonymous(proto, &server, "cleared").connect().await;
        cleared.subscribe_ok(&group).await;

        // Round robin alternates between the two; every secret still reaches the one member
        // that may read it.
        let mut publisher = anonymous(proto, &server, "pub").connect().await;
        for n in 0..4u8 {
            publisher.publish("secret/x", 1, false, &[n]).await;
        }
        for n in 0..4u8 {
            expect_next(&mut cleared, "secret/x", &[n]).await;
        }
        // Messages both may read are still shared between them.
        publisher.publish("public/x", 1, false, b"1").await;
        publisher.publish("public/x", 1, false, b"2").await;
        let (a, b) = (restricted.next_publish().await, cleared.next_publish().await);
        assert_eq!((a.topic.as_str(), b.topic.as_str()), ("public/x", "public/x"));
        assert_ne!(a.payload, b.payload, "one each");
    }
}

// ------------------------------------------------------------------------- wills

/// Waits until the broker has finished with `client_id`'s connection (a clean session ends
/// with it, after its will was published or refused).
async fn session_gone(server: &TestServer, client_id: &str) {
    common::within("the session to end", async {
        while server.broker().session(&mesgd_core::model::SessionKey::mqtt(client_id)).is_some() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_will_on_a_topic_the_client_may_not_write_is_not_published() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let mut watcher = anonymous(proto, &server, "watcher").connect().await;
        watcher.subscribe_ok("#").await;
        let acl = rules(&[("status/%c", "write")]);
        let denied_before = denied_publishes(&server);

        let forbidden = with_acl(proto, &server, "dev1", "dev", acl.clone()).will("alarm/fire", b"forged");
        forbidden.connect().await.kill();
        session_gone(&server, &forbidden.client_id).await;
        assert_eq!(denied_publishes(&server) - denied_before, 1, "the will was refused");

        let allowed = with_acl(proto, &server, "dev2", "dev", acl);
        let status = format!("status/{}", allowed.client_id);
        allowed.clone().will(&status, b"offline").connect().await.kill();
        expect_next(&mut watcher, &status, b"offline").await;
    }
}

#[tokio::test]
async fn a_will_on_a_sys_topic_is_not_published() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let mut watcher = anonymous(proto, &server, "watcher").connect().await;
        watcher.subscribe_ok("$SYS/#").await;
        watcher.subscribe_ok("wills/#").await;
        // Unrestricted, so only the rule that keeps $SYS for the broker can stop it.
        let forged = anonymous(proto, &server, "forger").will("$SYS/broker/version", b"forged");
        forged.connect().await.kill();
        session_gone(&server, &forged.client_id).await;
        anonymous(proto, &server, "honest").will("wills/honest", b"gone").connect().await.kill();
        expect_next(&mut watcher, "wills/honest", b"gone").await;
    }
}

// ------------------------------------------------------------------------- $SYS

#[tokio::test]
async fn sys_topics_are_visible_only_through_a_rule_that_names_them() {
    let server = jwt_server(1).await;
    for proto in BOTH {
        let everything = rules(&[("#", "readwrite")]);
        let mut plain = with_acl(proto, &server, "plain", "plain", everything).connect().await;
        assert_eq!(plain.subscribe("$SYS/#").await, proto.sub_refused(), "# does not grant $SYS");
        assert_eq!(plain.subscribe("$SYS/broker/version").await, proto.sub_refused());

        let sys = rules(&[("$SYS/#", "read")]);
        let mut monitor = with_acl(proto, &server, "monitor", "monitor", sys).connect().await;
        assert_eq!(monitor.subscribe("#").await, proto.sub_refused(), "$SYS/# grants nothing else");
        monitor.subscribe_ok("$SYS/broker/version").await;
        let version = monitor.next_publish().await;
        assert_eq!(version.topic, "$SYS/broker/version");
        assert!(version.payload.starts_with(b"mesgd "), "{version:?}");

        let mut anon = anonymous(proto, &server, "anon").connect().await;
        anon.subscribe_ok("$SYS/broker/uptime").await;
        assert_eq!(anon.next_publish().await.topic, "$SYS/broker/uptime", "unrestricted sees $SYS");
    }
}

// ------------------------------------------------------------------------- %u and %c

#[tokio::test]
async fn username_and_client_id_patterns_apply_per_client() {
    let server = jwt_server(0).await;
    let acl = rules(&[("devices/%u/#", "readwrite"), ("clients/%c/#", "readwrite")]);
    for proto in BOTH {
        let login = with_acl(proto, &server, "dev", "alice", acl.clone());
        let id = login.client_id.clone();
        let mut alice = login.connect().await;
        alice.subscribe_ok("devices/alice/#").await;
        alice.subscribe_ok(&format!("clients/{id}/inbox")).await;
        assert_eq!(alice.subscribe("devices/bob/#").await, proto.sub_refused());
        assert_eq!(alice.subscribe("devices/+/private").await, 1, "intersects devices/alice/#");
        assert_eq!(alice.subscribe("clients/other/inbox").await, proto.sub_refused());
        assert_eq!(alice.publish("devices/bob/x", 1, false, b"x").await, Some(proto.pub_refused()));
        assert_eq!(alice.publish("devices/alice/x", 1, false, b"mine").await, Some(0));
        expect_next(&mut alice, "devices/alice/x", b"mine").await;
    }
}

#[tokio::test]
async fn substituted_values_cannot_widen_a_rule() {
    let server = jwt_server(0).await;
    let acl = rules(&[("devices/%u/#", "readwrite"), ("%u/#", "read"), ("inbox/%c", "read")]);
    for proto in BOTH {
        // A username with wildcards makes every rule that uses %u match nothing.
        let mut wild = with_acl(proto, &server, "wild", "a/#", acl.clone()).connect().await;
        for filter in ["devices/a/#", "devices/#", "devices/a/x", "a/#", "a/x", "+/x"] {
            assert_eq!(wild.subscribe(filter).await, proto.sub_refused(), "{filter} with username a/#");
        }
        assert_eq!(wild.publish("devices/a/x", 1, false, b"x").await, Some(proto.pub_refused()));

        let mut plus = with_acl(proto, &server, "plus", "+", acl.clone()).connect().await;
        assert_eq!(plus.subscribe("devices/+/x").await, proto.sub_refused());
        assert_eq!(plus.subscribe("devices/bob/x").await, proto.sub_refused());

        // A username cannot move a rule into the $ topics.
        let mut sys = with_acl(proto, &server, "sys", "$SYS", acl.clone()).connect().await;
        assert_eq!(sys.subscribe("$SYS/#").await, proto.sub_refused());
        assert_eq!(sys.subscribe("$SYS/broker/version").await, proto.sub_refused());

        // A client id with a wildcard: %c rules match nothing, %u rules still work.
        let login = Login::new(proto, server.port(), &format!("c+{proto:?}"))
            .user("bob", &token("bob", Some(acl.clone())));
        let mut bob = login.connect().await;
        assert_eq!(bob.subscribe("inbox/+").await, proto.sub_refused());
        assert_eq!(bob.subscribe("inbox/#").await, proto.sub_refused());
        bob.subscribe_ok("devices/bob/#").await;
    }
}

// ------------------------------------------------------------------------- the specification's examples

#[tokio::test]
async fn a_write_rule_does_not_stop_a_later_read_rule() {
    // [{a/#, write}, {#, read}] lets the client read a/x.
    let server = jwt_server(0).await;
    for proto in BOTH {
        let acl = rules(&[("a/#", "write"), ("#", "read")]);
        let mut client = with_acl(proto, &server, "c", "c", acl).connect().await;
        client.subscribe_ok("a/x").await;
        let mut other = anonymous(proto, &server, "other").connect().await;
        other.publish("a/x", 1, false, b"read me").await;
        expect_next(&mut client, "a/x", b"read me").await;
        assert_eq!(client.publish("a/x", 1, false, b"written").await, Some(0));
        expect_next(&mut client, "a/x", b"written").await;
        assert_eq!(client.publish("b/x", 1, false, b"no").await, Some(proto.pub_refused()));
    }
}

#[tokio::test]
async fn a_leading_deny_rule_hides_one_topic_only() {
    // [{test/x, deny}, {#, all}] hides test/x and nothing else.
    let server = jwt_server(0).await;
    for proto in BOTH {
        let acl = rules(&[("test/x", "deny"), ("#", "all")]);
        let mut client = with_acl(proto, &server, "c", "c", acl).connect().await;
        assert_eq!(client.subscribe("test/x").await, proto.sub_refused());
        client.subscribe_ok("test/#").await;
        let mut other = anonymous(proto, &server, "other").connect().await;
        other.publish("test/x", 1, false, b"hidden").await;
        other.publish("test/y", 1, false, b"shown").await;
        expect_next(&mut client, "test/y", b"shown").await;
        assert_eq!(client.publish("test/x", 1, false, b"no").await, Some(proto.pub_refused()));
        assert_eq!(client.publish("test/z", 1, false, b"mine").await, Some(0));
        expect_next(&mut client, "test/z", b"mine").await;
    }
}

#[tokio::test]
async fn an_empty_rule_list_denies_everything() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        // Explicitly empty, and absent (the jwt provider's default for a token without ACL).
        let empty = with_acl(proto, &server, "empty", "empty", json!([]));
        let absent = Login::new(proto, server.port(), &format!("absent-{proto:?}"))
            .user("absent", &token("absent", None));
        for login in [empty, absent] {
            let mut client = login.connect().await;
            for filter in ["#", "a", "+/b", "$SYS/#"] {
                assert_eq!(client.subscribe(filter).await, proto.sub_refused(), "{filter}");
            }
            assert_eq!(client.publish("a", 1, false, b"no").await, Some(proto.pub_refused()));
        }
    }
}

#[tokio::test]
async fn an_unrestricted_client_may_do_everything() {
    let server = jwt_server(1).await;
    for proto in BOTH {
        let topic = format!("any/{proto:?}");
        let mut client = anonymous(proto, &server, "anon").connect().await;
        client.subscribe_ok("#").await;
        assert_eq!(client.publish(&topic, 2, true, b"x").await, Some(0));
        expect_next(&mut client, &topic, b"x").await;
        // Deleting the retained message is a write too (and keeps the next round's # clean).
        assert_eq!(client.publish(&topic, 1, true, b"").await, Some(0));
        expect_next(&mut client, &topic, b"").await;
        let mut monitor = anonymous(proto, &server, "monitor").connect().await;
        monitor.subscribe_ok("$SYS/broker/version").await;
        assert_eq!(monitor.next_publish().await.topic, "$SYS/broker/version");
    }
}

#[tokio::test]
async fn messages_queued_offline_are_checked_against_the_rules_of_the_resuming_connection() {
    let server = jwt_server(0).await;
    for proto in BOTH {
        let wide = rules(&[("news/#", "read"), ("ctl/#", "read")]);
        let reader = with_acl(proto, &server, "resumer", "reader", wide).persistent();
        let client_id = reader.client_id.clone();
        let mut first = reader.connect().await;
        first.subscribe_ok("news/#").await;
        first.subscribe_ok("ctl/#").await;
        first.kill();
        let session = server
            .broker()
            .session(&mesgd_core::model::SessionKey::mqtt(client_id.as_str()))
            .expect("persistent session");
        common::within("the session to go offline", session.wait_detached()).await;

        let mut publisher = anonymous(proto, &server, "offline-pub").connect().await;
        publisher.publish("news/x", 1, false, b"hidden now").await;
        publisher.publish("ctl/x", 1, false, b"marker").await;

        // The same client comes back with a token that no longer grants `news/#`.
        let narrow = rules(&[("ctl/#", "read")]);
        let mut resumed = with_acl(proto, &server, "resumer", "reader", narrow).persistent().connect().await;
        expect_next(&mut resumed, "ctl/x", b"marker").await;
    }
}

// ------------------------------------------------------------------------- live changes

/// A server with a builtin provider that checks the store for changes every 10 ms, and
/// anonymous (unrestricted) publishers.
async fn builtin_server(storage: &Storage) -> TestServer {
    TestServer::start_on(
        storage,
        "[auth]\nallow_anonymous = true\n[[auth.providers]]\ntype = \"builtin\"\npoll_interval_ms = 10\n[mqtt]\nsys_interval = 0\n",
    )
    .await
}

/// Publishes `news/x` then `ctl/x` (both numbered) until the reader's view of `news/x` is
/// `visible`: a round where `ctl/x` arrives without `news/x` before it shows the news are
/// hidden, a round where `news/x` arrives shows they are delivered. Returns the rounds taken.
async fn until_news(
    reader: &mut common::auth::Client,
    publisher: &mut common::auth::Client,
    visible: bool,
) -> u32 {
    common::within("the rule change to take effect", async {
        for round in 0u32.. {
            let n = round.to_be_bytes();
            publisher.publish("news/x", 1, false, &n).await;
            publisher.publish("ctl/x", 1, false, &n).await;
            let first = reader.next_publish().await;
            let news_seen = first.topic == "news/x";
            if news_seen {
                assert_eq!(first.payload, n);
                expect_next(reader, "ctl/x", &n).await;
            } else {
                assert_eq!((first.topic.as_str(), first.payload.as_slice()), ("ctl/x", &n[..]));
            }
            if news_seen == visible {
                return round;
            }
        }
        unreachable!()
    })
    .await
}

#[tokio::test]
async fn rule_changes_apply_to_connected_clients_without_reconnect() {
    let storage = Storage::new();
    for proto in BOTH {
        let name = format!("reader-{proto:?}");
        storage.add_user(&name, "pw").await;
        storage.add_rule(&name, "news/#", "read").await;
        storage.add_rule(&name, "ctl/#", "read").await;
    }
    let server = builtin_server(&storage).await;
    for proto in BOTH {
        let name = format!("reader-{proto:?}");
        let mut reader = Login::new(proto, server.port(), &name).user(&name, "pw").connect().await;
        reader.subscribe_ok("news/#").await;
        reader.subscribe_ok("ctl/#").await;
        let mut publisher = anonymous(proto, &server, "pub").connect().await;
        until_news(&mut reader, &mut publisher, true).await;

        storage.mesgd(&["acl", "remove", &name, "--pattern", "news/#"], "").await;
        until_news(&mut reader, &mut publisher, false).await;
        // Hidden from now on, and a new subscription is refused too.
        assert_eq!(until_news(&mut reader, &mut publisher, false).await, 0);
        assert_eq!(reader.subscribe("news/y").await, proto.sub_refused());

        storage.add_rule(&name, "news/#", "read").await;
        until_news(&mut reader, &mut publisher, true).await;
        assert_eq!(until_news(&mut reader, &mut publisher, true).await, 0);
    }
}

#[tokio::test]
async fn disabling_or_removing_a_user_disconnects_its_clients() {
    let storage = Storage::new();
    for proto in BOTH {
        for action in ["disable", "remove"] {
            let name = format!("{action}-{proto:?}");
            storage.add_user(&name, "pw").await;
            storage.add_rule(&name, "#", "read").await;
        }
    }
    let server = builtin_server(&storage).await;
    for proto in BOTH {
        for (action, v5_reason) in
            [("disable", ReasonCode::NotAuthorized), ("remove", ReasonCode::AdministrativeAction)]
        {
            let name = format!("{action}-{proto:?}");
            let (mut raw, code) =
                raw_login(server.addr, proto.version(), &name, Some(&name), Some(b"pw")).await;
            assert_eq!(code, ReasonCode::Success);
            storage.mesgd(&["user", action, &name], "").await;
            let reason = disconnect_reason(&mut raw).await;
            match proto {
                Proto::V5 => assert_eq!(reason, Some(v5_reason), "{action}"),
                Proto::V3 => assert_eq!(reason, None, "{action}: 3.1.1 has no DISCONNECT from the server"),
            }
            let login = Login::new(proto, server.port(), &name).user(&name, "pw");
            let expected = if action == "disable" { proto.not_authorized() } else { proto.bad_credentials() };
            assert_eq!(login.refused().await, expected, "reconnect after {action}");
        }
    }
}
