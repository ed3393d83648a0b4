//! Replays the committed fuzz corpus through the fuzz targets' bodies on a stable compiler.

use std::path::PathBuf;

use crate::content::fuzzing;

fn replay(target: &str, body: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut count = 0;
    for entry in entries {
        let file = entry.unwrap().path();
        body(&std::fs::read(&file).unwrap());
        count += 1;
    }
    assert!(count >= 5, "{target}: only {count} seeds in {}", dir.display());
}

#[test]
fn content_path_corpus() {
    replay("content_path", fuzzing::path_round_trip);
}

#[test]
fn content_match_corpus() {
    replay("content_match", fuzzing::matcher_agrees_with_paths);
}

#[test]
fn content_compile_corpus() {
    replay("content_compile", fuzzing::compiled_pattern_matches_sample);
}
