//! Store-and-forward across a crash: the real binary under `durability = "always"` is killed
//! with SIGKILL after it answered `queued`, and on restart the queued messages are delivered
//! to the address when it registers, and alias bindings still hold.

mod common;
#[path = "common/daemon.rs"]
#[allow(unreachable_pub, dead_code)]
mod daemon;

use std::path::{Path, PathBuf};

use common::relay::{Client, Kind};
use daemon::Daemon;
use serde_json::json;

const KEY_1: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
const KEY_2: &str = "ZWZnaGlqa2xtbm9wcXJzdHV2d3h5ent8fX5/gIGCg4Q=";

fn config(dir: &Path) -> PathBuf {
    let path = dir.join("mesgd.toml");
    std::fs::write(
        &path,
        "[storage]\ndir = \"data\"\ndurability = \"always\"\n\
         [[listeners]]\nname = \"relay\"\nkind = \"relay-tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[listeners]]\nname = \"relay-ws\"\nkind = \"relay-ws\"\nbind = \"127.0.0.1:0\"\n\
         [auth]\nallow_anonymous = true\n[mqtt]\nsys_interval = 0\n",
    )
    .unwrap();
    path
}

#[tokio::test]
async fn queued_messages_and_alias_bindings_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let mut daemon = Daemon::start(&config, &["relay", "relay-ws"]).await;

    let mut sender = Client::connect_to(daemon.addr("relay"), Kind::Tcp, "/").await;
    sender.register("sender").await;
    for i in 0..20 {
        sender.send(json!({"t": "send", "to": "away", "ct": format!("m{i}"), "id": format!("{i}")})).await;
        // Under durability "always", `queued` is sent once the message is on disk.
        assert_eq!(sender.expect("queued").await["to"], "away");
    }
    let mut binder = Client::connect_to(daemon.addr("relay-ws"), Kind::Ws, "/").await;
    binder.send(json!({"t": "register", "addr": "dave", "pubkey": KEY_1})).await;
    binder.expect("registered").await;

    daemon.signal("KILL").await;
    daemon.wait().await;
    let mut daemon = Daemon::start(&config, &["relay", "relay-ws"]).await;

    let mut away = Client::connect_to(daemon.addr("relay-ws"), Kind::Ws, "/").await;
    away.send(json!({"t": "register", "addr": "away"})).await;
    for i in 0..20 {
        let d = away.expect("deliver").await;
        assert_eq!(
            (&d["ct"], &d["kind"], &d["from"]),
            (&json!(format!("m{i}")), &json!("queued"), &json!("sender"))
        );
        assert_eq!(d["id"], i.to_string());
    }
    assert_eq!(away.expect("registered").await["queued"], 20);

    let mut thief = Client::connect_to(daemon.addr("relay"), Kind::Tcp, "/").await;
    thief.send(json!({"t": "register", "addr": "dave", "pubkey": KEY_2})).await;
    thief.expect_error("alias bound to a different key").await;

    // Nothing is delivered twice: a clean restart finds the queue empty.
    away.close().await;
    daemon.signal("TERM").await;
    daemon.wait().await;
    let daemon = Daemon::start(&config, &["relay", "relay-ws"]).await;
    let mut again = Client::connect_to(daemon.addr("relay"), Kind::Tcp, "/").await;
    again.send(json!({"t": "register", "addr": "away"})).await;
    assert_eq!(again.expect("registered").await["queued"], 0);
}
