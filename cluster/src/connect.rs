//! The node's connections to NATS, made at start.
//!
//! A node and its NATS servers are often started together (a compose file, a fresh
//! deployment), and the servers may not listen yet, or their names not resolve yet, when the
//! node first tries. A refusal of that kind (the connection refused or reset, no answer in
//! time, a name that does not resolve) is tried again, with pauses growing from 100 ms to 1 s,
//! until `connect_timeout_ms` has passed since the first try, each one logged and counted
//! (`initial_connect_failures`). A refusal that waiting cannot change (the credentials or the
//! TLS setup refused, a server list that does not parse) ends the start at once. Once
//! connected, async-nats reconnects by itself.

use std::sync::Arc;
use std::time::Duration;

use async_nats::{ConnectErrorKind, ConnectOptions, Event};

use crate::StartError;
use crate::backoff::Backoff;
use crate::config::ClusterConfig;
use crate::stats::ClusterStats;

/// The first pause after a refused attempt, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A connection to NATS; `no_echo` for the one that publishes (this node delivers its own
/// publishes locally: NATS must not hand them back).
pub(crate) async fn connect(
    config: &ClusterConfig,
    stats: &Arc<ClusterStats>,
    no_echo: bool,
) -> Result<async_nats::Client, StartError> {
    let servers = config.nats.join(", ");
    let patience = Duration::from_millis(config.connect_timeout_ms);
    let mut backoff = Backoff::new(patience, FIRST_PAUSE, MAX_PAUSE);
    // One attempt goes through the whole server list, each server bounded by
    // connect_timeout_ms; twice that bounds the attempt.
    let attempt_bound = patience.saturating_mul(2).max(Duration::from_millis(1));
    loop {
        let options = options(config, stats, no_echo).await?;
        let (reason, again) =
            match tokio::time::timeout(attempt_bound, options.connect(config.nats.as_slice())).await {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(e)) => (e.to_string(), passes(e.kind())),
                Err(_) => ("timed out".to_owned(), true),
            };
        let Some(pause) = backoff.next_pause().filter(|_| again) else {
            return Err(StartError::Connect { servers, reason });
        };
        ClusterStats::add(&stats.initial_connect_failures, 1);
        tracing::warn!(
            servers = %servers,
            error = %reason,
            retry_in_ms = pause.as_millis() as u64,
            "cluster: cannot connect to NATS yet; trying again until connect_timeout_ms"
        );
        tokio::time::sleep(pause).await;
    }
}

/// Whether a failed connect may succeed later without a change here: a server that does not
/// listen or answer yet, or a name that does not resolve yet.
fn passes(kind: ConnectErrorKind) -> bool {
    matches!(kind, ConnectErrorKind::Io | ConnectErrorKind::TimedOut | ConnectErrorKind::Dns)
}

/// The connection's options: its name, the node's credentials and TLS, and the callback that
/// counts connection events.
async fn options(
    config: &ClusterConfig,
    stats: &Arc<ClusterStats>,
    no_echo: bool,
) -> Result<ConnectOptions, StartError> {
    let events = stats.clone();
    let name =
        if no_echo { format!("mesgd-{}", config.node) } else { format!("mesgd-{}-shared", config.node) };
    let mut options = ConnectOptions::new().name(name);
    if no_echo {
        options = options.no_echo();
    }
    let mut options = options
        .connection_timeout(Duration::from_millis(config.connect_timeout_ms))
        .event_callback(move |event| {
            let stats = events.clone();
            async move {
                match event {
                    Event::Disconnected => ClusterStats::add(&stats.disconnects, 1),
                    Event::SlowConsumer(_) => ClusterStats::add(&stats.slow_consumers, 1),
                    _ => {}
                }
                tracing::info!(%event, "cluster: NATS connection");
            }
        });
    if let Some(path) = &config.credentials_file {
        options = options
            .credentials_file(path)
            .await
            .map_err(|source| StartError::Credentials { path: path.clone(), source })?;
    }
    if let (Some(user), Some(password)) = (&config.user, &config.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &config.token {
        options = options.token(token.clone());
    }
    if let Some(tls) = &config.tls {
        options = options.require_tls(tls.required);
        if let Some(ca) = &tls.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    Ok(options)
}
