//! `mesgd admin ...`: administrator accounts and API tokens, on the same store methods the
//! server uses (see [`super::admin`]).
//!
//! Output is plain text for scripts: `admin list` prints `name, role` per line (tab separated);
//! `admin token list` prints `name, scope, id, created (Unix seconds)`; `admin token create`
//! prints the token alone on its line, once — it cannot be shown again.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::UNIX_EPOCH;

use super::admin::Scope;
use super::cli::{CliError, read_new_password};
use super::store::Store;

/// `mesgd admin ...`: manage the administrators of the console and the REST API.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum AdminCommand {
    /// Add an administrator (asks for the password).
    Add {
        /// The login name.
        name: String,
        /// admin (may change anything) or read (may look only).
        #[arg(long, default_value = "admin", value_parser = parse_scope)]
        role: Scope,
        /// Read the password as one line from standard input instead of asking for it.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set an administrator's password.
    Passwd {
        /// The login name.
        name: String,
        /// Read the password as one line from standard input instead of asking for it.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Remove an administrator. Its console sessions end at their next request.
    Remove {
        /// The login name.
        name: String,
    },
    /// List the administrators, one per line.
    List,
    /// Manage API tokens (`Authorization: Bearer ...`).
    #[command(subcommand)]
    Token(TokenCommand),
}

/// `mesgd admin token ...`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum TokenCommand {
    /// Make a token and print it (once: only its hash is kept).
    Create {
        /// A unique name for the token, to list and revoke it by.
        name: String,
        /// read (every GET) or admin (everything).
        #[arg(long, value_parser = parse_scope)]
        scope: Scope,
    },
    /// List the tokens (never their secrets), one per line.
    List,
    /// Revoke a token: it stops working at its next use.
    Revoke {
        /// The token's name.
        name: String,
    },
}

fn parse_scope(text: &str) -> Result<Scope, String> {
    text.parse()
}

/// Runs one `mesgd admin` command against the database at `db`.
pub fn run_admin_command(
    cmd: AdminCommand,
    db: &Path,
    out: &mut dyn Write,
    stdin: &mut dyn BufRead,
) -> Result<(), CliError> {
    let store = Store::open(db)?;
    match cmd {
        AdminCommand::Add { name, role, password_stdin } => {
            let password = read_new_password(&name, password_stdin, stdin)?;
            store.add_admin(&name, &password, role)?;
            writeln!(out, "administrator {name} added ({role})")?;
        }
        AdminCommand::Passwd { name, password_stdin } => {
            // Refuse before asking: nobody should type a password that is then thrown away.
            if !store.admins()?.iter().any(|a| a.name == name) {
                return Err(super::StoreError::UnknownAdmin(name).into());
            }
            let password = read_new_password(&name, password_stdin, stdin)?;
            store.set_admin_password(&name, &password)?;
            writeln!(out, "password of administrator {name} changed")?;
        }
        AdminCommand::Remove { name } => {
            store.remove_admin(&name)?;
            writeln!(out, "administrator {name} removed")?;
        }
        AdminCommand::List => {
            for admin in store.admins()? {
                writeln!(out, "{}\t{}", admin.name, admin.role)?;
            }
        }
        AdminCommand::Token(TokenCommand::Create { name, scope }) => {
            let made = store.create_token(&name, scope)?;
            writeln!(out, "{}", made.token)?;
        }
        AdminCommand::Token(TokenCommand::List) => {
            for token in store.tokens()? {
                let created = token.created_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
                writeln!(out, "{}\t{}\t{}\t{created}", token.name, token.scope, token.id)?;
            }
        }
        AdminCommand::Token(TokenCommand::Revoke { name }) => {
            store.revoke_token(&name)?;
            writeln!(out, "token {name} revoked")?;
        }
    }
    Ok(())
}
