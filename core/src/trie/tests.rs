use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::topic::{TopicFilter, TopicName};

fn name(s: &str) -> TopicName {
    TopicName::try_from(s).unwrap()
}

fn filter(s: &str) -> TopicFilter {
    TopicFilter::try_from(s).unwrap()
}

/// A trie whose payload per filter is the filter's text, so matches can be compared by name.
fn trie_of(filters: &[&str]) -> SubscriptionTrie<Vec<String>> {
    let mut trie: SubscriptionTrie<Vec<String>> = SubscriptionTrie::new();
    for f in filters {
        trie.entry(&filter(f)).push(f.to_string());
    }
    trie
}

fn matches_of(trie: &SubscriptionTrie<Vec<String>>, topic: &str) -> Vec<String> {
    let mut found = Vec::new();
    trie.for_each_match(&name(topic), |p| found.extend(p.iter().cloned()));
    found.sort();
    found
}

fn retained_of(tree: &TopicTree<String>, f: &str) -> Vec<String> {
    let mut found = Vec::new();
    tree.for_each_match(&filter(f), |v| found.push(v.clone()));
    found.sort();
    found
}

const SPEC_FILTERS: &[&str] = &[
    "sport/tennis/player1/#",
    "sport/#",
    "+/+",
    "+",
    "/+",
    "#",
    "$SYS/#",
    "+/monitor/Clients",
    "$SYS/monitor/+",
    "sport/tennis/+",
    "sport/+",
];

#[test]
fn subscription_trie_spec_examples() {
    let trie = trie_of(SPEC_FILTERS);
    assert_eq!(trie.len(), SPEC_FILTERS.len());
    assert_eq!(
        matches_of(&trie, "sport/tennis/player1"),
        ["#", "sport/#", "sport/tennis/+", "sport/tennis/player1/#"]
    );
    assert_eq!(matches_of(&trie, "sport"), ["#", "+", "sport/#"]);
    assert_eq!(matches_of(&trie, "/finance"), ["#", "+/+", "/+"]);
    assert_eq!(matches_of(&trie, "$SYS/x"), ["$SYS/#"]);
    assert_eq!(matches_of(&trie, "$SYS/monitor/Clients"), ["$SYS/#", "$SYS/monitor/+"]);
    assert_eq!(matches_of(&trie, "sport/"), ["#", "+/+", "sport/#", "sport/+"]);
    assert_eq!(matches_of(&trie, "a/monitor/Clients"), ["#", "+/monitor/Clients"]);
}

#[test]
fn topic_tree_spec_examples() {
    let topics =
        ["sport", "sport/tennis/player1", "sport/tennis/player1/ranking", "/finance", "$SYS/x", "sport/"];
    let mut tree = TopicTree::new();
    for t in topics {
        assert_eq!(tree.insert(&name(t), t.to_string()), None);
    }
    assert_eq!(tree.len(), topics.len());
    assert_eq!(
        retained_of(&tree, "sport/tennis/player1/#"),
        ["sport/tennis/player1", "sport/tennis/player1/ranking"]
    );
    assert_eq!(
        retained_of(&tree, "sport/#"),
        ["sport", "sport/", "sport/tennis/player1", "sport/tennis/player1/ranking"]
    );
    assert_eq!(retained_of(&tree, "+/+"), ["/finance", "sport/"]);
    assert_eq!(retained_of(&tree, "+"), ["sport"]);
    assert_eq!(retained_of(&tree, "#").len(), topics.len() - 1, "'#' does not see $SYS");
    assert_eq!(retained_of(&tree, "$SYS/#"), ["$SYS/x"]);
    assert_eq!(retained_of(&tree, "+/x"), Vec::<String>::new());
    assert_eq!(tree.get(&name("sport")).map(String::as_str), Some("sport"));
    assert_eq!(tree.get(&name("sport/tennis")), None, "an inner node holds no value");
}

#[test]
fn entry_get_and_remove_if() {
    let mut trie: SubscriptionTrie<Vec<u32>> = SubscriptionTrie::new();
    let f = filter("a/+/c/#");
    trie.entry(&f).push(1);
    trie.entry(&f).push(2);
    trie.entry(&filter("a/+")).push(3);
    assert_eq!(trie.len(), 2);
    assert_eq!(trie.get(&f), Some(&vec![1, 2]));
    assert_eq!(trie.get(&filter("a/+/c")), None, "the '#' entry is not the parent's entry");
    assert_eq!(trie.get(&filter("a/b")), None);
    trie.get_mut(&f).unwrap().push(4);

    // A payload that is not empty yet stays.
    assert!(!trie.remove_if(&f, |subs| {
        subs.retain(|&s| s != 1);
        subs.is_empty()
    }));
    assert_eq!(trie.get(&f), Some(&vec![2, 4]));
    assert!(trie.remove_if(&f, |subs| {
        subs.clear();
        true
    }));
    assert_eq!(trie.get(&f), None);
    assert_eq!(trie.len(), 1);
    assert!(!trie.remove_if(&f, |_| panic!("not called for a missing filter")));
    assert!(!trie.remove_if(&filter("x/y/z"), |_| panic!("not called for a missing filter")));
    assert!(trie.remove_if(&filter("a/+"), |_| true));
    assert!(trie.is_empty());
    assert_eq!(trie.arena.nodes.len(), 1, "an empty trie gives its nodes back");
}

#[test]
fn pruning_keeps_shared_prefixes() {
    let mut trie = trie_of(&["a/b/c", "a/b", "a/+/c", "a/#"]);
    assert!(trie.remove_if(&filter("a/b/c"), |_| true));
    assert_eq!(matches_of(&trie, "a/b"), ["a/#", "a/b"]);
    assert_eq!(matches_of(&trie, "a/b/c"), ["a/#", "a/+/c"]);
    assert!(trie.remove_if(&filter("a/#"), |_| true));
    assert!(trie.remove_if(&filter("a/b"), |_| true));
    assert_eq!(matches_of(&trie, "a/b/c"), ["a/+/c"]);
    let live = trie.arena.nodes.len() - trie.arena.free.len();
    assert_eq!(live, 4, "root, a, +, c remain");
}

#[test]
fn children_switch_representation_both_ways() {
    let mut trie: SubscriptionTrie<u32> = SubscriptionTrie::new();
    let many = SMALL_CHILDREN * 3;
    for i in 0..many {
        *trie.entry(&filter(&format!("x/{i}"))) = i as u32;
    }
    let x = trie.arena[ROOT].children.get("x").unwrap();
    assert!(matches!(trie.arena[x].children, Children::Map(_)));
    for i in 0..many {
        let mut seen = Vec::new();
        trie.for_each_match(&name(&format!("x/{i}")), |&v| seen.push(v));
        assert_eq!(seen, [i as u32]);
    }
    for i in 0..many - 2 {
        assert!(trie.remove_if(&filter(&format!("x/{i}")), |_| true));
    }
    assert!(matches!(trie.arena[x].children, Children::Small(_)));
    let mut seen = Vec::new();
    trie.for_each_match(&name(&format!("x/{}", many - 1)), |&v| seen.push(v));
    assert_eq!(seen, [many as u32 - 1]);
}

#[test]
fn for_each_lists_every_filter() {
    let mut filters = SPEC_FILTERS.to_vec();
    filters.extend(["/", "//#", "/#", "a//+/"]);
    let trie = trie_of(&filters);
    let mut listed = Vec::new();
    trie.for_each(|f, payload| {
        assert_eq!(payload, &[f.to_string()]);
        listed.push(f.to_string());
    });
    listed.sort();
    filters.sort();
    assert_eq!(listed, filters);
    let debug = format!("{trie:?}");
    assert!(debug.contains("\"sport/tennis/player1/#\""), "{debug}");

    let mut tree = TopicTree::new();
    for t in ["/", "a", "a/b", "//x", "$SYS/y"] {
        tree.insert(&name(t), t.len());
    }
    let mut topics = Vec::new();
    tree.for_each(|t, &len| {
        assert_eq!(t.len(), len);
        topics.push(t.to_string());
    });
    topics.sort();
    assert_eq!(topics, ["$SYS/y", "/", "//x", "a", "a/b"]);
}

#[test]
fn topic_tree_insert_replace_remove_retain() {
    let mut tree = TopicTree::new();
    assert_eq!(tree.insert(&name("a/b"), 1), None);
    assert_eq!(tree.insert(&name("a/b"), 2), Some(1));
    assert_eq!(tree.insert(&name("a"), 3), None);
    assert_eq!(tree.insert(&name("a/c/d"), 4), None);
    assert_eq!(tree.len(), 3);
    *tree.get_mut(&name("a")).unwrap() += 10;
    assert_eq!(tree.get(&name("a")), Some(&13));
    assert_eq!(tree.remove(&name("a/c")), None, "an inner node is not an entry");
    assert_eq!(tree.remove(&name("a/b")), Some(2));
    assert_eq!(tree.remove(&name("a/b")), None);
    assert_eq!(tree.len(), 2);
    tree.retain(|&v| v != 4);
    assert_eq!(tree.len(), 1);
    assert_eq!(tree.get(&name("a/c/d")), None);
    let live = tree.arena.nodes.len() - tree.arena.free.len();
    assert_eq!(live, 2, "root and 'a' remain after the sweep pruned a/c/d");
    tree.retain(|_| false);
    assert!(tree.is_empty());
    assert_eq!(tree.arena.nodes.len(), 1);
}

/// Thirty thousand levels: neither matching nor dropping may recurse that deep.
#[test]
fn very_deep_filters_and_topics() {
    let depth = 30_000;
    let plus_chain = vec!["+"; depth].join("/");
    let literal_chain = vec!["a"; depth].join("/");
    let mut trie = trie_of(&[&plus_chain, &literal_chain, &format!("{literal_chain}/#")]);
    let found = matches_of(&trie, &literal_chain);
    assert_eq!(found.len(), 3);
    assert!(trie.remove_if(&filter(&plus_chain), |_| true));
    assert_eq!(matches_of(&trie, &literal_chain).len(), 2);

    let mut tree = TopicTree::new();
    tree.insert(&name(&literal_chain), 1);
    assert_eq!(retained_of_u(&tree, "#"), [1]);
    assert_eq!(retained_of_u(&tree, &plus_chain), [1]);
    drop(trie);
    drop(tree);

    fn retained_of_u(tree: &TopicTree<i32>, f: &str) -> Vec<i32> {
        let mut found = Vec::new();
        tree.for_each_match(&filter(f), |&v| found.push(v));
        found
    }
}

// Small alphabets so that random filters and topics collide often: empty levels, a '$' level
// that is special only in first position, and a topic level that no filter names.
fn filter_text() -> impl Strategy<Value = String> {
    let level = prop_oneof![Just("a"), Just("b"), Just(""), Just("$x"), Just("+")];
    (prop::collection::vec(level, 0..5), any::<bool>()).prop_filter_map("valid filter", |(levels, hash)| {
        let text = match (levels.is_empty(), hash) {
            (true, _) => "#".to_string(),
            (false, true) => format!("{}/#", levels.join("/")),
            (false, false) => levels.join("/"),
        };
        TopicFilter::try_from(text.as_str()).ok().map(|f| f.as_str().to_string())
    })
}

fn topic_text() -> impl Strategy<Value = String> {
    let level = prop_oneof![Just("a"), Just("b"), Just(""), Just("$x"), Just("c")];
    prop::collection::vec(level, 1..6).prop_filter_map("valid topic", |levels| {
        TopicName::try_from(levels.join("/")).ok().map(|t| t.as_str().to_string())
    })
}

fn brute_force_filters(filters: &BTreeMap<String, ()>, topic: &TopicName) -> Vec<String> {
    filters.keys().filter(|f| filter(f).matches(topic)).cloned().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn subscription_trie_agrees_with_matches(
        filters in prop::collection::vec(filter_text(), 0..40),
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        topics in prop::collection::vec(topic_text(), 1..20),
    ) {
        let mut trie: SubscriptionTrie<Vec<String>> = SubscriptionTrie::new();
        let mut model: BTreeMap<String, ()> = BTreeMap::new();
        for f in &filters {
            let entry = trie.entry(&filter(f));
            if entry.is_empty() {
                entry.push(f.clone());
            }
            model.insert(f.clone(), ());
        }
        for index in removed {
            if filters.is_empty() { break; }
            let f = index.get(&filters);
            let was_there = model.remove(f).is_some();
            prop_assert_eq!(trie.remove_if(&filter(f), |_| true), was_there);
        }
        prop_assert_eq!(trie.len(), model.len());
        for t in &topics {
            let topic = name(t);
            let mut found = Vec::new();
            trie.for_each_match(&topic, |p| found.extend(p.iter().cloned()));
            found.sort();
            prop_assert_eq!(&found, &brute_force_filters(&model, &topic), "topic {:?}", t);
        }
        let mut listed = Vec::new();
        trie.for_each(|f, _| listed.push(f.to_string()));
        listed.sort();
        prop_assert_eq!(listed, model.keys().cloned().collect::<Vec<_>>());
    }

    #[test]
    fn topic_tree_agrees_with_matches(
        topics in prop::collection::vec(topic_text(), 0..40),
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        expire_with in any::<u8>(),
        filters in prop::collection::vec(filter_text(), 1..20),
    ) {
        let mut tree: TopicTree<(String, u8)> = TopicTree::new();
        let mut model: BTreeMap<String, u8> = BTreeMap::new();
        for (i, t) in topics.iter().enumerate() {
            let stamp = i as u8;
            prop_assert_eq!(tree.insert(&name(t), (t.clone(), stamp)).map(|v| v.1), model.insert(t.clone(), stamp));
        }
        for index in removed {
            if topics.is_empty() { break; }
            let t = index.get(&topics);
            prop_assert_eq!(tree.remove(&name(t)).map(|v| v.1), model.remove(t));
        }
        // An expiry sweep by an arbitrary predicate.
        let expired = |stamp: u8| stamp.wrapping_mul(31) % 4 == expire_with % 4;
        tree.retain(|v| !expired(v.1));
        model.retain(|_, stamp| !expired(*stamp));
        prop_assert_eq!(tree.len(), model.len());
        for f in &filters {
            let flt = filter(f);
            let mut found = Vec::new();
            tree.for_each_match(&flt, |v| found.push(v.0.clone()));
            found.sort();
            let expected: Vec<String> = model.keys().filter(|t| flt.matches(&name(t))).cloned().collect();
            prop_assert_eq!(found, expected, "filter {:?}", f);
        }
        for t in model.keys() {
            prop_assert_eq!(tree.get(&name(t)).map(|v| &v.0), Some(t));
        }
    }
}
