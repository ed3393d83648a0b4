//! The `mesgd user ...` and `mesgd acl ...` commands: the clap types the binary mounts, and the
//! functions that run them against a database file.
//!
//! The functions take the output and the standard input as parameters, so they run the same
//! under a test as in a terminal. Passwords never come from the command line (where `ps` and
//! shell history would show them): they are asked twice at the terminal, or read as one line
//! from standard input with `--password-stdin`.
//!
//! Output is plain text meant to stay stable for scripts. `user list` prints one user per line,
//! tab separated: `name, auth_type, enabled|disabled, unrestricted|rules=N`. `acl list` prints
//! one rule per line: `position, permission, pattern` (the pattern last, as it may contain
//! spaces). Rule positions on the command line count from 1.

use std::io::{BufRead, Read as _, Write};
use std::path::Path;

use mesgd_core::acl::{Permission, Rule};

use super::store::{AuthType, Store, StoreError, UserRecord};

use super::password::{MAX_PASSWORD_LEN, PasswordError, check_new_password};

/// `mesgd user ...`: manage builtin users.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum UserCommand {
    /// Add a user (asks for the password of a basic user).
    Add {
        /// The username (for x509 users: the client certificate's Common Name).
        name: String,
        /// How the user logs in: basic (username and password) or x509 (client certificate).
        #[arg(long, default_value = "basic", value_parser = parse_auth_type)]
        auth_type: AuthType,
        /// Give the user no ACL at all instead of the default, which denies every topic until
        /// rules are added.
        #[arg(long)]
        unrestricted: bool,
        /// Read the password as one line from standard input instead of asking for it.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set a basic user's password. Existing connections stay connected.
    Passwd {
        /// The username.
        name: String,
        /// Read the password as one line from standard input instead of asking for it.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Disable a user; its connections are closed.
    Disable {
        /// The username.
        name: String,
    },
    /// Enable a disabled user.
    Enable {
        /// The username.
        name: String,
    },
    /// Remove a user and its rules; its connections are closed.
    Remove {
        /// The username.
        name: String,
    },
    /// List every user, one per line.
    List,
    /// Show one user and its rules.
    Show {
        /// The username.
        name: String,
    },
}

/// `mesgd acl ...`: manage a builtin user's ACL rules.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum AclCommand {
    /// Add a rule (at the end, or at --position).
    Add {
        /// The username.
        name: String,
        /// A topic filter; %u stands for the username and %c for the client id.
        pattern: String,
        /// read, write, readwrite (or rw, all), or deny.
        #[arg(value_parser = Permission::parse)]
        permission: Permission,
        /// Insert at this position (1 = first) instead of appending.
        #[arg(long, value_parser = parse_position)]
        position: Option<usize>,
    },
    /// Remove a rule by position or every rule with a pattern.
    Remove {
        /// The username.
        name: String,
        /// Which rule(s).
        #[command(flatten)]
        which: RuleSelector,
    },
    /// List a user's rules in order, one per line.
    List {
        /// The username.
        name: String,
    },
}

/// Which rules `acl remove` removes: exactly one of the two.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
#[group(required = true, multiple = false)]
pub struct RuleSelector {
    /// The rule at this position (1 = first).
    #[arg(long, value_parser = parse_position)]
    pub position: Option<usize>,
    /// Every rule whose pattern is exactly this.
    #[arg(long)]
    pub pattern: Option<String>,
}

/// A command that could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The password could not be read from the terminal or standard input.
    #[error("cannot read the password: {0}")]
    ReadPassword(std::io::Error),
    /// The two prompted passwords differ.
    #[error("the passwords do not match")]
    PasswordMismatch,
    /// An empty password was given.
    #[error("the password is empty")]
    EmptyPassword,
    /// The password is longer than 4096 bytes.
    #[error("the password is longer than {MAX_PASSWORD_LEN} bytes")]
    PasswordTooLong,
    /// `--password-stdin` was given for an x509 user.
    #[error("x509 users have no password; drop --password-stdin")]
    PasswordForX509,
    /// `acl remove` needs `--position` or `--pattern`.
    #[error("give --position N or --pattern P")]
    NoRuleSelected,
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    /// The command was refused, for the reason given (e.g. a token that cannot be issued).
    #[error("{0}")]
    Refused(String),
}

fn parse_auth_type(text: &str) -> Result<AuthType, String> {
    text.parse()
}

fn parse_position(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(position) if position >= 1 => Ok(position),
        _ => Err(format!("{text:?} is not a rule position (1 = first)")),
    }
}

/// Runs one `mesgd user` command against the database at `db`.
pub fn run_user_command(
    cmd: UserCommand,
    db: &Path,
    out: &mut dyn Write,
    stdin: &mut dyn BufRead,
) -> Result<(), CliError> {
    let store = Store::open(db)?;
    match cmd {
        UserCommand::Add { name, auth_type, unrestricted, password_stdin } => {
            let password = match auth_type {
                AuthType::X509 if password_stdin => return Err(CliError::PasswordForX509),
                AuthType::X509 => None,
                AuthType::Basic => Some(read_new_password(&name, password_stdin, stdin)?),
            };
            store.add_user(&name, auth_type, password.as_deref(), unrestricted)?;
            writeln!(out, "user {name} added ({auth_type})")?;
        }
        UserCommand::Passwd { name, password_stdin } => {
            // Refuse before asking: nobody should type a password that is then thrown away.
            let user = store.user(&name)?.ok_or_else(|| StoreError::UnknownUser(name.clone()))?;
            if user.auth_type == AuthType::X509 {
                return Err(StoreError::X509HasNoPassword(name).into());
            }
            let password = read_new_password(&name, password_stdin, stdin)?;
            store.set_password(&name, &password)?;
            writeln!(out, "password of user {name} changed")?;
        }
        UserCommand::Disable { name } => {
            store.set_disabled(&name, true)?;
            writeln!(out, "user {name} disabled")?;
        }
        UserCommand::Enable { name } => {
            store.set_disabled(&name, false)?;
            writeln!(out, "user {name} enabled")?;
        }
        UserCommand::Remove { name } => {
            store.remove_user(&name)?;
            writeln!(out, "user {name} removed")?;
        }
        UserCommand::List => {
            for user in store.list_users()? {
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}",
                    user.username,
                    user.auth_type,
                    status(&user),
                    if user.unrestricted {
                        "unrestricted".to_owned()
                    } else {
                        format!("rules={}", user.rules.len())
                    }
                )?;
            }
        }
        UserCommand::Show { name } => {
            let user = store.user(&name)?.ok_or_else(|| StoreError::UnknownUser(name.clone()))?;
            show_user(&user, out)?;
        }
    }
    Ok(())
}

/// Runs one `mesgd acl` command against the database at `db`.
pub fn run_acl_command(
    cmd: AclCommand,
    db: &Path,
    out: &mut dyn Write,
    _stdin: &mut dyn BufRead,
) -> Result<(), CliError> {
    let store = Store::open(db)?;
    match cmd {
        AclCommand::Add { name, pattern, permission, position } => {
            let at = store.add_rule(&name, Rule { pattern, permission }, position.map(|p| p - 1))?;
            writeln!(out, "rule {} added for user {name}", at + 1)?;
        }
        AclCommand::Remove { name, which: RuleSelector { position: Some(position), .. } } => {
            let rule = store.remove_rule_at(&name, position - 1)?;
            writeln!(
                out,
                "rule {position} ({} {}) removed for user {name}",
                rule.permission.as_str(),
                rule.pattern
            )?;
        }
        AclCommand::Remove { name, which: RuleSelector { pattern: Some(pattern), .. } } => {
            let removed = store.remove_rules_with_pattern(&name, &pattern)?;
            writeln!(out, "{removed} rule(s) with pattern {pattern} removed for user {name}")?;
        }
        AclCommand::Remove { .. } => return Err(CliError::NoRuleSelected),
        AclCommand::List { name } => {
            for (i, rule) in store.rules(&name)?.iter().enumerate() {
                writeln!(out, "{}\t{}\t{}", i + 1, rule.permission.as_str(), rule.pattern)?;
            }
        }
    }
    Ok(())
}

fn status(user: &UserRecord) -> &'static str {
    if user.disabled { "disabled" } else { "enabled" }
}

fn show_user(user: &UserRecord, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "username: {}", user.username)?;
    writeln!(out, "auth_type: {}", user.auth_type)?;
    writeln!(out, "status: {}", status(user))?;
    let password = match (&user.password_hash, user.password_scheme()) {
        (None, _) => "none",
        (Some(_), Some(scheme)) => scheme.as_str(),
        (Some(_), None) => "unusable hash",
    };
    writeln!(out, "password: {password}")?;
    match (user.unrestricted, user.rules.len()) {
        (true, _) => writeln!(out, "acl: unrestricted")?,
        (false, 0) => writeln!(out, "acl: no rules (every topic denied)")?,
        (false, n) => writeln!(out, "acl: {n} rule(s)")?,
    }
    for (i, rule) in user.rules.iter().enumerate() {
        writeln!(out, "rule {}: {} {}", i + 1, rule.permission.as_str(), rule.pattern)?;
    }
    Ok(())
}

/// The new password: one line of `stdin`, or asked twice at the terminal.
pub(super) fn read_new_password(
    name: &str,
    from_stdin: bool,
    stdin: &mut dyn BufRead,
) -> Result<Vec<u8>, CliError> {
    let password = if from_stdin {
        read_password_line(stdin)?
    } else {
        let first = rpassword::prompt_password(format!("New password for {name}: "))
            .map_err(CliError::ReadPassword)?;
        let second = rpassword::prompt_password("Repeat the password: ").map_err(CliError::ReadPassword)?;
        if first != second {
            return Err(CliError::PasswordMismatch);
        }
        first.into_bytes()
    };
    match check_new_password(&password) {
        Ok(()) => Ok(password),
        Err(PasswordError::Empty) => Err(CliError::EmptyPassword),
        Err(PasswordError::TooLong) => Err(CliError::PasswordTooLong),
        Err(other) => Err(StoreError::Password(other).into()),
    }
}

/// One line, without its line ending; reads at most a little past the limit.
fn read_password_line(stdin: &mut dyn BufRead) -> Result<Vec<u8>, CliError> {
    let mut line = Vec::new();
    (&mut *stdin)
        .take(MAX_PASSWORD_LEN as u64 + 3)
        .read_until(b'\n', &mut line)
        .map_err(CliError::ReadPassword)?;
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    Ok(line)
}
