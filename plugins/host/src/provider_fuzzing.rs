//! The body of the `plugin_wire` fuzz target (`fuzz/fuzz_targets/plugin_wire.rs`), kept here so
//! that a unit test replays the committed seed corpus on a stable compiler. It panics when it
//! finds a bug and returns normally on any input otherwise.

use mesgd_core::auth::{ConnectInfo, Outcome, Protocol};
use mesgd_plugin_api::{Decision, Request, Response};

use super::{MAX_RULES, decode_answer};
use crate::library::sanitize;

/// The plugin ABI's JSON boundary on arbitrary bytes, both ways:
///
/// - as a [`Request`] (what a plugin parses) and as a [`Response`] (the wire type of an
///   answer): what parses serialises and parses back to an equal value;
/// - as a plugin's answer through the host's own check (`decode_answer`): never a panic; an
///   answer the host takes is a [`Response`] that parses, an `allow` carries a non-empty
///   username and at most [`MAX_RULES`] valid rules, and a refusal's message is one line;
/// - as plugin text for the log (`sanitize`): one bounded line.
pub fn answer(data: &[u8]) {
    if let Ok(request) = serde_json::from_slice::<Request>(data) {
        let bytes = serde_json::to_vec(&request).expect("a request serialises");
        let again: Request = serde_json::from_slice(&bytes).expect("a serialised request parses");
        assert_eq!(again, request);
    }
    let response = serde_json::from_slice::<Response>(data);
    if let Ok(response) = &response {
        let bytes = serde_json::to_vec(response).expect("a response serialises");
        let again: Response = serde_json::from_slice(&bytes).expect("a serialised response parses");
        assert_eq!(&again, response);
    }

    let info = ConnectInfo::new(Protocol::Mqtt5, "fuzz-client", "fuzz").with_username(Some("alice".into()));
    match decode_answer(data, &info, "plugin:fuzz") {
        Ok(outcome) => {
            let response = response.expect("the host took an answer that does not parse");
            match outcome {
                Outcome::Allow(identity) => {
                    assert_eq!(response.result, Decision::Allow);
                    assert!(identity.username.as_deref().is_some_and(|u| !u.is_empty()));
                    if let Some(rules) = &identity.acl {
                        assert!(rules.len() <= MAX_RULES);
                        assert!(rules.iter().all(|r| r.validate().is_ok()), "an invalid rule was taken");
                        assert_eq!(Some(rules.len()), response.acl.as_ref().map(Vec::len));
                    } else {
                        assert!(response.acl.is_none(), "an ACL was dropped");
                    }
                }
                Outcome::Deny(denial) => {
                    assert_eq!(response.result, Decision::Deny);
                    assert!(!denial.message.contains(['\n', '\r']), "{:?}", denial.message);
                }
                Outcome::Next => assert_eq!(response.result, Decision::Next),
            }
        }
        Err(message) => assert!(!message.contains(['\n', '\r']), "{message:?}"),
    }

    let text = String::from_utf8_lossy(data);
    let shown = sanitize(&text);
    assert!(shown.chars().count() <= 501);
    assert!(!shown.chars().any(char::is_control));
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn plugin_wire_corpus() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/plugin_wire");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut count = 0;
        for entry in entries {
            let file = entry.unwrap().path();
            let data = std::fs::read(&file).unwrap();
            if let Err(panic) = std::panic::catch_unwind(|| super::answer(&data)) {
                eprintln!("seed {} fails", file.display());
                std::panic::resume_unwind(panic);
            }
            count += 1;
        }
        assert!(count >= 5, "only {count} seeds in {}", dir.display());
    }
}
