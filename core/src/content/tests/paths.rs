//! Path syntax, canonical form and matching rules.

use proptest::prelude::*;

use super::support::*;
use crate::content::{Constraint, Key, Path, PathError};

#[test]
fn canonical_forms() {
    for (written, canonical) in [
        ("/", "/"),
        ("", "/"),
        ("//", "/"),
        ("/*", "/"),
        ("/*/room=lobby", "/"),
        ("/room=lobby", "/room=lobby"),
        ("room=lobby", "/room=lobby"),
        ("/room=lobby/kind=chat", "/kind=chat/room=lobby"),
        ("//kind=chat///room=lobby/", "/kind=chat/room=lobby"),
        ("/room", "/room=*"),
        ("/room=", "/room=*"),
        ("/room=*", "/room=*"),
        ("/room/room=lobby", "/room=lobby"),
        ("/room=lobby/room=lobby", "/room=lobby"),
        ("/room=lobby/*", "/room=lobby"),
        ("/foo=bar/*/narf=borf", "/foo=bar"),
        ("/10=a/2=b/0", "/0=*/2=b/10=a"),
        ("/01=x", "/01=x"),
        ("/a b=c d", "/a b=c d"),
        ("/k=%20", "/k=%20"),
        ("/é=ü", "/é=ü"),
        ("/b/a/B", "/B=*/a=*/b=*"),
    ] {
        assert_eq!(p(written).to_string(), canonical, "{written}");
    }
}

#[test]
fn malformed_paths_are_refused_naming_the_segment() {
    let long = format!("/k={}", "v".repeat(5000));
    let many: String = (0..65).map(|i| format!("/k{i}")).collect();
    let cases: Vec<(&str, PathError)> = vec![
        ("/a=b=c", PathError::ExtraEquals { segment: "a=b=c".into() }),
        ("/ok/a==", PathError::ExtraEquals { segment: "a==".into() }),
        ("/=b", PathError::EmptyKey { segment: "=b".into() }),
        ("/=", PathError::EmptyKey { segment: "=".into() }),
        ("/a*=b", PathError::StarInKey { segment: "a*=b".into() }),
        ("/**", PathError::StarInKey { segment: "**".into() }),
        ("/*=*", PathError::StarInKey { segment: "*=*".into() }),
        ("/a=b*", PathError::StarInValue { segment: "a=b*".into() }),
        ("/a=**", PathError::StarInValue { segment: "a=**".into() }),
        ("/room=lobby/*/a=b=c", PathError::ExtraEquals { segment: "a=b=c".into() }),
        ("/4294967296=x", PathError::PositionOutOfRange { segment: "4294967296=x".into() }),
        ("/a=1/a=2", PathError::ConflictingValues { first: "a=1".into(), second: "a=2".into() }),
        (
            "/0=x/kind=chat",
            PathError::MixedPositionsAndNames { position: "0=x".into(), name: "kind=chat".into() },
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(Path::parse(input), Err(expected), "{input}");
    }
    assert!(matches!(Path::parse(&long), Err(PathError::TooLong { len: 5003, limit: 4096 })));
    // Bare keys grow by `=*` in canonical form: within the limit as written, over it canonically
    // (found by fuzzing: the canonical text must parse again).
    let bare: String = (0..64).map(|i| format!("/k{i:02}{}", "x".repeat(59))).collect();
    assert_eq!(bare.len(), 4032);
    assert_eq!(Path::parse(&bare), Err(PathError::CanonicalTooLong { len: 4160, limit: 4096 }));
    assert_eq!(Path::parse(&many), Err(PathError::TooManySegments { limit: 64 }));
    // Errors say what was wrong and name the segment.
    let message = Path::parse("/x/a=b=c").unwrap_err().to_string();
    assert!(message.contains("'a=b=c'") && message.contains("'='"), "{message}");
}

#[test]
fn url_paths_are_decoded_before_parsing() {
    assert_eq!(Path::from_url_path("/room=lobby%20one").unwrap().to_string(), "/room=lobby one");
    assert_eq!(Path::from_url_path("/kind%3Dchat%2Froom%3D%2A").unwrap().to_string(), "/kind=chat/room=*");
    assert_eq!(Path::from_url_path("/k=caf%C3%A9").unwrap().to_string(), "/k=café");
    assert_eq!(Path::from_url_path("/a%3Db%3Dc"), Err(PathError::ExtraEquals { segment: "a=b=c".into() }));
    assert!(matches!(Path::from_url_path("/k=%2"), Err(PathError::InvalidPercentEncoding { offset: 3, .. })));
    assert!(matches!(Path::from_url_path("/k=%FF"), Err(PathError::NotUtf8 { offset: 3 })));
}

#[test]
fn segments_are_exposed() {
    let path = p("/room=lobby/from");
    let segs: Vec<_> = path.segments().map(|s| (s.key, s.constraint)).collect();
    assert_eq!(
        segs,
        [(Key::Name("from"), Constraint::Present), (Key::Name("room"), Constraint::Equals("lobby"))]
    );
    assert_eq!(path.len(), 2);
    assert!(!path.is_positional() && !path.matches_everything());
    assert!(p("/3=x").is_positional());
    assert!(p("/*").matches_everything() && p("/").is_empty());
    let json: Path = serde_json::from_str("\"/b/a=1\"").unwrap();
    assert_eq!(serde_json::to_string(&json).unwrap(), "\"/a=1/b=*\"");
    assert!(serde_json::from_str::<Path>("\"/a=b=c\"").is_err());
}

/// (path, message, matches) — the seed's rules and the decisions in docs/content.md.
const MATCHES: &[(&str, &str, bool)] = &[
    ("/kind=chat/room=lobby", r#"{"kind":"chat","room":"lobby","text":"hello"}"#, true),
    ("/kind=chat/room=lobby", r#"{"room":"lobby","text":"hello","kind":"chat"}"#, true),
    ("/kind=chat/room=lobby", r#"{"kind":"chat","room":"hall"}"#, false),
    ("/kind=chat/room=*", r#"{"kind":"chat","room":"hall"}"#, true),
    ("/room", r#"{"room":{"deep":[1]}}"#, true),
    ("/room", r#"{"room":[]}"#, true),
    ("/room", r#"{"room":null}"#, true),
    ("/room", r#"{"rooms":1}"#, false),
    ("/room=lobby", r#"{"room":{"room":"lobby"}}"#, false),
    ("/deep=x", r#"{"a":{"deep":"x"}}"#, false),
    ("/n=5", r#"{"n":5}"#, true),
    ("/n=5", r#"{"n":"5"}"#, true),
    ("/n=5", r#"{"n":5.0}"#, false),
    ("/n=5", r#"{"n":5e0}"#, false),
    ("/n=-1.5e3", r#"{"n":-1.5e3}"#, true),
    ("/b=true", r#"{"b":true}"#, true),
    ("/b=true", r#"{"b":"true"}"#, true),
    ("/b=false", r#"{"b":true}"#, false),
    ("/z=null", r#"{"z":null}"#, true),
    ("/0=foo", r#"["foo","bar","narf","blat"]"#, true),
    ("/5=foo", r#"["foo","bar","narf","blat"]"#, false),
    ("/1=bar/3=blat", r#"["foo","bar","narf","blat"]"#, true),
    ("/0", r#"["foo"]"#, true),
    ("/1", r#"["foo"]"#, false),
    ("/0=foo", r#"{"0":"foo"}"#, false),
    ("/01=foo", r#"{"01":"foo"}"#, true),
    ("/0=foo", r#"[["foo"]]"#, false),
    ("/kind=chat", r#"["chat"]"#, false),
    ("/", r#"{"foo":"bar","narf":"blat"}"#, true),
    ("/", "[]", true),
    ("/*", "{}", true),
    ("/foo/*", r#"{"foo":"bar","narf":"blat"}"#, true),
    ("/foo/narf", r#"{"foo":"bar","narf":"blat"}"#, true),
    ("/foo/narf/blat", r#"{"foo":"bar","narf":"blat"}"#, false),
    ("/foo=bar/narf=", r#"{"foo":"bar","narf":"blat"}"#, true),
    ("/foo=blat/narf=blat", r#"{"foo":"bar","narf":"blat"}"#, false),
    ("/foo=bar/*/narf=borf", r#"{"foo":"bar","narf":"blat"}"#, true),
    ("/k=a\"b", r#"{"k":"a\"b"}"#, true),
    ("/k\"q=é", r#"{"k\u0022q":"\u00e9"}"#, true),
    ("/k=😀", r#"{"k":"\ud83d\ude00"}"#, true),
    ("/k=x y", r#"{"k":"x\u0020y"}"#, true),
    ("/k=2", r#"{"k":1,"k":2}"#, true),
    ("/k=1", r#"{"k":1,"k":2}"#, false),
    ("/k", r#"{"\u006b":1}"#, true),
];

#[test]
fn matching_follows_the_rules() {
    for &(path, json, expected) in MATCHES {
        let doc: serde_json::Value = serde_json::from_str(json).unwrap();
        let path = p(path);
        assert_eq!(path.matches(&scan(json)), expected, "{path} on {json}");
        // The reference sees serde_json's rendering of numbers, which rewrites exponents.
        if !json.contains("e0") && !json.contains("e3") {
            assert_eq!(reference_matches(&path, &doc), expected, "reference: {path} on {json}");
        }
    }
}

proptest! {
    #[test]
    fn canonical_text_round_trips(text in path_text()) {
        if let Ok(path) = Path::parse(&text) {
            let again = Path::parse(path.as_str()).unwrap();
            prop_assert_eq!(&again, &path);
            // Segment order does not matter.
            let mut segs: Vec<&str> = text.split('/').collect();
            if !text.contains('*') {
                segs.reverse();
                prop_assert_eq!(Path::parse(&segs.join("/")).unwrap(), path);
            }
        }
    }

    #[test]
    fn matching_agrees_with_the_reference(doc in doc(), style in any::<u64>(), path in arb_path()) {
        let text = doc.write(style);
        let message = scan(&text);
        prop_assert_eq!(path.matches(&message), reference_matches(&path, &doc.to_value()), "{} on {}", path, text);
    }

    #[test]
    fn key_order_does_not_matter(doc in doc(), style in any::<u64>(), path in arb_path()) {
        let super::support::Doc::Object(members) = &doc else { return Ok(()) };
        // Reordering keeps the last of repeated keys last.
        let value = doc.to_value();
        let mut reordered: Vec<(String, serde_json::Value)> = value.as_object().unwrap().clone().into_iter().collect();
        reordered.reverse();
        let a = doc.write(style);
        let b = super::support::Doc::Object(reordered).write(style);
        prop_assert_eq!(path.matches(&scan(&a)), path.matches(&scan(&b)), "{} on {} vs {}", path, a, b);
        let _ = members;
    }
}
