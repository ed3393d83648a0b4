//! Fuzzes the builtin users' wire form between cluster nodes: any bytes in the users stream
//! are refused or decode to a user that encodes back to itself.
//!
//! The body lives in mesgd-providers (`builtin::replica::fuzzing::replicated_user`) so that a
//! unit test replays `fuzz/corpus/cluster_users/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_providers::builtin::replica::fuzzing::replicated_user(data));
