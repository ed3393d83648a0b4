//! The builtin and x509 providers against a real SQLite file, changed from a second connection
//! as the command line does it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mesgd_core::acl::Permission::{Deny, Read, ReadWrite, Write};
use mesgd_core::auth::{Authenticator, DenyReason, IdentityState, LiveIdentity, Revocation, TlsInfo};
use mesgd_providers::builtin::lookup::{LOOKUP_BURST, LOOKUPS_PER_SECOND};
use mesgd_providers::builtin::password::MIN_PBKDF2_ITERATIONS;
use mesgd_providers::builtin::{AuthType, BuiltinProvider, Store, UserDirectory, config_db_path};
use mesgd_providers::x509::X509Provider;
use mesgd_providers::{BuildContext, Registry};

use crate::support::{allowed, decide, denied, info, next, providers, rule, within};

/// A published bcrypt test vector (password `U*U`), as another broker would have stored it.
const BCRYPT_U_STAR_U: &str = "$2y$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW";

struct Fixture {
    _dir: tempfile::TempDir,
    db: PathBuf,
    /// A second connection to the file, standing in for `mesgd user ...` in another process.
    admin: Store,
    directory: Arc<UserDirectory>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = config_db_path(dir.path());
        let admin = Store::open(&db).expect("opens");
        admin.set_pbkdf2_iterations(MIN_PBKDF2_ITERATIONS).expect("fast hashes for tests");
        admin.add_user("alice", AuthType::Basic, Some(b"alice-pw"), false).expect("adds");
        admin.add_rule("alice", rule("devices/%u/#", ReadWrite), None).expect("adds");
        admin.add_rule("alice", rule("public/#", Read), None).expect("adds");
        admin.add_user("root", AuthType::Basic, Some(b"root-pw"), true).expect("adds");
        admin.add_user("locked-out", AuthType::Basic, Some(b"pw"), false).expect("adds");
        admin.add_user("old-broker", AuthType::Basic, Some(b"replaced"), false).expect("adds");
        admin.set_password_hash("old-broker", BCRYPT_U_STAR_U).expect("imports");
        let fresh_bcrypt = bcrypt::hash("fresh-pw", 4).expect("bcrypt hashes");
        admin.add_user("bcrypt-user", AuthType::Basic, Some(b"replaced"), false).expect("adds");
        admin.set_password_hash("bcrypt-user", &fresh_bcrypt).expect("imports");
        admin.add_user("disabled", AuthType::Basic, Some(b"disabled-pw"), false).expect("adds");
        admin.set_disabled("disabled", true).expect("disables");
        admin.add_user("device-1", AuthType::X509, None, false).expect("adds");
        admin.add_rule("device-1", rule("telemetry/%c", Write), None).expect("adds");
        admin.add_user("device-off", AuthType::X509, None, false).expect("adds");
        admin.set_disabled("device-off", true).expect("disables");
        let directory = Arc::new(UserDirectory::open(&db).expect("opens"));
        directory.set_poll_interval(Duration::from_millis(20));
        Fixture { _dir: dir, db, admin, directory }
    }

    fn provider(&self, verify_cache: bool) -> BuiltinProvider {
        BuiltinProvider::new(Arc::clone(&self.directory), verify_cache)
    }

    /// Makes a change through the second connection and waits until the broker applied it.
    async fn change(&self, what: &str, change: impl FnOnce(&Store)) {
        let mut applied = self.directory.changes();
        applied.borrow_and_update();
        change(&self.admin);
        within(what, applied.changed()).await.expect("the directory is alive");
    }
}

impl Fixture {
    /// Makes the poll wait a minute from now on: after this, only `check_now` or a read on a
    /// miss brings changes in. (A change is applied first, so the poll thread is known to have
    /// started its long wait.)
    async fn quiet_poll(&self) {
        self.directory.set_poll_interval(Duration::from_secs(60));
        self.change("the last polled change", |admin| {
            admin.add_user("before-quiet", AuthType::X509, None, false).expect("adds");
            self.directory.check_now();
        })
        .await;
    }
}

async fn next_state(live: &mut LiveIdentity, what: &str) -> IdentityState {
    within(what, live.changed()).await;
    live.current()
}

#[tokio::test]
async fn passwords_and_records_decide() {
    let fx = Fixture::new();
    let builtin = fx.provider(true);

    let alice = allowed(decide(&builtin, &info(Some("alice"), Some(b"alice-pw"))).await);
    assert_eq!(alice.username.as_deref(), Some("alice"));
    assert_eq!(alice.client_id, "c1");
    assert_eq!(alice.provider, "builtin");
    assert_eq!(alice.acl, Some(vec![rule("devices/%u/#", ReadWrite), rule("public/#", Read)]));
    assert!(alice.expires_at.is_none());
    assert!(alice.live.is_some(), "builtin identities follow later changes");

    assert_eq!(
        allowed(decide(&builtin, &info(Some("root"), Some(b"root-pw"))).await).acl,
        None,
        "unrestricted"
    );
    assert_eq!(
        allowed(decide(&builtin, &info(Some("locked-out"), Some(b"pw"))).await).acl,
        Some(vec![]),
        "no rules = every topic denied"
    );
    allowed(decide(&builtin, &info(Some("old-broker"), Some(b"U*U"))).await);
    allowed(decide(&builtin, &info(Some("bcrypt-user"), Some(b"fresh-pw"))).await);

    for (username, password) in [
        ("alice", Some(&b"alice-pW"[..])),
        ("alice", Some(b"")),
        ("alice", None),
        ("old-broker", Some(b"U*V")),
        ("bcrypt-user", Some(b"replaced")),
        ("disabled", Some(b"wrong")),
    ] {
        let denial = denied(decide(&builtin, &info(Some(username), password)).await);
        assert_eq!(denial.reason, DenyReason::BadCredentials, "{username} / {password:?}: {denial:?}");
        assert!(!denial.message.contains("alice-p"), "no password in messages: {}", denial.message);
    }
    let disabled = denied(decide(&builtin, &info(Some("disabled"), Some(b"disabled-pw"))).await);
    assert_eq!(disabled.reason, DenyReason::NotAuthorized);
    assert!(disabled.message.contains("disabled"), "{}", disabled.message);

    let certificate_only = denied(decide(&builtin, &info(Some("device-1"), Some(b"anything"))).await);
    assert_eq!(certificate_only.reason, DenyReason::NotAuthorized);

    next(decide(&builtin, &info(Some("nobody"), Some(b"pw"))).await);
    next(decide(&builtin, &info(None, Some(b"alice-pw"))).await);
    next(decide(&builtin, &info(None, None)).await);
}

#[tokio::test]
async fn changes_from_another_connection_reach_connected_clients() {
    let fx = Fixture::new();
    let builtin = fx.provider(true);
    let identity = allowed(decide(&builtin, &info(Some("alice"), Some(b"alice-pw"))).await);
    let mut live = identity.live.expect("live handle");
    // A second connection of the same account shares the updates.
    let mut second =
        allowed(decide(&builtin, &info(Some("alice"), Some(b"alice-pw"))).await).live.expect("live");

    fx.admin.add_rule("alice", rule("secret/#", Deny), Some(0)).expect("adds");
    let expected = vec![rule("secret/#", Deny), rule("devices/%u/#", ReadWrite), rule("public/#", Read)];
    assert_eq!(
        next_state(&mut live, "the new rule").await,
        IdentityState::Active(Some(expected.clone().into()))
    );
    assert_eq!(next_state(&mut second, "the new rule").await, IdentityState::Active(Some(expected.into())));

    fx.admin.set_unrestricted("alice", true).expect("unrestricts");
    assert_eq!(next_state(&mut live, "unrestricted").await, IdentityState::Active(None));

    fx.admin.set_disabled("alice", true).expect("disables");
    assert_eq!(next_state(&mut live, "disabled").await, IdentityState::Revoked(Revocation::Disabled));
    assert_eq!(
        denied(decide(&builtin, &info(Some("alice"), Some(b"alice-pw"))).await).reason,
        DenyReason::NotAuthorized
    );

    fx.change("enable", |admin| admin.set_disabled("alice", false).expect("enables")).await;
    let again = allowed(decide(&builtin, &info(Some("alice"), Some(b"alice-pw"))).await);
    assert_eq!(again.acl, None, "still unrestricted");
    let mut live = again.live.expect("a fresh live handle");
    assert!(!live.has_changed());

    fx.admin.remove_user("alice").expect("removes");
    assert_eq!(next_state(&mut live, "deleted").await, IdentityState::Revoked(Revocation::Deleted));
}

#[tokio::test]
async fn a_password_change_keeps_connections_but_not_cached_checks() {
    let fx = Fixture::new();
    let builtin = fx.provider(true);

    let identity = allowed(decide(&builtin, &info(Some("alice"), Some(b"alice-pw"))).await);
    let live = identity.live.expect("live handle");
    assert_eq!(builtin.hash_runs(), 1);
    allowed(decide(&builtin, &info(Some("alice"), Some(b"alice-pw"))).await);
    assert_eq!(builtin.hash_runs(), 1, "the second login is answered from the cache");
    denied(decide(&builtin, &info(Some("alice"), Some(b"guess"))).await);
    denied(decide(&builtin, &info(Some("alice"), Some(b"guess"))).await);
    assert_eq!(builtin.hash_runs(), 2, "wrong passwords are cached too");

    fx.change("the password change", |admin| admin.set_password("alice", b"new-pw").expect("sets")).await;
    assert!(!live.has_changed(), "a password change leaves connected clients alone");
    denied(decide(&builtin, &info(Some("alice"), Some(b"alice-pw"))).await);
    assert_eq!(builtin.hash_runs(), 3, "the old password's cached answer is gone");
    allowed(decide(&builtin, &info(Some("alice"), Some(b"new-pw"))).await);
    allowed(decide(&builtin, &info(Some("alice"), Some(b"new-pw"))).await);
    assert_eq!(builtin.hash_runs(), 4);

    fx.change("a rule change", |admin| {
        admin.add_rule("alice", rule("x", Read), None).expect("adds");
    })
    .await;
    allowed(decide(&builtin, &info(Some("alice"), Some(b"new-pw"))).await);
    assert_eq!(builtin.hash_runs(), 5, "any change to the user drops its cached checks");

    let uncached = fx.provider(false);
    for _ in 0..3 {
        allowed(decide(&uncached, &info(Some("root"), Some(b"root-pw"))).await);
    }
    assert_eq!(uncached.hash_runs(), 3, "verify_cache = false checks every time");
}

#[tokio::test]
async fn a_storm_of_identical_logins_costs_a_few_hash_runs() {
    let fx = Fixture::new();
    let builtin = Arc::new(fx.provider(true));
    let logins: Vec<_> = (0..64)
        .map(|_| {
            let builtin = Arc::clone(&builtin);
            tokio::spawn(async move { decide(&*builtin, &info(Some("alice"), Some(b"alice-pw"))).await })
        })
        .collect();
    for login in logins {
        allowed(login.await.expect("login task"));
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert!(builtin.hash_runs() <= cpus, "{} hash runs for 64 identical logins", builtin.hash_runs());
}

#[tokio::test]
async fn users_added_while_running_can_log_in() {
    let fx = Fixture::new();
    let builtin = fx.provider(true);
    next(decide(&builtin, &info(Some("late"), Some(b"late-pw"))).await);
    fx.change("the new user", |admin| {
        admin.add_user("late", AuthType::Basic, Some(b"late-pw"), false).expect("adds")
    })
    .await;
    allowed(decide(&builtin, &info(Some("late"), Some(b"late-pw"))).await);
}

fn with_cert(common_name: Option<&str>) -> mesgd_core::auth::ConnectInfo {
    let tls = TlsInfo::new(vec![b"leaf certificate (DER)".to_vec()], common_name.map(str::to_owned), vec![]);
    info(None, None).with_tls(Some(tls))
}

#[tokio::test]
async fn x509_selects_certificate_records_by_common_name() {
    let fx = Fixture::new();
    let mut ctx = BuildContext::new(fx.db.parent().expect("storage dir"));
    let chain = Registry::with_builtin_providers()
        .build_chain(
            &providers("[[auth.providers]]\ntype = \"x509\"\n[[auth.providers]]\ntype = \"builtin\""),
            false,
            &mut ctx,
        )
        .expect("builds");
    let x509: &dyn Authenticator = &*chain.entries()[0].provider;
    assert_eq!(x509.name(), "x509");

    let device = allowed(decide(x509, &with_cert(Some("device-1"))).await);
    assert_eq!(device.username.as_deref(), Some("device-1"));
    assert_eq!(device.provider, "x509");
    assert_eq!(device.acl, Some(vec![rule("telemetry/%c", Write)]));

    let off = denied(decide(x509, &with_cert(Some("device-off"))).await);
    assert_eq!(off.reason, DenyReason::NotAuthorized);

    next(decide(x509, &with_cert(Some("alice"))).await); // a basic record
    next(decide(x509, &with_cert(Some("unknown-device"))).await);
    next(decide(x509, &with_cert(None)).await);
    next(decide(x509, &info(None, None)).await); // no TLS
    let no_client_cert =
        info(None, None).with_tls(Some(TlsInfo::new(vec![], Some("device-1".into()), vec![])));
    next(decide(x509, &no_client_cert).await);
    let with_username = with_cert(Some("device-1")).with_username(Some("device-1".into()));
    next(decide(x509, &with_username).await);

    let mut live = device.live.expect("live handle");
    let admin = Store::open(&fx.db).expect("opens");
    admin.set_disabled("device-1", true).expect("disables");
    assert_eq!(next_state(&mut live, "disabled device").await, IdentityState::Revoked(Revocation::Disabled));
}

#[tokio::test]
async fn provider_settings_reach_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut ctx = BuildContext::new(dir.path());
    let toml = "[[auth.providers]]\ntype = \"builtin\"\npbkdf2_iterations = 1500\nverify_cache = false\npoll_interval_ms = 50";
    Registry::with_builtin_providers().build_chain(&providers(toml), false, &mut ctx).expect("builds");
    let store = Store::open(&config_db_path(dir.path())).expect("the provider created the database");
    assert_eq!(store.pbkdf2_iterations().expect("reads"), 1500);
    store.add_user("u", AuthType::Basic, Some(b"pw"), false).expect("adds");
    let hash = store.user("u").expect("reads").expect("exists").password_hash.expect("hash");
    assert!(
        hash.starts_with("$pbkdf2-sha256$i=1500,l=32$"),
        "the command line hashes with the configured count"
    );

    for (toml, expected) in [
        ("pbkdf2_iterations = 10", "`pbkdf2_iterations` must be 1000 to 10000000, found 10"),
        ("poll_interval_ms = 1", "`poll_interval_ms` must be 10 to 60000, found 1"),
        (
            "verify_cach = true",
            "unknown field `verify_cach`, expected one of `pbkdf2_iterations`, `verify_cache`, `poll_interval_ms`",
        ),
    ] {
        let text = format!("[[auth.providers]]\ntype = \"builtin\"\n{toml}");
        let error = Registry::with_builtin_providers()
            .build_chain(&providers(&text), false, &mut BuildContext::new(dir.path()))
            .expect_err("refused");
        assert_eq!(error.to_string(), format!("auth.providers[1] (type = \"builtin\"): {expected}"));
    }
}

#[tokio::test]
async fn check_now_applies_a_change_without_waiting_for_the_poll() {
    let fx = Fixture::new();
    fx.directory.set_poll_interval(Duration::from_secs(60));
    // The first change may still be seen by a tick at the fixture's short interval; the second
    // one can only be seen in time if `check_now` wakes the poll.
    for name in ["first", "second"] {
        let mut applied = fx.directory.changes();
        applied.borrow_and_update();
        fx.admin.add_user(name, AuthType::X509, None, false).expect("adds");
        fx.directory.check_now();
        while fx.directory.user(name).is_none() {
            within("the change after check_now", applied.changed()).await.expect("directory alive");
        }
    }
}

#[tokio::test]
async fn a_user_added_by_another_connection_logs_in_before_the_poll_sees_it() {
    let fx = Fixture::new();
    // No poll tick can bring the new records in during this test: only the read on a miss.
    fx.quiet_poll().await;
    let applied = *fx.directory.changes().borrow();
    let builtin = fx.provider(true);
    let x509 = X509Provider::new(Arc::clone(&fx.directory));
    fx.admin.add_user("new-user", AuthType::Basic, Some(b"new-pw"), false).expect("adds");
    fx.admin.add_rule("new-user", rule("inbox/%u", Read), None).expect("adds");
    fx.admin.add_user("new-device", AuthType::X509, None, false).expect("adds");

    let user = allowed(decide(&builtin, &info(Some("new-user"), Some(b"new-pw"))).await);
    assert_eq!(user.acl, Some(vec![rule("inbox/%u", Read)]));
    denied(decide(&builtin, &info(Some("new-user"), Some(b"wrong"))).await);
    let device = allowed(decide(&x509, &with_cert(Some("new-device"))).await);
    assert_eq!(device.username.as_deref(), Some("new-device"));
    assert_eq!(*fx.directory.changes().borrow(), applied, "the poll did not run");
    let stats = fx.directory.lookup_stats();
    assert_eq!((stats.store_reads, stats.found), (2, 2), "{stats:?}");

    // The identity of a user found this way follows later changes like any other.
    let mut live = device.live.expect("live handle");
    fx.admin.set_disabled("new-device", true).expect("disables");
    fx.directory.check_now();
    assert_eq!(next_state(&mut live, "disabled device").await, IdentityState::Revoked(Revocation::Disabled));
    // And a removal is not undone by what the read found earlier.
    let mut applied = fx.directory.changes();
    fx.admin.remove_user("new-user").expect("removes");
    fx.directory.check_now();
    while fx.directory.user("new-user").is_some() {
        within("the removal", applied.changed()).await.expect("directory alive");
    }
    next(decide(&builtin, &info(Some("new-user"), Some(b"new-pw"))).await);
}

#[tokio::test]
async fn a_burst_of_unknown_names_costs_a_bounded_number_of_store_reads() {
    let opened = std::time::Instant::now();
    let fx = Fixture::new();
    fx.quiet_poll().await;
    let builtin = Arc::new(fx.provider(true));
    let burst = |names: Vec<String>| {
        let tasks: Vec<_> = names
            .into_iter()
            .map(|name| {
                let builtin = Arc::clone(&builtin);
                tokio::spawn(async move { decide(&*builtin, &info(Some(&name), Some(b"guess"))).await })
            })
            .collect();
        async move {
            for task in tasks {
                next(task.await.expect("login task"));
            }
        }
    };

    // One name, many times at once: one read, the rest wait for it and find the negative entry.
    burst(vec!["ghost".to_string(); 200]).await;
    let stats = fx.directory.lookup_stats();
    assert_eq!((stats.store_reads, stats.known_missing), (1, 199), "{stats:?}");

    // Many names: the budget caps the reads; every miss is either a read or over budget.
    burst((0..500).map(|i| format!("unknown-{i}")).collect()).await;
    let elapsed = opened.elapsed().as_secs_f64();
    let stats = fx.directory.lookup_stats();
    let bound = LOOKUP_BURST as u64 + (LOOKUPS_PER_SECOND as f64 * elapsed).ceil() as u64;
    assert!(
        stats.store_reads <= bound,
        "{} reads, at most {bound} allowed in {elapsed:.3} s",
        stats.store_reads
    );
    assert_eq!(stats.store_reads - 1 + stats.over_budget, 500, "{stats:?}");
    assert!(stats.over_budget > 0, "the budget was reached: {stats:?}");

    // Known users do not need the budget.
    allowed(decide(&*builtin, &info(Some("alice"), Some(b"alice-pw"))).await);
    // Names longer than any stored one are never read.
    let before = fx.directory.lookup_stats();
    next(decide(&*builtin, &info(Some(&"x".repeat(2000)), Some(b"pw"))).await);
    assert_eq!(fx.directory.lookup_stats(), before);
}
