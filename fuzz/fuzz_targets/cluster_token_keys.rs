//! Fuzzes the token key store as cluster nodes exchange it: any bytes on the keys subject are
//! refused or decode to a store that encodes back to the same store.
//!
//! The body lives in mesgd-providers (`tokens::shared::fuzzing::shared_keys`) so that a unit
//! test replays `fuzz/corpus/cluster_token_keys/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_providers::tokens::shared::fuzzing::shared_keys(data));
