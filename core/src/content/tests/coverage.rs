//! Coverage: seed examples and its properties, including that it is exact.

use proptest::prelude::*;
use serde_json::{Value as Json, json};

use super::support::*;
use crate::content::{Constraint, Key, Path};

#[test]
fn seed_examples() {
    assert!(p("/room=lobby").covers(&p("/room=lobby/from=ann")));
    assert!(!p("/room=lobby").covers(&p("/room=*")));
    assert!(p("/room=*").covers(&p("/room=lobby")));
    assert!(p("/room").covers(&p("/room=lobby/from=ann")));
    assert!(!p("/room=lobby/from=ann").covers(&p("/room=lobby")));
    assert!(p("/").covers(&p("/room=lobby")));
    assert!(p("/*").covers(&p("/0=x")));
    assert!(p("/*/room=lobby").covers(&p("/room=hall")));
    assert!(!p("/room=lobby").covers(&p("/")));
    assert!(!p("/room=lobby").covers(&p("/room=hall")));
    assert!(p("/room=lobby/*").covers(&p("/from=ann/room=lobby")));
    // Positions: an element at 3 implies elements at 0..=2.
    assert!(p("/0").covers(&p("/3=x")));
    assert!(p("/1=a").covers(&p("/1=a/4")));
    assert!(!p("/4").covers(&p("/3=x")));
    assert!(!p("/0").covers(&p("/")));
    assert!(!p("/0").covers(&p("/kind=x")));
    assert!(!p("/kind").covers(&p("/0=kind")));
}

/// A message that `path` matches and that holds nothing else: values it does not fix are a
/// string no path can name.
fn witness(path: &Path) -> Json {
    let fresh = json!("fresh*");
    let value = |c: Constraint<'_>| match c {
        Constraint::Equals(v) => Json::String(v.into()),
        Constraint::Present => fresh.clone(),
    };
    if path.is_positional() {
        let last = path
            .segments()
            .filter_map(|s| if let Key::Position(i) = s.key { Some(i) } else { None })
            .max()
            .unwrap();
        let mut items = vec![fresh.clone(); last as usize + 1];
        for s in path.segments() {
            if let Key::Position(i) = s.key {
                items[i as usize] = value(s.constraint);
            }
        }
        Json::Array(items)
    } else {
        Json::Object(path.segments().map(|s| (s.key_text.to_owned(), value(s.constraint))).collect())
    }
}

fn matches(path: &Path, doc: &Json) -> bool {
    path.matches(&scan(&doc.to_string()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn reflexive(a in arb_path()) {
        prop_assert!(a.covers(&a));
    }

    #[test]
    fn transitive(a in arb_path(), b in arb_path(), c in arb_path()) {
        if a.covers(&b) && b.covers(&c) {
            prop_assert!(a.covers(&c), "{} covers {} covers {}", a, b, c);
        }
    }

    /// Whatever a covered path matches, the covering pattern matches.
    #[test]
    fn consistent_with_matching(a in arb_path(), b in arb_path(), doc in doc(), style in any::<u64>()) {
        let text = doc.write(style);
        let m = scan(&text);
        if a.covers(&b) && b.matches(&m) {
            prop_assert!(a.matches(&m), "{} covers {}, which matches {}", a, b, text);
        }
    }

    /// When `a` does not cover `b`, some message that `b` matches escapes `a`.
    #[test]
    fn exact(a in arb_path(), b in arb_path()) {
        let w = witness(&b);
        prop_assert!(matches(&b, &w), "{} misses its witness {}", b, w);
        prop_assert_eq!(a.covers(&b), matches(&a, &w), "{} vs {} on {}", a, b, w);
    }
}
