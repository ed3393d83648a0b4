//! MQTT 3.1.1: connecting, subscribing, and the wires of the load's publishers and
//! subscribers.

pub(crate) mod codec;
pub(crate) mod load;

use std::net::SocketAddr;
use std::time::Duration;

use crate::error::SetupError;
use crate::link::{Framing, Link, Writer};
use crate::run::{Incoming, Wire};
use crate::stamp::{self, Stamp};
use crate::stats::Errors;
use codec::Packet;

/// How long a CONNACK or SUBACK may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Keep-alive asked for: longer than any run, so no PINGREQ is needed.
const KEEP_ALIVE_S: u16 = 600;

/// Credentials every connection of a run presents.
#[derive(Clone, Debug, Default)]
pub(crate) struct Credentials {
    /// MQTT username, relay `username`.
    pub(crate) username: Option<String>,
    /// MQTT password, relay `password`.
    pub(crate) password: Option<String>,
    /// Relay `token`, WebSocket `Authorization: Bearer`.
    pub(crate) token: Option<String>,
}

/// Opens an MQTT connection and waits for its CONNACK.
pub(crate) async fn connect(
    addr: SocketAddr,
    client_id: &str,
    creds: &Credentials,
) -> Result<Link, SetupError> {
    let mut link = Link::tcp(addr, Framing::Mqtt).await?;
    link.writer.message(|b| {
        codec::put_connect(b, client_id, KEEP_ALIVE_S, creds.username.as_deref(), creds.password.as_deref())
    });
    link.writer.flush().await.map_err(SetupError::io("connect"))?;
    let reply = link.next_message("connack", HANDSHAKE_TIMEOUT).await?;
    match codec::parse(&reply) {
        Ok(Packet::ConnAck { code: 0 }) => Ok(link),
        Ok(Packet::ConnAck { code }) => {
            Err(SetupError::Refused { what: "connect", reason: format!("return code {code}") })
        }
        Ok(_) => Err(SetupError::Refused { what: "connect", reason: "no CONNACK first".into() }),
        Err(e) => Err(SetupError::Frame { what: "connack", source: e.into() }),
    }
}

/// Subscribes `link` to `filter` and waits for the SUBACK.
pub(crate) async fn subscribe(link: &mut Link, filter: &str, qos: u8) -> Result<(), SetupError> {
    link.writer.message(|b| codec::put_subscribe(b, 1, filter, qos));
    link.writer.flush().await.map_err(SetupError::io("subscribe"))?;
    let reply = link.next_message("suback", HANDSHAKE_TIMEOUT).await?;
    match codec::parse(&reply) {
        Ok(Packet::SubAck { packet_id: 1, codes: [code] }) if *code < 0x80 => Ok(()),
        Ok(Packet::SubAck { .. }) => {
            Err(SetupError::Refused { what: "subscribe", reason: "SUBACK failure".into() })
        }
        Ok(_) => Err(SetupError::Refused { what: "subscribe", reason: "no SUBACK first".into() }),
        Err(e) => Err(SetupError::Frame { what: "suback", source: e.into() }),
    }
}

/// Counts a packet a load connection did not expect.
fn unexpected(packet: Result<Packet<'_>, codec::MqttError>, errors: &Errors) {
    match packet {
        Ok(Packet::PingResp) => {}
        Ok(Packet::ConnAck { .. }) => errors.add("unexpected CONNACK"),
        Ok(Packet::SubAck { .. }) => errors.add("unexpected SUBACK"),
        Ok(Packet::Publish { .. }) => errors.add("unexpected PUBLISH"),
        Ok(Packet::PubAck { .. }) => errors.add("unexpected PUBACK"),
        Ok(Packet::Other { kind }) => errors.add(&format!("unexpected packet type {kind}")),
        Err(e) => errors.add(&format!("mqtt: {e}")),
    }
}

/// A publisher: PUBLISHes with a stamped payload; PUBACKs count as acks.
pub(crate) struct Publisher {
    topic: Vec<u8>,
    qos: u8,
    payload: usize,
    packet_id: u16,
}

impl Publisher {
    /// Publishes `payload`-byte messages to `topic` at `qos`.
    pub(crate) fn new(topic: String, qos: u8, payload: usize) -> Publisher {
        Publisher { topic: topic.into_bytes(), qos, payload, packet_id: 0 }
    }
}

impl Wire for Publisher {
    fn put(&mut self, w: &mut Writer, stamp: Stamp) {
        self.packet_id = self.packet_id.checked_add(1).unwrap_or(1);
        let (topic, qos, len, pid) = (&self.topic, self.qos, self.payload, self.packet_id);
        w.message(|b| {
            let at = codec::put_publish(b, topic, qos, pid, len);
            stamp::put_binary(&mut b[at..], stamp);
        });
    }

    fn read(&mut self, msg: &[u8], _w: &mut Writer, errors: &Errors) -> Incoming {
        match codec::parse(msg) {
            Ok(Packet::PubAck { .. }) => Incoming::Ack,
            other => {
                unexpected(other, errors);
                Incoming::Ignored
            }
        }
    }
}

/// A subscriber: every PUBLISH is a delivery; QoS 1 ones are acknowledged.
pub(crate) struct Subscriber;

impl Wire for Subscriber {
    fn put(&mut self, _w: &mut Writer, _stamp: Stamp) {}

    fn read(&mut self, msg: &[u8], w: &mut Writer, errors: &Errors) -> Incoming {
        match codec::parse(msg) {
            Ok(Packet::Publish { qos, packet_id, payload, .. }) => {
                if let (1, Some(pid)) = (qos, packet_id) {
                    w.message(|b| codec::put_puback(b, pid));
                } else if qos == 2 {
                    errors.add("unexpected QoS 2 PUBLISH");
                }
                Incoming::Delivery(stamp::read_binary(payload))
            }
            other => {
                unexpected(other, errors);
                Incoming::Ignored
            }
        }
    }
}
