//! The `mesgd grant ...` and `mesgd role ...` commands: accounts' message access from the
//! command line, against the store file (a running broker picks each change up at its next
//! check of the file, as for `mesgd user`).
//!
//! Output is plain text for scripts: `grant list USER` prints the patterns the user holds
//! (directly and through roles), one a line, canonical and sorted; `role list` prints one role
//! a line, `name<TAB>pattern count`; `role show NAME` prints its patterns, one a line.

use std::io::Write;
use std::path::Path;

use super::cli::CliError;
use super::store::{Store, StoreError, UserRecord};

/// `mesgd grant ...`: content-routing patterns assigned to users, and grant tokens.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum GrantCommand {
    /// Assign a pattern (a content-routing path, e.g. /kind=chat/room=lobby) to a user.
    Assign {
        /// The username.
        user: String,
        /// The pattern.
        path: String,
    },
    /// Remove a pattern assigned directly to a user; its grant connections stop reaching what
    /// only that pattern covered at their next message.
    Unassign {
        /// The username.
        user: String,
        /// The pattern.
        path: String,
    },
    /// Print the patterns a user holds (directly and through roles), one a line.
    List {
        /// The username.
        user: String,
    },
    /// Print a grant token for a user: one hour, carrying the patterns assigned now.
    Issue {
        /// The username.
        user: String,
    },
    /// Remove a permission everywhere: from every user and every role.
    Remove {
        /// The pattern.
        path: String,
    },
}

/// `mesgd role ...`: named sets of patterns, assigned to users.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum RoleCommand {
    /// Add an empty role.
    Add {
        /// The role's name.
        name: String,
    },
    /// Remove a role; every user loses its patterns.
    Remove {
        /// The role's name.
        name: String,
    },
    /// Add a pattern to a role.
    Permit {
        /// The role's name.
        name: String,
        /// The pattern.
        path: String,
    },
    /// Remove a pattern from a role.
    Forbid {
        /// The role's name.
        name: String,
        /// The pattern.
        path: String,
    },
    /// Give a user a role.
    Assign {
        /// The username.
        user: String,
        /// The role's name.
        name: String,
    },
    /// Take a role from a user.
    Unassign {
        /// The username.
        user: String,
        /// The role's name.
        name: String,
    },
    /// List every role, one a line: name, pattern count.
    List,
    /// Print a role's patterns, one a line.
    Show {
        /// The role's name.
        name: String,
    },
}

/// Runs a `grant` command against the store at `db`. `issue` makes the grant token of
/// `grant issue` from the user's current record (the token code lives with the server keys).
pub fn run_grant_command(
    cmd: GrantCommand,
    db: &Path,
    out: &mut dyn Write,
    issue: impl FnOnce(&UserRecord) -> Result<String, String>,
) -> Result<(), CliError> {
    let store = Store::open(db)?;
    match cmd {
        GrantCommand::Assign { user, path } => {
            store.assign_pattern(&user, &path)?;
        }
        GrantCommand::Unassign { user, path } => store.unassign_pattern(&user, &path)?,
        GrantCommand::List { user } => {
            for pattern in store.patterns(&user)? {
                writeln!(out, "{pattern}")?;
            }
        }
        GrantCommand::Issue { user } => {
            let record = store.user(&user)?.ok_or(StoreError::UnknownUser(user))?;
            let token = issue(&record).map_err(CliError::Refused)?;
            writeln!(out, "{token}")?;
        }
        GrantCommand::Remove { path } => store.remove_permission(&path)?,
    }
    Ok(())
}

/// Runs a `role` command against the store at `db`.
pub fn run_role_command(cmd: RoleCommand, db: &Path, out: &mut dyn Write) -> Result<(), CliError> {
    let store = Store::open(db)?;
    match cmd {
        RoleCommand::Add { name } => store.add_role(&name)?,
        RoleCommand::Remove { name } => store.remove_role(&name)?,
        RoleCommand::Permit { name, path } => {
            store.role_add_pattern(&name, &path)?;
        }
        RoleCommand::Forbid { name, path } => store.role_remove_pattern(&name, &path)?,
        RoleCommand::Assign { user, name } => {
            store.assign_role(&user, &name)?;
        }
        RoleCommand::Unassign { user, name } => store.unassign_role(&user, &name)?,
        RoleCommand::List => {
            for role in store.roles()? {
                writeln!(out, "{}\t{}", role.name, role.patterns.len())?;
            }
        }
        RoleCommand::Show { name } => {
            for pattern in store.role(&name)?.patterns {
                writeln!(out, "{pattern}")?;
            }
        }
    }
    Ok(())
}
