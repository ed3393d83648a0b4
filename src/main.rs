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

fn user_db(config: &Config) -> anyhow::Result<PathBuf> {
    let dir = config.storage_dir();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create storage directory {}", dir.display()))?;
    Ok(dir.join("config.db"))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let server = Server::start(config).await?;
    wait_for_shutdown(&server).await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

/// Waits for SIGINT or SIGTERM; SIGHUP meanwhile reloads the TLS certificates.
#[cfg(unix)]
async fn wait_for_shutdown(server: &Server) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
    else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading TLS certificates");
                server.reload_tls();
            }
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_shutdown(_server: &Server) {
    let _ = tokio::signal::ctrl_c().await;
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
