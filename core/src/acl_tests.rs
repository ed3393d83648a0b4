//! Unit and property tests of the ACL engine: rule order, substitution, the exact subscribe
//! intersection against brute force, and the cached whole-filter decision.

use proptest::prelude::*;
use serde::de::value::{Error as ValueError, StrDeserializer};

use super::*;

fn name(s: &str) -> TopicName {
    TopicName::try_from(s).unwrap()
}

fn filter(s: &str) -> TopicFilter {
    TopicFilter::try_from(s).unwrap()
}

fn rules(list: &[(&str, Permission)]) -> Vec<Rule> {
    list.iter().map(|&(pattern, permission)| Rule::new(pattern, permission)).collect()
}

fn acl(list: &[(&str, Permission)]) -> Acl {
    Acl::compile(Some(&rules(list)), Some("alice"), "client-1")
}

use Permission::{Deny, Read, ReadWrite, Write};

#[test]
fn write_rule_does_not_hide_a_later_read_rule() {
    let acl = acl(&[("a/#", Write), ("#", Read)]);
    assert!(acl.allows(Access::Read, &name("a/x")));
    assert!(acl.allows(Access::Write, &name("a/x")));
    assert!(acl.allows(Access::Read, &name("b")));
    assert!(!acl.allows(Access::Write, &name("b")), "the read rule grants no write");
    assert!(acl.allows_subscribe(&filter("a/+")));
}

#[test]
fn deny_then_all_hides_exactly_one_topic() {
    let acl = acl(&[("test/x", Deny), ("#", ReadWrite)]);
    for access in [Access::Read, Access::Write] {
        assert!(!acl.allows(access, &name("test/x")));
        for visible in ["test/y", "test/x/y", "test", "other"] {
            assert!(acl.allows(access, &name(visible)), "{visible}");
        }
    }
    assert!(!acl.allows_subscribe(&filter("test/x")));
    assert!(acl.allows_subscribe(&filter("test/+")));
    assert!(acl.allows_subscribe(&filter("#")));
}

#[test]
fn nil_list_is_unrestricted_and_empty_list_denies_everything() {
    let open = Acl::compile(None, Some("alice"), "c");
    assert!(open.is_unrestricted());
    assert!(Acl::unrestricted().is_unrestricted());
    assert!(open.allows(Access::Read, &name("$SYS/x")));
    assert!(open.allows(Access::Write, &name("a")));
    assert!(open.allows_subscribe(&filter("#")));

    let closed = Acl::compile(Some(&[]), Some("alice"), "c");
    assert!(!closed.is_unrestricted());
    assert!(!closed.allows(Access::Read, &name("a")));
    assert!(!closed.allows(Access::Write, &name("a")));
    assert!(!closed.allows_subscribe(&filter("#")));
    assert!(!closed.allows_subscribe(&filter("a")));
}

#[test]
fn first_matching_rule_decides() {
    let deny_first = acl(&[("a/secret", Deny), ("a/#", Read)]);
    assert!(!deny_first.allows(Access::Read, &name("a/secret")));
    assert!(deny_first.allows(Access::Read, &name("a/public")));
    assert!(!deny_first.allows_subscribe(&filter("a/secret")));
    assert!(deny_first.allows_subscribe(&filter("a/+")));

    let allow_first = acl(&[("a/#", Read), ("a/secret", Deny)]);
    assert!(allow_first.allows(Access::Read, &name("a/secret")));
    assert!(allow_first.allows_subscribe(&filter("a/secret")));

    // A deny rule decides both accesses.
    let acl = acl(&[("a/+", Deny), ("#", ReadWrite)]);
    assert!(!acl.allows(Access::Write, &name("a/b")));
    assert!(acl.allows(Access::Write, &name("a/b/c")));
    // Every topic "a/+/#" matches is readable except the two-level ones, and there are
    // longer ones.
    assert!(acl.allows_subscribe(&filter("a/+/#")));
    assert!(!acl.allows_subscribe(&filter("a/+")));
}

#[test]
fn write_only_rules_grant_no_read() {
    let acl = acl(&[("a/#", Write)]);
    assert!(acl.allows(Access::Write, &name("a/x")));
    assert!(!acl.allows(Access::Read, &name("a/x")));
    assert!(!acl.allows_subscribe(&filter("a/#")));
    assert!(!acl.allows_subscribe(&filter("a/x")));
    let read_only = self::acl(&[("a/#", Read)]);
    assert!(!read_only.allows(Access::Write, &name("a/x")));
}

#[test]
fn dollar_topics_need_an_explicit_rule() {
    let everything = acl(&[("#", ReadWrite), ("+/#", ReadWrite)]);
    assert!(!everything.allows(Access::Read, &name("$SYS/broker/uptime")));
    assert!(!everything.allows(Access::Write, &name("$SYS/x")));
    assert!(!everything.allows_subscribe(&filter("$SYS/#")));
    assert!(everything.allows_subscribe(&filter("#")));

    let sys = acl(&[("$SYS/#", Read)]);
    assert!(sys.allows(Access::Read, &name("$SYS/broker/uptime")));
    assert!(sys.allows_subscribe(&filter("$SYS/#")));
    assert!(sys.allows_subscribe(&filter("$SYS/+/uptime")));
    // '#' never delivers a '$' topic, so with only the $SYS rule it delivers nothing.
    assert!(!sys.allows_subscribe(&filter("#")));
    assert!(!sys.allows_subscribe(&filter("+/broker/uptime")));
    // Below the first level '$' is an ordinary character.
    let nested = acl(&[("a/+", Read)]);
    assert!(nested.allows(Access::Read, &name("a/$x")));
}

#[test]
fn substitution_of_username_and_client_id() {
    let list = rules(&[("devices/%u/#", ReadWrite), ("clients/%c", Read), ("x/%u-%c/y", Read)]);
    let acl = Acl::compile(Some(&list), Some("alice"), "c1");
    assert!(acl.allows(Access::Write, &name("devices/alice/temp")));
    assert!(acl.allows(Access::Read, &name("devices/alice")));
    assert!(!acl.allows(Access::Read, &name("devices/bob/temp")));
    assert!(acl.allows(Access::Read, &name("clients/c1")));
    assert!(!acl.allows(Access::Read, &name("clients/c2")));
    assert!(acl.allows(Access::Read, &name("x/alice-c1/y")));
    assert!(acl.allows_subscribe(&filter("devices/+/temp")));
    assert!(!acl.allows_subscribe(&filter("clients/+/x")));

    // Substitution is a single pass: a username that spells "%c" stays literal.
    let single = rules(&[("users/%u", Read)]);
    let acl = Acl::compile(Some(&single), Some("%c"), "secret");
    assert!(acl.allows(Access::Read, &name("users/%c")));
    assert!(!acl.allows(Access::Read, &name("users/secret")));

    // Other '%' sequences are literal text.
    let literal = Acl::compile(Some(&rules(&[("a/%d/100%", Read)])), None, "c");
    assert!(literal.allows(Access::Read, &name("a/%d/100%")));
}

#[test]
fn injected_values_never_widen_a_rule() {
    let list = rules(&[("devices/%u/#", ReadWrite), ("clients/%c/#", ReadWrite)]);
    let probes = ["devices/x", "devices/a/b", "devices/a/b/c", "devices/+", "clients/x/y", "clients/a/b/c"];
    let check = |username: Option<&str>, client_id: &str| {
        let acl = Acl::compile(Some(&list), username, client_id);
        for topic in probes {
            if let Ok(topic) = TopicName::try_from(topic) {
                assert!(!acl.allows(Access::Read, &topic), "{username:?}/{client_id:?} reads {topic}");
                assert!(!acl.allows(Access::Write, &topic), "{username:?}/{client_id:?} writes {topic}");
            }
        }
        for f in ["#", "devices/#", "clients/#", "devices/+/#", "clients/+/+"] {
            assert!(!acl.allows_subscribe(&filter(f)), "{username:?}/{client_id:?} subscribes {f}");
        }
    };
    for bad in ["a/b", "+", "#", "x\0y", "", "a+", "b#c", "/"] {
        check(Some(bad), bad);
    }
    check(None, "");
    check(None, "a/b");

    // A username cannot move a rule into the '$' topics.
    let acl = Acl::compile(Some(&rules(&[("%u/#", Read)])), Some("$SYS"), "c");
    assert!(!acl.allows(Access::Read, &name("$SYS/x")));
    assert!(!acl.allows_subscribe(&filter("$SYS/#")));
    // But a '$' pattern may use one.
    let acl = Acl::compile(Some(&rules(&[("$SYS/clients/%c", Read)])), None, "c9");
    assert!(acl.allows(Access::Read, &name("$SYS/clients/c9")));
}

#[test]
fn invalid_patterns_match_nothing_and_fail_validation() {
    let list = rules(&[("a/#/b", ReadWrite), ("", ReadWrite), ("ok/+", Read)]);
    let acl = Acl::compile(Some(&list), None, "c");
    assert!(!acl.allows(Access::Read, &name("a/x/b")));
    assert!(acl.allows(Access::Read, &name("ok/1")));

    let cases: &[(&str, Option<TopicError>)] = &[
        ("devices/%u/#", None),
        ("%c", None),
        ("%u%c", None),
        ("$SYS/#", None),
        ("a/%x", None),
        ("a/#/b", Some(TopicError::InvalidWildcard)),
        ("a%u+", Some(TopicError::InvalidWildcard)),
        ("", Some(TopicError::Empty)),
        ("a\0", Some(TopicError::Nul)),
    ];
    for (pattern, expected) in cases {
        let got = Rule::new(*pattern, Read).validate();
        match expected {
            None => assert_eq!(got, Ok(()), "{pattern:?}"),
            Some(source) => match got {
                Err(AclError::InvalidPattern { source: s, .. }) => assert_eq!(s, *source, "{pattern:?}"),
                other => panic!("{pattern:?}: {other:?}"),
            },
        }
    }
    let long = format!("{}/#/x", "a".repeat(1000));
    let message = Rule::new(long, Read).validate().unwrap_err().to_string();
    assert!(message.len() < 300, "the error quotes only the beginning: {message}");
}

#[test]
fn permission_names() {
    let cases: &[(&str, Result<Permission, ()>)] = &[
        ("read", Ok(Read)),
        ("write", Ok(Write)),
        ("readwrite", Ok(ReadWrite)),
        ("rw", Ok(ReadWrite)),
        ("all", Ok(ReadWrite)),
        ("deny", Ok(Deny)),
        ("READ", Ok(Read)),
        ("Deny", Ok(Deny)),
        ("", Err(())),
        ("reed", Err(())),
        (" read", Err(())),
        ("read,write", Err(())),
        ("r\0", Err(())),
    ];
    for (input, expected) in cases {
        assert_eq!(Permission::parse(input).map_err(|_| ()), *expected, "{input:?}");
    }
    for p in [Read, Write, ReadWrite, Deny] {
        assert_eq!(Permission::parse(p.as_str()), Ok(p));
        assert_eq!(p.to_string().parse::<Permission>(), Ok(p));
        // The serde form is the canonical name, and serde accepts the aliases too.
        let de = Permission::deserialize(StrDeserializer::<ValueError>::new(p.as_str()));
        assert_eq!(de, Ok(p));
    }
    for alias in ["rw", "all"] {
        assert_eq!(Permission::deserialize(StrDeserializer::<ValueError>::new(alias)), Ok(ReadWrite));
    }
    let huge = "x".repeat(100_000);
    match Permission::parse(&huge) {
        Err(AclError::UnknownPermission(text)) => assert!(text.len() <= 67),
        other => panic!("{other:?}"),
    }
}

#[test]
fn subscribe_intersection_cases() {
    let acl = acl(&[("a/b", Read)]);
    let cases = [
        ("a/+", true),
        ("+/b", true),
        ("+/+", true),
        ("#", true),
        ("a/#", true),
        ("a/b/#", true),
        ("a/c", false),
        ("+", false),
        ("+/+/+", false),
        ("a/+/#", true),
        ("$SYS/#", false),
    ];
    for (f, expected) in cases {
        assert_eq!(acl.allows_subscribe(&filter(f)), expected, "{f}");
    }
    // "/#" reaches topics of two or more levels; "+" allows only one-level topics; the
    // one-level topic with an empty level would be the empty string, which is no topic.
    assert!(!self::acl(&[("+", Read)]).allows_subscribe(&filter("/#")));
    assert!(self::acl(&[("/", Read)]).allows_subscribe(&filter("/#")));
    // Deny rules that cover some, but not all, of the filter's topics.
    let partial = self::acl(&[("a/x", Deny), ("a/y", Deny), ("a/+", Read)]);
    assert!(partial.allows_subscribe(&filter("a/+")));
    let full = self::acl(&[("a/+", Deny), ("a/x", Read)]);
    assert!(!full.allows_subscribe(&filter("a/+")));
    assert!(!full.allows_subscribe(&filter("a/#")));
}

#[test]
fn allows_every_is_true_only_where_nothing_is_hidden() {
    let acl = Acl::compile(
        Some(&[
            Rule::new("admin/#", Deny),
            Rule::new("logs/+/debug", Deny),
            Rule::new("logs/#", Read),
            Rule::new("b/#", ReadWrite),
            Rule::new("$SYS/#", Read),
        ]),
        None,
        "c",
    );
    for covered in ["b/1/in/#", "b/+/fan", "b/x", "b/#", "logs/a/info", "$SYS/broker/#"] {
        assert!(acl.allows_every(&filter(covered)), "{covered}");
    }
    // logs/+/debug is denied inside logs/#; # also reaches admin/ and the unlisted rest;
    // +/x would need a rule for every first level; a/# has no rule at all.
    for partial in ["logs/#", "logs/+/+", "#", "+/x", "a/#", "admin/x", "logs/a/debug"] {
        assert!(!acl.allows_every(&filter(partial)), "{partial}");
    }
    assert!(Acl::unrestricted().allows_every(&filter("#")));
    // A leading wildcard does not reach `$` topics.
    let everything = Acl::compile(Some(&[Rule::new("#", Read)]), None, "c");
    assert!(everything.allows_every(&filter("+/x")));
    assert!(!everything.allows_every(&filter("$SYS/#")));
}

#[test]
fn stamps_tell_compilations_apart() {
    let rules = [Rule::new("a/#", Read)];
    let one = Acl::compile(Some(&rules), None, "c");
    let two = Acl::compile(Some(&rules), None, "c");
    assert_ne!(one.stamp(), two.stamp());
    let shared = one.clone();
    assert_eq!(one.stamp(), shared.stamp(), "clones share the compilation");
    drop(shared);
    assert_ne!(one.stamp(), 0);
    assert_eq!(Acl::unrestricted().stamp(), 0);
}

#[test]
fn fresh_level_avoids_every_literal() {
    assert_eq!(fresh_level(["a", "b", "+"].into_iter()), "x0");
    assert_eq!(fresh_level(["x0", "x1", "x", "x3"].into_iter()), "x2");
    // Rules that name the levels a naive fresh level would use do not fool the check.
    let acl = acl(&[("a/x0", Deny), ("a/x1", Deny), ("a/+", Read)]);
    assert!(acl.allows_subscribe(&filter("a/+")));
    let acl = self::acl(&[("a/x0", Deny), ("a/x1", Read)]);
    assert!(acl.allows_subscribe(&filter("a/+")));
    assert!(!self::acl(&[("a/x0", Deny)]).allows_subscribe(&filter("a/+")));
}

#[test]
fn huge_filters_and_rules_stay_cheap() {
    let long_level = "y".repeat(60_000);
    let many_levels = vec!["+"; 30_000].join("/");
    let list = rules(&[(&format!("{long_level}/#"), Deny), ("#", Read), ("+/+/#", Deny)]);
    let acl = Acl::compile(Some(&list), None, "c");
    assert!(acl.allows_subscribe(&filter(&many_levels)));
    assert!(acl.allows_subscribe(&filter(&format!("{many_levels}/#"))));
    assert!(!acl.allows_subscribe(&filter(&format!("{long_level}/+"))));
    let x_levels = (0..5000).map(|i| format!("x{i}")).collect::<Vec<_>>().join("/");
    assert!(acl.allows_subscribe(&filter(&format!("{x_levels}/+/#"))));
}

// Random ACLs over a tiny alphabet; the brute force (`acl_oracle.rs`) enumerates every topic
// over that alphabet plus a level no rule names ("z"), with '$' and empty levels, deeper than
// any pattern by two.
use super::oracle::{PATTERN_LEVELS, all_topics, reference_allows};

fn pattern() -> impl Strategy<Value = String> {
    let level = prop::sample::select(&PATTERN_LEVELS[..]);
    (prop::collection::vec(level, 0..3), any::<bool>()).prop_filter_map("valid filter", |(levels, hash)| {
        let text = match (levels.is_empty(), hash) {
            (true, _) => "#".to_string(),
            (false, true) => format!("{}/#", levels.join("/")),
            (false, false) => levels.join("/"),
        };
        TopicFilter::try_from(text.as_str()).ok().map(|f| f.as_str().to_string())
    })
}

fn permission() -> impl Strategy<Value = Permission> {
    prop_oneof![Just(Read), Just(Write), Just(ReadWrite), Just(Deny)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn allows_and_allows_subscribe_agree_with_brute_force(
        list in prop::collection::vec((pattern(), permission()), 0..7),
        filters in prop::collection::vec(pattern(), 1..6),
    ) {
        let rules: Vec<Rule> = list.into_iter().map(|(p, perm)| Rule::new(p, perm)).collect();
        let acl = Acl::compile(Some(&rules), Some("alice"), "c");
        let max_levels = rules.iter().map(|r| filter(&r.pattern).level_count())
            .chain(filters.iter().map(|f| filter(f).level_count())).max().unwrap_or(1);
        let topics = all_topics(max_levels + 2);
        for topic in &topics {
            for access in [Access::Read, Access::Write] {
                prop_assert_eq!(acl.allows(access, topic), reference_allows(&rules, access, topic),
                    "{:?} {}", access, topic);
            }
        }
        for f in &filters {
            let flt = filter(f);
            let witness = topics.iter().find(|t| flt.matches(t) && reference_allows(&rules, Access::Read, t));
            prop_assert_eq!(acl.allows_subscribe(&flt), witness.is_some(),
                "filter {} rules {:?} witness {:?}", f, rules, witness);
            if acl.allows_every(&flt) {
                let hidden = topics.iter().find(|t| flt.matches(t) && !reference_allows(&rules, Access::Read, t));
                prop_assert!(hidden.is_none(), "filter {} rules {:?} hides {:?}", f, rules, hidden);
            }
        }
    }
}

#[test]
fn explain_names_the_deciding_rule() {
    let list = rules(&[("a/#", Write), ("devices/%u/#", Read), ("devices/#", Deny), ("#", ReadWrite)]);
    let why = |access, topic: &str| explain(Some(&list), Some("bob"), "c", access, &name(topic));
    assert_eq!(why(Access::Read, "a/x"), Explanation::Rule { index: 3, allowed: true });
    assert_eq!(why(Access::Write, "a/x"), Explanation::Rule { index: 0, allowed: true });
    assert_eq!(why(Access::Read, "devices/bob/t"), Explanation::Rule { index: 1, allowed: true });
    assert_eq!(why(Access::Read, "devices/eve/t"), Explanation::Rule { index: 2, allowed: false });
    assert_eq!(why(Access::Read, "$SYS/x"), Explanation::NoMatch);
    assert!(!Explanation::NoMatch.allowed());
    assert_eq!(explain(None, None, "c", Access::Write, &name("x")), Explanation::Unrestricted);
    // An unsafe username voids the %u rule: the next matching rule decides.
    let evil = explain(Some(&list), Some("#"), "c", Access::Read, &name("devices/x/t"));
    assert_eq!(evil, Explanation::Rule { index: 2, allowed: false });
}

fn pattern_with_variables() -> impl Strategy<Value = String> {
    let level = prop_oneof![Just("a"), Just("%u"), Just("%c"), Just("x%u"), Just("$x"), Just("+")];
    (prop::collection::vec(level, 1..4), any::<bool>()).prop_map(|(levels, hash)| {
        let text = levels.join("/");
        if hash { format!("{text}/#") } else { text }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// `explain` is the operator's view of `allows`: it must give the same decision, and the rule
    /// it names must be the first one that matches in the reference reading.
    #[test]
    fn explain_agrees_with_allows(
        list in prop::collection::vec((prop_oneof![pattern(), pattern_with_variables()], permission()), 0..7),
        username in prop_oneof![Just(None), Just(Some("a")), Just(Some("u")), Just(Some("#")), Just(Some("$x"))],
        client_id in prop_oneof![Just("c"), Just("a"), Just("c/d"), Just("")],
    ) {
        let rules: Vec<Rule> = list.into_iter().map(|(p, perm)| Rule::new(p, perm)).collect();
        let acl = Acl::compile(Some(&rules), username, client_id);
        for topic in all_topics(4) {
            for access in [Access::Read, Access::Write] {
                let why = explain(Some(&rules), username, client_id, access, &topic);
                prop_assert_eq!(why.allowed(), acl.allows(access, &topic), "{:?} {} {:?}", access, topic, why);
                if let Explanation::Rule { index, allowed } = why {
                    prop_assert!(rules[index].permission.decides(access));
                    prop_assert_eq!(allowed, rules[index].permission != Deny);
                }
            }
        }
    }
}

// The shared form: one compilation per rule list, `%u` and `%c` matched in place. The reference
// is the substitution that compiled every connection's rules before (`acl_oracle.rs`).
use super::oracle::reference_substituted;

#[test]
fn clients_with_the_same_rules_share_one_compilation() {
    let list = rules(&[("shared-test/%u/#", ReadWrite), ("shared-test/all/%c", Read)]);
    let alice = Acl::compile(Some(&list), Some("alice"), "c1");
    let bob = Acl::compile(Some(&list), Some("bob"), "c2");
    let (a, b) = (alice.0.as_ref().unwrap(), bob.0.as_ref().unwrap());
    assert!(Arc::ptr_eq(&a.rules, &b.rules), "one compilation for both");
    assert_ne!(alice.stamp(), bob.stamp(), "a decision cached for alice is not bob's");
    assert!(alice.allows(Access::Write, &name("shared-test/alice/x")));
    assert!(!alice.allows(Access::Write, &name("shared-test/bob/x")));
    assert!(bob.allows(Access::Write, &name("shared-test/bob/x")));
    assert!(bob.allows(Access::Read, &name("shared-test/all/c2")));
    assert!(!bob.allows(Access::Read, &name("shared-test/all/c1")));
    assert!(alice.allows_every(&filter("shared-test/alice/#")));
    assert!(!bob.allows_every(&filter("shared-test/alice/#")));
    assert!(!bob.allows_subscribe(&filter("shared-test/alice/#")));

    // The set leaves the cache with its last client, and comes back compiled anew.
    drop(alice);
    assert!(shared_sets().get(list.as_slice()).is_some_and(|set| set.strong_count() == 1));
    drop(bob);
    assert!(shared_sets().get(list.as_slice()).is_none());
    let again = Acl::compile(Some(&list), Some("alice"), "c1");
    assert!(again.allows(Access::Write, &name("shared-test/alice/x")));
}

#[test]
fn same_source_means_same_rules_and_values() {
    let list = rules(&[("a/%u", Read)]);
    let one = Acl::compile(Some(&list), Some("u"), "c");
    assert!(one.same_source(&Acl::compile(Some(&list), Some("u"), "c")));
    assert!(!one.same_source(&Acl::compile(Some(&list), Some("v"), "c")));
    assert!(!one.same_source(&Acl::compile(Some(&list), None, "c")));
    assert!(!one.same_source(&Acl::compile(Some(&list), Some("u"), "d")));
    assert!(!one.same_source(&Acl::compile(Some(&rules(&[("a/%u", Write)])), Some("u"), "c")));
    assert!(!one.same_source(&Acl::unrestricted()));
    assert!(!Acl::unrestricted().same_source(&Acl::unrestricted()));
    let source = one.source().unwrap();
    assert_eq!(source, AclSource { rules: Some(list), username: Some("u".into()), client_id: "c".into() });
    assert_eq!(Acl::unrestricted().source(), None);
}

#[test]
fn a_value_that_makes_the_pattern_too_long_voids_the_rule() {
    // `%u/#` for a username of 65,534 bytes is one byte over the limit of a filter; it would
    // match the username itself as a topic (the parent level), but an invalid filter matches
    // nothing.
    let list = rules(&[("%u/#", Read), ("%u", Write)]);
    let over = "u".repeat(MAX_TOPIC_LEN - 1);
    assert_eq!(reference_substituted(&list, Some(&over), "c"), rules(&[(&over, Write)]));
    let acl = Acl::compile(Some(&list), Some(&over), "c");
    assert!(!acl.allows(Access::Read, &name(&over)));
    assert!(acl.allows(Access::Write, &name(&over)));
    assert!(!acl.allows_subscribe(&filter(&over)));
    // One byte shorter, the rule holds.
    let fits = "u".repeat(MAX_TOPIC_LEN - 2);
    let acl = Acl::compile(Some(&list), Some(&fits), "c");
    assert!(acl.allows(Access::Read, &name(&fits)));
    assert!(acl.allows_subscribe(&filter(&fits)));
}

#[test]
fn pieces_follow_the_single_pass() {
    use Piece::{Text, Var as V};
    let text = |s: &str| Text(s.into());
    assert_eq!(pieces("a/%u/%c"), [text("a/"), V(Var::User), text("/"), V(Var::Client)]);
    assert_eq!(pieces("%%u"), [text("%"), V(Var::User)]);
    assert_eq!(pieces("%u%c"), [V(Var::User), V(Var::Client)]);
    assert_eq!(pieces("100%/%d%"), [text("100%/%d%")]);
    assert_eq!(pieces(""), []);
}

/// Topics that a substituted pattern matches, besides the brute force's: its `+` levels as `a`,
/// a final `#` as nothing and as two more levels.
fn topics_of(pattern: &str) -> Vec<TopicName> {
    let levels: Vec<&str> = pattern.split('/').map(|l| if l == "+" { "a" } else { l }).collect();
    let texts = match levels.split_last() {
        Some((&"#", parent)) => vec![parent.join("/"), format!("{}/a/b", parent.join("/"))],
        _ => vec![levels.join("/")],
    };
    texts.iter().filter_map(|t| TopicName::try_from(t.as_str()).ok()).collect()
}

/// The ACL the old per-connection compilation built: the substituted filters, nothing left to
/// substitute.
fn substituted_acl(substituted: &[Rule]) -> Acl {
    let entry = |rule: &Rule| Entry {
        pattern: Pattern::Filter(filter(&rule.pattern)),
        allow: rule.permission != Deny,
    };
    let deciding = |access| substituted.iter().filter(move |r| r.permission.decides(access)).map(entry);
    Acl(Some(Arc::new(Bound {
        rules: Arc::new(Compiled::of_entries(
            Arc::from(substituted),
            deciding(Access::Read).collect(),
            deciding(Access::Write).collect(),
        )),
        username: None,
        client_id: Arc::from("c"),
        stamp: NEXT_STAMP.fetch_add(1, Ordering::Relaxed),
        values: 0,
    })))
}

fn tricky_pattern() -> impl Strategy<Value = String> {
    let level = prop_oneof![
        Just("a"),
        Just("%u"),
        Just("%c"),
        Just("x%u"),
        Just("%u%c"),
        Just("%%u"),
        Just("%"),
        Just("a%d"),
        Just("$x"),
        Just("%u+"),
        Just("+"),
        Just(""),
    ];
    (prop::collection::vec(level, 1..4), any::<bool>()).prop_map(|(levels, hash)| {
        let text = levels.join("/");
        if hash { format!("{text}/#") } else { text }
    })
}

fn username() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        Just(None),
        Just(Some("a")),
        Just(Some("b")),
        Just(Some("$x")),
        Just(Some("#")),
        Just(Some("a/b")),
        Just(Some("")),
        Just(Some("%c")),
        Just(Some("x+")),
        Just(Some("a\0")),
    ]
}

fn client_id() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("a"), Just("b"), Just("c"), Just("$x"), Just("c/d"), Just(""), Just("+"), Just("%u")]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Two clients with the same rules share one compilation, and each one's decisions are those
    /// of its own substituted rules: every check, for every topic of the brute force and every
    /// topic the substituted rules name.
    #[test]
    fn the_shared_form_decides_as_per_connection_substitution(
        list in prop::collection::vec(
            (prop_oneof![pattern(), pattern_with_variables(), tricky_pattern()], permission()), 0..7),
        clients in [(username(), client_id()), (username(), client_id())],
        filters in prop::collection::vec(pattern(), 1..4),
    ) {
        let rules: Vec<Rule> = list.into_iter().map(|(p, perm)| Rule::new(p, perm)).collect();
        let acls = clients.map(|(username, client_id)| Acl::compile(Some(&rules), username, client_id));
        prop_assert!(Arc::ptr_eq(&acls[0].0.as_ref().unwrap().rules, &acls[1].0.as_ref().unwrap().rules));
        prop_assert_ne!(acls[0].stamp(), acls[1].stamp());
        for (acl, (username, client_id)) in acls.iter().zip(clients) {
            let substituted = reference_substituted(&rules, username, client_id);
            let old = substituted_acl(&substituted);
            // What the subscribe checks reason about: the substituted read rules, in order.
            let bound = acl.0.as_ref().unwrap();
            let read: Vec<(String, bool)> = bound.rules.read.iter()
                .filter_map(|e| bound.text_of(e, &mut String::new()).map(|t| (t.to_string(), e.allow)))
                .collect();
            let expected: Vec<(String, bool)> = substituted.iter()
                .filter(|r| r.permission.decides(Access::Read))
                .map(|r| (r.pattern.clone(), r.permission != Deny)).collect();
            prop_assert_eq!(read, expected);
            let mut topics = all_topics(4);
            topics.extend(substituted.iter().flat_map(|r| topics_of(&r.pattern)));
            for topic in &topics {
                for access in [Access::Read, Access::Write] {
                    prop_assert_eq!(acl.allows(access, topic), reference_allows(&substituted, access, topic),
                        "{:?} {} as {:?}/{:?} under {:?}", access, topic, username, client_id, rules);
                }
            }
            let named = substituted.iter().map(|r| r.pattern.clone());
            for f in filters.iter().cloned().chain(named) {
                let f = filter(&f);
                prop_assert_eq!(acl.allows_subscribe(&f), old.allows_subscribe(&f), "subscribe {}", f);
                prop_assert_eq!(acl.allows_every(&f), old.allows_every(&f), "every {}", f);
            }
        }
    }
}
