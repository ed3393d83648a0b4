//! Fuzzes topic names, topic filters and subscription filters (parsing never panics and the
//! three agree), filter matching against a split-and-walk reference, and the ACL engine's
//! `allows` / `allows_subscribe` / `allows_every` against the brute-force oracle of
//! `acl::oracle`.
//!
//! The body lives in mesgd-core (`topic::fuzzing::topic_filter`) so that a unit test replays
//! `fuzz/corpus/topic_filter/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_core::topic::fuzzing::topic_filter(data));
