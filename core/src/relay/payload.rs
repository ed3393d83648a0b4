//! The payload mapping between relay `ct` strings and MQTT payloads (one topic space).
//!
//! - Relay → MQTT: the payload is the bytes of the `ct` string's value (UTF-8, unescaped).
//! - MQTT → relay: a payload that is valid UTF-8 becomes `ct` as is. One that is not becomes
//!   the standard base64 of the payload (with padding) and the `message` frame carries
//!   `"enc":"base64"`; without `enc` the `ct` is the payload's text. An empty payload is the
//!   empty string.
//!
//! A relay client therefore sees exactly what an MQTT client published whenever that is text,
//! and can still recover binary payloads byte for byte. `enc` is outside the seed's tables, and
//! it is only ever sent, never read: a relay `publish` is always text.

use std::borrow::Cow;

use base64::Engine as _;
use bytes::Bytes;

use super::address::BASE64;
use super::json::JsonStr;

/// How a `ct` derived from an MQTT payload is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtEncoding {
    /// The payload's own UTF-8 text (no `enc` key).
    Text,
    /// Standard base64 of the payload (`"enc":"base64"`).
    Base64,
}

impl CtEncoding {
    /// The `enc` value to send, if any.
    pub fn enc(self) -> Option<&'static str> {
        match self {
            CtEncoding::Text => None,
            CtEncoding::Base64 => Some("base64"),
        }
    }
}

/// An MQTT payload as a relay `ct`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqttCt<'a> {
    text: Cow<'a, str>,
    encoding: CtEncoding,
}

impl<'a> MqttCt<'a> {
    /// Maps an MQTT payload: borrowed when it is UTF-8, base64 otherwise.
    pub fn from_payload(payload: &'a [u8]) -> Self {
        match std::str::from_utf8(payload) {
            Ok(text) => MqttCt { text: Cow::Borrowed(text), encoding: CtEncoding::Text },
            Err(_) => MqttCt { text: Cow::Owned(BASE64.encode(payload)), encoding: CtEncoding::Base64 },
        }
    }

    /// The `ct` value, to be escaped when written.
    pub fn ct(&self) -> JsonStr<'_> {
        JsonStr::text(&self.text)
    }

    /// How it is encoded.
    pub fn encoding(&self) -> CtEncoding {
        self.encoding
    }
}

/// The MQTT payload for a relay `ct` parsed from `frame`: a slice of the frame (no copy) when
/// the string has no escapes, otherwise the unescaped text's bytes.
pub fn mqtt_payload(frame: &Bytes, ct: &JsonStr<'_>) -> Bytes {
    if let Some(text) = ct.as_unescaped() {
        let inside = frame.as_ptr_range();
        let part = text.as_bytes().as_ptr_range();
        if inside.start <= part.start && part.end <= inside.end {
            return frame.slice_ref(text.as_bytes());
        }
    }
    Bytes::copy_from_slice(ct.to_text().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::client::{ClientMessage, parse};

    fn publish_ct(frame: &Bytes) -> Bytes {
        match parse(frame).unwrap() {
            ClientMessage::Publish { ct, .. } => mqtt_payload(frame, &ct),
            other => panic!("not a publish: {other:?}"),
        }
    }

    #[test]
    fn relay_ct_becomes_the_strings_bytes() {
        let frame = Bytes::from_static(br#"{"t":"publish","topic":"sensors/1","ct":"21.5 \u00b0C"}"#);
        assert_eq!(publish_ct(&frame), "21.5 °C".as_bytes());
        let frame = Bytes::from_static(br#"{"t":"publish","topic":"sensors/1","ct":"{\"v\":1}"}"#);
        assert_eq!(publish_ct(&frame), &b"{\"v\":1}"[..]);
    }

    #[test]
    fn unescaped_ct_shares_the_frame() {
        let frame = Bytes::from_static(br#"{"t":"publish","topic":"a","ct":"plain text"}"#);
        let payload = publish_ct(&frame);
        assert_eq!(payload, &b"plain text"[..]);
        assert!(frame.as_ptr_range().contains(&payload.as_ptr()), "sliced, not copied");
        // A value from elsewhere is copied, never sliced out of the wrong buffer.
        assert_eq!(mqtt_payload(&frame, &JsonStr::text("other")), &b"other"[..]);
    }

    #[test]
    fn mqtt_payloads_become_ct() {
        let text = MqttCt::from_payload("héllo".as_bytes());
        assert_eq!((text.ct().to_text(), text.encoding().enc()), (Cow::Borrowed("héllo"), None));
        let binary = MqttCt::from_payload(&[0xff, 0x00, 0x10]);
        assert_eq!(binary.ct().to_text(), "/wAQ");
        assert_eq!(binary.encoding().enc(), Some("base64"));
        assert_eq!(MqttCt::from_payload(b"").ct().to_text(), "");
    }

    #[test]
    fn binary_round_trips_through_base64() {
        let payload: Vec<u8> = (0..=255).collect();
        let ct = MqttCt::from_payload(&payload);
        assert_eq!(ct.encoding(), CtEncoding::Base64);
        assert_eq!(BASE64.decode(ct.ct().to_text().as_bytes()).unwrap(), payload);
    }
}
