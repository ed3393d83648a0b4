//! `[cluster.durable]`: the JetStream stream that stores QoS 1/2 messages before their
//! acknowledgement, its retention bounds, and how long a store may take.

use serde::Deserialize;

use crate::ClusterConfigError;

/// `[cluster.durable]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DurableConfig {
    /// The stream of QoS 1/2 messages (subjects `mqs.>` and `mqsd.>`).
    #[serde(default = "default_stream")]
    pub stream: String,
    /// Its replica count when this node creates it (1, or 3 on a three-server NATS cluster).
    #[serde(default = "default_replicas")]
    pub replicas: usize,
    /// How long the stream keeps a message, in seconds: a session that resumes on another node
    /// later than this after its node died finds older messages gone.
    #[serde(default = "default_max_age_s")]
    pub max_age_s: u64,
    /// How many bytes the stream keeps at most; past it, the oldest messages go.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: i64,
    /// How long a QoS 1/2 publish waits for the stream's acknowledgement, in milliseconds. Past
    /// it the message counts as not stored: the publisher gets no PUBACK / PUBREC and its
    /// connection is closed (MQTT 5: DISCONNECT 0x80), so it publishes again elsewhere.
    #[serde(default = "default_store_timeout_ms")]
    pub store_timeout_ms: u64,
}

impl Default for DurableConfig {
    fn default() -> Self {
        DurableConfig {
            stream: default_stream(),
            replicas: default_replicas(),
            max_age_s: default_max_age_s(),
            max_bytes: default_max_bytes(),
            store_timeout_ms: default_store_timeout_ms(),
        }
    }
}

fn default_stream() -> String {
    "MESGD_QOS".to_owned()
}
fn default_replicas() -> usize {
    1
}
fn default_max_age_s() -> u64 {
    86_400
}
fn default_max_bytes() -> i64 {
    1 << 30
}
fn default_store_timeout_ms() -> u64 {
    5000
}

impl DurableConfig {
    /// Checks the ranges and the stream name.
    pub fn validate(&self) -> Result<(), ClusterConfigError> {
        let out = |key: &'static str, value: String, why: &'static str| {
            Err(ClusterConfigError::OutOfRange { key, value, why })
        };
        let s = &self.stream;
        if s.is_empty() || s.bytes().any(|b| b.is_ascii_whitespace() || b"./*>".contains(&b)) {
            return out(
                "durable.stream",
                s.clone(),
                "a non-empty name without whitespace, '.', '/', '*' or '>'",
            );
        }
        if !(1..=5).contains(&self.replicas) {
            return out("durable.replicas", self.replicas.to_string(), "1 to 5");
        }
        if self.max_age_s == 0 {
            return out("durable.max_age_s", "0".into(), "at least 1");
        }
        if self.max_bytes < 1 << 20 {
            return out("durable.max_bytes", self.max_bytes.to_string(), "at least 1 MiB (1048576)");
        }
        if self.store_timeout_ms == 0 {
            return out("durable.store_timeout_ms", "0".into(), "at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_values() {
        let d: DurableConfig = toml::from_str("").unwrap();
        assert_eq!((d.stream.as_str(), d.replicas, d.max_age_s), ("MESGD_QOS", 1, 86_400));
        assert_eq!((d.max_bytes, d.store_timeout_ms), (1 << 30, 5000));
        let cases = [
            ("stream = \"a.b\"", "durable.stream"),
            ("replicas = 0", "durable.replicas"),
            ("max_age_s = 0", "durable.max_age_s"),
            ("max_bytes = 10", "durable.max_bytes"),
            ("store_timeout_ms = 0", "durable.store_timeout_ms"),
        ];
        for (text, key) in cases {
            let d: DurableConfig = toml::from_str(text).unwrap();
            let err = d.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
        assert!(toml::from_str::<DurableConfig>("ttl = 1").is_err(), "unknown keys are refused");
    }
}
