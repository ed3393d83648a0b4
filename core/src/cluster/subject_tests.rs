//! The subject mapping: fixed examples, a malformed-input table, and the properties (round
//! trip both ways; NATS matching of mapped filters is MQTT matching; a literal `*` or `>`
//! never matches another topic).

use proptest::prelude::*;

use super::subject::{LIVE, MAX_SUBJECT_LEN, RETAINED, SubjectError, nats_matches, subject_as_filter};
use crate::topic::{TopicFilter, TopicName};

fn topic(s: &str) -> TopicName {
    TopicName::try_from(s).unwrap()
}

fn filter(s: &str) -> TopicFilter {
    TopicFilter::try_from(s).unwrap()
}

#[test]
fn topics_map_to_escaped_tokens() {
    let cases = [
        ("a/b", "mq.a.b"),
        ("a.b/c", "mq.a%2Eb.c"),
        ("a/*", "mq.a.%2A"),
        ("a/>", "mq.a.%3E"),
        ("/a", "mq.%.a"),
        ("a/", "mq.a.%"),
        ("a//b", "mq.a.%.b"),
        ("/", "mq.%.%"),
        ("a b\tc", "mq.a%20b%09c"),
        ("100%", "mq.100%25"),
        ("$SYS/x", "mqd.%24SYS.x"),
        ("a/$b", "mq.a.%24b"),
        ("é", "mq.%C3%A9"),
        ("Under_score-dash", "mq.Under_score-dash"),
    ];
    for (t, subject) in cases {
        assert_eq!(LIVE.topic(&topic(t)).unwrap(), subject, "{t:?}");
        assert_eq!(LIVE.parse_topic(subject).unwrap(), topic(t), "{subject:?}");
    }
    assert_eq!(RETAINED.topic(&topic("$x/y")).unwrap(), "mqrd.%24x.y");
}

#[test]
fn filters_map_to_subscriptions() {
    let cases: [(&str, &[&str]); 9] = [
        ("a/b", &["mq.a.b"]),
        ("a/+", &["mq.a.*"]),
        ("+/b", &["mq.*.b"]),
        ("a/#", &["mq.a", "mq.a.>"]),
        ("#", &["mq.>"]),
        ("+/#", &["mq.*", "mq.*.>"]),
        ("$SYS/#", &["mqd.%24SYS", "mqd.%24SYS.>"]),
        ("a/*/+", &["mq.a.%2A.*"]),
        ("/+/", &["mq.%.*.%"]),
    ];
    for (f, subjects) in cases {
        let got = LIVE.filter(&filter(f)).unwrap();
        assert_eq!(got.as_slice(), subjects, "{f:?}");
    }
}

#[test]
fn malformed_subjects_are_refused_with_the_reason() {
    type Check = fn(&SubjectError) -> bool;
    let cases: [(&str, Check); 17] = [
        ("", |e| matches!(e, SubjectError::WrongPrefix { .. })),
        ("mq", |e| matches!(e, SubjectError::WrongPrefix { .. })),
        ("mqr.a", |e| matches!(e, SubjectError::WrongPrefix { .. })),
        ("mq.", |e| matches!(e, SubjectError::EmptyToken { token: 0 })),
        ("mq.a..b", |e| matches!(e, SubjectError::EmptyToken { token: 1 })),
        ("mq.a.*", |e| matches!(e, SubjectError::Wildcard { wildcard: '*', token: 1 })),
        ("mq.>", |e| matches!(e, SubjectError::Wildcard { wildcard: '>', token: 0 })),
        ("mq.a%2e", |e| matches!(e, SubjectError::BadEscape { token: 0, offset: 1 })),
        ("mq.a%2", |e| matches!(e, SubjectError::BadEscape { .. })),
        ("mq.%41", |e| matches!(e, SubjectError::BadEscape { .. })),
        // Found by the cluster_subject fuzz target: '/' escaped inside a token read back as a
        // level separator, so the subject was not the canonical one of its topic.
        ("mq.ARRRBP%2F", |e| matches!(e, SubjectError::BadEscape { token: 0, offset: 6 })),
        ("mq.a%2Fb", |e| matches!(e, SubjectError::BadEscape { token: 0, offset: 1 })),
        ("mq.a$b", |e| matches!(e, SubjectError::BadEscape { offset: 1, .. })),
        ("mq.%FF", |e| matches!(e, SubjectError::NotUtf8)),
        ("mq.%2B", |e| matches!(e, SubjectError::NotATopic(_))),
        ("mq.%24SYS", |e| matches!(e, SubjectError::NotATopic(_))),
        ("mqd.SYS", |e| matches!(e, SubjectError::NotATopic(_))),
    ];
    for (subject, expected) in cases {
        let err = LIVE.parse_topic(subject).expect_err(subject);
        assert!(expected(&err), "{subject:?}: {err:?}");
        assert!(!err.to_string().is_empty());
    }
    assert!(matches!(LIVE.parse_topic("mq.%00"), Err(SubjectError::NotATopic(_))));
}

#[test]
fn a_subject_too_long_for_nats_is_refused() {
    let long = "*".repeat(MAX_SUBJECT_LEN / 3);
    assert!(matches!(LIVE.topic(&topic(&long)), Err(SubjectError::TooLong { .. })));
    assert!(matches!(LIVE.filter(&filter(&format!("{long}/#"))), Err(SubjectError::TooLong { .. })));
    assert!(LIVE.topic(&topic(&"a".repeat(MAX_SUBJECT_LEN - 3))).is_ok());
}

#[test]
fn nats_matching_is_nats_semantics() {
    assert!(nats_matches("mq.a.*", "mq.a.b"));
    assert!(!nats_matches("mq.a.*", "mq.a.b.c"));
    assert!(nats_matches("mq.a.>", "mq.a.b.c"));
    assert!(!nats_matches("mq.a.>", "mq.a"));
    assert!(!nats_matches("mq.a.%2A", "mq.a.b"));
    assert!(nats_matches("mq.a", "mq.a"));
}

fn level() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("*".to_owned()),
        Just(">".to_owned()),
        Just(".".to_owned()),
        Just("a.b".to_owned()),
        Just("$x".to_owned()),
        Just("%".to_owned()),
        Just("%2A".to_owned()),
        Just(" ".to_owned()),
        Just("é\u{1F600}".to_owned()),
        "[a-c*>.$% \t\u{e9}-]{1,4}",
    ]
}

fn topic_strategy() -> impl Strategy<Value = TopicName> {
    proptest::collection::vec(level(), 1..5)
        .prop_filter_map("a topic is not empty", |levels| TopicName::try_from(levels.join("/")).ok())
}

fn filter_strategy() -> impl Strategy<Value = TopicFilter> {
    let flevel = prop_oneof![4 => level(), 1 => Just("+".to_owned())];
    (proptest::collection::vec(flevel, 0..4), any::<bool>()).prop_filter_map(
        "needs a level",
        |(mut l, hash)| {
            if hash || l.is_empty() {
                l.push("#".to_owned());
            }
            TopicFilter::try_from(l.join("/")).ok()
        },
    )
}

proptest! {
    #[test]
    fn topic_round_trips(t in topic_strategy()) {
        let subject = LIVE.topic(&t).unwrap();
        prop_assert_eq!(&LIVE.parse_topic(&subject).unwrap(), &t);
        // No token is empty or a wildcard, and no whitespace survives.
        prop_assert!(subject.split('.').all(|tok| !tok.is_empty() && tok != "*" && tok != ">"));
        prop_assert!(!subject.contains(char::is_whitespace));
        prop_assert_eq!(subject_as_filter(&LIVE, &subject), Some(TopicFilter::from(t)));
    }

    #[test]
    fn nats_matching_of_mapped_filters_is_mqtt_matching(f in filter_strategy(), t in topic_strategy()) {
        let topic_subject = LIVE.topic(&t).unwrap();
        let subjects = LIVE.filter(&f).unwrap();
        let nats = subjects.iter().filter(|s| nats_matches(s, &topic_subject)).count();
        prop_assert_eq!(nats > 0, f.matches(&t), "{} on {} via {:?}", f, t, subjects);
        // Never two subjects of one filter for one topic: `a` and `a.>` are disjoint.
        prop_assert!(nats <= 1);
        for s in &subjects {
            match subject_as_filter(&LIVE, s) {
                Some(as_filter) => prop_assert_eq!(
                    as_filter.matches(&t), nats_matches(s, &topic_subject), "{} as {}", s, as_filter
                ),
                // Only the parent of `/#`, the empty topic, has no filter: it matches nothing.
                None => prop_assert!(s == "mq.%" && !nats_matches(s, &topic_subject), "{}", s),
            }
        }
    }

    #[test]
    fn a_literal_wildcard_never_matches_another_topic(a in topic_strategy(), b in topic_strategy()) {
        let (sa, sb) = (LIVE.topic(&a).unwrap(), LIVE.topic(&b).unwrap());
        prop_assert_eq!(nats_matches(&sa, &sb), a == b);
        // The topic used as a filter (a `*` or `>` level in it is a literal) matches only itself.
        let as_filter = LIVE.filter(&TopicFilter::from(a.clone())).unwrap();
        prop_assert_eq!(as_filter.iter().any(|s| nats_matches(s, &sb)), a == b);
    }

    #[test]
    fn subjects_round_trip(t in topic_strategy()) {
        let subject = RETAINED.topic(&t).unwrap();
        let back = RETAINED.parse_topic(&subject).unwrap();
        prop_assert_eq!(RETAINED.topic(&back).unwrap(), subject);
    }
}

#[test]
fn star_in_a_topic_does_not_match_b() {
    let star = LIVE.filter(&filter("a/*")).unwrap();
    assert!(!star.iter().any(|s| nats_matches(s, &LIVE.topic(&topic("a/b")).unwrap())));
    assert!(star.iter().any(|s| nats_matches(s, &LIVE.topic(&topic("a/*")).unwrap())));
    let gt = LIVE.filter(&filter("a/>")).unwrap();
    assert!(!gt.iter().any(|s| nats_matches(s, &LIVE.topic(&topic("a/b/c")).unwrap())));
}

#[test]
fn fuzz_body_accepts_odd_input() {
    for data in [&b""[..], b"\x00", b"a/b\nmq.a", b"\xff\xfe", b"#\n+/+\n$SYS/#\nmq.%", b"a/*\nmq.a.*"] {
        super::fuzzing::subject_mapping(data);
    }
}
