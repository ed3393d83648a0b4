//! Hand-assembled MQTT packets, for the raw-socket tests: the bytes no client library would
//! send, built once here for every test file.

/// Encodes an MQTT string (2-byte length + bytes).
pub fn mqtt_str(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// An MQTT variable byte integer.
pub fn var_int(mut n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        v.push(b);
        if n == 0 {
            return v;
        }
    }
}

/// A fixed header + body: `first` byte, variable-byte remaining length, `body`.
pub fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![first];
    v.extend(var_int(body.len()));
    v.extend_from_slice(body);
    v
}

/// A CONNECT for `client_id` at protocol `level` with the given flags, keep-alive 60.
pub fn connect_bytes(level: u8, client_id: &str, flags: u8) -> Vec<u8> {
    let mut body = mqtt_str(if level == 3 { "MQIsdp" } else { "MQTT" });
    body.push(level);
    body.push(flags);
    body.extend_from_slice(&60u16.to_be_bytes());
    if level == 5 {
        body.push(0); // no properties
    }
    body.extend_from_slice(&mqtt_str(client_id));
    packet(0x10, &body)
}

/// A property block: its length, then the properties.
pub fn property_block(properties: &[u8]) -> Vec<u8> {
    let mut v = var_int(properties.len());
    v.extend_from_slice(properties);
    v
}

/// A PUBLISH. `properties` is `Some` (possibly empty) for MQTT 5, `None` for 3.x.
pub fn publish_packet(
    topic: &str,
    qos: u8,
    packet_id: Option<u16>,
    retain: bool,
    properties: Option<&[u8]>,
    payload: &[u8],
) -> Vec<u8> {
    let mut body = mqtt_str(topic);
    if let Some(id) = packet_id {
        body.extend_from_slice(&id.to_be_bytes());
    }
    if let Some(p) = properties {
        body.extend(property_block(p));
    }
    body.extend_from_slice(payload);
    packet(0x30 | (qos << 1) | u8::from(retain), &body)
}

/// A SUBSCRIBE of one filter with its options byte (for 3.x, the QoS).
pub fn subscribe_packet(packet_id: u16, filter: &str, options: u8, v5: bool) -> Vec<u8> {
    let mut body = packet_id.to_be_bytes().to_vec();
    if v5 {
        body.push(0);
    }
    body.extend_from_slice(&mqtt_str(filter));
    body.push(options);
    packet(0x82, &body)
}
