//! The real `mesgd` binary's `forge`, `check` and `keys` commands against a temporary storage
//! directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mesgd.toml");
        std::fs::write(
            &config,
            "[storage]\ndir = \"data\"\n[[listeners]]\nkind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n",
        )
        .unwrap();
        Setup { dir, config }
    }

    fn storage(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs `mesgd ARGS[0] --config FILE ARGS[1..]`: status code, stdout, stderr.
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_mesgd"))
            .arg(args[0])
            .arg("--config")
            .arg(&self.config)
            .args(&args[1..])
            .env_remove("RUST_LOG")
            .output()
            .expect("run mesgd");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().expect("exited"), text(&out.stdout), text(&out.stderr))
    }

    fn forge(&self, words: &[&str]) -> String {
        let (code, out, err) = self.run(&[&["forge"], words].concat());
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "one token on stdout: {out:?}");
        lines[0].to_owned()
    }

    fn check(&self, path: &str, token: &str) -> (i32, String, String) {
        self.run(&["check", path, token])
    }

    fn key_lines(&self) -> Vec<String> {
        let (code, out, err) = self.run(&["keys", "list"]);
        assert_eq!(code, 0, "{err}");
        out.lines().map(str::to_owned).collect()
    }
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if entry.file_type().unwrap().is_dir() {
            names.extend(files_under(&entry.path()).into_iter().map(|n| format!("{name}/{n}")));
        } else {
            names.push(name);
        }
    }
    names.sort();
    names
}

#[test]
fn forge_prints_one_token_and_saves_nothing_but_the_keys() {
    let s = Setup::new();
    let token = s.forge(&["sub", "alice", "room", "lobby"]);
    assert_eq!(token.split('.').count(), 2, "{token}");
    let files = files_under(&s.storage());
    assert_eq!(files.len(), 4, "{files:?}");
    assert!(files.iter().all(|f| f.starts_with("keys/")), "{files:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        for f in &files {
            let mode = std::fs::metadata(s.storage().join(f)).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{f} is readable by others");
        }
    }
    // A second forge reuses the keys and writes nothing.
    let before: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(s.storage().join(f)).unwrap()).collect();
    let second = s.forge(&["sub", "alice", "room", "lobby"]);
    assert_ne!(second, token);
    assert_eq!(files_under(&s.storage()), files);
    let after: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(s.storage().join(f)).unwrap()).collect();
    assert_eq!(after, before);
    assert_eq!(s.key_lines().len(), 1);
}

#[test]
fn forge_refuses_repeated_keys_and_no_words() {
    let s = Setup::new();
    let (code, out, err) = s.run(&["forge", "room", "a", "room", "b"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("the key `room` is given twice"), "{err}");
    let (code, _, err) = s.run(&["forge"]);
    assert_eq!(code, 2, "a usage error: {err}");
}

#[test]
fn check_matches_the_pairs_against_the_path_as_a_message() {
    let s = Setup::new();
    let token = s.forge(&["sub", "alice", "room", "lobby"]);
    assert_eq!(s.check("/room=lobby", &token), (0, "ok\n".into(), String::new()));
    assert_eq!(s.check("/room=*", &token), (0, "ok\n".into(), String::new()));
    assert_eq!(s.check("/room=lobby/from=ann", &token), (1, "fail\n".into(), String::new()));
    assert_eq!(s.check("/sub=alice/room=lobby", &token), (0, "ok\n".into(), String::new()));
    let odd = s.forge(&["room", "lobby", "vip"]);
    assert_eq!(s.check("/vip=true", &odd).0, 0);
    let (code, out, err) = s.check("a=b=c", &token);
    assert_eq!((code, out.as_str()), (2, ""), "an invalid path is not a fail: {err}");
}

#[test]
fn a_token_signed_before_a_rotation_still_checks_ok() {
    let s = Setup::new();
    let old = s.forge(&["room", "lobby"]);
    let (code, out, err) = s.run(&["keys", "rotate"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("verifies until"), "{out}");
    assert_eq!(s.check("/room=lobby", &old), (0, "ok\n".into(), String::new()));
    assert_eq!(s.check("/room=lobby", &s.forge(&["room", "lobby"])).0, 0);
}

#[test]
fn rotation_keeps_the_previous_key_for_the_grace_period_only() {
    let s = Setup::new();
    let old = s.forge(&["room", "lobby"]);
    let first = s.key_lines();
    let (code, out, err) = s.run(&["keys", "rotate", "--grace", "2h"]);
    assert_eq!(code, 0, "{err}");
    let listed = s.key_lines();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed[0].ends_with("\tcurrent") && listed[0] != first[0], "{listed:?}");
    let old_id = first[0].split('\t').next().unwrap();
    assert!(listed[1].starts_with(&format!("{old_id}\tretired\t")), "{listed:?}");
    assert!(out.contains(&format!("previous key {old_id} verifies until")), "{out}");

    // With no grace, the previous key is dropped at once and its tokens fail with the reason.
    let newer = s.forge(&["room", "lobby"]);
    let (code, out, _) = s.run(&["keys", "rotate", "--grace", "0s"]);
    assert_eq!(code, 0);
    assert!(out.contains("no longer verifies"), "{out}");
    let (code, out, err) = s.check("/room=lobby", &newer);
    assert_eq!((code, out.as_str()), (1, "fail\n"));
    assert!(err.contains("which this server does not have"), "{err}");
    // The first key is still in its two-hour grace period.
    assert_eq!(s.check("/room=lobby", &old), (0, "ok\n".into(), String::new()));
    let (code, _, err) = s.run(&["keys", "rotate", "--grace", "soon"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn foreign_and_broken_tokens_fail_with_an_explanation() {
    let s = Setup::new();
    let token = s.forge(&["room", "lobby"]);
    let b64 = |t: &str| URL_SAFE_NO_PAD.encode(t);
    let jwt = format!("{}.{}.c2lnbmF0dXJl", b64(r#"{"alg":"HS256","typ":"JWT"}"#), b64(r#"{"sub":"alice"}"#));
    let other = Setup::new().forge(&["room", "lobby"]);
    let (body, sig) = token.split_once('.').unwrap();
    let tampered = format!(
        "{body}.{}",
        if sig.starts_with('M') { sig.replacen('M', "N", 1) } else { format!("M{sig}") }
    );
    let table = [
        (jwt, "this is a JWT (a login session"),
        (r#"{"r":"AAAA","s":"BBBB"}"#.to_owned(), r#"SDK message signature (JSON {"r","s"})"#),
        (format!("{body}.{}", b64(r#"{"r":"AAAA","s":"BBBB"}"#)), "SDK message signature"),
        ("hello".to_owned(), "not a mesgd token"),
        (other, "which this server does not have"),
        (tampered, "malformed token"),
        ("x".repeat(20_000), "more than the 16384"),
    ];
    for (input, expected) in &table {
        let (code, out, err) = s.check("/room=lobby", input);
        assert_eq!((code, out.as_str()), (1, "fail\n"), "{expected}: {err}");
        assert!(err.contains(expected), "{expected}: {err}");
        assert!(!err.contains("lobby"), "an explanation never quotes the claims: {err}");
    }
}

#[test]
fn check_without_server_keys_fails_and_creates_nothing() {
    let s = Setup::new();
    let token = Setup::new().forge(&["room", "lobby"]);
    let (code, out, err) = s.check("/room=lobby", &token);
    assert_eq!((code, out.as_str()), (1, "fail\n"));
    assert!(err.contains("no server keys"), "{err}");
    assert!(!s.storage().exists(), "check must not create the store");
}
