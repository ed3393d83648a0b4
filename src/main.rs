//! The `mesgd` command line: `mesgd serve` runs the broker; `mesgd user` and `mesgd acl` manage
//! the builtin user store, also while the broker runs.

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

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = load_config(cli.config.as_deref())?;
    match cli.command {
        Command::Serve => {
            mesgd::logging::init(&config.log.level);
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(serve(config))
        }
        Command::User(cmd) => {
            let db = user_db(&config)?;
            let stdin = std::io::stdin();
            mesgd_providers::builtin::run_user_command(cmd, &db, &mut std::io::stdout(), &mut stdin.lock())?;
            Ok(())
        }
        Command::Acl(cmd) => {
            let db = user_db(&config)?;
            let stdin = std::io::stdin();
            mesgd_providers::builtin::run_acl_command(cmd, &db, &mut std::io::stdout(), &mut stdin.lock())?;
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mesgd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
