//! The `mesgd forge`, `mesgd check` and `mesgd keys …` commands: the clap types the binary
//! mounts and the functions that run them against a keys directory.
//!
//! Like `mesgd user`, the functions take their output streams and the time as parameters, so
//! they run the same under a test as in a terminal. `forge` prints one token and a line end;
//! `check` prints `ok` or `fail` (the reason for a `fail` on the error stream); `keys list`
//! prints one key set per line, tab separated: `id, current|retired, retired at, verifies
//! until` (RFC 3339, UTC).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::check::{CheckError, PathMatcher, check};
use super::{KeyError, KeyStore, Pairs, TokenError, forge_claim};

/// `mesgd forge KEY VALUE …`: print a claim token for these pairs.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
#[non_exhaustive]
pub struct ForgeArgs {
    /// Keys and values, `sub alice room lobby`; an odd count gives the last key the JSON value
    /// `true`. Put `--` first if a word starts with `-`.
    #[arg(required = true, num_args = 1.., value_name = "KEY VALUE")]
    pub words: Vec<String>,
}

/// `mesgd check PATH TOKEN`: does the claim token admit the path?
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
#[non_exhaustive]
pub struct CheckArgs {
    /// A content-routing path such as `/room=lobby`.
    pub path: String,
    /// A claim token from `mesgd forge`.
    pub token: String,
}

/// `mesgd keys …`: manage the server's token keys.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum KeysCommand {
    /// Make a new key set current; the previous one still verifies for the grace period.
    Rotate {
        /// How long tokens signed with the previous key still verify (humantime: 24h, 90m,
        /// 0s for a compromised key). The default outlasts every expiring token (grant and
        /// anonymous tokens live 1 h) and leaves a day to re-forge claim tokens.
        #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
        grace: Duration,
    },
    /// List the key sets, the current one first.
    List,
}

/// Why a command could not run (as opposed to `check` answering `fail`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The key store could not be opened, created or rotated.
    #[error(transparent)]
    Keys(#[from] KeyError),
    /// No token could be made from the arguments.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// `check` was given an invalid path (or could not match it).
    #[error("cannot match the path: {0}")]
    Path(String),
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// `check`'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The token admits the path.
    Ok,
    /// It does not, or the token does not verify.
    Fail,
}

/// Runs `mesgd forge`: opens (or, the first time, creates) the key store in `keys_dir` and
/// prints one token. Nothing else is written.
pub fn run_forge(
    args: &ForgeArgs,
    keys_dir: &Path,
    now: SystemTime,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let pairs = Pairs::from_words(&args.words)?;
    let keys = KeyStore::open_or_create(keys_dir, now)?;
    writeln!(out, "{}", forge_claim(&keys, &pairs, now)?)?;
    Ok(())
}

/// Runs `mesgd check`: `ok` or `fail` on `out`; for a token that does not verify (or a store
/// with no keys, where none can), `fail` and the reason on `err`. An invalid path and an
/// unreadable store are errors, not a `fail`.
pub fn run_check(
    args: &CheckArgs,
    keys_dir: &Path,
    now: SystemTime,
    matcher: &dyn PathMatcher,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Verdict, CliError> {
    let keys = match KeyStore::open(keys_dir, now) {
        Ok(keys) => keys,
        Err(e @ KeyError::Missing { .. }) => {
            writeln!(out, "fail")?;
            writeln!(err, "{e}")?;
            return Ok(Verdict::Fail);
        }
        Err(e) => return Err(e.into()),
    };
    match check(&keys, &args.path, args.token.trim(), now, matcher) {
        Ok(true) => {
            writeln!(out, "ok")?;
            Ok(Verdict::Ok)
        }
        Ok(false) => {
            writeln!(out, "fail")?;
            Ok(Verdict::Fail)
        }
        Err(CheckError::Token(e)) => {
            writeln!(out, "fail")?;
            writeln!(err, "{e}")?;
            Ok(Verdict::Fail)
        }
        Err(CheckError::Path(e)) => Err(CliError::Path(e)),
    }
}

/// Runs `mesgd keys …` against the store in `keys_dir` (created if absent).
pub fn run_keys_command(
    cmd: &KeysCommand,
    keys_dir: &Path,
    now: SystemTime,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let mut keys = KeyStore::open_or_create(keys_dir, now)?;
    match cmd {
        KeysCommand::Rotate { grace } => {
            let previous = keys.current_key_id();
            keys.rotate(now, *grace)?;
            writeln!(out, "current key {}", keys.current_key_id())?;
            match keys.key_ids().iter().find(|k| k.id == previous).and_then(|k| k.retired) {
                Some((_, until)) => {
                    writeln!(out, "previous key {previous} verifies until {}", rfc3339(until))?
                }
                None => writeln!(out, "previous key {previous} no longer verifies")?,
            }
        }
        KeysCommand::List => {
            for info in keys.key_ids() {
                match info.retired {
                    None => writeln!(out, "{}\tcurrent", info.id)?,
                    Some((at, until)) => {
                        writeln!(out, "{}\tretired\t{}\t{}", info.id, rfc3339(at), rfc3339(until))?
                    }
                }
            }
        }
    }
    Ok(())
}

fn rfc3339(unix_s: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(unix_s)).to_string()
}
