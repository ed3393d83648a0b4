//! `loadgen`: the load generator of mesgd's side-by-side benchmark (tools/bench).
//!
//! One subcommand per scenario — MQTT `pairs`, `fanout`, `fanin`, `latency`, `idle`; the JSON
//! relay's `relay-pairs`, `relay-room`, `relay-latency`, `relay-backlog`, `relay-idle` over TCP,
//! WebSocket or UDP; `content-fanout` for content routing; `echo-server`/`echo` for the machine's raw TCP
//! ceiling. Each prints one JSON row on stdout: the scenario, its parameters, delivered and
//! published messages per second, the broker's CPU per delivery and utilisation (from
//! `/proc/PID/stat` of `--broker-pid`), the generator's own utilisation, latency percentiles
//! where measured, and error counts by kind.
//!
//! Bounded by construction: loopback addresses only, every count and time capped on the command
//! line, and a hard deadline after which the process exits whatever it is doing.
//!
//! # Layout
//! - `cli`: the command line. `target`: the loopback rule.
//! - `link`: a connection with its framing; `ws`: the WebSocket client; `mqtt::codec`: MQTT.
//! - `run`: receivers, closed-loop and paced senders, the pacer, measuring, stopping.
//! - `window`: the closed loop's credits. `stamp`: the send-time stamp in every message.
//! - `mqtt`, `relay`, `content`, `idle`, `echo`: the scenarios.
//! - `stats`, `procfs`: counting, and reading the broker's CPU and memory.

mod cli;
mod content;
mod echo;
mod error;
mod idle;
mod link;
mod mqtt;
mod procfs;
mod relay;
mod run;
mod stamp;
mod stats;
mod target;
mod window;
mod ws;

#[cfg(test)]
mod testing;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::{Value, json};

use cli::{Command, Common};
use error::SetupError;
use mqtt::Credentials;
use procfs::Proc;
use run::Timing;
use stats::Meta;

/// Slack on top of warm-up, duration and hold for connecting and stopping, before the hard
/// deadline ends the process.
const SETUP_SLACK: Duration = Duration::from_secs(120);

fn credentials(c: &Common) -> Credentials {
    Credentials { username: c.username.clone(), password: c.password.clone(), token: c.token.clone() }
}

fn meta(c: &Common) -> Meta {
    Meta { label: c.label.clone(), round: c.round, broker: c.broker_pid.map(Proc::Pid) }
}

fn timing(c: &Common) -> Timing {
    Timing { warmup: c.warmup, duration: c.duration }
}

fn relay_endpoint(r: &cli::Relay, c: &Common) -> relay::Endpoint {
    relay::Endpoint { addr: r.addr, transport: r.transport, path: r.path.clone(), creds: credentials(c) }
}

fn relay_config(r: &cli::Relay, c: &Common) -> relay::load::Config {
    relay::load::Config {
        endpoint: relay_endpoint(r, c),
        payload: r.payload as usize,
        timing: timing(c),
        stall: c.stall,
        meta: meta(c),
    }
}

fn mqtt_config(m: &cli::Mqtt, c: &Common) -> mqtt::load::Config {
    mqtt::load::Config {
        addr: m.addr,
        qos: m.qos,
        payload: m.payload as usize,
        creds: credentials(c),
        timing: timing(c),
        stall: c.stall,
        meta: meta(c),
    }
}

async fn run(command: &Command) -> Result<Value, SetupError> {
    use mqtt::load::Shape;
    match command {
        Command::Pairs { mqtt: m, pairs, window, common } => {
            mqtt::load::throughput(&mqtt_config(m, common), Shape::Pairs(*pairs), *window).await
        }
        Command::Fanout { mqtt: m, subs, window, common } => {
            mqtt::load::throughput(&mqtt_config(m, common), Shape::Fanout(*subs), *window).await
        }
        Command::Fanin { mqtt: m, pubs, window, common } => {
            mqtt::load::throughput(&mqtt_config(m, common), Shape::Fanin(*pubs), *window).await
        }
        Command::Latency { mqtt: m, pairs, rate, common } => {
            mqtt::load::latency(&mqtt_config(m, common), *pairs, *rate).await
        }
        Command::Idle { addr, subscribe, idle: i, common } => {
            let kind = idle::Kind::Mqtt { addr: *addr, creds: credentials(common), subscribe: *subscribe };
            let plan = idle::Plan { conns: i.conns, conc: i.conc, hold: i.hold };
            Ok(idle::idle(kind, plan, &meta(common)).await)
        }
        Command::EchoServer { addr, max_conns, lifetime } => {
            echo::serve(*addr, *max_conns, *lifetime).await.map_err(SetupError::io("echo-server"))?;
            Ok(Value::Null)
        }
        Command::Echo { addr, conns, window, frame, common } => {
            echo::client(*addr, *conns, *window, *frame as usize, timing(common), common.stall, &meta(common))
                .await
        }
        Command::RelayPairs { relay: r, pairs, window, common } => {
            relay::load::pairs(&relay_config(r, common), *pairs, *window).await
        }
        Command::RelayRoom { relay: r, subs, window, common } => {
            relay::load::room(&relay_config(r, common), *subs, *window).await
        }
        Command::RelayLatency { relay: r, pairs, rate, common } => {
            relay::load::latency(&relay_config(r, common), *pairs, *rate).await
        }
        Command::RelayBacklog { relay: r, messages, rounds, common } => {
            relay::backlog::backlog(&relay_config(r, common), *messages, *rounds).await
        }
        Command::RelayIdle { relay: r, idle: i, common } => {
            let kind = idle::Kind::Relay(relay_endpoint(r, common));
            let plan = idle::Plan { conns: i.conns, conc: i.conc, hold: i.hold };
            Ok(idle::idle(kind, plan, &meta(common)).await)
        }
        Command::ContentFanout { addr, prefix, subs, window, payload, common } => {
            let cfg = content::Config {
                addr: *addr,
                prefix: prefix.clone(),
                payload: *payload as usize,
                creds: credentials(common),
                timing: timing(common),
                stall: common.stall,
                meta: meta(common),
            };
            content::fanout(&cfg, *subs, *window).await
        }
    }
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let threads = cli.command.common().map_or(1, |c| c.threads);
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(usize::from(threads)).enable_all().build()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(c) = cli.command.common() {
        let deadline = c.warmup + c.duration + cli.command.hold() + SETUP_SLACK;
        std::thread::spawn(move || {
            std::thread::sleep(deadline);
            eprintln!("loadgen: hard deadline of {} s reached, exiting", deadline.as_secs());
            std::process::exit(3);
        });
    }
    match runtime.block_on(run(&cli.command)) {
        Ok(Value::Null) => ExitCode::SUCCESS,
        Ok(row) => {
            println!("{row}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let c = cli.command.common();
            let failed = json!({
                "scenario": cli.command.scenario(),
                "label": c.map(|c| c.label.as_str()),
                "round": c.and_then(|c| c.round),
                "failed": e.to_string(),
            });
            println!("{failed}");
            eprintln!("loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}
