//! Builtin users and their ACLs on every node of a cluster, over a real nats-server
//! (`nats-server -js` on a loopback port): a user added with the real `mesgd user` command on
//! one node's store logs in on another, an ACL change made on one node reaches a client
//! connected to another, disabling on one node closes the user's connection on the other,
//! a removal is applied everywhere, and a node that joins later gets every user (the cluster's
//! copy over its own, and a role changed after its members at once). The delay from
//! the command's exit to the other node applying the change is printed (it is measured, not
//! asserted: the machine may be slow).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestServer;
use common::auth::{Storage, disconnect_reason, raw_login};
use common::nats::{NatsServer, cluster};
use common::packets::{publish_packet, subscribe_packet};
use mesgd_core::mqtt::{Packet, ProtocolVersion, ReasonCode};
use mesgd_providers::builtin::{UserDirectory, UserRecord};

/// A node on `storage` whose only provider is the builtin store, polled every 50 ms.
async fn node(storage: &Storage, nats: &NatsServer, name: &str) -> TestServer {
    TestServer::start_on(
        storage,
        &format!(
            "[auth]\nallow_anonymous = false\n[[auth.providers]]\ntype = \"builtin\"\npoll_interval_ms = 50\n\
             [mqtt]\nsys_interval = 0\n[cluster]\nnode = {name:?}\nnats = [{:?}]\n",
            nats.url
        ),
    )
    .await
}

/// A fresh NATS server and two nodes on it, `a` and `b`, each with a store of its own.
async fn two_nodes() -> (NatsServer, Storage, Storage, TestServer, TestServer) {
    let nats = NatsServer::start().await;
    let (store_a, store_b) = (Storage::new(), Storage::new());
    let a = node(&store_a, &nats, "a").await;
    let b = node(&store_b, &nats, "b").await;
    (nats, store_a, store_b, a, b)
}

/// One of `server`'s cluster counters.
fn counted(
    server: &TestServer,
    which: fn(&mesgd_cluster::ClusterStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    which(cluster(server).stats()).load(std::sync::atomic::Ordering::Relaxed)
}

fn directory(server: &TestServer) -> Arc<UserDirectory> {
    let server = server.server.as_ref().expect("running");
    server.context().services().get::<UserDirectory>().expect("the builtin store is open")
}

/// Waits until `server`'s directory has installed a copy of the store in which `done` holds
/// for `username`'s record; returns how long that took from `since`.
async fn applied(
    server: &TestServer,
    username: &str,
    since: Instant,
    done: impl Fn(Option<&UserRecord>) -> bool,
) -> Duration {
    let directory = directory(server);
    let mut changes = directory.changes();
    // Replication normally takes well under a second (the test prints it); the bound is wide
    // so that a slow machine does not fail it, and a miss says how far the node got.
    let reached = tokio::time::timeout(Duration::from_secs(30), async {
        while !done(directory.records().get(username).map(|r| &**r)) {
            changes.changed().await.expect("directory running");
        }
    })
    .await;
    if reached.is_err() {
        let s = cluster(server).stats();
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        panic!(
            "{username}'s change did not reach the node within 30 s: applied {}, kept local {}, \
             apply errors {}, published {}, publish errors {}",
            get(&s.users_applied),
            get(&s.users_kept_local),
            get(&s.users_apply_errors),
            get(&s.users_published),
            get(&s.users_publish_errors)
        );
    }
    since.elapsed()
}

async fn login(server: &TestServer, id: &str, user: &str, password: &[u8]) -> (common::Raw, ReasonCode) {
    raw_login(server.addr, ProtocolVersion::V5, id, Some(user), Some(password)).await
}

/// A QoS 1 publish's PUBACK reason code.
async fn publish_reason(raw: &mut common::Raw, topic: &str, id: u16) -> ReasonCode {
    raw.send(&publish_packet(topic, 1, Some(id), false, Some(&[]), b"x")).await;
    match raw.recv().await {
        Some(Packet::PubAck(a)) => a.reason_code,
        other => panic!("expected PUBACK, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_users_and_their_acls_are_the_same_on_every_node() {
    let (nats, store_a, store_b, a, b) = two_nodes().await;

    // Added on a with the command line; b applies it and ann logs in there with her password.
    let started = Instant::now();
    store_a.add_user("ann", "ann-secret").await;
    store_a.add_rule("ann", "t/#", "readwrite").await;
    let took = applied(&b, "ann", started, |r| r.is_some_and(|r| r.rules.len() == 1)).await;
    println!("user add + rule on a, applied on b after {took:?} (both commands included)");
    let (mut on_b, code) = login(&b, "ann-b", "ann", b"ann-secret").await;
    assert_eq!(code, ReasonCode::Success);
    let (_, code) = login(&b, "ann-b2", "ann", b"wrong").await;
    assert_eq!(code, ReasonCode::BadUserNameOrPassword);
    // 0x10 No matching subscribers: accepted (nobody reads t/1).
    assert_eq!(publish_reason(&mut on_b, "t/1", 1).await, ReasonCode::NoMatchingSubscribers);

    // A rule change on a reaches ann's connection on b without a reconnect.
    let started = Instant::now();
    store_a.mesgd(&["acl", "remove", "ann", "--pattern", "t/#"], "").await;
    store_a.add_rule("ann", "t/#", "read").await;
    let took = applied(&b, "ann", started, |r| {
        r.is_some_and(|r| r.rules.len() == 1 && r.rules[0].permission.as_str() == "read")
    })
    .await;
    println!("rule change on a, applied on b after {took:?} (both commands included)");
    assert_eq!(publish_reason(&mut on_b, "t/1", 2).await, ReasonCode::NotAuthorized);
    on_b.send(&subscribe_packet(3, "t/#", 1, true)).await;
    assert!(matches!(on_b.recv().await, Some(Packet::SubAck(_))), "reading is still allowed");

    // Disabled on b: ann's connection on a is closed as not authorized.
    let (mut on_a, code) = login(&a, "ann-a", "ann", b"ann-secret").await;
    assert_eq!(code, ReasonCode::Success);
    let started = Instant::now();
    store_b.mesgd(&["user", "disable", "ann"], "").await;
    assert_eq!(disconnect_reason(&mut on_a).await, Some(ReasonCode::NotAuthorized));
    println!("disable on b, ann's connection on a closed after {:?}", started.elapsed());
    assert_eq!(disconnect_reason(&mut on_b).await, Some(ReasonCode::NotAuthorized));
    let (_, code) = login(&a, "ann-a", "ann", b"ann-secret").await;
    assert_eq!(code, ReasonCode::NotAuthorized);

    // Removed on a: gone from b's store too.
    store_a.mesgd(&["user", "remove", "ann"], "").await;
    applied(&b, "ann", Instant::now(), |r| r.is_none()).await;
    let b_store = directory(&b);
    assert!(b_store.store().user("ann").expect("store readable").is_none());

    // A node that joins later gets every user, and its own users join the cluster.
    store_a.add_user("bob", "bob-secret").await;
    applied(&b, "bob", Instant::now(), |r| r.is_some()).await;
    let store_c = Storage::new();
    store_c.add_user("cid", "cid-secret").await;
    let c = node(&store_c, &nats, "c").await;
    assert!(directory(&c).records().contains_key("bob"), "loaded before the listeners opened");
    assert!(!directory(&c).records().contains_key("ann"), "the removal is in the stream too");
    let (_, code) = login(&c, "bob-c", "bob", b"bob-secret").await;
    assert_eq!(code, ReasonCode::Success);
    applied(&a, "cid", Instant::now(), |r| r.is_some()).await;
    let (_, code) = login(&a, "cid-a", "cid", b"cid-secret").await;
    assert_eq!(code, ReasonCode::Success);

    let stats = cluster(&a).stats();
    let published = stats.users_published.load(std::sync::atomic::Ordering::Relaxed);
    // ann added with her rule, the rule replaced, ann removed, bob added (commands that land
    // within one poll of each other are one change).
    assert!(published >= 4, "a published its changes: {published}");
    for server in [&a, &b, &c] {
        let s = cluster(server).stats();
        assert_eq!(s.users_invalid.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(s.users_apply_errors.load(std::sync::atomic::Ordering::Relaxed), 0);
    }
}

/// A node that joins later reads the stream in its order: a role changed after the user who
/// holds it comes after that user, and the user's write made the role, empty, on the joining
/// node. That empty role is no local change: the role's own message fills it at once (it used
/// to be kept empty as a "local change" until the next comparison with the stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_joins_later_gets_a_role_changed_after_its_members_at_once() {
    let nats = NatsServer::start().await;
    let (store_a, store_w) = (Storage::new(), Storage::new());
    let a = node(&store_a, &nats, "a").await;
    let watcher = node(&store_w, &nats, "watcher").await;
    let on_a = directory(&a);
    let on_a = on_a.store();
    on_a.set_pbkdf2_iterations(1000).expect("iterations");
    on_a.add_role("ops").expect("role");
    on_a.role_add_pattern("ops", "/room=lobby").expect("role pattern");
    store_a.add_user("alice", "alice-secret").await;
    on_a.assign_role("alice", "ops").expect("role assigned");
    applied(&watcher, "alice", Instant::now(), |r| r.is_some_and(|r| r.roles == ["ops"])).await;
    on_a.role_add_pattern("ops", "/room=attic").expect("second role pattern");
    applied(&watcher, "alice", Instant::now(), |r| r.is_some_and(|r| r.patterns.len() == 2)).await;

    // The node opens once it has applied the stream.
    let store_late = Storage::new();
    let late = node(&store_late, &nats, "late").await;
    let kept_local = counted(&late, |s| &s.users_kept_local);
    assert_eq!(kept_local, 0, "nothing on the new node is a local change");
    let role = directory(&late).store().role("ops").expect("ops on the late node");
    assert_eq!(role.patterns, ["/room=attic", "/room=lobby"]);
}

/// A node that joins with its own copy of a user the cluster has takes the cluster's before
/// its listeners open: the stream wins over the joining node's store (its copy is not a local
/// change to keep).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_takes_the_cluster_s_copy_of_a_user_it_has_too() {
    let nats = NatsServer::start().await;
    let store_a = Storage::new();
    let a = node(&store_a, &nats, "a").await;
    store_a.add_user("dan", "cluster-secret").await;
    store_a.add_rule("dan", "t/#", "readwrite").await;
    let store_w = Storage::new();
    let watcher = node(&store_w, &nats, "watcher").await;
    applied(&watcher, "dan", Instant::now(), |r| r.is_some_and(|r| r.rules.len() == 1)).await;

    let store_late = Storage::new();
    store_late.add_user("dan", "old-local-secret").await;
    let late = node(&store_late, &nats, "late").await;
    let kept_local = counted(&late, |s| &s.users_kept_local);
    assert_eq!(kept_local, 0, "the joining node's own copy is not a change to keep");
    let dan = directory(&late).store().user("dan").expect("store readable").expect("dan");
    assert_eq!(dan.rules.len(), 1, "the cluster's copy, with its rule");
    let (_, code) = login(&late, "dan-late", "dan", b"cluster-secret").await;
    assert_eq!(code, ReasonCode::Success);
    drop(a);
}

/// Many users, each added and given a rule at once on one node: every node ends with every
/// user and its rule. The second change reaches the other node right behind the first, while
/// its directory may still show the first; that lagging copy must not be taken for a local
/// change (published, it undid the rule everywhere). And the echo of the first change must
/// not be written over the second on the node that made both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_back_to_back_on_one_node_all_reach_every_node() {
    const USERS: usize = 150;
    let (_nats, _store_a, _store_b, a, b) = two_nodes().await;
    let a_directory = directory(&a);
    let on_a = a_directory.store();
    on_a.set_pbkdf2_iterations(1000).expect("iterations");
    for i in 0..USERS {
        // Each change applied before the next, as the REST API does: two publishes a moment apart.
        let name = format!("u{i}");
        on_a.add_user(&name, mesgd_providers::builtin::AuthType::Basic, Some(b"pw"), false).expect("user");
        a_directory.sync().await;
        on_a.add_rule(&name, mesgd_core::acl::Rule::new("t/#", mesgd_core::acl::Permission::Read), None)
            .expect("rule");
        a_directory.sync().await;
    }
    let without_rule = |d: &UserDirectory| -> Vec<String> {
        let records = d.records();
        (0..USERS)
            .map(|i| format!("u{i}"))
            .filter(|n| records.get(n).is_none_or(|r| r.rules.len() != 1))
            .collect()
    };
    for (server, node) in [(&b, "b"), (&a, "a")] {
        let directory = directory(server);
        let mut changes = directory.changes();
        let reached = tokio::time::timeout(Duration::from_secs(30), async {
            while !without_rule(&directory).is_empty() {
                changes.changed().await.expect("directory running");
            }
        })
        .await;
        assert!(
            reached.is_ok(),
            "on {node}, users without their rule after 30 s: {:?}",
            without_rule(&directory)
        );
    }
    // a made every change: nothing from the stream was news to it. Each message was its own
    // change, or an older one of its own that a later publish had replaced (writing that one
    // took the rule away on a until the later echo came).
    let applied_on_a = counted(&a, |s| &s.users_applied);
    assert_eq!(applied_on_a, 0, "a wrote its own older states back into its store");
}

/// Two nodes changing the same users at once, each change applied before its next, as the
/// REST API does: the nodes end with the same state of every user (the one the stream stored
/// last), and that state is one of the changes made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_changing_the_same_users_at_once_converge() {
    const USERS: usize = 20;
    const ROUNDS: usize = 8;
    let (_nats, _store_a, _store_b, a, b) = two_nodes().await;
    let (dir_a, dir_b) = (directory(&a), directory(&b));
    dir_a.store().set_pbkdf2_iterations(1000).expect("iterations");
    for i in 0..USERS {
        let name = format!("u{i}");
        dir_a
            .store()
            .add_user(&name, mesgd_providers::builtin::AuthType::Basic, Some(b"pw"), false)
            .expect("user");
    }
    dir_a.sync().await;
    applied(&b, &format!("u{}", USERS - 1), Instant::now(), |r| r.is_some()).await;

    // Each node appends rules naming itself; the stream orders the two nodes' versions.
    let change = |directory: Arc<UserDirectory>, node: &'static str| async move {
        for round in 0..ROUNDS {
            for i in 0..USERS {
                let rule =
                    mesgd_core::acl::Rule::new(format!("{node}/{round}"), mesgd_core::acl::Permission::Read);
                // A rule of the other node's may have replaced the user's list meanwhile.
                let _ = directory.store().add_rule(&format!("u{i}"), rule, None);
                directory.sync().await;
            }
        }
    };
    tokio::join!(change(dir_a.clone(), "a"), change(dir_b.clone(), "b"));

    let rules = |d: &UserDirectory| -> Vec<Option<Vec<String>>> {
        let records = d.records();
        (0..USERS)
            .map(|i| {
                records.get(&format!("u{i}")).map(|r| r.rules.iter().map(|r| r.pattern.clone()).collect())
            })
            .collect()
    };
    let (mut changes_a, mut changes_b) = (dir_a.changes(), dir_b.changes());
    let converged = tokio::time::timeout(Duration::from_secs(30), async {
        while rules(&dir_a) != rules(&dir_b) {
            tokio::select! {
                changed = changes_a.changed() => changed.expect("a's directory running"),
                changed = changes_b.changed() => changed.expect("b's directory running"),
            }
        }
    })
    .await;
    assert!(converged.is_ok(), "a and b differ after 30 s:\n{:?}\n{:?}", rules(&dir_a), rules(&dir_b));
    for user in rules(&dir_a) {
        let user = user.expect("every user is still there");
        assert!(!user.is_empty(), "every user has one of the changes made");
    }
}

/// A change made while NATS does not answer stays on its node (its publish times out and is
/// counted) and reaches the other node once NATS answers again, through the replicator's
/// periodic retry; the change does not get lost to the stream's older state meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_nats_hangs_reaches_the_cluster_when_it_answers() {
    let (nats, store_a, _store_b, a, b) = two_nodes().await;
    store_a.add_user("eve", "eve-secret").await;
    applied(&b, "eve", Instant::now(), |r| r.is_some()).await;

    nats.pause().await;
    store_a.add_rule("eve", "t/#", "read").await;
    let errors = || cluster(&a).stats().users_publish_errors.load(std::sync::atomic::Ordering::Relaxed);
    let on_a = directory(&a);
    common::within("a's publish to time out (after 5 s)", async {
        while errors() == 0 {
            // Polled: a counter has no notification.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(on_a.records()["eve"].rules.len(), 1, "the change stays on a");
    nats.resume();
    let took = applied(&b, "eve", Instant::now(), |r| r.is_some_and(|r| r.rules.len() == 1)).await;
    println!("the change reached b {took:?} after NATS answered again");
    assert_eq!(on_a.records()["eve"].rules.len(), 1, "and a still has it");
}

/// Roles made and given a pattern back to back on one node (each change applied before the
/// next): every node ends with every role and its two patterns, and the node that made them
/// writes nothing of its own back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_changed_back_to_back_on_one_node_all_reach_every_node() {
    const ROLES: usize = 60;
    let (_nats, _store_a, _store_b, a, b) = two_nodes().await;
    let a_directory = directory(&a);
    let on_a = a_directory.store();
    for i in 0..ROLES {
        let name = format!("r{i}");
        on_a.add_role(&name).expect("role");
        on_a.role_add_pattern(&name, "/site=1").expect("pattern");
        a_directory.sync().await;
        on_a.role_add_pattern(&name, "/site=2").expect("second pattern");
        a_directory.sync().await;
    }
    let complete = |server: &TestServer| -> Vec<String> {
        let roles = directory(server).store().roles().expect("roles readable");
        (0..ROLES)
            .map(|i| format!("r{i}"))
            .filter(|n| !roles.iter().any(|r| &r.name == n && r.patterns == ["/site=1", "/site=2"]))
            .collect()
    };
    let b_directory = directory(&b);
    let mut changes = b_directory.changes();
    let reached = tokio::time::timeout(Duration::from_secs(30), async {
        while !complete(&b).is_empty() {
            changes.changed().await.expect("directory running");
        }
    })
    .await;
    assert!(reached.is_ok(), "roles incomplete on b after 30 s: {:?}", complete(&b));
    assert!(complete(&a).is_empty(), "roles incomplete on a: {:?}", complete(&a));
    let applied_on_a = counted(&a, |s| &s.users_applied);
    assert_eq!(applied_on_a, 0, "a wrote its own older states back into its store");
}

/// The users stream deleted while the nodes run (an operator's `nats stream rm`, or NATS's
/// storage lost): the nodes notice at their next check, create it again and put their users
/// back, so that a node that joins afterwards gets them, and changes made afterwards reach
/// every node as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_users_stream_is_created_again_and_filled_from_the_nodes() {
    let (nats, store_a, store_b, a, b) = two_nodes().await;
    store_a.add_user("fay", "fay-secret").await;
    store_a.add_rule("fay", "t/#", "readwrite").await;
    applied(&b, "fay", Instant::now(), |r| r.is_some_and(|r| r.rules.len() == 1)).await;

    nats.delete_stream("MESGD_USERS").await;
    common::within("both nodes to follow a new users stream", async {
        while counted(&a, |s| &s.users_rejoins) == 0 || counted(&b, |s| &s.users_rejoins) == 0 {
            // Polled: a counter has no notification (the nodes check every 5 s).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // A node with an empty store joins after the deletion: the users are in the stream again.
    let store_late = Storage::new();
    let late = node(&store_late, &nats, "late").await;
    applied(&late, "fay", Instant::now(), |r| r.is_some_and(|r| r.rules.len() == 1)).await;
    let (_, code) = login(&late, "fay-late", "fay", b"fay-secret").await;
    assert_eq!(code, ReasonCode::Success, "the late node has fay's password from the new stream");

    // And replication goes on both ways: a user added on b reaches a and the late node.
    store_b.add_user("gus", "gus-secret").await;
    applied(&a, "gus", Instant::now(), |r| r.is_some()).await;
    applied(&late, "gus", Instant::now(), |r| r.is_some()).await;
    assert!(directory(&a).records().contains_key("fay"), "a kept fay through the deletion");
    assert!(directory(&b).records().contains_key("fay"), "b kept fay through the deletion");
}
