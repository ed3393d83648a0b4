//! The body of the `topic_filter` fuzz target (`fuzz/fuzz_targets/topic_filter.rs`), kept here
//! so that a unit test replays the committed seed corpus on a stable compiler. It panics when
//! it finds a bug and returns normally on any input otherwise.

use crate::acl::oracle::{
    PATTERN_LEVELS, all_topics, reference_allows, reference_allows_every, reference_allows_subscribe,
};
use crate::acl::{Access, Acl, Permission, Rule};
use crate::topic::{SubscriptionFilter, TopicFilter, TopicName};

/// Input: a mode byte, then the rest.
///
/// - Mode byte even: text. The whole text, and each line of it, is parsed as a topic name, a
///   topic filter and a subscription filter, which must not panic and must agree with each
///   other (a name is a filter that matches itself, a plain subscription filter is the same
///   filter, a shared one prints back as its text). Then every (filter line, name line) pair
///   is matched and compared with [`reference_matches`].
/// - Mode byte odd: a small ACL and filters over the brute force's alphabet (see
///   [`acl_case`]); `allows`, `allows_subscribe` and `allows_every` must agree with the oracle
///   of `acl::oracle`.
pub fn topic_filter(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode % 2 == 0 {
        text_case(rest);
    } else {
        acl_case(rest);
    }
}

fn text_case(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.split('\n').collect();
    for candidate in std::iter::once(&*text).chain(lines.iter().copied()) {
        parse_agrees(candidate);
    }
    // Bounded so that a long input costs a linear number of matches, not a quadratic one.
    let names: Vec<TopicName> = lines.iter().filter_map(|l| TopicName::try_from(*l).ok()).take(16).collect();
    let filters: Vec<TopicFilter> =
        lines.iter().filter_map(|l| TopicFilter::try_from(*l).ok()).take(16).collect();
    for filter in &filters {
        for name in &names {
            assert_eq!(
                filter.matches(name),
                reference_matches(filter.as_str(), name.as_str()),
                "filter {filter:?} on topic {name:?}"
            );
        }
    }
}

fn parse_agrees(text: &str) {
    let name = TopicName::try_from(text);
    let filter = TopicFilter::try_from(text);
    let subscription = SubscriptionFilter::parse(text);
    if let Ok(name) = &name {
        let as_filter = filter.as_ref().expect("a topic name is a valid filter");
        assert!(!as_filter.has_wildcards());
        assert!(as_filter.matches(name), "{name:?} does not match itself");
        assert_eq!(as_filter.to_topic_name().as_ref(), Some(name));
        assert_eq!(name.level_count(), name.levels().count());
        assert_eq!(TopicFilter::from(name.clone()), *as_filter);
    }
    if let Ok(filter) = &filter {
        assert_eq!(filter.has_wildcards(), name.is_err(), "{filter:?}");
        assert_eq!(filter.level_count(), filter.levels().count());
    }
    match &subscription {
        Ok(SubscriptionFilter::Plain(plain)) => {
            assert_eq!(filter.as_ref(), Ok(plain));
            assert!(!text.starts_with(crate::topic::SHARE_PREFIX));
        }
        Ok(shared @ SubscriptionFilter::Shared { group, filter: inner }) => {
            assert_eq!(shared.to_string(), text, "a shared subscription prints differently");
            assert!(!group.is_empty() && !group.contains(['/', '+', '#']));
            assert_eq!(SubscriptionFilter::parse(&shared.as_str()).as_ref(), Ok(shared));
            assert!(text.ends_with(inner.as_str()));
        }
        Err(_) => {
            if let Ok(filter) = &filter {
                assert!(filter.as_str().starts_with(crate::topic::SHARE_PREFIX), "{filter:?} refused");
            }
        }
    }
    if let Ok(Ok(parsed)) = subscription.as_ref().map(|s| SubscriptionFilter::parse(&s.as_str())) {
        assert_eq!(Ok(&parsed), subscription.as_ref());
    }
}

/// MQTT filter matching the simple way: split both into levels and walk them.
pub fn reference_matches(filter: &str, topic: &str) -> bool {
    let filter: Vec<&str> = filter.split('/').collect();
    let topic: Vec<&str> = topic.split('/').collect();
    if topic[0].starts_with('$') && (filter[0] == "+" || filter[0] == "#") {
        return false;
    }
    fn walk(filter: &[&str], topic: &[&str]) -> bool {
        match (filter.split_first(), topic.split_first()) {
            (None, None) => true,
            (Some((&"#", _)), _) => true,
            (Some((&"+", f)), Some((_, t))) => walk(f, t),
            (Some((level, f)), Some((name, t))) => level == name && walk(f, t),
            (Some(_), None) | (None, Some(_)) => false,
        }
    }
    walk(&filter, &topic)
}

/// Reads a small ACL and some filters from bytes, densely, like the property test's strategy:
/// byte 0 is the rule count (mod 7); each rule is a permission byte (mod 4), a level count byte
/// (mod 3 levels, plus `/#` when bit 2 is set; none and no `#` make `#`), and one byte per level
/// picking from the pattern alphabet. The filters follow in the same form without the
/// permission, up to five of them.
fn acl_case(data: &[u8]) {
    let mut bytes = data.iter().copied();
    let rule_count = bytes.next().unwrap_or(0) % 7;
    let mut rules = Vec::new();
    for _ in 0..rule_count {
        let permission = match bytes.next().unwrap_or(0) % 4 {
            0 => Permission::Read,
            1 => Permission::Write,
            2 => Permission::ReadWrite,
            _ => Permission::Deny,
        };
        let Some(pattern) = read_pattern(&mut bytes) else { return };
        rules.push(Rule::new(pattern.as_str(), permission));
    }
    let mut filters = Vec::new();
    while filters.len() < 5 {
        match read_pattern(&mut bytes) {
            Some(filter) => filters.push(filter),
            None => break,
        }
    }
    let acl = Acl::compile(Some(&rules), Some("alice"), "c");
    let max_levels = rules
        .iter()
        .map(|r| TopicFilter::try_from(r.pattern.as_str()).map_or(1, |f| f.level_count()))
        .chain(filters.iter().map(TopicFilter::level_count))
        .max()
        .unwrap_or(1);
    let topics = all_topics(max_levels + 2);
    for topic in &topics {
        for access in [Access::Read, Access::Write] {
            assert_eq!(
                acl.allows(access, topic),
                reference_allows(&rules, access, topic),
                "{access:?} {topic} under {rules:?}"
            );
        }
    }
    for filter in &filters {
        assert_eq!(
            acl.allows_subscribe(filter),
            reference_allows_subscribe(&rules, filter, &topics),
            "subscribe {filter} under {rules:?}"
        );
        if acl.allows_every(filter) {
            assert!(
                reference_allows_every(&rules, filter, &topics),
                "{filter} hides a topic under {rules:?}"
            );
        }
    }
}

/// One pattern (see [`acl_case`]); `None` at the end of the input or for an invalid filter.
fn read_pattern(bytes: &mut impl Iterator<Item = u8>) -> Option<TopicFilter> {
    let shape = bytes.next()?;
    let levels: Vec<&str> = (0..shape % 3)
        .map(|_| bytes.next().map(|b| PATTERN_LEVELS[usize::from(b) % 5]))
        .collect::<Option<_>>()?;
    let hash = shape & 0b100 != 0;
    let text = match (levels.is_empty(), hash) {
        (true, _) => "#".to_owned(),
        (false, true) => format!("{}/#", levels.join("/")),
        (false, false) => levels.join("/"),
    };
    TopicFilter::try_from(text.as_str()).ok()
}
