//! The rules every message a client hands the broker must meet, whether it arrives as a PUBLISH
//! or as the will of a CONNECT: one implementation for both, so a will cannot slip past a rule
//! a publish is held to. (The ACL check is not here: the broker makes it, for every protocol.)

use std::sync::Arc;

use mesgd_core::mqtt::{QoS, ReasonCode};
use mesgd_core::topic::TopicName;

use super::Settings;

/// The parts of a message the rules look at.
pub(crate) struct Fields<'a> {
    pub(crate) topic: &'a TopicName,
    pub(crate) qos: QoS,
    pub(crate) retain: bool,
    pub(crate) payload_format_indicator: Option<u8>,
    pub(crate) payload: &'a [u8],
    pub(crate) response_topic: Option<&'a Arc<str>>,
}

/// A broken rule: the MQTT 5 reason code and what was wrong.
#[derive(Debug)]
pub(crate) struct Broken {
    pub(crate) code: ReasonCode,
    pub(crate) message: String,
}

fn broken(code: ReasonCode, message: impl Into<String>) -> Result<(), Broken> {
    Err(Broken { code, message: message.into() })
}

/// Checks a client's message against the server's features and the protocol's rules.
pub(crate) fn check(settings: &Settings, m: &Fields<'_>) -> Result<(), Broken> {
    if m.qos > settings.max_qos {
        return broken(ReasonCode::QoSNotSupported, format!("QoS {:?} exceeds the maximum QoS", m.qos));
    }
    if m.retain && !settings.retain_available {
        return broken(ReasonCode::RetainNotSupported, "retained messages are not supported");
    }
    if let Some(Err(e)) = m.response_topic.map(|t| TopicName::try_from(t.clone())) {
        // [MQTT-3.3.2-14]: a response topic is a topic name, without wildcards.
        return broken(ReasonCode::ProtocolError, format!("invalid response topic: {e}"));
    }
    if m.topic.as_str().len() > settings.max_topic_length {
        return broken(
            ReasonCode::TopicNameInvalid,
            format!("topic name is longer than {} bytes", settings.max_topic_length),
        );
    }
    if m.topic.level_count() > settings.max_topic_levels {
        return broken(
            ReasonCode::TopicNameInvalid,
            format!("topic name has more than {} levels", settings.max_topic_levels),
        );
    }
    if m.payload_format_indicator == Some(1) && std::str::from_utf8(m.payload).is_err() {
        return broken(ReasonCode::PayloadFormatInvalid, "payload is not UTF-8 as its format indicator says");
    }
    Ok(())
}
