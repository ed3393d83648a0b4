//! The builtin user store and the `builtin` provider: users and their ACL rules in SQLite at
//! `<storage.dir>/config.db`, managed from the command line and the REST API
//! while the broker runs.
//!
//! - [`store`]: the database and its management API ([`Store`]).
//! - [`accounts`]: accounts' message access: content permissions, roles, assignments, and the
//!   ended login sessions ([`Store::assign_pattern`], ...).
//! - [`accounts_cli`]: `mesgd grant ...` and `mesgd role ...`.
//! - [`password`]: PBKDF2-HMAC-SHA256 hashes (and bcrypt verification).
//! - [`live`]: the [`UserDirectory`], the broker's in-memory view of the store that follows
//!   changes and pushes them to connected clients.
//! - [`replica`]: users and content-routing roles as a cluster replicates them between nodes'
//!   stores; [`admin_replica`]: administrators and API tokens likewise; [`replica_write`]: how
//!   a record from the cluster is written without losing a local change.
//! - [`provider`]: the `builtin` provider ([`BuiltinProvider`], [`BuiltinFactory`]).
//! - [`lookup`]: reading one user from the store when the copy lacks it, bounded.
//! - `cache`: remembered password checks.
//! - [`cli`]: `mesgd user ...` and `mesgd acl ...`.
//! - [`admin`]: administrators and API tokens (the console and the REST API), and
//!   [`admin_cli`]: `mesgd admin ...`.
//! - `schema`: the schema of `config.db`, its migrations, and how a connection is opened.

pub mod accounts;
pub mod accounts_cli;
pub mod admin;
pub mod admin_cli;
pub mod admin_replica;
mod cache;
pub mod cli;
pub mod live;
pub mod lookup;
pub mod password;
pub mod provider;
pub mod replica;
pub mod replica_write;
mod schema;
pub mod store;

pub use accounts::{MAX_PATTERNS, RoleRecord, canonical_pattern};
pub use accounts_cli::{GrantCommand, RoleCommand, run_grant_command, run_role_command};
pub use admin::{AdminRecord, NewToken, Scope, TokenRecord};
pub use admin_cli::{AdminCommand, TokenCommand, run_admin_command};
pub use admin_replica::{ReplicatedAdmin, ReplicatedApiToken};
pub use cli::{AclCommand, CliError, RuleSelector, UserCommand, run_acl_command, run_user_command};
pub use live::{IdentityHook, UserDirectory};
pub use lookup::LookupStats;
pub use provider::{BuiltinFactory, BuiltinProvider, TYPE_NAME};
pub use replica::{ReplicaError, ReplicatedRole, ReplicatedUser};
pub use replica_write::{Expect, Replaced, Replica};
pub use store::{
    AuthType, CONFIG_DB_FILE, Store, StoreError, UserChanges, UserQuery, UserRecord, config_db_path,
};
