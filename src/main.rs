//! The `mesgd` command line: `mesgd serve` runs the broker; `mesgd user` and `mesgd acl` manage
//! the builtin user store, also while the broker runs; `mesgd admin` manages the administrators
//! and API tokens of the REST API; `mesgd forge`, `mesgd check` and `mesgd keys` make, try and
//! manage PKI tokens; `mesgd grant` and `mesgd role` manage accounts' content-routing
//! patterns and issue grant tokens; `mesgd token anonymous` mints anonymous tokens;
//! `mesgd pattern compile` builds a content-routing pattern from a sample
//! message; `mesgd plugin check` inspects a plugin library.
//!
//! Exit status: 0 on success; 1 on failure, and for `check` when the token does not admit the
//! path (it printed `fail`); 2 when `check` could not answer (an invalid path, an unreadable key
//! store) and for command-line usage errors.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use mesgd::Server;
use mesgd::config::Config;

#[derive(Parser)]
#[command(
    name = "mesgd",
    version,
    about = "A message broker with an ordered chain of pluggable authenticators"
)]
struct Cli {
    /// The configuration file (TOML). Without it, a local-only broker with anonymous access.
    #[arg(long, short = 'c', global = true, env = "MESGD_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve,
    /// Manage builtin users (in <storage.dir>/config.db).
    #[command(subcommand)]
    User(mesgd_providers::builtin::UserCommand),
    /// Manage builtin users' ACL rules.
    #[command(subcommand)]
    Acl(mesgd_providers::builtin::AclCommand),
    /// Assign content-routing patterns to users and issue grant tokens.
    #[command(subcommand)]
    Grant(mesgd_providers::builtin::GrantCommand),
    /// Manage roles: named sets of content-routing patterns.
    #[command(subcommand)]
    Role(mesgd_providers::builtin::RoleCommand),
    /// Mint tokens that are neither logins nor grants.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Manage the administrators of the REST API and console, and API tokens (in
    /// <storage.dir>/config.db).
    #[command(subcommand)]
    Admin(mesgd_providers::builtin::AdminCommand),
    /// Print a claim token for KEY VALUE pairs (saves nothing but the server keys, made on
    /// first use in <storage.dir>/keys).
    Forge(mesgd_providers::tokens::cli::ForgeArgs),
    /// Print `ok` if a claim token's pairs, as a JSON message, match PATH, else `fail`.
    Check(mesgd_providers::tokens::cli::CheckArgs),
    /// Manage the server's token keys (in <storage.dir>/keys).
    #[command(subcommand)]
    Keys(mesgd_providers::tokens::cli::KeysCommand),
    /// Content-routing patterns.
    #[command(subcommand)]
    Pattern(mesgd::content::PatternCommand),
    /// Inspect authentication plugin libraries.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Inspect or compact the broker's state store (<storage.dir>/state.db).
    #[command(subcommand)]
    Store(StoreCommand),
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print a one-hour anonymous token admitting an upgrade on a path one of the 1 to 8
    /// PREFIXes covers (`/` and star-only patterns are refused).
    Anonymous {
        /// The path prefixes.
        #[arg(required = true)]
        prefixes: Vec<String>,
    },
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Count stored sessions, subscriptions, queued messages, retained messages and wills, and
    /// the size on disk. Safe while the broker runs.
    Stats,
    /// Drop unreferenced messages and shrink the file. Run it while the broker is stopped.
    Compact,
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Load a plugin library as the broker would and report its name, version, ABI version and
    /// whether this mesgd can use it.
    Check {
        /// The shared library (e.g. target/release/libmy_auth.so).
        path: PathBuf,
        /// Also create an instance with this `config`, given as a JSON object.
        #[arg(long, value_name = "JSON")]
        plugin_config: Option<String>,
    },
}

fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Ok(Config::load(p)?),
        None => Ok(Config::embedded_default()),
    }
}

/// The builtin store's file, with the hashing cost the config asks for recorded in it, so that
/// passwords set from the command line are hashed exactly as the broker would hash them.
fn user_db(config: &Config) -> anyhow::Result<PathBuf> {
    let dir = config.storage_dir();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create storage directory {}", dir.display()))?;
    let db = mesgd_providers::builtin::config_db_path(&dir);
    let iterations = config
        .auth
        .providers
        .iter()
        .filter(|p| p.get("type").and_then(|t| t.as_str()) == Some(mesgd_providers::builtin::TYPE_NAME))
        .find_map(|p| p.get("pbkdf2_iterations").and_then(|i| i.as_integer()));
    if let Some(n) = iterations {
        let n = u32::try_from(n).context("pbkdf2_iterations is out of range")?;
        mesgd_providers::builtin::Store::open(&db)?.set_pbkdf2_iterations(n)?;
    }
    Ok(db)
}

async fn serve(config: Config) -> anyhow::Result<()> {
    // Signal handlers first: a SIGTERM that arrives while listeners are being bound must still
    // mean an orderly shutdown, not the default instant death.
    let signals = Signals::install()?;
    let server = Server::start(config).await?;
    signals.wait_for_shutdown(&server).await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

/// SIGINT / SIGTERM end the server; SIGHUP reloads TLS certificates.
#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn wait_for_shutdown(mut self, server: &Server) {
        loop {
            tokio::select! {
                _ = self.term.recv() => return,
                _ = self.int.recv() => return,
                _ = self.hup.recv() => {
                    tracing::info!("SIGHUP: reloading TLS certificates");
                    server.reload_tls();
                }
            }
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn install() -> anyhow::Result<Signals> {
        Ok(Signals)
    }

    async fn wait_for_shutdown(self, _server: &Server) {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `mesgd check`'s exit status when it could not answer.
const CHECK_ERROR: u8 = 2;

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = load_config(cli.config.as_deref())?;
    let keys_dir = mesgd_providers::tokens::keys_dir(&config.storage_dir());
    let now = std::time::SystemTime::now();
    match cli.command {
        Command::Forge(args) => {
            mesgd_providers::tokens::cli::run_forge(&args, &keys_dir, now, &mut std::io::stdout())?;
        }
        Command::Check(args) => {
            use mesgd_providers::tokens::cli::{Verdict, run_check};
            let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
            return Ok(
                match run_check(
                    &args,
                    &keys_dir,
                    now,
                    &mesgd_providers::tokens::ContentPaths,
                    &mut out,
                    &mut err,
                ) {
                    Ok(Verdict::Ok) => ExitCode::SUCCESS,
                    Ok(Verdict::Fail) => ExitCode::FAILURE,
                    Err(e) => {
                        eprintln!("mesgd: {e}");
                        ExitCode::from(CHECK_ERROR)
                    }
                },
            );
        }
        Command::Pattern(cmd) => mesgd::content::run_pattern_command(&cmd, &mut std::io::stdout())?,
        Command::Keys(cmd) => {
            mesgd_providers::tokens::cli::run_keys_command(&cmd, &keys_dir, now, &mut std::io::stdout())?;
        }
        Command::Serve => {
            mesgd::logging::init(&config.log.level);
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let served = runtime.block_on(serve(config));
            // A plugin call that never returns holds a blocking thread for good; dropping the
            // runtime would wait for it forever.
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
            served?;
        }
        Command::Plugin(PluginCommand::Check { path, plugin_config }) => {
            let report = mesgd_plugin_host::check(&path, plugin_config.as_deref());
            print!("{report}");
            anyhow::ensure!(report.is_usable(), "{} cannot be used as a plugin", path.display());
        }
        Command::Store(StoreCommand::Stats) => {
            let s = mesgd::persist::stats(&config.storage_dir())?;
            println!("sessions\t{}", s.sessions);
            println!("subscriptions\t{}", s.subscriptions);
            println!("queued\t{}", s.queued);
            println!("messages\t{}", s.messages);
            println!("retained\t{}", s.retained);
            println!("wills\t{}", s.wills);
            println!("relay_queued\t{}", s.relay_queued);
            println!("relay_aliases\t{}", s.relay_aliases);
            println!("bytes_on_disk\t{}", s.bytes_on_disk);
        }
        Command::Store(StoreCommand::Compact) => {
            let (before, after) = mesgd::persist::compact(&config.storage_dir())?;
            println!(
                "compacted {}: {before} bytes -> {after} bytes",
                config.storage_dir().join(mesgd::persist::STATE_DB_FILE).display()
            );
        }
        Command::User(cmd) => {
            let db = user_db(&config)?;
            let stdin = std::io::stdin();
            mesgd_providers::builtin::run_user_command(cmd, &db, &mut std::io::stdout(), &mut stdin.lock())?;
        }
        Command::Admin(cmd) => {
            let db = user_db(&config)?;
            let stdin = std::io::stdin();
            mesgd_providers::builtin::run_admin_command(cmd, &db, &mut std::io::stdout(), &mut stdin.lock())?;
        }
        Command::Grant(cmd) => {
            let db = user_db(&config)?;
            let issue = |record: &mesgd_providers::builtin::UserRecord| {
                let keys = mesgd_providers::tokens::KeyStore::open_or_create(&keys_dir, now)
                    .map_err(|e| e.to_string())?;
                mesgd_providers::grants::issue_grant(&keys, record, now)
                    .map(|(token, _)| token)
                    .map_err(|e| e.to_string())
            };
            mesgd_providers::builtin::run_grant_command(cmd, &db, &mut std::io::stdout(), issue)?;
        }
        Command::Role(cmd) => {
            let db = user_db(&config)?;
            mesgd_providers::builtin::run_role_command(cmd, &db, &mut std::io::stdout())?;
        }
        Command::Token(TokenCommand::Anonymous { prefixes }) => {
            let keys = mesgd_providers::tokens::KeyStore::open_or_create(&keys_dir, now)?;
            let (token, _) = mesgd_providers::grants::mint_anonymous(&keys, &prefixes, now)?;
            println!("{token}");
        }
        Command::Acl(cmd) => {
            let db = user_db(&config)?;
            let stdin = std::io::stdin();
            mesgd_providers::builtin::run_acl_command(cmd, &db, &mut std::io::stdout(), &mut stdin.lock())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mesgd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
