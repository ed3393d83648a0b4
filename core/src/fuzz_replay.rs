//! Replays the committed seed corpora of the MQTT and topic fuzz targets
//! (`fuzz/corpus/<target>/`) through the targets' bodies on a stable compiler, so that every
//! seed, and every crash that became one, is checked by `cargo test`.

use std::path::PathBuf;

/// Runs `body` on every file of `fuzz/corpus/<target>/`; the corpus must hold at least five.
fn replay(target: &str, body: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut count = 0;
    for entry in entries {
        let file = entry.unwrap().path();
        let data = std::fs::read(&file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| body(&data)) {
            eprintln!("seed {} fails", file.display());
            std::panic::resume_unwind(panic);
        }
        count += 1;
    }
    assert!(count >= 5, "{target}: only {count} seeds in {}", dir.display());
}

#[test]
fn mqtt_decode_corpus() {
    replay("mqtt_decode", crate::mqtt::fuzzing::decode_stream);
}

#[test]
fn mqtt_roundtrip_corpus() {
    replay("mqtt_roundtrip", crate::mqtt::fuzzing::round_trip);
}

#[test]
fn topic_filter_corpus() {
    replay("topic_filter", crate::topic::fuzzing::topic_filter);
}

#[test]
fn websocket_frames_corpus() {
    replay("websocket_frames", crate::websocket::fuzzing::decode_stream);
}

#[test]
fn cluster_subject_corpus() {
    replay("cluster_subject", crate::cluster::fuzzing::subject_mapping);
}

#[test]
fn cluster_registry_corpus() {
    replay("cluster_registry", crate::cluster::fuzzing::registry_messages);
}

#[test]
fn cluster_relay_corpus() {
    replay("cluster_relay", crate::cluster::fuzzing::relay_messages);
}

#[test]
fn cluster_content_corpus() {
    replay("cluster_content", crate::cluster::fuzzing::content_reach);
}

#[test]
fn cluster_console_corpus() {
    replay("cluster_console", crate::cluster::fuzzing::console_record);
}

/// Every fuzz target's seed corpus is tracked: `fuzz/.gitignore` ignores the corpora libFuzzer
/// grows and lists the committed ones, so a target added without its line would have seeds
/// here and none in a fresh checkout (where its replay test then fails). This checks the list
/// against `fuzz/fuzz_targets/` and the seeds against git's index.
#[test]
fn every_fuzz_target_has_a_tracked_seed_corpus() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let ignore = std::fs::read_to_string(fuzz.join(".gitignore")).unwrap();
    let tracked: Vec<&str> =
        ignore.lines().filter_map(|l| l.strip_prefix("!corpus/")?.strip_suffix('/')).collect();
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(fuzz.join("fuzz_targets")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(target) = name.strip_suffix(".rs") {
            targets.push(target.to_string());
        }
    }
    assert!(targets.len() >= 17, "only {} fuzz targets found", targets.len());
    for target in &targets {
        assert!(
            tracked.contains(&target.as_str()),
            "fuzz/.gitignore lacks `!corpus/{target}/`: its seed corpus would not be committed"
        );
        assert!(fuzz.join("corpus").join(target).is_dir(), "no seed corpus for fuzz target {target}");
    }
}
