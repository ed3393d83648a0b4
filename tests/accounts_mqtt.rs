//! The `session` provider against a real server: a login session (and a grant token) in the
//! CONNECT password admits an MQTT client (rumqttc, MQTT 3.1.1) as its account, with the
//! account's ACL; a logged-out session, another username or a forged token are refused; and
//! disabling the account disconnects the client.

mod common;
#[path = "common/content.rs"]
mod content;

use common::v3::{self, QoS};
use content::ContentServer;
use mesgd_core::acl::{Permission, Rule};
use mesgd_providers::builtin::{AuthType, Scope, Store, config_db_path};
use rumqttc::SubscribeReasonCode;

const EXTRA: &str = "[[listeners]]\nname = \"mqtt\"\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n\
                     [[auth.providers]]\ntype = \"session\"\n[[auth.providers]]\ntype = \"builtin\"\n";

async fn server() -> (ContentServer, Store, u16) {
    let s = ContentServer::start(EXTRA).await;
    let st = Store::open(&config_db_path(&s.storage())).unwrap();
    st.set_pbkdf2_iterations(1000).unwrap();
    st.add_user("alice", AuthType::Basic, Some(b"pw"), false).unwrap();
    st.add_rule("alice", Rule { pattern: "devices/alice/#".into(), permission: Permission::ReadWrite }, None)
        .unwrap();
    let port = s.server.as_ref().unwrap().local_addr("mqtt").unwrap().port();
    (s, st, port)
}

async fn login(s: &ContentServer) -> String {
    let (status, body) = s
        .http(
            "POST",
            "/auth/login",
            "content-type: application/json\r\n",
            r#"{"username":"alice","password":"pw"}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["token"].as_str().unwrap().to_owned()
}

fn options(id: &str, port: u16, user: &str, token: &str) -> rumqttc::MqttOptions {
    let mut o = v3::options(id, port);
    o.set_credentials(user, token);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_session_admits_an_mqtt_client_with_the_accounts_acl() {
    let (s, st, port) = server().await;
    let token = login(&s).await;
    let (mut c, connack) = v3::connect(options("c1", port, "alice", &token)).await;
    assert_eq!(connack.code, rumqttc::ConnectReturnCode::Success);
    let ok = c.subscribe("devices/alice/#", QoS::AtMostOnce).await;
    assert_eq!(ok.return_codes, [SubscribeReasonCode::Success(QoS::AtMostOnce)]);
    let refused = c.subscribe("devices/bob/#", QoS::AtMostOnce).await;
    assert_eq!(refused.return_codes, [SubscribeReasonCode::Failure], "the account's ACL applies");
    c.client.publish("devices/alice/t", QoS::AtMostOnce, false, "21").await.unwrap();
    assert_eq!(&c.next_publish().await.payload[..], b"21");

    // Disabling the account disconnects the client.
    st.set_disabled("alice", true).unwrap();
    c.closed().await;
    st.set_disabled("alice", false).unwrap();

    // Another username, a forged token and a logged-out session are refused.
    let e = v3::connect_err(options("c2", port, "bob", &token)).await;
    assert!(e.contains("BadUserNamePassword") || e.contains("NotAuthorized"), "{e}");
    let forged = format!("{}x", &token[..token.len() - 1]);
    let e = v3::connect_err(options("c3", port, "alice", &forged)).await;
    assert!(e.contains("BadUserNamePassword"), "{e}");
    let bearer = format!("authorization: Bearer {token}\r\n");
    assert_eq!(s.http("POST", "/auth/logout", &bearer, "").await.0, 204);
    let e = v3::connect_err(options("c4", port, "alice", &token)).await;
    assert!(e.contains("BadUserNamePassword"), "{e}");
    // A password login still goes through the builtin provider behind it.
    let (c, _) = v3::connect(options("c5", port, "alice", "pw")).await;
    c.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_token_admits_an_mqtt_client_as_its_account() {
    let (s, st, port) = server().await;
    st.add_admin("root", b"a long admin password", Scope::Admin).unwrap();
    let admin = st.create_token("ops", Scope::Admin).unwrap().token;
    st.assign_pattern("alice", "/kind=chat").unwrap();
    let (status, body) = s
        .http(
            "POST",
            "/auth/admin/issue",
            &format!("authorization: Bearer {admin}\r\n"),
            r#"{"user":"alice"}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let grant = v["token"].as_str().unwrap();
    let (mut c, _) = v3::connect(options("g1", port, "alice", grant)).await;
    let ok = c.subscribe("devices/alice/x", QoS::AtMostOnce).await;
    assert_eq!(ok.return_codes, [SubscribeReasonCode::Success(QoS::AtMostOnce)]);
    c.disconnect().await;
}
