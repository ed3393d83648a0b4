//! What one connect costs: `Chain::authenticate` through each shipped provider, as the broker
//! calls it. Run with `cargo bench -p mesgd-providers --bench connect`; criterion reports the
//! time per authentication (its inverse is authentications per second on one caller).
//!
//! - builtin, with and without the password-check cache, at the default PBKDF2 count;
//! - jwt, one HS256 token with a two-rule ACL;
//! - http, a webhook on 127.0.0.1 (hyper), with and without the answer cache.

#[path = "../tests/it/support/webhook.rs"]
mod webhook;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use mesgd_core::auth::{Chain, ConnectInfo, Protocol, Secret, Verdict};
use mesgd_providers::builtin::{AuthType, Store, config_db_path};
use mesgd_providers::{BuildContext, Registry};
use serde_json::json;

const SECRET: &str = "an HS256 secret of at least thirty-two bytes";

fn chain(storage: &std::path::Path, providers_toml: &str) -> Chain {
    #[derive(serde::Deserialize)]
    struct Doc {
        providers: Vec<toml::Table>,
    }
    let tables = toml::from_str::<Doc>(providers_toml).expect("bench TOML parses").providers;
    Registry::with_builtin_providers()
        .build_chain(&tables, false, &mut BuildContext::new(storage))
        .expect("bench chain builds")
}

fn connect(username: &str, password: &str) -> ConnectInfo {
    ConnectInfo::new(Protocol::Mqtt311, "bench-client", "mqtt")
        .with_username(Some(username.to_owned()))
        .with_password(Some(Secret::new(password)))
}

fn admit(rt: &tokio::runtime::Runtime, chain: &Chain, info: &ConnectInfo) {
    match rt.block_on(chain.authenticate(black_box(info))) {
        Verdict::Allowed(identity) => {
            black_box(identity);
        }
        Verdict::Denied(denial) => panic!("bench connect denied: {denial:?}"),
    }
}

fn bench_connect(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let storage = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&config_db_path(storage.path())).expect("store");
    store.add_user("alice", AuthType::Basic, Some(b"alice-pw"), false).expect("user");
    for pattern in ["devices/%u/#", "public/#"] {
        store
            .add_rule(
                "alice",
                mesgd_core::acl::Rule {
                    pattern: pattern.into(),
                    permission: mesgd_core::acl::Permission::Read,
                },
                None,
            )
            .expect("rule");
    }
    let alice = connect("alice", "alice-pw");

    let mut group = c.benchmark_group("connect");
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));

    let cached = chain(storage.path(), "[[providers]]\ntype = \"builtin\"");
    group.bench_function("builtin/cache-on", |b| b.iter(|| admit(&rt, &cached, &alice)));
    let uncached = chain(storage.path(), "[[providers]]\ntype = \"builtin\"\nverify_cache = false");
    group.sample_size(10);
    group.bench_function("builtin/cache-off", |b| b.iter(|| admit(&rt, &uncached, &alice)));
    group.sample_size(100);

    let jwt = chain(storage.path(), &format!("[[providers]]\ntype = \"jwt\"\nsecret = \"{SECRET}\""));
    let exp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() + 3600;
    let token = encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": "alice", "exp": exp, "acl": [{"pattern": "devices/%u/#", "permission": "read"}, {"pattern": "public/#", "permission": "read"}]}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("token");
    let with_token = connect("alice", &token);
    group.bench_function("jwt", |b| b.iter(|| admit(&rt, &jwt, &with_token)));

    let hook = rt.block_on(webhook::Webhook::start(Arc::new(|_: &serde_json::Value| {
        webhook::Answer::Reply(
            200,
            r#"{"allow":true,"acl":[{"pattern":"devices/%u/#","permission":"read"}]}"#.into(),
        )
    })));
    let url = hook.url("/auth");
    let http = chain(storage.path(), &format!("[[providers]]\ntype = \"http\"\nurl = \"{url}\""));
    group.bench_function("http/cache-off", |b| b.iter(|| admit(&rt, &http, &alice)));
    let http_cached = chain(
        storage.path(),
        &format!("[[providers]]\ntype = \"http\"\nurl = \"{url}\"\ncache_ttl_ms = 60000"),
    );
    group.bench_function("http/cache-on", |b| b.iter(|| admit(&rt, &http_cached, &alice)));
    group.finish();
}

criterion_group!(benches, bench_connect);
criterion_main!(benches);
