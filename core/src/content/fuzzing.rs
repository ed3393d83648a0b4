//! The bodies of the content-routing fuzz targets (`fuzz/fuzz_targets/content_*.rs`), kept
//! here so that a unit test can replay the committed seed corpus on a stable compiler.
//! Each function panics when it finds a bug and returns normally on any input otherwise.

use std::collections::BTreeSet;

use super::{Matcher, Message, Modes, Path, compile};

/// Path parsing never panics; a parsed path prints a canonical text that parses back to the
/// same path, covers itself, and matches what it matched before.
pub fn path_round_trip(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for parsed in [Path::parse(text), Path::from_url_path(text)] {
        let Ok(path) = parsed else { continue };
        let again = Path::parse(&path.to_string()).expect("a canonical path parses");
        assert_eq!(again, path, "canonical text {path} parses differently");
        assert_eq!(again.to_string(), path.to_string());
        assert!(path.covers(&path), "{path} does not cover itself");
        assert!(Path::everything().covers(&path));
    }
}

/// The indexed matcher agrees with each path's own `matches`. Input: listener paths, one per
/// line, then a NUL byte, then the message.
pub fn matcher_agrees_with_paths(data: &[u8]) {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (paths, message) = (&data[..split], data.get(split + 1..).unwrap_or_default());
    let paths: Vec<Path> =
        String::from_utf8_lossy(paths).lines().filter_map(|l| Path::parse(l).ok()).collect();
    let Ok(message) = Message::scan(message) else { return };
    let matcher = Matcher::new();
    for (id, path) in paths.iter().enumerate() {
        matcher.insert(id, path.clone()).expect("below the limit");
    }
    let check = |live: &dyn Fn(usize) -> bool| {
        let mut found = Vec::new();
        matcher.for_each_match(&message, |id| found.push(id));
        let unique: BTreeSet<usize> = found.iter().copied().collect();
        assert_eq!(unique.len(), found.len(), "a listener was yielded twice");
        let expected: BTreeSet<usize> = paths
            .iter()
            .enumerate()
            .filter(|(id, p)| live(*id) && p.matches(&message))
            .map(|(id, _)| id)
            .collect();
        assert_eq!(unique, expected);
    };
    check(&|_| true);
    for id in (0..paths.len()).step_by(2) {
        assert!(matcher.remove(id));
    }
    check(&|id| id % 2 == 1);
}

/// The compiler never panics, and a pattern it compiles matches its own sample. Input: the
/// sample as JSON, then a NUL byte, then `FIELD=MODE` lines.
pub fn compiled_pattern_matches_sample(data: &[u8]) {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(sample) = serde_json::from_slice::<serde_json::Value>(&data[..split]) else { return };
    let mut modes = Modes::new();
    for line in String::from_utf8_lossy(data.get(split + 1..).unwrap_or_default()).lines() {
        if modes.parse_assignment(line).is_err() {
            return;
        }
    }
    let Ok(path) = compile(&sample, &modes) else { return };
    let text = serde_json::to_vec(&sample).expect("a Value serialises");
    let message = Message::scan(&text).expect("serde_json writes valid JSON");
    assert!(path.matches(&message), "{path} does not match its sample {sample}");
    assert_eq!(Path::parse(path.as_str()).as_ref(), Ok(&path));
}
