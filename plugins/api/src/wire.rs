//! The JSON that crosses the ABI: the [`Request`] the host sends for every connect and the
//! [`Response`] the plugin answers. Both sides use these types, so the wire format has one
//! definition.
//!
//! The request tolerates fields it does not know (a newer host may send more), the answer does
//! not: a misspelt `acl` must not silently become "no ACL", which would mean unrestricted.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One connect attempt, as the host describes it to the plugin.
///
/// ```json
/// {"client_id": "c1", "username": "alice", "password": "aHVudGVyMg==",
///  "peer_addr": "192.0.2.7:51234", "protocol": "mqtt-3.1.1", "listener": "mqtt",
///  "cert_common_name": null}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Request {
    /// The client identifier (after the broker assigned one, if the client sent none).
    pub client_id: String,
    /// The username, if the client sent one.
    #[serde(default)]
    pub username: Option<String>,
    /// The password or token, if the client sent one (standard base64 in the JSON, because
    /// MQTT passwords are binary).
    #[serde(default, with = "password_base64")]
    pub password: Option<Password>,
    /// The peer's address (`ip:port`), when the transport has one.
    #[serde(default)]
    pub peer_addr: Option<String>,
    /// The wire protocol: `mqtt-3.1`, `mqtt-3.1.1`, `mqtt-5`, `relay` or `content-routing`.
    pub protocol: String,
    /// The name of the listener the client connected to.
    pub listener: String,
    /// The Common Name of the client certificate the TLS layer verified, if any.
    #[serde(default)]
    pub cert_common_name: Option<String>,
}

impl Request {
    /// A request with no credentials, no peer address and no certificate.
    pub fn new(
        client_id: impl Into<String>,
        protocol: impl Into<String>,
        listener: impl Into<String>,
    ) -> Self {
        Request {
            client_id: client_id.into(),
            username: None,
            password: None,
            peer_addr: None,
            protocol: protocol.into(),
            listener: listener.into(),
            cert_common_name: None,
        }
    }

    /// Sets the username.
    pub fn with_username(mut self, username: Option<String>) -> Self {
        self.username = username;
        self
    }

    /// Sets the password.
    pub fn with_password(mut self, password: Option<Password>) -> Self {
        self.password = password;
        self
    }

    /// Sets the peer address.
    pub fn with_peer_addr(mut self, peer_addr: Option<String>) -> Self {
        self.peer_addr = peer_addr;
        self
    }

    /// Sets the certificate Common Name.
    pub fn with_cert_common_name(mut self, common_name: Option<String>) -> Self {
        self.cert_common_name = common_name;
        self
    }
}

/// A password or token as the client sent it. `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(Vec<u8>);

impl Password {
    /// Wraps the bytes a client sent.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Password(bytes.into())
    }

    /// The raw bytes. Do not log them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// The bytes as UTF-8, if they are.
    pub fn expose_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Password(<{} bytes redacted>)", self.0.len())
    }
}

/// What the plugin decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The plugin knows the client and admits it.
    Allow,
    /// The plugin knows the client and refuses it.
    Deny,
    /// The plugin does not know the client: the next provider of the chain decides.
    Next,
}

/// Why a client is refused; MQTT clients see it as the CONNACK code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyCode {
    /// Wrong credentials (MQTT 3.1.1 return code 4, 5.0 reason code 0x86). The default.
    #[default]
    BadCredentials,
    /// Known, but not allowed to connect (3.1.1 return code 5, 5.0 reason code 0x87).
    NotAuthorized,
}

/// What an ACL rule grants (or, for `deny`, refuses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Subscribe and receive.
    Read,
    /// Publish.
    Write,
    /// Both (`rw` and `all` are accepted too).
    #[serde(alias = "rw", alias = "all")]
    ReadWrite,
    /// Neither: the first matching `deny` rule hides the topic.
    Deny,
}

/// One ACL rule: a topic filter that may contain `%u` (username) and `%c` (client id), and a
/// permission. Rules are checked in order and the first that matches decides.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclRule {
    /// The topic filter pattern.
    pub pattern: String,
    /// What the rule grants or refuses.
    pub permission: Permission,
}

impl AclRule {
    /// A rule.
    pub fn new(pattern: impl Into<String>, permission: Permission) -> Self {
        AclRule { pattern: pattern.into(), permission }
    }
}

/// The plugin's answer about one connect.
///
/// ```json
/// {"result": "allow", "username": "alice", "acl": [{"pattern": "devices/%u/#", "permission": "readwrite"}]}
/// {"result": "deny", "code": "not_authorized", "reason": "outside business hours"}
/// {"result": "next"}
/// ```
///
/// `username` and `acl` belong to `allow` only, `code` to `deny` only; `reason` (for the log)
/// may come with any result. An `allow` without `acl` (or with `"acl": null`) admits the client
/// unrestricted; `"acl": []` admits it with access to no topic at all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Response {
    /// The decision.
    pub result: Decision,
    /// For `allow`: the username of the identity, replacing the one the client sent (`%u` in
    /// ACL patterns). Absent: the client's own username.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// For `allow`: the client's ACL. Absent or `null`: unrestricted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<Vec<AclRule>>,
    /// For `deny`: why (default `bad_credentials`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<DenyCode>,
    /// Why the plugin decided so, for the broker's log. Never put a secret here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Response {
    fn decided(result: Decision) -> Self {
        Response { result, username: None, acl: None, code: None, reason: None }
    }

    /// Admits the client (unrestricted until [`Response::with_acl`] says otherwise).
    pub fn allow() -> Self {
        Response::decided(Decision::Allow)
    }

    /// Refuses the client with wrong credentials.
    pub fn deny() -> Self {
        Response::decided(Decision::Deny)
    }

    /// Refuses the client as not authorized (rather than as having wrong credentials).
    pub fn deny_not_authorized() -> Self {
        Response { code: Some(DenyCode::NotAuthorized), ..Response::decided(Decision::Deny) }
    }

    /// Leaves the decision to the next provider of the chain.
    pub fn next() -> Self {
        Response::decided(Decision::Next)
    }

    /// Sets the identity's username (with `allow`).
    pub fn with_username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// Sets the ACL (with `allow`); `None` means unrestricted.
    pub fn with_acl(mut self, acl: Option<Vec<AclRule>>) -> Self {
        self.acl = acl;
        self
    }

    /// Sets the reason that the broker logs.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// Compares two byte strings in time that depends on their lengths only, not on where they
/// differ: use it for passwords, tokens and their hashes.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keeps the optimiser from turning the fold into an early-exit comparison.
    std::hint::black_box(difference) == 0
}

mod password_base64 {
    use super::*;

    pub(super) fn serialize<S: Serializer>(password: &Option<Password>, s: S) -> Result<S::Ok, S::Error> {
        match password {
            Some(password) => s.serialize_str(&super::base64::encode(password.expose())),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Password>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(text) => super::base64::decode(&text)
                .map(|bytes| Some(Password(bytes)))
                .ok_or_else(|| serde::de::Error::custom("`password` is not standard base64")),
        }
    }
}

/// Standard base64 (RFC 4648, with padding): small enough to keep this crate's dependencies to
/// serde and serde_json.
mod base64 {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub(super) fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
            let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    fn value(c: u8) -> Option<u32> {
        ALPHABET.iter().position(|&a| a == c).map(|p| p as u32)
    }

    /// Decodes padded standard base64; `None` for anything else (wrong length, foreign
    /// characters, misplaced padding, non-zero bits in the padding).
    pub(super) fn decode(text: &str) -> Option<Vec<u8>> {
        let bytes = text.as_bytes();
        if bytes.len() % 4 != 0 {
            return None;
        }
        let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
        let quads = bytes.len() / 4;
        for (index, quad) in bytes.chunks(4).enumerate() {
            let padding = quad.iter().rev().take_while(|&&c| c == b'=').count();
            if padding > 2 || (padding > 0 && index + 1 != quads) {
                return None;
            }
            let mut n = 0u32;
            for &c in &quad[..4 - padding] {
                n = n << 6 | value(c)?;
            }
            n <<= 6 * padding as u32;
            let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            let keep = 3 - padding;
            // Canonical form only: the bits the padding stands for must be zero.
            if decoded[keep..].iter().any(|&b| b != 0) {
                return None;
            }
            out.extend_from_slice(&decoded[..keep]);
        }
        Some(out)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn rfc_4648_vectors_round_trip() {
            let vectors = [
                ("", ""),
                ("f", "Zg=="),
                ("fo", "Zm8="),
                ("foo", "Zm9v"),
                ("foob", "Zm9vYg=="),
                ("fooba", "Zm9vYmE="),
                ("foobar", "Zm9vYmFy"),
            ];
            for (plain, encoded) in vectors {
                assert_eq!(encode(plain.as_bytes()), encoded);
                assert_eq!(decode(encoded).as_deref(), Some(plain.as_bytes()), "{encoded}");
            }
            let binary: Vec<u8> = (0..=255).collect();
            assert_eq!(decode(&encode(&binary)), Some(binary));
        }

        #[test]
        fn malformed_base64_is_refused() {
            for bad in
                ["Zg", "Zg=", "Z===", "Zm9v=", "Zg==Zg==", "Zh==", "Zm9=", "Zm9v!", "Zm 9", "====", "é==="]
            {
                assert_eq!(decode(bad), None, "{bad:?} accepted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_round_trips_with_a_base64_password_and_tolerates_new_fields() {
        let request = Request::new("c1", "mqtt-5", "mqtt")
            .with_username(Some("alice".into()))
            .with_password(Some(Password::new(b"\x00hunter2\xff".to_vec())))
            .with_peer_addr(Some("127.0.0.1:5000".into()));
        let mut with_extra = serde_json::to_value(&request).expect("serializes");
        assert_eq!(with_extra["password"], "AGh1bnRlcjL/");
        assert_eq!(with_extra["cert_common_name"], serde_json::Value::Null, "absent fields are null");
        with_extra["added_in_a_later_minor_version"] = json!(true);
        let back: Request = serde_json::from_value(with_extra).expect("unknown request fields are ignored");
        assert_eq!(back, request);
        assert!(!format!("{back:?}").contains("hunter2"));
    }

    #[test]
    fn malformed_requests_are_refused() {
        let cases = [
            json!({"username": "a", "protocol": "mqtt-5", "listener": "l"}),
            json!({"client_id": 5, "protocol": "mqtt-5", "listener": "l"}),
            json!({"client_id": "c", "protocol": "mqtt-5", "listener": "l", "password": "not base64"}),
            json!({"client_id": "c", "protocol": "mqtt-5", "listener": "l", "password": 12}),
            json!({"client_id": "c", "listener": "l"}),
            json!(["c", "mqtt-5", "l"]),
        ];
        for case in cases {
            assert!(serde_json::from_value::<Request>(case.clone()).is_err(), "{case} accepted");
        }
    }

    #[test]
    fn answers_serialize_compactly_and_parse_strictly() {
        let allow = Response::allow()
            .with_username("bob")
            .with_acl(Some(vec![AclRule::new("a/%u/#", Permission::ReadWrite)]));
        assert_eq!(
            serde_json::to_value(&allow).expect("serializes"),
            json!({"result": "allow", "username": "bob", "acl": [{"pattern": "a/%u/#", "permission": "readwrite"}]})
        );
        assert_eq!(serde_json::to_value(Response::next()).expect("serializes"), json!({"result": "next"}));
        assert_eq!(
            serde_json::to_value(Response::deny_not_authorized()).expect("serializes"),
            json!({"result": "deny", "code": "not_authorized"})
        );

        let parsed: Response =
            serde_json::from_value(json!({"result": "allow", "acl": null})).expect("null acl is accepted");
        assert_eq!(parsed, Response::allow());
        let aliases: Response = serde_json::from_value(json!({"result": "allow", "acl": [
            {"pattern": "a", "permission": "rw"}, {"pattern": "b", "permission": "all"}]}))
        .expect("aliases");
        assert!(aliases.acl.expect("acl").iter().all(|r| r.permission == Permission::ReadWrite));

        let bad = [
            json!({"result": "allow", "acls": []}),
            json!({"result": "maybe"}),
            json!({"result": "Allow"}),
            json!({}),
            json!({"result": "deny", "code": "teapot"}),
            json!({"result": "allow", "acl": [{"pattern": "a"}]}),
            json!({"result": "allow", "acl": [{"pattern": "a", "permission": "read", "qos": 1}]}),
            json!({"result": "allow", "acl": {"pattern": "a", "permission": "read"}}),
            json!({"result": "allow", "username": 7}),
            json!("allow"),
        ];
        for case in bad {
            assert!(serde_json::from_value::<Response>(case.clone()).is_err(), "{case} accepted");
        }
    }

    #[test]
    fn constant_time_eq_compares_contents_and_lengths() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret "));
    }
}
