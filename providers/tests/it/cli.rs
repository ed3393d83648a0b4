//! `mesgd user ...` / `mesgd acl ...` end to end: parsed by clap as the binary mounts them, run
//! against a real database file, and seen by a running directory.

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use mesgd_core::acl::Permission::{Read, ReadWrite, Write};
use mesgd_providers::builtin::password::{MIN_PBKDF2_ITERATIONS, verify_password};
use mesgd_providers::builtin::{
    AclCommand, BuiltinProvider, CliError, Store, StoreError, UserCommand, UserDirectory, config_db_path,
    run_acl_command, run_user_command,
};

use crate::support::{allowed, decide, info, rule, within};

/// The shape the binary gives these commands: `mesgd user ...` and `mesgd acl ...`.
#[derive(Parser)]
struct Mesgd {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    #[command(subcommand)]
    User(UserCommand),
    #[command(subcommand)]
    Acl(AclCommand),
}

fn parse(args: &str) -> Result<Command, clap::Error> {
    Mesgd::try_parse_from(std::iter::once("mesgd").chain(args.split(' '))).map(|m| m.command)
}

/// Runs one command line with `stdin` as standard input; returns what it printed.
fn run(db: &Path, args: &str, stdin: &str) -> Result<String, CliError> {
    let mut out = Vec::new();
    let mut input = Cursor::new(stdin.as_bytes().to_vec());
    match parse(args).unwrap_or_else(|e| panic!("{args:?} does not parse: {e}")) {
        Command::User(cmd) => run_user_command(cmd, db, &mut out, &mut input)?,
        Command::Acl(cmd) => run_acl_command(cmd, db, &mut out, &mut input)?,
    }
    Ok(String::from_utf8(out).expect("UTF-8 output"))
}

fn fresh_db() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = config_db_path(dir.path());
    Store::open(&db).expect("creates").set_pbkdf2_iterations(MIN_PBKDF2_ITERATIONS).expect("fast hashes");
    (dir, db)
}

fn stored_hash(db: &Path, name: &str) -> String {
    Store::open(db).expect("opens").user(name).expect("reads").expect("exists").password_hash.expect("hash")
}

#[test]
fn users_are_managed_with_stable_output() {
    let (_dir, db) = fresh_db();
    assert_eq!(
        run(&db, "user add alice --password-stdin", "s3cret\n").expect("adds"),
        "user alice added (basic)\n"
    );
    assert!(verify_password(b"s3cret", &stored_hash(&db, "alice")).expect("verifies"));
    assert_eq!(
        run(&db, "user add device-1 --auth-type x509 --unrestricted", "").expect("adds"),
        "user device-1 added (x509)\n"
    );
    run(&db, "user add bob --password-stdin", "pw\r\n").expect("adds");
    assert!(verify_password(b"pw", &stored_hash(&db, "bob")).expect("verifies"), "CRLF is a line ending");
    run(&db, "user disable bob", "").expect("disables");

    assert_eq!(
        run(&db, "user list", "").expect("lists"),
        "alice\tbasic\tenabled\trules=0\nbob\tbasic\tdisabled\trules=0\ndevice-1\tx509\tenabled\tunrestricted\n"
    );
    assert_eq!(run(&db, "user enable bob", "").expect("enables"), "user bob enabled\n");

    assert_eq!(
        run(&db, "user passwd alice --password-stdin", "n3w\n").expect("sets"),
        "password of user alice changed\n"
    );
    assert!(verify_password(b"n3w", &stored_hash(&db, "alice")).expect("verifies"));

    run(&db, "acl add alice devices/%u/# rw", "").expect("adds");
    run(&db, "acl add alice public/# read", "").expect("adds");
    assert_eq!(
        run(&db, "user show alice", "").expect("shows"),
        "username: alice\nauth_type: basic\nstatus: enabled\npassword: pbkdf2-sha256\nacl: 2 rule(s)\n\
         rule 1: readwrite devices/%u/#\nrule 2: read public/#\n"
    );
    assert_eq!(
        run(&db, "user show device-1", "").expect("shows"),
        "username: device-1\nauth_type: x509\nstatus: enabled\npassword: none\nacl: unrestricted\n"
    );
    assert_eq!(run(&db, "user remove bob", "").expect("removes"), "user bob removed\n");
    assert!(!run(&db, "user list", "").expect("lists").contains("bob"));
}

#[test]
fn user_errors_are_typed() {
    let (_dir, db) = fresh_db();
    run(&db, "user add alice --password-stdin", "pw\n").expect("adds");
    run(&db, "user add dev --auth-type x509", "").expect("adds");
    let long = "x".repeat(5000);
    type Expected = fn(&CliError) -> bool;
    let cases: Vec<(&str, String, Expected)> = vec![
        ("user add alice --password-stdin", "pw\n".into(), |e| {
            matches!(e, CliError::Store(StoreError::UserExists(_)))
        }),
        ("user add empty --password-stdin", "\n".into(), |e| matches!(e, CliError::EmptyPassword)),
        ("user add eof --password-stdin", String::new(), |e| matches!(e, CliError::EmptyPassword)),
        ("user add long --password-stdin", long, |e| matches!(e, CliError::PasswordTooLong)),
        ("user add dev2 --auth-type x509 --password-stdin", "pw\n".into(), |e| {
            matches!(e, CliError::PasswordForX509)
        }),
        ("user passwd dev --password-stdin", "pw\n".into(), |e| {
            matches!(e, CliError::Store(StoreError::X509HasNoPassword(_)))
        }),
        ("user passwd nobody --password-stdin", "pw\n".into(), |e| {
            matches!(e, CliError::Store(StoreError::UnknownUser(_)))
        }),
        ("user disable nobody", String::new(), |e| matches!(e, CliError::Store(StoreError::UnknownUser(_)))),
        ("user remove nobody", String::new(), |e| matches!(e, CliError::Store(StoreError::UnknownUser(_)))),
        ("user show nobody", String::new(), |e| matches!(e, CliError::Store(StoreError::UnknownUser(_)))),
    ];
    for (args, stdin, expected) in cases {
        match run(&db, args, &stdin) {
            Ok(out) => panic!("{args:?} succeeded: {out}"),
            Err(error) => assert!(expected(&error), "{args:?}: {error:?}"),
        }
    }
    assert_eq!(
        run(&db, "user list", "").expect("lists").lines().count(),
        2,
        "nothing was added by the failures"
    );
}

#[test]
fn rules_are_managed_by_position_and_pattern() {
    let (_dir, db) = fresh_db();
    run(&db, "user add u --password-stdin", "pw\n").expect("adds");
    assert_eq!(run(&db, "acl add u a read", "").expect("adds"), "rule 1 added for user u\n");
    assert_eq!(run(&db, "acl add u c write", "").expect("adds"), "rule 2 added for user u\n");
    assert_eq!(run(&db, "acl add u b all --position 2", "").expect("inserts"), "rule 2 added for user u\n");
    assert_eq!(run(&db, "acl add u a deny --position 1", "").expect("inserts"), "rule 1 added for user u\n");
    assert_eq!(
        run(&db, "acl list u", "").expect("lists"),
        "1\tdeny\ta\n2\tread\ta\n3\treadwrite\tb\n4\twrite\tc\n"
    );
    assert_eq!(
        run(&db, "acl remove u --position 3", "").expect("removes"),
        "rule 3 (readwrite b) removed for user u\n"
    );
    assert_eq!(
        run(&db, "acl remove u --pattern a", "").expect("removes"),
        "2 rule(s) with pattern a removed for user u\n"
    );
    assert_eq!(run(&db, "acl list u", "").expect("lists"), "1\twrite\tc\n");

    for (args, expected) in [
        (
            "acl add u a/#/b read",
            "ACL pattern \"a/#/b\" is not a valid topic filter: misplaced wildcard: '+' must be a whole level and '#' \
             the whole last level of a filter",
        ),
        ("acl add nobody a read", "no user \"nobody\""),
        ("acl remove u --position 5", "user \"u\" has no rule at position 4 (it has 1)"),
        ("acl remove u --pattern zzz", "user \"u\" has no rule with pattern \"zzz\""),
        ("acl list nobody", "no user \"nobody\""),
    ] {
        assert_eq!(run(&db, args, "").expect_err(args).to_string(), expected);
    }
}

#[test]
fn bad_command_lines_are_refused_by_the_parser() {
    for args in [
        "acl add u a execute",
        "acl add u a read --position 0",
        "acl add u a read --position x",
        "acl remove u",
        "acl remove u --position 1 --pattern a",
        "user add u --auth-type ldap",
        "user add u hunter2",
        "user frobnicate u",
    ] {
        assert!(parse(args).is_err(), "{args:?} parsed");
    }
    assert!(parse("user add u --auth-type x509 --unrestricted").is_ok());
    assert!(parse("acl add u a rw --position 3").is_ok());
}

#[tokio::test]
async fn the_running_broker_sees_command_line_changes() {
    let (_dir, db) = fresh_db();
    let directory = Arc::new(UserDirectory::open(&db).expect("opens"));
    directory.set_poll_interval(Duration::from_millis(20));
    let builtin = BuiltinProvider::new(Arc::clone(&directory), true);

    let mut applied = directory.changes();
    run(&db, "user add carol --password-stdin", "carol-pw\n").expect("adds");
    run(&db, "acl add carol sensors/+/temp read", "").expect("adds");
    run(&db, "acl add carol cmd/%c write", "").expect("adds");
    // The poll may pick up the three commands in one go or in several.
    while directory.user("carol").map(|user| user.rules.len()) != Some(2) {
        within("the command-line changes", applied.changed()).await.expect("directory alive");
    }
    let carol = allowed(decide(&builtin, &info(Some("carol"), Some(b"carol-pw"))).await);
    assert_eq!(carol.acl, Some(vec![rule("sensors/+/temp", Read), rule("cmd/%c", Write)]));

    let mut live = carol.live.expect("live handle");
    run(&db, "acl add carol sensors/# rw --position 1", "").expect("adds");
    within("the rule change", live.changed()).await;
    assert_eq!(
        live.current(),
        mesgd_core::auth::IdentityState::Active(Some(
            vec![rule("sensors/#", ReadWrite), rule("sensors/+/temp", Read), rule("cmd/%c", Write)].into()
        ))
    );
    run(&db, "user remove carol", "").expect("removes");
    within("the removal", live.changed()).await;
    assert_eq!(
        live.current(),
        mesgd_core::auth::IdentityState::Revoked(mesgd_core::auth::Revocation::Deleted)
    );
}
