//! The properties a message carries from its publisher to its subscribers, between the codec's
//! packet properties and the protocol-neutral [`MessageProperties`] the router keeps.

use super::{PublishProperties, WillProperties};
use crate::model::MessageProperties;

impl From<&PublishProperties> for MessageProperties {
    /// Takes the forwarded properties out of a decoded PUBLISH.
    fn from(p: &PublishProperties) -> Self {
        MessageProperties {
            payload_format_indicator: p.payload_format_indicator,
            content_type: p.content_type.clone(),
            response_topic: p.response_topic.clone(),
            correlation_data: p.correlation_data.clone(),
            user_properties: p.user_properties.clone(),
        }
    }
}

impl From<&WillProperties> for MessageProperties {
    /// Takes the forwarded properties out of a CONNECT's will.
    fn from(p: &WillProperties) -> Self {
        MessageProperties {
            payload_format_indicator: p.payload_format_indicator,
            content_type: p.content_type.clone(),
            response_topic: p.response_topic.clone(),
            correlation_data: p.correlation_data.clone(),
            user_properties: p.user_properties.clone(),
        }
    }
}

impl From<&MessageProperties> for PublishProperties {
    /// The forwarded properties of a message, as a PUBLISH to a subscriber carries them (the
    /// per-subscriber ones — expiry, subscription identifiers, topic alias — are set apart).
    fn from(p: &MessageProperties) -> Self {
        PublishProperties {
            payload_format_indicator: p.payload_format_indicator,
            content_type: p.content_type.clone(),
            response_topic: p.response_topic.clone(),
            correlation_data: p.correlation_data.clone(),
            user_properties: p.user_properties.clone(),
            ..Default::default()
        }
    }
}
