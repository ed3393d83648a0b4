//! How messages, properties and clocks are written in `state.db`, and read back.
//!
//! Properties are JSON (readable with the `sqlite3` tool); binary correlation data is base64.
//! Times are wall-clock milliseconds since the Unix epoch, so that message expiry and session
//! expiry keep counting while the broker is down; in memory they become monotonic instants again.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use mesgd_core::acl::{AclSource, Rule};
use mesgd_core::model::MessageProperties;
use serde_json::{Value, json};

/// Wall-clock milliseconds of a monotonic instant.
pub(crate) fn instant_to_ms(at: Instant, now: Instant, wall_now: SystemTime) -> i64 {
    let wall = if at >= now { wall_now + (at - now) } else { wall_now - (now - at) };
    system_to_ms(wall)
}

/// Wall-clock milliseconds of a system time.
pub(crate) fn system_to_ms(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The monotonic instant of wall-clock milliseconds (in the past if they are).
pub(crate) fn ms_to_instant(ms: i64, now: Instant, wall_now: SystemTime) -> Instant {
    let at = if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    };
    match at.duration_since(wall_now) {
        Ok(ahead) => now + ahead,
        Err(behind) => now.checked_sub(behind.duration()).unwrap_or(now),
    }
}

/// The forwarded properties as JSON, or `None` when there are none.
pub(crate) fn properties_to_json(p: &MessageProperties) -> Option<String> {
    if p.is_empty() {
        return None;
    }
    let users: Vec<Value> = p.user_properties.iter().map(|(k, v)| json!([&**k, &**v])).collect();
    Some(
        json!({
            "payload_format_indicator": p.payload_format_indicator,
            "content_type": p.content_type.as_deref(),
            "response_topic": p.response_topic.as_deref(),
            "correlation_data": p.correlation_data.as_ref().map(|d| B64.encode(d)),
            "user_properties": users,
        })
        .to_string(),
    )
}

/// Reads properties written by [`properties_to_json`]. Unreadable JSON is an error: the store is
/// never guessed at.
pub(crate) fn properties_from_json(text: Option<&str>) -> Result<MessageProperties, String> {
    let Some(text) = text else { return Ok(MessageProperties::default()) };
    let v: Value = serde_json::from_str(text).map_err(|e| format!("message properties: {e}"))?;
    let string = |key: &str| v.get(key).and_then(Value::as_str).map(Arc::<str>::from);
    let correlation_data = match v.get("correlation_data").and_then(Value::as_str) {
        Some(s) => Some(Bytes::from(B64.decode(s).map_err(|e| format!("correlation data: {e}"))?)),
        None => None,
    };
    let user_properties = v
        .get("user_properties")
        .and_then(Value::as_array)
        .map(|pairs| {
            pairs
                .iter()
                .filter_map(|pair| {
                    let k = pair.get(0)?.as_str()?;
                    let v = pair.get(1)?.as_str()?;
                    Some((Arc::from(k), Arc::from(v)))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(MessageProperties {
        payload_format_indicator: v
            .get("payload_format_indicator")
            .and_then(Value::as_u64)
            .and_then(|n| u8::try_from(n).ok()),
        content_type: string("content_type"),
        response_topic: string("response_topic"),
        correlation_data,
        user_properties,
    })
}

/// Subscription identifiers as a JSON array, `None` when empty.
pub(crate) fn ids_to_json(ids: &[u32]) -> Option<String> {
    (!ids.is_empty()).then(|| serde_json::to_string(ids).unwrap_or_default())
}

/// Reads [`ids_to_json`].
pub(crate) fn ids_from_json(text: Option<&str>) -> Result<Vec<u32>, String> {
    match text {
        None => Ok(Vec::new()),
        Some(t) => serde_json::from_str(t).map_err(|e| format!("subscription ids: {e}")),
    }
}

/// What a will's ACL was compiled from, so it can be compiled again after a restart.
pub(crate) fn acl_to_json(rules: Option<&[Rule]>, username: Option<&str>, client_id: &str) -> String {
    json!({ "rules": rules, "username": username, "client_id": client_id }).to_string()
}

/// Reads [`acl_to_json`].
pub(crate) fn acl_from_json(text: &str) -> Result<AclSource, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("will ACL: {e}"))?;
    let rules = match v.get("rules") {
        None | Some(Value::Null) => None,
        Some(r) => Some(serde_json::from_value(r.clone()).map_err(|e| format!("will ACL rules: {e}"))?),
    };
    let username = v.get("username").and_then(Value::as_str).map(str::to_owned);
    let client_id = v.get("client_id").and_then(Value::as_str).unwrap_or_default().to_owned();
    Ok(AclSource { rules, username, client_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip() {
        let p = MessageProperties {
            payload_format_indicator: Some(1),
            content_type: Some("text/plain".into()),
            response_topic: Some("r/t".into()),
            correlation_data: Some(Bytes::from_static(&[0, 255, 7])),
            user_properties: vec![("a".into(), "1".into()), ("a".into(), "2".into())],
        };
        let text = properties_to_json(&p).unwrap();
        assert_eq!(properties_from_json(Some(&text)).unwrap(), p);
        assert_eq!(properties_to_json(&MessageProperties::default()), None);
        assert!(properties_from_json(Some("{not json")).is_err());
    }

    #[test]
    fn clocks_convert_both_ways() {
        let now = Instant::now();
        let wall = SystemTime::now();
        let later = now + Duration::from_secs(90);
        let ms = instant_to_ms(later, now, wall);
        let back = ms_to_instant(ms, now, wall);
        assert!(back.max(later) - back.min(later) <= Duration::from_millis(1));
        let earlier = ms_to_instant(system_to_ms(wall - Duration::from_secs(30)), now, wall);
        assert!(now - earlier >= Duration::from_millis(29_999));
    }

    #[test]
    fn acl_round_trips() {
        let rules = [Rule::new("a/%u/#", mesgd_core::acl::Permission::Read)];
        let text = acl_to_json(Some(&rules), Some("u"), "c");
        let source = |rules: Option<Vec<Rule>>, username: Option<&str>| AclSource {
            rules,
            username: username.map(str::to_owned),
            client_id: "c".into(),
        };
        assert_eq!(acl_from_json(&text).unwrap(), source(Some(rules.to_vec()), Some("u")));
        assert_eq!(acl_from_json(&acl_to_json(None, None, "c")).unwrap(), source(None, None));
    }

    #[test]
    fn a_compiled_acl_survives_its_stored_form() {
        use mesgd_core::acl::{Access, Acl, Permission};
        use mesgd_core::topic::TopicName;
        let rules = [Rule::new("devices/%u/#", Permission::Read), Rule::new("inbox/%c", Permission::Read)];
        let acl = Acl::compile(Some(&rules), Some("u"), "c");
        let stored = acl.source().unwrap();
        let text = acl_to_json(stored.rules.as_deref(), stored.username.as_deref(), &stored.client_id);
        let back = acl_from_json(&text).unwrap();
        let again = Acl::compile(back.rules.as_deref(), back.username.as_deref(), &back.client_id);
        assert!(again.same_source(&acl));
        let topic = |t: &str| TopicName::try_from(t).unwrap();
        assert!(again.allows(Access::Read, &topic("devices/u/t")));
        assert!(again.allows(Access::Read, &topic("inbox/c")));
        assert!(!again.allows(Access::Read, &topic("devices/v/t")));
    }
}
