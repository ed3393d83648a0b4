//! Login confirmation against a real server: `require_confirm = true` answers 202 with a
//! pending id, the code reaches the configured command, and `POST /auth/confirm` completes the
//! login once; wrong codes are refused and use up the attempts.

#[path = "common/content.rs"]
mod content;

use content::ContentServer;
use mesgd_providers::builtin::{AuthType, Store, config_db_path};

async fn server(codes: &std::path::Path) -> ContentServer {
    let extra = format!(
        "[auth]\nrequire_confirm = true\nsession_ttl = \"2h\"\n[auth.confirm]\nmax_attempts = 2\ncommand = [\"sh\", \"-c\", \"printf '%s ' \\\"$MESGD_ACCOUNT\\\" > {0}.tmp && cat >> {0}.tmp && mv {0}.tmp {0}\"]\n",
        codes.display()
    );
    let s = ContentServer::start(&extra).await;
    let st = Store::open(&config_db_path(&s.storage())).unwrap();
    st.set_pbkdf2_iterations(1000).unwrap();
    st.add_user("alice", AuthType::Basic, Some(b"pw"), false).unwrap();
    s
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

async fn post(s: &ContentServer, path: &str, body: &str) -> (u16, serde_json::Value) {
    let (status, body) = s.http("POST", path, "content-type: application/json\r\n", body).await;
    (status, json(&body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_login_gets_a_session_once() {
    let dir = tempfile::tempdir().unwrap();
    let codes = dir.path().join("code");
    let s = server(&codes).await;
    assert_eq!(post(&s, "/auth/login", r#"{"username":"alice","password":"bad"}"#).await.0, 401);
    assert!(!codes.exists(), "no code for a wrong password");

    let (status, body) = post(&s, "/auth/login", r#"{"username":"alice","password":"pw"}"#).await;
    assert_eq!(status, 202, "{body}");
    let pending = body["pending"].as_str().unwrap().to_owned();
    assert!(body.get("token").is_none());
    // The login answers after delivery, so the command has written the code.
    let delivered = std::fs::read_to_string(&codes).unwrap();
    let (account, code) = delivered.trim().split_once(' ').unwrap();
    assert_eq!(account, "alice");
    assert_eq!(code.len(), 8);

    let confirm = |code: &str| serde_json::json!({ "pending": pending, "code": code }).to_string();
    let (status, body) = post(&s, "/auth/confirm", &confirm(code)).await;
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap();
    let claims = {
        use base64::Engine as _;
        let part = token.split('.').nth(1).unwrap();
        json(
            &String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).unwrap())
                .unwrap(),
        )
    };
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 7200, "session_ttl = 2h");
    let (status, account) =
        s.http("GET", "/account", &format!("authorization: Bearer {token}\r\n"), "").await;
    assert_eq!((status, json(&account)["name"].as_str()), (200, Some("alice")));
    assert_eq!(post(&s, "/auth/confirm", &confirm(code)).await.0, 401, "a code works once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_codes_are_refused_and_use_up_the_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let codes = dir.path().join("code");
    let s = server(&codes).await;
    let (status, body) = post(&s, "/auth/login", r#"{"username":"alice","password":"pw"}"#).await;
    assert_eq!(status, 202);
    let pending = body["pending"].as_str().unwrap().to_owned();
    let code = std::fs::read_to_string(&codes).unwrap().trim().split_once(' ').unwrap().1.to_owned();
    let wrong = if code == "00000000" { "11111111" } else { "00000000" };
    let confirm = |code: &str| serde_json::json!({ "pending": pending, "code": code }).to_string();
    for _ in 0..2 {
        let (status, body) = post(&s, "/auth/confirm", &confirm(wrong)).await;
        assert_eq!(status, 401, "{body}");
        assert!(body["error"].as_str().unwrap().contains("wrong or expired"));
    }
    assert_eq!(post(&s, "/auth/confirm", &confirm(&code)).await.0, 401, "out of attempts");
    assert_eq!(post(&s, "/auth/confirm", r#"{"pending":"x"}"#).await.0, 400);
}
