//! Benchmarks of the subscription trie (the per-publish match) and the retained topic tree.
//!
//! Filters look like a fleet of devices: mostly literal `fleet/site{s}/dev{d}/temp`, with one
//! in twenty using `+` and one in twenty ending in `#`. Run with
//! `cargo bench -p mesgd-core --bench trie`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mesgd_core::topic::{TopicFilter, TopicName};
use mesgd_core::trie::{SubscriptionTrie, TopicTree};

/// Devices per site: the fan-out of the third level.
const DEVICES_PER_SITE: usize = 100;

fn filter_text(i: usize) -> String {
    let site = i / DEVICES_PER_SITE;
    match i % 20 {
        0 => format!("fleet/site{site}/+/alarm{i}"),
        1 => format!("fleet/site{site}/dev{i}/#"),
        _ => format!("fleet/site{site}/dev{i}/temp"),
    }
}

fn trie_with(n: usize) -> SubscriptionTrie<u64> {
    let mut trie = SubscriptionTrie::new();
    for i in 0..n {
        *trie.entry(&TopicFilter::try_from(filter_text(i)).unwrap()) += 1;
    }
    // A few global wildcard subscriptions, as monitoring clients have.
    for f in ["#", "fleet/#", "+/+/+/temp"] {
        *trie.entry(&TopicFilter::try_from(f).unwrap()) += 1;
    }
    trie
}

fn count_matches(trie: &SubscriptionTrie<u64>, topic: &TopicName) -> u64 {
    let mut total = 0;
    trie.for_each_match(topic, |&n| total += n);
    total
}

fn bench_match(c: &mut Criterion) {
    let mut group = c.benchmark_group("subscription_trie/match");
    for n in [10_000, 100_000, 1_000_000] {
        let trie = trie_with(n);
        let probe = n / 2 + 7; // a literal filter in the middle
        let topic =
            TopicName::try_from(format!("fleet/site{}/dev{probe}/temp", probe / DEVICES_PER_SITE)).unwrap();
        assert!(count_matches(&trie, &topic) >= 3, "the probe hits literal, '#' and '+' filters");
        group.bench_with_input(BenchmarkId::new("literal_hit", n), &topic, |b, topic| {
            b.iter(|| count_matches(&trie, black_box(topic)))
        });
        let miss = TopicName::try_from("other/site1/dev1/temp").unwrap();
        group.bench_with_input(BenchmarkId::new("miss", n), &miss, |b, topic| {
            b.iter(|| count_matches(&trie, black_box(topic)))
        });
        let dollar = TopicName::try_from("$SYS/broker/load/messages").unwrap();
        group.bench_with_input(BenchmarkId::new("dollar", n), &dollar, |b, topic| {
            b.iter(|| count_matches(&trie, black_box(topic)))
        });
    }
    group.finish();
}

fn bench_insert_remove(c: &mut Criterion) {
    let mut group = c.benchmark_group("subscription_trie/update");
    let mut trie = trie_with(100_000);
    let fresh = TopicFilter::try_from("fleet/site500/dev-new/+/temp").unwrap();
    group.bench_function("insert_then_remove_100k", |b| {
        b.iter(|| {
            *trie.entry(black_box(&fresh)) += 1;
            trie.remove_if(black_box(&fresh), |_| true)
        })
    });
    let existing = TopicFilter::try_from(filter_text(50_002)).unwrap();
    group.bench_function("entry_existing_100k", |b| b.iter(|| *trie.entry(black_box(&existing))));
    group.bench_function("build_10k", |b| b.iter(|| trie_with(10_000).len()));
    group.finish();
}

fn bench_retained(c: &mut Criterion) {
    let mut group = c.benchmark_group("topic_tree");
    let mut tree = TopicTree::new();
    for i in 0..100_000 {
        let topic = format!("fleet/site{}/dev{i}/temp", i / DEVICES_PER_SITE);
        tree.insert(&TopicName::try_from(topic).unwrap(), i);
    }
    for (label, f) in [
        ("literal", "fleet/site500/dev50042/temp"),
        ("plus", "fleet/site500/+/temp"),
        ("hash", "fleet/site500/#"),
    ] {
        let filter = TopicFilter::try_from(f).unwrap();
        group.bench_function(BenchmarkId::new("match_100k", label), |b| {
            b.iter(|| {
                let mut n = 0;
                tree.for_each_match(black_box(&filter), |_| n += 1);
                n
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! { name = benches; config = config(); targets = bench_match, bench_insert_remove, bench_retained }
criterion_main!(benches);
