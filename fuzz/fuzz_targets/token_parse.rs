//! Fuzzes the PKI token parser and verifier with arbitrary text.
//!
//! `parse` and `verify` must never panic, and no input may verify: the key store is made once
//! per process in a temporary directory, and nothing but that store's own `forge` can produce
//! a token it accepts. Seeds: `fuzz/corpus/token_parse` (`cargo fuzz run token_parse
//! fuzz/corpus/token_parse`), which a stable unit test in `mesgd-providers` also replays.

#![no_main]

use std::sync::OnceLock;
use std::time::SystemTime;

use libfuzzer_sys::fuzz_target;
use mesgd_providers::tokens::{KeyStore, parse, verify};

fn keys() -> &'static KeyStore {
    static KEYS: OnceLock<KeyStore> = OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mesgd-fuzz-token-parse-{}", std::process::id()));
        KeyStore::open_or_create(&dir, SystemTime::UNIX_EPOCH).expect("a key store in the temporary directory")
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse(&text);
    assert!(verify(keys(), &text, SystemTime::UNIX_EPOCH).is_err(), "arbitrary input verified");
});
