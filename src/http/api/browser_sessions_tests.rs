//! The session table with explicit time: alone (the single node), and as a node's copy of the
//! cluster's sessions with a cluster that records what it is asked.

use std::sync::Mutex;

use mesgd_core::cluster::console::ConsoleFuture;

use super::*;

const IDLE: Duration = Duration::from_secs(80);

/// A cluster that stores everything at once, numbering revisions from 100, and remembers the
/// writes it was asked for.
#[derive(Clone, Debug, Default)]
struct Recorded {
    calls: Arc<Mutex<Vec<String>>>,
    down: Arc<std::sync::atomic::AtomicBool>,
}

impl Recorded {
    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    fn unreachable(&self) -> bool {
        self.down.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl ConsoleCluster for Recorded {
    fn create(&self, id: &str, record: &ConsoleRecord) -> ConsoleFuture<Result<u64, Unreachable>> {
        self.calls.lock().unwrap().push(format!("create {id} {}", record.admin));
        let result = if self.unreachable() { Err(Unreachable) } else { Ok(100) };
        Box::pin(std::future::ready(result))
    }

    fn end(&self, id: &str) -> ConsoleFuture<Result<(), Unreachable>> {
        self.calls.lock().unwrap().push(format!("end {id}"));
        let result = if self.unreachable() { Err(Unreachable) } else { Ok(()) };
        Box::pin(std::future::ready(result))
    }

    fn touch(&self, id: &str, _: &ConsoleRecord, revision: u64) {
        self.calls.lock().unwrap().push(format!("touch {id} {revision}"));
    }

    fn forget(&self, id: &str, revision: u64) {
        self.calls.lock().unwrap().push(format!("forget {id} {revision}"));
    }

    fn fetch(&self, id: &str) -> ConsoleFuture<()> {
        self.calls.lock().unwrap().push(format!("fetch {id}"));
        Box::pin(std::future::ready(()))
    }
}

fn clustered(max: usize) -> (BrowserSessions, Recorded) {
    let sessions = BrowserSessions::new(IDLE, max);
    let cluster = Recorded::default();
    sessions.set_cluster(Arc::new(cluster.clone()));
    (sessions, cluster)
}

/// A session of another node: its id, the cookie its browser holds, and its record last used
/// `ago` before `wall`.
fn remote(n: u8, admin: &str, wall: SystemTime, ago: Duration) -> (String, String, ConsoleRecord) {
    let id = hex(&[n; 16]);
    let secret = [n; 32];
    let seen = unix_ms(wall) - u64::try_from(ago.as_millis()).unwrap();
    let record = ConsoleRecord::new(admin, &sha256(&secret), "remote-csrf", seen);
    (id.clone(), format!("{id}.{}", URL_SAFE_NO_PAD.encode(secret)), record)
}

fn id_of(cookie: &str) -> &str {
    cookie.split_once('.').unwrap().0
}

#[tokio::test]
async fn alone_a_session_is_the_cookie_s_until_idle_and_the_least_recently_used_goes_first() {
    let sessions = BrowserSessions::new(IDLE, 2);
    let (first, csrf) = sessions.open("root").await.unwrap();
    let t0 = crate::clock::now();
    let found = sessions.session(&first, t0).expect("open");
    assert_eq!((found.admin.as_str(), found.csrf.as_str()), ("root", csrf.as_str()));
    assert_eq!(found.id, id_of(&first));

    // An altered secret, a forged one, garbage: refused, and the session is untouched.
    let (id, secret) = first.split_once('.').unwrap();
    let mut altered = secret.as_bytes().to_vec();
    altered[3] = if altered[3] == b'A' { b'B' } else { b'A' };
    for bad in [
        format!("{id}.{}", String::from_utf8(altered).unwrap()),
        format!("{id}.{}", URL_SAFE_NO_PAD.encode([0u8; 32])),
        format!("{}.{secret}", hex(&[7; 16])),
        format!("{id}.not base64"),
        id.to_owned(),
        String::new(),
    ] {
        assert!(sessions.session(&bad, t0).is_none(), "{bad:?}");
    }

    // Used within the timeout it lives on; idle for the timeout it ends.
    assert!(sessions.session(&first, t0 + IDLE - Duration::from_secs(1)).is_some());
    assert!(sessions.is_open(id, t0 + IDLE));
    assert!(sessions.session(&first, t0 + 2 * IDLE - Duration::from_secs(1)).is_none(), "idle");
    assert!(!sessions.is_open(id, t0));

    // Two at most: a third ends the least recently used.
    let (a, _) = sessions.open("a").await.unwrap();
    let (b, _) = sessions.open("b").await.unwrap();
    let now = crate::clock::now() + Duration::from_secs(1);
    assert!(sessions.session(&a, now).is_some());
    let (c, _) = sessions.open("c").await.unwrap();
    let now = crate::clock::now();
    assert!(sessions.session(&b, now).is_none(), "b was used least recently");
    assert!(sessions.session(&a, now).is_some() && sessions.session(&c, now).is_some());
    sessions.close(id_of(&a)).await.unwrap();
    assert!(sessions.session(&a, now).is_none(), "logged out");
}

#[tokio::test]
async fn clustered_a_login_is_stored_before_its_cookie_and_a_logout_before_its_answer() {
    let (sessions, cluster) = clustered(8);
    let (cookie, _) = sessions.open("root").await.unwrap();
    let id = id_of(&cookie).to_owned();
    assert_eq!(cluster.calls(), [format!("create {id} root")]);
    assert_eq!(sessions.revisions(), [(id.clone(), 100)]);

    // The cluster unreachable: no session at the login, and a logout refused keeps it open.
    cluster.down.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(sessions.open("other").await, Err(Unreachable));
    assert_eq!(sessions.revisions().len(), 1, "the refused login left nothing");
    assert_eq!(sessions.close(&id).await, Err(Unreachable));
    assert!(sessions.session(&cookie, crate::clock::now()).is_some(), "still open");
    cluster.down.store(false, std::sync::atomic::Ordering::Relaxed);
    cluster.calls();
    sessions.close(&id).await.unwrap();
    assert_eq!(cluster.calls(), [format!("end {id}")]);
    assert!(sessions.session(&cookie, crate::clock::now()).is_none());
    // Its record coming back late (a comparison read it before the end) opens nothing.
    let wall = SystemTime::now();
    let record = ConsoleRecord::new("root", &[0; 32], "x", unix_ms(wall));
    assert_eq!(sessions.apply(&id, Change::Put(record, 100)), Applied::Stale);
}

#[tokio::test]
async fn clustered_another_node_s_session_is_valid_here_until_idle_on_every_node() {
    let (sessions, cluster) = clustered(8);
    let (now, wall) = (crate::clock::now(), SystemTime::now());
    // Made on another node, last used there 70 s ago (the timeout is 80 s).
    let (id, cookie, record) = remote(1, "root", wall, Duration::from_secs(70));
    assert_eq!(sessions.apply_at(&id, Change::Put(record.clone(), 5), now, wall), Applied::Kept);
    let found = sessions.session(&cookie, now).expect("valid here");
    assert_eq!((found.admin.as_str(), found.csrf.as_str()), ("root", "remote-csrf"));
    // The use here is written back (at the revision known): it was 70 s since the last write.
    assert_eq!(cluster.calls(), [format!("touch {id} 5")]);
    // Used again within touch_every (10 s): not written again.
    assert!(sessions.session(&cookie, now + Duration::from_secs(9)).is_some());
    assert!(cluster.calls().is_empty());

    // Its use on a third node comes back through the bucket: the timeout counts from there.
    let later = now + Duration::from_secs(60);
    let used = ConsoleRecord { seen_ms: unix_ms(wall + Duration::from_secs(59)), ..record.clone() };
    assert_eq!(
        sessions.apply_at(&id, Change::Put(used, 6), later, wall + Duration::from_secs(60)),
        Applied::Kept
    );
    assert!(sessions.is_open(&id, now + Duration::from_secs(59) + IDLE - Duration::from_millis(1)));
    assert!(!sessions.is_open(&id, now + Duration::from_secs(59) + IDLE));
    // An older record (a lagging watch) changes nothing.
    assert_eq!(sessions.apply_at(&id, Change::Put(record.clone(), 5), later, wall), Applied::Stale);

    // Ended on another node: gone here, and its last record coming late does not revive it.
    assert_eq!(sessions.apply_at(&id, Change::Gone, later, wall), Applied::Kept);
    assert!(sessions.session(&cookie, later).is_none());
    assert_eq!(sessions.apply_at(&id, Change::Put(record, 7), later, wall), Applied::Stale);

    // Already idle when it arrives (another node's clock says so): not taken.
    let (id, cookie, old) = remote(2, "root", wall, IDLE);
    assert_eq!(sessions.apply_at(&id, Change::Put(old, 8), now, wall), Applied::Stale);
    assert!(sessions.session(&cookie, now).is_none());
}

#[tokio::test]
async fn clustered_idle_and_least_recently_used_sessions_are_forgotten_at_their_revision() {
    let (sessions, cluster) = clustered(2);
    let (now, wall) = (crate::clock::now(), SystemTime::now());
    let (old, old_cookie, old_record) = remote(1, "a", wall, Duration::from_secs(50));
    let (recent, recent_cookie, recent_record) = remote(2, "b", wall, Duration::from_secs(10));
    sessions.apply_at(&old, Change::Put(old_record.clone(), 11), now, wall);
    sessions.apply_at(&recent, Change::Put(recent_record, 12), now, wall);
    // The cap counts every node's sessions: a login here ends the least recently used.
    let (mine, _) = sessions.open("c").await.unwrap();
    let calls = cluster.calls();
    assert_eq!(calls[0], format!("forget {old} 11"), "{calls:?}");
    assert_eq!(calls[1], format!("create {} c", id_of(&mine)));
    let now = crate::clock::now();
    assert!(sessions.session(&old_cookie, now).is_none());
    assert!(sessions.session(&recent_cookie, now).is_some());
    // A use on another node that beat the delete (a newer revision) brings it back; the
    // record the delete was made at does not.
    assert_eq!(sessions.apply_at(&old, Change::Put(old_record.clone(), 11), now, wall), Applied::Stale);
    let used = ConsoleRecord { seen_ms: unix_ms(wall), ..old_record };
    assert_eq!(sessions.apply_at(&old, Change::Put(used, 13), now, wall), Applied::Kept);

    // Idle here: ended at the first request after the timeout, and forgotten at its revision.
    cluster.calls();
    assert!(sessions.session(&recent_cookie, now + IDLE).is_none());
    assert_eq!(cluster.calls(), [format!("forget {recent} 12")]);

    // Other nodes' sessions beyond twice the cap are not taken.
    let (sessions, _) = clustered(1);
    for n in 1..=3 {
        let (id, _, record) = remote(n, "x", wall, Duration::ZERO);
        let applied = sessions.apply_at(&id, Change::Put(record, u64::from(n)), now, wall);
        assert_eq!(applied, if n <= 2 { Applied::Kept } else { Applied::Full }, "session {n}");
    }
}

#[tokio::test]
async fn clustered_a_cookie_of_a_session_not_known_here_is_looked_up_once_in_the_bucket() {
    let (sessions, cluster) = clustered(8);
    let (now, wall) = (crate::clock::now(), SystemTime::now());
    // Not here yet (made on another node a moment ago): one lookup, then the table decides.
    let (id, cookie, record) = remote(1, "root", wall, Duration::from_secs(1));
    assert!(sessions.session_anywhere(&cookie, now).await.is_none(), "the fake bucket has nothing");
    assert_eq!(cluster.calls(), [format!("fetch {id}")]);
    // Known here: decided here, whatever the secret.
    sessions.apply_at(&id, Change::Put(record, 3), now, wall);
    assert!(sessions.session_anywhere(&cookie, now).await.is_some());
    let wrong = format!("{id}.{}", URL_SAFE_NO_PAD.encode([9u8; 32]));
    assert!(sessions.session_anywhere(&wrong, now).await.is_none());
    // Ended here: its record must not come back through a lookup either.
    let (mine, _) = sessions.open("root").await.unwrap();
    sessions.close(id_of(&mine)).await.unwrap();
    assert!(sessions.session_anywhere(&mine, now).await.is_none());
    // Not a session id at all: no lookup.
    for bad in ["garbage", "abc.def", "mesgd", ""] {
        assert!(sessions.session_anywhere(bad, now).await.is_none());
    }
    let calls = cluster.calls();
    assert!(calls.iter().all(|c| !c.starts_with("fetch")), "{calls:?}");
}
