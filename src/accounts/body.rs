//! The request bodies of `/auth`: strict JSON objects (unknown fields refused), bounded in
//! size before they are parsed, with errors that name what is wrong and never echo a password.

use serde::Deserialize;

/// The largest body `/auth` reads.
pub const MAX_BODY: usize = 16 * 1024;
/// The longest username or password accepted.
pub const MAX_FIELD: usize = 4096;

/// `POST /auth/login`: `{"username": U, "password": P}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Login {
    /// The account.
    pub username: String,
    /// Its password.
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("username", &self.username).finish_non_exhaustive()
    }
}

/// `POST /auth/admin/issue`: `{"user": U}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Issue {
    /// The account the grant token is for.
    pub user: String,
}

/// `POST /auth/confirm`: `{"pending": ID, "code": C}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confirm {
    /// The pending login's id.
    pub pending: String,
    /// The one-time code.
    pub code: String,
}

impl std::fmt::Debug for Confirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirm").finish_non_exhaustive()
    }
}

/// Why a body was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// Over [`MAX_BODY`].
    #[error("the body is over {MAX_BODY} bytes")]
    TooLarge,
    /// Not the JSON object this route takes.
    #[error("invalid body: {0}")]
    Invalid(String),
    /// A field is empty or over [`MAX_FIELD`] bytes.
    #[error("`{0}` must be 1 to {MAX_FIELD} bytes")]
    FieldLength(&'static str),
}

fn json<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, BodyError> {
    if body.len() > MAX_BODY {
        return Err(BodyError::TooLarge);
    }
    // serde_json's messages name the field and position; those about a wrong type or value
    // quote the value (a number given as a code, say), so they are replaced by a neutral one.
    serde_json::from_slice(body).map_err(|e| {
        let text = e.to_string();
        if ["invalid type", "invalid value", "invalid length"].iter().any(|p| text.starts_with(p)) {
            BodyError::Invalid(format!(
                "a field has the wrong type or value at line {} column {}",
                e.line(),
                e.column()
            ))
        } else {
            BodyError::Invalid(text)
        }
    })
}

fn check_len(name: &'static str, value: &str) -> Result<(), BodyError> {
    if value.is_empty() || value.len() > MAX_FIELD { Err(BodyError::FieldLength(name)) } else { Ok(()) }
}

/// Parses a login body.
pub fn parse_login(body: &[u8]) -> Result<Login, BodyError> {
    let login: Login = json(body)?;
    check_len("username", &login.username)?;
    check_len("password", &login.password)?;
    Ok(login)
}

/// Parses a confirm body.
pub fn parse_confirm(body: &[u8]) -> Result<Confirm, BodyError> {
    let confirm: Confirm = json(body)?;
    check_len("pending", &confirm.pending)?;
    check_len("code", &confirm.code)?;
    Ok(confirm)
}

/// Parses an issue body.
pub fn parse_issue(body: &[u8]) -> Result<Issue, BodyError> {
    let issue: Issue = json(body)?;
    check_len("user", &issue.user)?;
    Ok(issue)
}

/// The body of the `auth_body` fuzz target: parsing any bytes never panics.
pub fn fuzz(data: &[u8]) {
    let _ = parse_login(data);
    let _ = parse_issue(data);
    let _ = parse_confirm(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_login_bodies_say_what_is_wrong() {
        let long = format!(r#"{{"username":"{}","password":"p"}}"#, "u".repeat(MAX_FIELD + 1));
        let huge = vec![b' '; MAX_BODY + 1];
        let cases: Vec<(&[u8], &str)> = vec![
            (b"", "invalid body"),
            (b"{", "invalid body"),
            (b"[]", "invalid body"),
            (br#"{"username":"a"}"#, "missing field `password`"),
            (br#"{"password":"secret-pw"}"#, "missing field `username`"),
            (br#"{"username":"a","password":"p","admin":true}"#, "unknown field `admin`"),
            (br#"{"username":1,"password":"p"}"#, "wrong type"),
            (br#"{"username":"","password":"p"}"#, "`username` must be"),
            (br#"{"username":"a","password":""}"#, "`password` must be"),
            (long.as_bytes(), "`username` must be"),
            (&huge, "over 16384 bytes"),
        ];
        for (body, words) in cases {
            let e = parse_login(body).expect_err(&String::from_utf8_lossy(body)).to_string();
            assert!(e.contains(words), "{:.60}: {e} should say {words:?}", String::from_utf8_lossy(body));
            assert!(!e.contains("secret-pw"), "{e}");
        }
        let ok = parse_login(br#"{"username":"alice","password":"pw"}"#).unwrap();
        assert_eq!((ok.username.as_str(), ok.password.as_str()), ("alice", "pw"));
        assert!(!format!("{ok:?}").contains("pw\""), "the password is not in Debug");
    }

    #[test]
    fn malformed_issue_bodies_say_what_is_wrong() {
        let cases: [(&[u8], &str); 4] = [
            (b"{}", "missing field `user`"),
            (br#"{"user":""}"#, "`user` must be"),
            (br#"{"user":"a","ttl":5}"#, "unknown field `ttl`"),
            (b"null", "invalid body"),
        ];
        for (body, words) in cases {
            let e = parse_issue(body).unwrap_err().to_string();
            assert!(e.contains(words), "{e} should say {words:?}");
        }
        fuzz(b"\xff{");
    }

    #[test]
    fn malformed_confirm_bodies_say_what_is_wrong() {
        let cases: [(&[u8], &str); 5] = [
            (br#"{"pending":"p"}"#, "missing field `code`"),
            (br#"{"code":"12345678"}"#, "missing field `pending`"),
            (br#"{"pending":"p","code":""}"#, "`code` must be"),
            (br#"{"pending":"p","code":"1","user":"a"}"#, "unknown field `user`"),
            (br#"{"pending":"p","code":12345678}"#, "wrong type"),
        ];
        for (body, words) in cases {
            let e = parse_confirm(body).unwrap_err().to_string();
            assert!(e.contains(words), "{e} should say {words:?}");
            assert!(!e.contains("12345678"), "never echoes the code: {e}");
        }
        let ok = parse_confirm(br#"{"pending":"p","code":"1"}"#).unwrap();
        assert_eq!(format!("{ok:?}"), "Confirm { .. }");
    }

    #[test]
    fn auth_body_corpus() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/auth_body");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            fuzz(&std::fs::read(entry.unwrap().path()).unwrap());
            count += 1;
        }
        assert!(count >= 5, "only {count} seeds in {}", dir.display());
    }
}
