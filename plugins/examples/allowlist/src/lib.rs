//! An example mesgd authentication plugin: an allow-list of users, each with a SHA-256 password
//! hash and an optional ACL, plus a list of blocked usernames.
//!
//! ```toml
//! [[auth.providers]]
//! type = "plugin"
//! path = "target/release/libmesgd_example_allowlist.so"
//! [auth.providers.config]
//! blocked = ["mallory"]
//! [[auth.providers.config.users]]
//! username = "alice"
//! password_sha256 = "4b3a2a7f..."     # printf %s 'password' | sha256sum
//! acl = [{ pattern = "sensors/%u/#", permission = "readwrite" }]
//! ```
//!
//! | client | answer |
//! |---|---|
//! | no username | `next` |
//! | a blocked username | `deny` (not authorized) |
//! | a listed user with the right password | `allow`, with the user's `acl` (none: unrestricted) |
//! | a listed user with a wrong or missing password | `deny` (bad credentials) |
//! | anyone else | `next`: a later provider (say, `builtin`) decides |
//!
//! An unsalted SHA-256 keeps the example short and its C twin dependency-free; a plugin that
//! guards real accounts should use a slow, salted hash (mesgd's builtin provider uses PBKDF2).

use std::collections::{HashMap, HashSet};

use mesgd_plugin_api::{AclRule, BoxError, Plugin, Request, Response, constant_time_eq};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The `config` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    users: Vec<UserConfig>,
    #[serde(default)]
    blocked: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserConfig {
    username: String,
    password_sha256: String,
    #[serde(default)]
    acl: Option<Vec<AclRule>>,
}

struct User {
    password_sha256: [u8; 32],
    acl: Option<Vec<AclRule>>,
}

struct Allowlist {
    users: HashMap<String, User>,
    blocked: HashSet<String>,
}

impl Plugin for Allowlist {
    const NAME: &'static str = "allowlist";

    fn create(config: mesgd_plugin_api::serde_json::Value) -> Result<Self, BoxError> {
        // serde would also read a struct from an array; only the documented object form is taken.
        if !config.is_object() {
            return Err("the config must be a JSON object".into());
        }
        let config = Config::deserialize(config)?;
        let mut users = HashMap::new();
        for user in config.users {
            let hash = parse_sha256(&user.password_sha256).ok_or_else(|| {
                format!("user {:?}: `password_sha256` must be 64 hex digits", user.username)
            })?;
            let previous = users.insert(user.username.clone(), User { password_sha256: hash, acl: user.acl });
            if previous.is_some() {
                return Err(format!("user {:?} is listed twice", user.username).into());
            }
        }
        Ok(Allowlist { users, blocked: config.blocked.into_iter().collect() })
    }

    fn authenticate(&self, request: &Request) -> Result<Response, BoxError> {
        let Some(username) = request.username.as_deref() else {
            return Ok(Response::next());
        };
        if self.blocked.contains(username) {
            return Ok(Response::deny_not_authorized().with_reason("the username is blocked"));
        }
        let Some(user) = self.users.get(username) else {
            return Ok(Response::next().with_reason("not on the allow-list"));
        };
        let Some(password) = &request.password else {
            return Ok(Response::deny().with_reason("no password"));
        };
        let digest = Sha256::digest(password.expose());
        if !constant_time_eq(&digest, &user.password_sha256) {
            return Ok(Response::deny().with_reason("wrong password"));
        }
        Ok(Response::allow().with_acl(user.acl.clone()))
    }
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(bytes.chunks(2)) {
        let text = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

mesgd_plugin_api::export_plugin!(Allowlist);

#[cfg(test)]
mod tests {
    use super::*;
    use mesgd_plugin_api::{Decision, Password, Permission, serde_json::json};

    const HUNTER2_SHA256: &str = "f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7";

    fn plugin() -> Allowlist {
        Allowlist::create(json!({
            "users": [{"username": "alice", "password_sha256": HUNTER2_SHA256,
                       "acl": [{"pattern": "sensors/%u/#", "permission": "readwrite"}]}],
            "blocked": ["mallory"],
        }))
        .expect("valid config")
    }

    fn ask(username: Option<&str>, password: Option<&[u8]>) -> Response {
        let request = Request::new("c1", "mqtt-3.1.1", "mqtt")
            .with_username(username.map(str::to_owned))
            .with_password(password.map(Password::new));
        plugin().authenticate(&request).expect("answers")
    }

    #[test]
    fn decides_as_documented() {
        let allowed = ask(Some("alice"), Some(b"hunter2"));
        assert_eq!(allowed.result, Decision::Allow);
        assert_eq!(allowed.acl, Some(vec![AclRule::new("sensors/%u/#", Permission::ReadWrite)]));
        assert_eq!(ask(Some("alice"), Some(b"hunter3")).result, Decision::Deny);
        assert_eq!(ask(Some("alice"), None).result, Decision::Deny);
        assert_eq!(
            ask(Some("mallory"), Some(b"hunter2")),
            Response::deny_not_authorized().with_reason("the username is blocked")
        );
        assert_eq!(ask(Some("bob"), Some(b"hunter2")).result, Decision::Next);
        assert_eq!(ask(None, None).result, Decision::Next);
    }

    #[test]
    fn bad_configs_are_refused_with_a_reason() {
        let cases = [
            (json!({"users": [{"username": "a", "password_sha256": "abc"}]}), "64 hex digits"),
            (json!({"users": [{"username": "a", "password_sha256": "g".repeat(64)}]}), "64 hex digits"),
            (json!({"users": [{"username": "a"}]}), "missing field `password_sha256`"),
            (json!({"user": []}), "unknown field `user`"),
            (json!([]), "must be a JSON object"),
            (
                json!({"users": [{"username": "a", "password_sha256": HUNTER2_SHA256},
                                 {"username": "a", "password_sha256": HUNTER2_SHA256}]}),
                "listed twice",
            ),
        ];
        for (config, expected) in cases {
            match Allowlist::create(config.clone()) {
                Ok(_) => panic!("accepted {config}"),
                Err(e) => assert!(e.to_string().contains(expected), "{e} for {config}"),
            }
        }
    }
}
