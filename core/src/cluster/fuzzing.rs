//! The bodies of the `cluster_subject`, `cluster_registry`, `cluster_relay`, `cluster_content`
//! and `cluster_console` fuzz targets (`fuzz/fuzz_targets/`), kept here so that a unit test replays the committed seed
//! corpus on a stable compiler. It panics when it finds a bug and returns normally on any input
//! otherwise.

use super::subject::{LIVE, nats_matches, subject_as_filter};
use crate::topic::{TopicFilter, TopicName};

/// Input: text, one candidate per line. Each line is parsed as a subject (which must not
/// panic, and whatever parses must map back to the same subject) and as a topic and filter
/// (whose subjects must parse back); then every (filter line, topic line) pair must match in
/// NATS exactly when it matches in MQTT.
pub fn subject_mapping(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.split('\n').take(32).collect();
    for line in &lines {
        if let Ok(topic) = LIVE.parse_topic(line) {
            assert_eq!(LIVE.topic(&topic).as_deref(), Ok(*line), "subject {line:?} is not canonical");
        }
        let _ = subject_as_filter(&LIVE, line);
        if let Ok(topic) = TopicName::try_from(*line) {
            if let Ok(subject) = LIVE.topic(&topic) {
                assert_eq!(LIVE.parse_topic(&subject).as_ref(), Ok(&topic), "{line:?} via {subject:?}");
            }
        }
    }
    let topics: Vec<TopicName> = lines.iter().filter_map(|l| TopicName::try_from(*l).ok()).take(8).collect();
    let filters: Vec<TopicFilter> =
        lines.iter().filter_map(|l| TopicFilter::try_from(*l).ok()).take(8).collect();
    for filter in &filters {
        let Ok(subjects) = LIVE.filter(filter) else { continue };
        for topic in &topics {
            let Ok(subject) = LIVE.topic(topic) else { continue };
            let nats = subjects.iter().any(|s| nats_matches(s, &subject));
            assert_eq!(nats, filter.matches(topic), "{filter:?} on {topic:?} via {subjects:?}");
        }
    }
}

/// The body of the `cluster_registry` fuzz target (`fuzz/fuzz_targets/cluster_registry.rs`):
/// the input is read as a KV key (whatever decodes must be the canonical key of its client id),
/// as a client id (whose key must decode back to it), and as each registry message (which
/// must not panic, and whatever is read must read back the same after encoding), including
/// the messages of a handed-over session and a session's record for recovery.
pub fn registry_messages(data: &[u8]) {
    use super::client_key;
    use super::registry::{Record, TakeoverReply, TakeoverRequest};

    let text = String::from_utf8_lossy(data);
    if let Ok(id) = client_key::decode(&text) {
        assert_eq!(client_key::encode(&id).as_deref(), Ok(&*text), "key {text:?} is not canonical");
    }
    if let Ok(key) = client_key::encode(&text) {
        assert_eq!(client_key::decode(&key).as_deref(), Ok(&*text), "{text:?} via {key:?}");
    }
    if let Ok(r) = Record::decode(data) {
        assert_eq!(Record::decode(&r.encode()).ok(), Some(r));
    }
    if let Ok(q) = TakeoverRequest::decode(data) {
        assert_eq!(TakeoverRequest::decode(&q.encode()).ok(), Some(q));
    }
    if let Ok(a) = TakeoverReply::decode(data) {
        for handed in &a.subscriptions {
            if let Ok((filter, options)) = handed.parse() {
                let again = super::registry::HandedSubscription::of(&filter, &options);
                assert_eq!(again.parse().ok(), Some((filter, options)));
            }
        }
        // Handed-over messages: whatever parses is written and parses again the same.
        let now = std::time::Instant::now();
        let node: std::sync::Arc<str> = std::sync::Arc::from("fuzz");
        for m in &a.messages {
            if let Ok(entry) = m.parse(&node, now) {
                let again =
                    super::handover::HandedMessage::of(&entry, now).parse(&node, now).expect("reparses");
                assert_eq!(again.inflight, entry.inflight);
                assert_eq!(again.delivery.message.payload, entry.delivery.message.payload);
                assert_eq!(again.delivery.message.topic, entry.delivery.message.topic);
            }
        }
        assert_eq!(TakeoverReply::decode(&a.encode()).ok(), Some(a));
    }
    if let Ok(r) = super::session_record::SessionRecord::decode(data) {
        let _ = r.expired(u64::MAX);
        assert_eq!(super::session_record::SessionRecord::decode(&r.encode()).ok(), Some(r));
    }
}

/// The body of the `cluster_relay` fuzz target (`fuzz/fuzz_targets/cluster_relay.rs`): the
/// input is read as a relay request and as a reply between nodes, as an alias binding's value
/// and as a game's waiter record and a node's figures (never a panic), and whatever is read
/// must read back the same after encoding.
pub fn relay_messages(data: &[u8]) {
    use super::relay_wire::{RelayReply, RelayRequest};

    let bytes = bytes::Bytes::copy_from_slice(data);
    if let Ok(request) = RelayRequest::decode(&bytes) {
        assert_eq!(RelayRequest::decode(&request.encode()).as_ref(), Ok(&request));
        assert_eq!(request.encode(), bytes, "not the canonical form");
    }
    if let Ok(reply) = RelayReply::decode(data) {
        assert_eq!(&reply.encode()[..], data);
    }
    if let Ok(digest) = super::relay::decode_binding(data) {
        assert_eq!(super::relay::encode_binding(&digest), data, "not the canonical form");
    }
    if let Ok(waiter) = super::relay_kv::Waiter::decode(data) {
        assert_eq!(super::relay_kv::Waiter::decode(&waiter.encode()).ok(), Some(waiter));
    }
    if let Ok(figures) = super::relay_kv::Figures::decode(data) {
        assert_eq!(super::relay_kv::Figures::decode(&figures.encode()).ok(), Some(figures));
    }
}

/// The body of the `cluster_content` fuzz target (`fuzz/fuzz_targets/cluster_content.rs`): the
/// input is read as a reach header (never a panic), and whatever is read must read back the
/// same after encoding.
pub fn content_reach(data: &[u8]) {
    use super::content::{decode_reach, encode_reach};

    let text = String::from_utf8_lossy(data);
    if let Ok(patterns) = decode_reach(&text) {
        assert_eq!(decode_reach(&encode_reach(&patterns)).as_ref(), Ok(&patterns), "{text:?}");
    }
}

/// The body of the `cluster_console` fuzz target (`fuzz/fuzz_targets/cluster_console.rs`): the
/// input is read as a console session's record (never a panic), and whatever is read must read
/// back the same after encoding, with a digest.
pub fn console_record(data: &[u8]) {
    use super::console::ConsoleRecord;

    if let Ok(record) = ConsoleRecord::decode(data) {
        assert!(record.digest().is_some(), "a record that reads has a digest");
        assert_eq!(ConsoleRecord::decode(&record.encode()).ok(), Some(record));
    }
}
