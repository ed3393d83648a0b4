//! Quality of service and the options of a subscription, as every layer sees them.

/// Quality of service of a publication or a subscription.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum QoS {
    /// Delivered at most once, unacknowledged.
    #[default]
    AtMostOnce = 0,
    /// Delivered at least once (PUBACK).
    AtLeastOnce = 1,
    /// Delivered exactly once (PUBREC, PUBREL, PUBCOMP).
    ExactlyOnce = 2,
}

/// Whether retained messages are sent when a subscription is made (MQTT 5.0 §3.8.3.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RetainHandling {
    /// Send retained messages at every subscribe.
    #[default]
    SendAtSubscribe = 0,
    /// Send retained messages only if the subscription did not exist before.
    SendIfNew = 1,
    /// Never send retained messages for this subscription.
    DoNotSend = 2,
}

/// The options of one subscription, as the session and router keep them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// The maximum QoS the subscriber accepts.
    pub qos: QoS,
    /// MQTT 5: do not deliver the subscriber's own publishes back to it.
    pub no_local: bool,
    /// MQTT 5: keep the publisher's retain flag instead of clearing it.
    pub retain_as_published: bool,
    /// MQTT 5: when to send retained messages at subscribe time.
    pub retain_handling: RetainHandling,
    /// MQTT 5: the identifier to send with every matching message.
    pub subscription_id: Option<u32>,
}

impl SubscribeOptions {
    /// Plain options: the QoS, everything else at its MQTT 3.1.1 meaning.
    pub fn with_qos(qos: QoS) -> Self {
        SubscribeOptions {
            qos,
            no_local: false,
            retain_as_published: false,
            retain_handling: RetainHandling::SendAtSubscribe,
            subscription_id: None,
        }
    }
}
