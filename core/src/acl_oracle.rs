//! The brute-force oracle for the ACL engine, shared by the property tests
//! (`acl_tests.rs`) and the `topic_filter` fuzz target: the rule list read straight off its
//! definition, and every topic over a tiny alphabet of levels.

use super::{Access, Permission, Rule};
use crate::topic::{TopicFilter, TopicName};

/// The levels of the brute force: those the patterns may name (`a`, `b`, `$x`, the empty
/// level) plus one no pattern names (`z`), which stands for every other level.
pub const TOPIC_LEVELS: [&str; 5] = ["a", "b", "$x", "", "z"];

/// The levels a pattern may be built from: [`TOPIC_LEVELS`] without `z`, and `+`.
pub const PATTERN_LEVELS: [&str; 5] = ["a", "b", "$x", "", "+"];

/// Every valid topic name of 1 to `max_levels` levels over [`TOPIC_LEVELS`].
pub fn all_topics(max_levels: usize) -> Vec<TopicName> {
    let mut topics = Vec::new();
    let mut layer: Vec<String> = TOPIC_LEVELS.iter().map(|l| l.to_string()).collect();
    for _ in 0..max_levels {
        topics.extend(layer.iter().filter_map(|t| TopicName::try_from(t.as_str()).ok()));
        layer = layer.iter().flat_map(|t| TOPIC_LEVELS.iter().map(move |l| format!("{t}/{l}"))).collect();
    }
    topics
}

/// The semantics, read straight off the rule list: the first rule that names the access and
/// matches the topic decides, and a deny rule decides both accesses. A rule whose pattern is
/// not a valid filter matches nothing.
pub fn reference_allows(rules: &[Rule], access: Access, topic: &TopicName) -> bool {
    rules
        .iter()
        .find(|rule| {
            let names_access = match (rule.permission, access) {
                (Permission::Deny | Permission::ReadWrite, _) => true,
                (Permission::Read, a) => a == Access::Read,
                (Permission::Write, a) => a == Access::Write,
            };
            names_access && TopicFilter::try_from(rule.pattern.as_str()).is_ok_and(|f| f.matches(topic))
        })
        .is_some_and(|rule| rule.permission != Permission::Deny)
}

/// Whether a subscription to `filter` may deliver something: some topic it matches is readable.
/// `topics` must be [`all_topics`] of enough levels (two more than the deepest rule or filter).
pub fn reference_allows_subscribe(rules: &[Rule], filter: &TopicFilter, topics: &[TopicName]) -> bool {
    topics.iter().any(|t| filter.matches(t) && reference_allows(rules, Access::Read, t))
}

/// Whether every topic `filter` matches is readable.
pub fn reference_allows_every(rules: &[Rule], filter: &TopicFilter, topics: &[TopicName]) -> bool {
    topics.iter().all(|t| !filter.matches(t) || reference_allows(rules, Access::Read, t))
}

/// The per-connection substitution that ACLs were compiled with before rule sets were shared,
/// kept word for word as the reference for the shared form: each pattern with `%u` and `%c`
/// replaced in one pass, and the rules that then match nothing left out (a value missing,
/// empty or with `/ + #` NUL; a pattern made a `$` pattern; an invalid filter). Leaving out a
/// rule that matches nothing changes no decision.
pub fn reference_substituted(rules: &[Rule], username: Option<&str>, client_id: &str) -> Vec<Rule> {
    rules
        .iter()
        .filter_map(|rule| {
            let pattern = reference_substitute(&rule.pattern, username, client_id)?;
            if pattern.starts_with('$') && !rule.pattern.starts_with('$') {
                return None;
            }
            let filter = TopicFilter::try_from(pattern.as_str()).ok()?;
            Some(Rule::new(filter.as_str(), rule.permission))
        })
        .collect()
}

/// Replaces `%u` and `%c` in one pass; `None` if a value that the pattern uses is missing or
/// could change the pattern's structure.
fn reference_substitute(pattern: &str, username: Option<&str>, client_id: &str) -> Option<String> {
    if !pattern.contains('%') {
        return Some(pattern.to_string());
    }
    let safe = |value: &str| !value.is_empty() && !value.contains(['/', '+', '#', '\0']);
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let value = match after.as_bytes().first() {
            Some(b'u') => Some(username.filter(|u| safe(u))?),
            Some(b'c') => Some(Some(client_id).filter(|c| safe(c))?),
            _ => None,
        };
        match value {
            Some(value) => {
                out.push_str(value);
                rest = &after[1..];
            }
            None => {
                out.push('%');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(out)
}
