//! The indexed matcher: behaviour, a differential test against each path's own `matches`, and
//! the removal guarantee under concurrent matching.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::support::*;
use crate::content::{Matcher, MatcherFull, Message, Path};

fn matched(m: &Matcher<u64>, msg: &Message<'_>) -> Vec<u64> {
    let mut ids = Vec::new();
    m.for_each_match(msg, |id| ids.push(id));
    ids.sort_unstable();
    ids
}

#[test]
fn registers_matches_replaces_and_removes() {
    let m = Matcher::new();
    assert!(m.is_empty());
    m.insert(1, p("/kind=chat/room=lobby")).unwrap();
    m.insert(2, p("/room=*")).unwrap();
    m.insert(3, p("/")).unwrap();
    m.insert(4, p("/0=chat")).unwrap();
    m.insert(5, p("/kind=chat/room=lobby")).unwrap();
    m.insert(6, p("/text")).unwrap();
    assert_eq!(m.len(), 6);
    let msg = scan(r#"{"kind":"chat","room":"lobby","text":{"a":1}}"#);
    assert_eq!(matched(&m, &msg), [1, 2, 3, 5, 6]);
    assert_eq!(matched(&m, &scan(r#"["chat"]"#)), [3, 4]);
    assert_eq!(matched(&m, &scan(r#"{"room":"hall"}"#)), [2, 3]);
    // Replacing a path returns the old one.
    assert_eq!(m.insert(2, p("/room=hall")).unwrap(), Some(p("/room=*")));
    assert_eq!(m.path(2), Some(p("/room=hall")));
    assert_eq!(matched(&m, &msg), [1, 3, 5, 6]);
    assert!(m.remove(1));
    assert!(!m.remove(1));
    assert_eq!(m.path(1), None);
    assert_eq!(matched(&m, &msg), [3, 5, 6]);
    assert_eq!(m.len(), 5);
    let mut seen = Vec::new();
    m.matches(br#"{"room":"hall"}"#, |id| seen.push(id)).unwrap();
    seen.sort_unstable();
    assert_eq!(seen, [2, 3]);
    assert!(m.matches(b"5", |_| {}).is_err());
    for id in [2, 3, 4, 5, 6] {
        assert!(m.remove(id));
    }
    assert!(m.is_empty());
    assert_eq!(matched(&m, &msg), Vec::<u64>::new());
}

#[test]
fn yields_each_listener_once_whatever_the_message_repeats() {
    let m = Matcher::new();
    m.insert(1, p("/k=1")).unwrap();
    m.insert(2, p("/k")).unwrap();
    m.insert(3, p("/k=1/j=1")).unwrap();
    assert_eq!(matched(&m, &scan(r#"{"k":1,"k":1,"j":1,"k":1}"#)), [1, 2, 3]);
    assert_eq!(matched(&m, &scan(r#"{"k":1,"k":2,"j":1}"#)), [2]);
    // The same path under many ids, and the message matched twice.
    for id in 10..20 {
        m.insert(id, p("/j=1")).unwrap();
    }
    let msg = scan(r#"{"j":1}"#);
    assert_eq!(matched(&m, &msg), (10..20).collect::<Vec<_>>());
    assert_eq!(matched(&m, &msg), (10..20).collect::<Vec<_>>());
}

#[test]
fn the_path_is_handed_to_the_callback_for_coverage_checks() {
    let m = Matcher::new();
    m.insert(1u32, p("/room=lobby/from=ann")).unwrap();
    m.insert(2u32, p("/room=lobby")).unwrap();
    let grant = p("/room=lobby/from=*");
    let mut allowed = Vec::new();
    m.for_each_match_with_path(&scan(r#"{"room":"lobby","from":"ann"}"#), |id, path| {
        if grant.covers(path) {
            allowed.push(id);
        }
    });
    assert_eq!(allowed, [1]);
}

#[test]
fn refuses_listeners_beyond_its_limit() {
    let m = Matcher::with_max_listeners(2);
    m.insert(1u8, p("/a")).unwrap();
    m.insert(2, p("/b")).unwrap();
    assert_eq!(m.insert(3, p("/c")), Err(MatcherFull { limit: 2 }));
    assert_eq!(m.refused(), 1);
    assert_eq!(m.insert(2, p("/c")).unwrap(), Some(p("/b")));
    assert_eq!(m.len(), 2);
}

#[test]
fn memory_follows_the_listeners() {
    let m = Matcher::new();
    let empty = m.memory_bytes();
    for id in 0..1000u64 {
        m.insert(id, Path::parse(&format!("/user=u{id}/kind=chat")).unwrap()).unwrap();
    }
    let full = m.memory_bytes();
    assert!(full > empty + 1000 * 64, "{empty} → {full}");
    for id in 0..1000u64 {
        m.remove(id);
    }
    assert!(m.memory_bytes() < full);
}

#[test]
fn a_callback_may_change_the_matcher() {
    let m = Matcher::new();
    m.insert(1u64, p("/a")).unwrap();
    m.insert(2, p("/a")).unwrap();
    let msg = scan(r#"{"a":1}"#);
    let mut called = Vec::new();
    m.for_each_match(&msg, |id| {
        called.push(id);
        // Would wait for itself if the matcher did not notice it is called from a match.
        m.remove(3 - id);
        m.insert(10 + id, p("/a=1")).unwrap();
    });
    // The first callback removed the other listener, which then received nothing, although
    // the match was already running when it was removed.
    assert_eq!(called.len(), 1, "{called:?}");
    let first = called[0];
    let mut after = matched(&m, &msg);
    after.sort_unstable();
    assert_eq!(after, vec![first, 10 + first]);
}

#[test]
fn a_callback_may_remove_its_own_listener() {
    let m = Matcher::new();
    m.insert(1u64, p("/a")).unwrap();
    let msg = scan(r#"{"a":1}"#);
    let mut calls = 0;
    m.for_each_match(&msg, |id| {
        calls += 1;
        // Would wait for itself if its own callback counted as one in progress.
        assert!(m.remove(id));
    });
    assert_eq!(calls, 1);
    assert!(matched(&m, &msg).is_empty());
    assert!(m.is_empty());
}

/// A removal waits for a callback of its listener that is already running, and only then
/// returns: the guarantee covers a match that was in progress.
#[test]
fn a_removal_waits_for_a_running_callback_of_its_listener() {
    let m = Arc::new(Matcher::new());
    m.insert(1u64, p("/a")).unwrap();
    let (removing, returned) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let reader = {
        let (m, removing, returned) = (m.clone(), removing.clone(), returned.clone());
        std::thread::spawn(move || {
            let msg = Message::scan(br#"{"a":1}"#).unwrap();
            let mut early = false;
            m.for_each_match(&msg, |_| {
                entered_tx.send(()).unwrap();
                while !removing.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                // The remover is in `remove` (or about to be): for the next 20 ms it must not
                // return while this callback runs.
                let until = Instant::now() + Duration::from_millis(20);
                while Instant::now() < until {
                    early |= returned.load(Ordering::SeqCst);
                }
            });
            early
        })
    };
    entered_rx.recv().unwrap();
    removing.store(true, Ordering::SeqCst);
    assert!(m.remove(1));
    returned.store(true, Ordering::SeqCst);
    assert!(!reader.join().unwrap(), "remove returned while a callback of its listener was running");
    let msg = scan(r#"{"a":1}"#);
    assert!(matched(&m, &msg).is_empty());
}

/// The matcher and the linear scan (each path's own `matches`) agree on 1.6 × 10⁵ message/path
/// pairs, before and after removing listeners (about a second in a debug build).
#[test]
fn agrees_with_a_linear_scan() {
    assert!(differential(10) >= 160_000);
}

/// The same on 1.6 × 10⁶ pairs: `cargo test --release -p mesgd-core -- --ignored linear_scan`.
#[test]
#[ignore = "about 10 s in a debug build; run with --release"]
fn agrees_with_a_linear_scan_on_a_million_pairs() {
    assert!(differential(100) >= 1_000_000);
}

/// Runs `cases` random cases of 200 paths × 40 messages; returns the pairs compared.
fn differential(cases: u32) -> u64 {
    const PATHS: usize = 200;
    const MESSAGES: usize = 40;
    let pairs = Cell::new(0u64);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let strategy = (
        proptest::collection::vec(arb_path(), PATHS),
        proptest::collection::vec((doc(), any::<u64>()), MESSAGES),
        proptest::collection::vec(any::<bool>(), PATHS),
    );
    runner
        .run(&strategy, |(paths, docs, keep)| {
            let m = Matcher::new();
            for (id, path) in paths.iter().enumerate() {
                m.insert(id as u64, path.clone()).unwrap();
            }
            let texts: Vec<String> = docs.iter().map(|(d, style)| d.write(*style)).collect();
            let check = |live: &dyn Fn(usize) -> bool| -> Result<(), TestCaseError> {
                for text in &texts {
                    let msg = scan(text);
                    let mut got = Vec::new();
                    m.for_each_match(&msg, |id| got.push(id));
                    let n = got.len();
                    let got: BTreeSet<u64> = got.into_iter().collect();
                    prop_assert_eq!(n, got.len(), "a listener yielded twice on {}", text);
                    let want: BTreeSet<u64> = paths
                        .iter()
                        .enumerate()
                        .filter(|(id, path)| live(*id) && path.matches(&msg))
                        .map(|(id, _)| id as u64)
                        .collect();
                    prop_assert_eq!(&got, &want, "on {}", text);
                    pairs.set(pairs.get() + paths.len() as u64);
                }
                Ok(())
            };
            check(&|_| true)?;
            for (id, k) in keep.iter().enumerate() {
                if !k && id % 3 == 0 {
                    prop_assert!(m.remove(id as u64));
                }
            }
            check(&|id| keep[id] || id % 3 != 0)
        })
        .unwrap();
    pairs.get()
}

/// A listener removed while another thread matches never appears in a match after `remove`
/// returns, even in a match that was already running.
#[test]
fn a_removed_listener_receives_nothing_once_remove_returns() {
    const VICTIM: u64 = u64::MAX;
    let m = Arc::new(Matcher::new());
    for id in 0..1000u64 {
        m.insert(id, Path::parse(&format!("/kind=chat/user=u{id}")).unwrap()).unwrap();
    }
    let removed = Arc::new(AtomicBool::new(true));
    let stop = Arc::new(AtomicBool::new(false));
    let (violations, seen) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reader = {
        let (m, removed, stop, violations, seen) =
            (m.clone(), removed.clone(), stop.clone(), violations.clone(), seen.clone());
        std::thread::spawn(move || {
            let text = r#"{"kind":"chat","user":"u7","room":"lobby"}"#;
            let msg = Message::scan(text.as_bytes()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            // Until the writers are done and at least one match was seen: on a loaded machine
            // the writers may finish before this thread first runs, and the listeners they
            // leave behind still have to be matched (and checked) once.
            while !(stop.load(Ordering::SeqCst) && seen.load(Ordering::Relaxed) > 0)
                && Instant::now() < deadline
            {
                m.for_each_match(&msg, |id| {
                    if id == VICTIM {
                        seen.fetch_add(1, Ordering::Relaxed);
                        if removed.load(Ordering::SeqCst) {
                            violations.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        })
    };
    let started = Instant::now();
    let mut rounds = 0;
    while rounds < 2000 || (seen.load(Ordering::Relaxed) < 10 && started.elapsed() < Duration::from_secs(5)) {
        removed.store(false, Ordering::SeqCst);
        m.insert(VICTIM, p("/room=lobby")).unwrap();
        for _ in 0..50 {
            std::hint::spin_loop();
        }
        assert!(m.remove(VICTIM));
        removed.store(true, Ordering::SeqCst);
        rounds += 1;
    }
    stop.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    assert_eq!(violations.load(Ordering::Relaxed), 0);
    assert!(seen.load(Ordering::Relaxed) > 0, "the reader never saw the listener: the test proved nothing");
}

proptest! {
    #![proptest_config(Config { cases: 24, failure_persistence: None, ..Config::default() })]

    /// Through any run of inserts, replacements and removals (lists growing and emptying,
    /// the anchor table growing, shrinking and rebuilding its filter), the matcher yields
    /// exactly the live listeners whose paths match.
    #[test]
    fn agrees_with_a_linear_scan_through_churn(
        ops in proptest::collection::vec((0u64..120, proptest::option::weighted(0.6, arb_path())), 1..600),
        docs in proptest::collection::vec((doc(), any::<u64>()), 8),
    ) {
        let m = Matcher::new();
        let mut live: std::collections::BTreeMap<u64, Path> = std::collections::BTreeMap::new();
        let texts: Vec<String> = docs.iter().map(|(d, style)| d.write(*style)).collect();
        for (n, (id, path)) in ops.into_iter().enumerate() {
            match path {
                Some(path) => {
                    prop_assert_eq!(m.insert(id, path.clone()).unwrap(), live.insert(id, path));
                }
                None => prop_assert_eq!(m.remove(id), live.remove(&id).is_some()),
            }
            prop_assert_eq!(m.len(), live.len());
            if n % 25 == 0 {
                for text in &texts {
                    let msg = scan(text);
                    let want: Vec<u64> = live.iter().filter(|(_, p)| p.matches(&msg)).map(|(id, _)| *id).collect();
                    prop_assert_eq!(matched(&m, &msg), want, "on {}", text);
                }
            }
        }
    }
}

/// Messages with more anchors than one buffered pass holds (large objects and arrays, the same
/// key repeated) match exactly what each path's own `matches` says.
#[test]
fn large_messages_match_like_small_ones() {
    let m = Matcher::new();
    let mut paths = Vec::new();
    for i in 0..80u64 {
        paths.push(Path::parse(&format!("/k{i}=v{i}")).unwrap());
        paths.push(Path::parse(&format!("/k{i}/k{}=v{}", i + 1, i + 1)).unwrap());
        paths.push(Path::parse(&format!("/{i}=v{i}")).unwrap());
    }
    paths.push(p("/k3=other"));
    for (id, path) in paths.iter().enumerate() {
        m.insert(id as u64, path.clone()).unwrap();
    }
    let object: String =
        (0..70).map(|i| format!("\"k{i}\":\"v{i}\",")).collect::<String>() + "\"k3\":\"other\"";
    let array: String = (0..70).map(|i| format!("\"v{i}\"")).collect::<Vec<_>>().join(",");
    for text in [format!("{{{object}}}"), format!("[{array}]"), format!("{{{object},\"k3\":\"v3\"}}")] {
        let msg = scan(&text);
        let want: Vec<u64> =
            paths.iter().enumerate().filter(|(_, p)| p.matches(&msg)).map(|(id, _)| id as u64).collect();
        assert!(want.len() > 60, "the test needs many matches: {}", want.len());
        assert_eq!(matched(&m, &msg), want, "on {text}");
    }
}

/// Several writers at once (their changes published in shared batches) each get the right
/// answers for their own listeners, and a listener removed by any of them never reaches a
/// concurrent reader once its removal has returned.
#[test]
fn concurrent_writers_get_their_own_answers_and_removals_stay_strict() {
    const WRITERS: u64 = 4;
    const IDS: u64 = 64;
    let m = Arc::new(Matcher::new());
    let removed: Arc<Vec<AtomicBool>> = Arc::new((0..WRITERS * IDS).map(|_| AtomicBool::new(true)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let (violations, seen) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reader = {
        let (m, removed, stop, violations, seen) =
            (m.clone(), removed.clone(), stop.clone(), violations.clone(), seen.clone());
        std::thread::spawn(move || {
            let msg = Message::scan(br#"{"kind":"chat","room":"lobby"}"#).unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            // Until the writers are done and at least one match was seen: on a loaded machine
            // the writers may finish before this thread first runs, and the listeners they
            // leave behind still have to be matched (and checked) once.
            while !(stop.load(Ordering::SeqCst) && seen.load(Ordering::Relaxed) > 0)
                && Instant::now() < deadline
            {
                m.for_each_match(&msg, |id| {
                    seen.fetch_add(1, Ordering::Relaxed);
                    if removed[id as usize].load(Ordering::SeqCst) {
                        violations.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (m, removed) = (m.clone(), removed.clone());
            std::thread::spawn(move || {
                let paths = [p("/kind=chat"), p("/room=lobby/kind=*"), p("/room=hall")];
                let mut mine: Vec<Option<usize>> = vec![None; IDS as usize];
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ w;
                for _ in 0..1000 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let k = (rng % IDS) as usize;
                    let id = w * IDS + k as u64;
                    if rng % 3 == 0 {
                        let was = mine[k].take();
                        assert_eq!(m.remove(id), was.is_some());
                        removed[id as usize].store(true, Ordering::SeqCst);
                    } else {
                        let n = (rng >> 32) as usize % paths.len();
                        // The last path does not match the reader's message: once an insert
                        // that replaces a matching path with it returns, the id must be gone.
                        if n != 2 {
                            removed[id as usize].store(false, Ordering::SeqCst);
                        }
                        let old = m.insert(id, paths[n].clone()).unwrap();
                        if n == 2 {
                            removed[id as usize].store(true, Ordering::SeqCst);
                        }
                        assert_eq!(old, mine[k].map(|i| paths[i].clone()));
                        mine[k] = Some(n);
                    }
                    assert_eq!(m.path(id), mine[k].map(|i| paths[i].clone()));
                }
                mine.iter().filter(|x| x.is_some()).count()
            })
        })
        .collect();
    let live: usize = writers.into_iter().map(|t| t.join().unwrap()).sum();
    stop.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    assert_eq!(m.len(), live);
    assert_eq!(violations.load(Ordering::Relaxed), 0);
    assert!(seen.load(Ordering::Relaxed) > 0, "the reader never saw a listener: the test proved nothing");
}

/// One caller at a time: each insert that changes something is one publication; removals take
/// effect without one and are unlinked from the index with the next publication, or in one of
/// their own once `PENDING_REMOVALS` (64) have piled up.
#[test]
fn each_lone_insert_is_one_publication_and_removals_ride_along() {
    let m = Matcher::new();
    m.insert(1u64, p("/a")).unwrap();
    m.insert(2, p("/b")).unwrap();
    m.insert(1, p("/c")).unwrap();
    assert_eq!(m.publications(), 3);
    assert!(!m.remove(9));
    assert_eq!(m.publications(), 3, "a removal that changes nothing publishes nothing");
    assert!(m.remove(2));
    assert_eq!(m.publications(), 3, "a removal is live without a publication");
    assert!(matched(&m, &scan(r#"{"b":1}"#)).is_empty());
    m.insert(3, p("/d")).unwrap();
    assert_eq!(m.publications(), 4);
    for id in 100..164 {
        m.insert(id, p("/e")).unwrap();
    }
    assert_eq!(m.publications(), 68);
    for id in 100..163 {
        assert!(m.remove(id));
    }
    assert_eq!(m.publications(), 68, "63 removals wait for a publication");
    assert!(m.remove(163));
    assert_eq!(m.publications(), 69, "the 64th publishes them");
    assert_eq!(m.len(), 2);
    assert!(matched(&m, &scan(r#"{"e":1}"#)).is_empty());
}
