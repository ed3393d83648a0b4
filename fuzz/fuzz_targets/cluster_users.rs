//! Fuzzes the wire forms of the users stream between cluster nodes (users, content-routing
//! roles, administrators, API tokens): any bytes are refused or decode to a record that encodes
//! back to itself.
//!
//! The body lives in mesgd-providers (`builtin::replica::fuzzing::replicated_user`) so that a
//! unit test replays `fuzz/corpus/cluster_users/` on a stable compiler.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mesgd_providers::builtin::replica::fuzzing::replicated_user(data));
