//! Benchmarks of the ACL engine: the per-message check and the subscribe check. Run with
//! `cargo bench -p mesgd-core --bench acl`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mesgd_core::acl::{Access, Acl, Permission, Rule};
use mesgd_core::topic::{TopicFilter, TopicName};

/// `n` rules of the shapes real ACLs have; the last one grants `public/#`.
fn rules(n: usize) -> Vec<Rule> {
    let mut rules: Vec<Rule> = (0..n - 1)
        .map(|i| match i % 5 {
            0 => Rule::new(format!("devices/%u/secret{i}"), Permission::Deny),
            1 => Rule::new(format!("devices/%u/cfg{i}/#"), Permission::ReadWrite),
            2 => Rule::new(format!("tenants/t{i}/+/status"), Permission::Read),
            3 => Rule::new(format!("clients/%c/inbox{i}"), Permission::Read),
            _ => Rule::new(format!("telemetry/+/m{i}/#"), Permission::Write),
        })
        .collect();
    rules.push(Rule::new("public/#", Permission::Read));
    rules
}

fn bench_allows(c: &mut Criterion) {
    let acl = Acl::compile(Some(&rules(10)), Some("alice"), "client-1");
    let last = TopicName::try_from("public/news/today").unwrap();
    let denied = TopicName::try_from("private/news/today").unwrap();
    assert!(acl.allows(Access::Read, &last) && !acl.allows(Access::Read, &denied));
    let mut group = c.benchmark_group("acl/allows_10_rules");
    group.bench_function("last_rule_matches", |b| b.iter(|| acl.allows(Access::Read, black_box(&last))));
    group.bench_function("no_rule_matches", |b| b.iter(|| acl.allows(Access::Read, black_box(&denied))));
    group.finish();
}

fn bench_allows_subscribe(c: &mut Criterion) {
    let mut group = c.benchmark_group("acl/allows_subscribe");
    for n in [10, 50] {
        let acl = Acl::compile(Some(&rules(n)), Some("alice"), "client-1");
        for (label, f) in [("literal", "public/news/today"), ("wildcard", "public/+/today"), ("hash", "#")] {
            let Ok(filter) = TopicFilter::try_from(f) else { continue };
            group.bench_with_input(BenchmarkId::new(label, n), &filter, |b, filter| {
                b.iter(|| acl.allows_subscribe(black_box(filter)))
            });
        }
        let everything = TopicFilter::try_from("+/+/+/#").unwrap();
        group.bench_with_input(BenchmarkId::new("plus_plus_plus_hash", n), &everything, |b, filter| {
            b.iter(|| acl.allows_subscribe(black_box(filter)))
        });
        let nothing = TopicFilter::try_from("private/+/x").unwrap();
        assert!(!acl.allows_subscribe(&nothing));
        group.bench_with_input(BenchmarkId::new("refused", n), &nothing, |b, filter| {
            b.iter(|| acl.allows_subscribe(black_box(filter)))
        });
    }
    group.finish();
}

fn bench_compile(c: &mut Criterion) {
    let list = rules(50);
    // No other client holds the list: each iteration compiles it (and drops it from the cache).
    c.bench_function("acl/compile_50_rules", |b| {
        b.iter(|| Acl::compile(Some(black_box(&list)), Some("alice"), "client-1"))
    });
    // Another client holds it: a connect looks the list up and binds its two values.
    let held = Acl::compile(Some(&list), Some("bob"), "client-2");
    c.bench_function("acl/compile_50_rules_shared", |b| {
        b.iter(|| Acl::compile(Some(black_box(&list)), Some("alice"), "client-1"))
    });
    drop(held);
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! { name = benches; config = config(); targets = bench_allows, bench_allows_subscribe, bench_compile }
criterion_main!(benches);
