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
