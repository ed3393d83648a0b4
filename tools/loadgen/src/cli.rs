//! The command line: one subcommand per scenario, every count and time bounded.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::relay::Transport;

/// Bounded, loopback-only load generator for side-by-side broker benchmarks. Every scenario
/// prints one JSON row on stdout.
#[derive(Debug, Parser)]
#[command(name = "loadgen", version)]
pub(crate) struct Cli {
    /// The scenario.
    #[command(subcommand)]
    pub(crate) command: Command,
}

fn addr(text: &str) -> Result<SocketAddr, String> {
    crate::target::loopback(text).map_err(|e| e.to_string())
}

fn seconds(text: &str, max: f64) -> Result<Duration, String> {
    let s: f64 = text.parse().map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(0.0..=max).contains(&s) {
        return Err(format!("{s} s is outside 0..={max} s"));
    }
    Ok(Duration::from_secs_f64(s))
}

fn warmup(text: &str) -> Result<Duration, String> {
    seconds(text, 60.0)
}

fn duration(text: &str) -> Result<Duration, String> {
    let d = seconds(text, 600.0)?;
    if d < Duration::from_millis(100) {
        return Err("the measured interval must be at least 0.1 s".into());
    }
    Ok(d)
}

fn stall(text: &str) -> Result<Duration, String> {
    let d = seconds(text, 60.0)?;
    if d < Duration::from_millis(10) {
        return Err("the stall timeout must be at least 0.01 s".into());
    }
    Ok(d)
}

fn hold(text: &str) -> Result<Duration, String> {
    seconds(text, 600.0)
}

fn rate(text: &str) -> Result<f64, String> {
    let r: f64 = text.parse().map_err(|_| format!("`{text}` is not a rate"))?;
    if !(1.0..=1_000_000.0).contains(&r) {
        return Err(format!("{r} msg/s is outside 1..=1000000"));
    }
    Ok(r)
}

/// Options every scenario has.
#[derive(Clone, Debug, Args)]
pub(crate) struct Common {
    /// The broker's name in the results (mosquitto, rumqttd, mesgd, …).
    #[arg(long, default_value = "broker")]
    pub(crate) label: String,
    /// The runner's round number, copied into the row.
    #[arg(long)]
    pub(crate) round: Option<u32>,
    /// The broker's process id: its CPU time and memory are read from /proc.
    #[arg(long)]
    pub(crate) broker_pid: Option<u32>,
    /// Seconds of load before measuring.
    #[arg(long, default_value = "1", value_parser = warmup)]
    pub(crate) warmup: Duration,
    /// Seconds measured.
    #[arg(long, default_value = "5", value_parser = duration)]
    pub(crate) duration: Duration,
    /// Seconds a window waits for a delivery before writing its messages off (counted).
    #[arg(long, default_value = "1", value_parser = stall)]
    pub(crate) stall: Duration,
    /// Username for MQTT CONNECT and relay register.
    #[arg(long, env = "LOADGEN_USERNAME")]
    pub(crate) username: Option<String>,
    /// Password for MQTT CONNECT and relay register.
    #[arg(long, env = "LOADGEN_PASSWORD", hide_env_values = true)]
    pub(crate) password: Option<String>,
    /// Token for relay register and WebSocket `Authorization: Bearer`.
    #[arg(long, env = "LOADGEN_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Runtime threads of the generator (1: everything on one core).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) threads: u16,
}

/// MQTT load options.
#[derive(Clone, Debug, Args)]
pub(crate) struct Mqtt {
    /// The broker's MQTT listener (loopback only).
    #[arg(long, value_parser = addr)]
    pub(crate) addr: SocketAddr,
    /// QoS of subscriptions and publishes.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub(crate) qos: u8,
    /// Payload bytes (the first 12 carry the stamp).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(12..=65536))]
    pub(crate) payload: u32,
}

/// Relay options.
#[derive(Clone, Debug, Args)]
pub(crate) struct Relay {
    /// The relay listener (loopback only).
    #[arg(long, value_parser = addr)]
    pub(crate) addr: SocketAddr,
    /// Its transport.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    pub(crate) transport: Transport,
    /// URL path of the WebSocket upgrade.
    #[arg(long, default_value = "/")]
    pub(crate) path: String,
    /// Characters of `ct` (the first 24 carry the stamp).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(24..=16000))]
    pub(crate) payload: u32,
}

/// How many of something, 1..=10,000.
fn count(text: &str) -> Result<u32, String> {
    let n: u32 = text.parse().map_err(|_| format!("`{text}` is not a count"))?;
    if !(1..=10_000).contains(&n) {
        return Err(format!("{n} is outside 1..=10000"));
    }
    Ok(n)
}

/// A window, 1..=100,000 deliveries per sender (per message for fan-outs).
fn window(text: &str) -> Result<u32, String> {
    let n: u32 = text.parse().map_err(|_| format!("`{text}` is not a window"))?;
    if !(1..=100_000).contains(&n) {
        return Err(format!("{n} is outside 1..=100000"));
    }
    Ok(n)
}

/// Idle connection options.
#[derive(Clone, Debug, Args)]
pub(crate) struct IdlePlan {
    /// Connections to open and hold.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=200_000))]
    pub(crate) conns: u32,
    /// Connection attempts in flight at once.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) conc: u32,
    /// Seconds to hold them before reading the broker's memory.
    #[arg(long, default_value = "3", value_parser = hold)]
    pub(crate) hold: Duration,
}

/// The scenarios.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// N MQTT publisher → subscriber pairs, closed loop.
    Pairs {
        #[command(flatten)]
        mqtt: Mqtt,
        /// Pairs.
        #[arg(long, default_value_t = 10, value_parser = count)]
        pairs: u32,
        /// Undelivered messages per pair at most.
        #[arg(long, default_value_t = 16, value_parser = window)]
        window: u32,
        #[command(flatten)]
        common: Common,
    },
    /// One MQTT publisher → S subscribers of its topic, closed loop.
    Fanout {
        #[command(flatten)]
        mqtt: Mqtt,
        /// Subscribers.
        #[arg(long, default_value_t = 100, value_parser = count)]
        subs: u32,
        /// Messages in flight at most (each owes S deliveries).
        #[arg(long, default_value_t = 16, value_parser = window)]
        window: u32,
        #[command(flatten)]
        common: Common,
    },
    /// P MQTT publishers → one `#` subscriber, closed loop.
    Fanin {
        #[command(flatten)]
        mqtt: Mqtt,
        /// Publishers.
        #[arg(long, default_value_t = 100, value_parser = count)]
        pubs: u32,
        /// Undelivered messages per publisher at most.
        #[arg(long, default_value_t = 16, value_parser = window)]
        window: u32,
        #[command(flatten)]
        common: Common,
    },
    /// N MQTT pairs at a fixed total rate, open loop; latency from the intended send time.
    Latency {
        #[command(flatten)]
        mqtt: Mqtt,
        /// Pairs.
        #[arg(long, default_value_t = 10, value_parser = count)]
        pairs: u32,
        /// Messages per second, all pairs together.
        #[arg(long, default_value = "5000", value_parser = rate)]
        rate: f64,
        #[command(flatten)]
        common: Common,
    },
    /// Hold N MQTT connections: broker memory per connection, connects per second.
    Idle {
        /// The broker's MQTT listener (loopback only).
        #[arg(long, value_parser = addr)]
        addr: SocketAddr,
        /// Also subscribe each connection to a topic of its own.
        #[arg(long)]
        subscribe: bool,
        #[command(flatten)]
        idle: IdlePlan,
        #[command(flatten)]
        common: Common,
    },
    /// A TCP echo server, the ceiling of the machine (loopback only).
    EchoServer {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:29870", value_parser = addr)]
        addr: SocketAddr,
        /// Connections at once at most.
        #[arg(long, default_value_t = 1000)]
        max_conns: usize,
        /// Seconds after which the server exits.
        #[arg(long, default_value = "7200", value_parser = |t: &str| seconds(t, 86_400.0))]
        lifetime: Duration,
    },
    /// Closed-loop echo against `echo-server`.
    Echo {
        /// The echo server.
        #[arg(long, value_parser = addr)]
        addr: SocketAddr,
        /// Connections.
        #[arg(long, default_value_t = 10, value_parser = count)]
        conns: u32,
        /// Frames in flight per connection.
        #[arg(long, default_value_t = 16, value_parser = window)]
        window: u32,
        /// Frame bytes (80: a QoS 0 PUBLISH of 64 bytes on a 12-byte topic).
        #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u32).range(1..=65536))]
        frame: u32,
        #[command(flatten)]
        common: Common,
    },
    /// N relay senders, each `send`ing to its own receiver, closed loop.
    RelayPairs {
        #[command(flatten)]
        relay: Relay,
        /// Pairs.
        #[arg(long, default_value_t = 10, value_parser = count)]
        pairs: u32,
        /// Undelivered messages per pair at most.
        #[arg(long, default_value_t = 16, value_parser = window)]
        window: u32,
        #[command(flatten)]
        common: Common,
    },
    /// One relay sender `room_send`ing to S other members, closed loop.
    RelayRoom {
        #[command(flatten)]
        relay: Relay,
        /// Members besides the sender.
        #[arg(long, default_value_t = 100, value_parser = count)]
        subs: u32,
        /// room_sends in flight at most (each owes S deliveries).
        #[arg(long, default_value_t = 16, value_parser = window)]
        window: u32,
        #[command(flatten)]
        common: Common,
    },
    /// N relay pairs at a fixed total rate, open loop.
    RelayLatency {
        #[command(flatten)]
        relay: Relay,
        /// Pairs.
        #[arg(long, default_value_t = 10, value_parser = count)]
        pairs: u32,
        /// Sends per second, all pairs together.
        #[arg(long, default_value = "5000", value_parser = rate)]
        rate: f64,
        #[command(flatten)]
        common: Common,
    },
    /// A backlog of M messages to an offline address, flushed by its `register`, R rounds.
    RelayBacklog {
        #[command(flatten)]
        relay: Relay,
        /// Messages queued per round.
        #[arg(long, default_value_t = 100, value_parser = count)]
        messages: u32,
        /// Rounds, one after another.
        #[arg(long, default_value_t = 50, value_parser = count)]
        rounds: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Hold N registered relay connections.
    RelayIdle {
        #[command(flatten)]
        relay: Relay,
        #[command(flatten)]
        idle: IdlePlan,
        #[command(flatten)]
        common: Common,
    },
    /// One WebSocket sender → S content-routing listeners whose path matches, closed loop.
    ContentFanout {
        /// The HTTP listener serving content routing (loopback only).
        #[arg(long, value_parser = addr)]
        addr: SocketAddr,
        /// URL path prefix in front of the listeners' paths.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Listeners.
        #[arg(long, default_value_t = 100, value_parser = count)]
        subs: u32,
        /// Messages in flight at most (each owes S deliveries).
        #[arg(long, default_value_t = 16, value_parser = window)]
        window: u32,
        /// Characters of the `ts` field (the first 24 carry the stamp).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(24..=16000))]
        payload: u32,
        #[command(flatten)]
        common: Common,
    },
}

impl Command {
    /// The scenario's common options (`None` for the echo server).
    pub(crate) fn common(&self) -> Option<&Common> {
        match self {
            Command::Pairs { common, .. }
            | Command::Fanout { common, .. }
            | Command::Fanin { common, .. }
            | Command::Latency { common, .. }
            | Command::Idle { common, .. }
            | Command::Echo { common, .. }
            | Command::RelayPairs { common, .. }
            | Command::RelayRoom { common, .. }
            | Command::RelayLatency { common, .. }
            | Command::RelayIdle { common, .. }
            | Command::RelayBacklog { common, .. }
            | Command::ContentFanout { common, .. } => Some(common),
            Command::EchoServer { .. } => None,
        }
    }

    /// The scenario's name in rows.
    pub(crate) fn scenario(&self) -> &'static str {
        match self {
            Command::Pairs { .. } => "pairs",
            Command::Fanout { .. } => "fanout",
            Command::Fanin { .. } => "fanin",
            Command::Latency { .. } => "latency",
            Command::Idle { .. } => "idle",
            Command::EchoServer { .. } => "echo-server",
            Command::Echo { .. } => "echo",
            Command::RelayPairs { .. } => "relay-pairs",
            Command::RelayRoom { .. } => "relay-room",
            Command::RelayLatency { .. } => "relay-latency",
            Command::RelayIdle { .. } => "relay-idle",
            Command::RelayBacklog { .. } => "relay-backlog",
            Command::ContentFanout { .. } => "content-fanout",
        }
    }

    /// The idle hold, if the scenario has one (for the hard deadline).
    pub(crate) fn hold(&self) -> Duration {
        match self {
            Command::Idle { idle, .. } | Command::RelayIdle { idle, .. } => idle.hold,
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("loadgen").chain(args.iter().copied()))
    }

    #[test]
    fn refuses_non_loopback_and_out_of_bounds() {
        for args in [
            &["pairs", "--addr", "10.0.0.1:1883"][..],
            &["pairs", "--addr", "127.0.0.1:1883", "--pairs", "0"],
            &["pairs", "--addr", "127.0.0.1:1883", "--pairs", "10001"],
            &["pairs", "--addr", "127.0.0.1:1883", "--qos", "2"],
            &["pairs", "--addr", "127.0.0.1:1883", "--payload", "8"],
            &["pairs", "--addr", "127.0.0.1:1883", "--duration", "601"],
            &["pairs", "--addr", "127.0.0.1:1883", "--duration", "0"],
            &["latency", "--addr", "127.0.0.1:1883", "--rate", "2000000"],
            &["idle", "--addr", "127.0.0.1:1883", "--conns", "300000"],
            &["echo-server", "--addr", "0.0.0.0:29870"],
            &["relay-pairs", "--addr", "127.0.0.1:7000", "--transport", "quic"],
            &["content-fanout", "--addr", "[2001:db8::1]:80"],
        ] {
            assert!(parse(args).is_err(), "{args:?} was accepted");
        }
    }

    #[test]
    fn defaults() {
        let cli = parse(&["relay-room", "--addr", "localhost:7000", "--transport", "ws"]).unwrap();
        let Command::RelayRoom { relay, subs, window, common } = cli.command else {
            panic!("not relay-room")
        };
        assert_eq!(
            (relay.addr.to_string(), relay.transport, subs, window),
            ("127.0.0.1:7000".into(), Transport::Ws, 100, 16)
        );
        assert_eq!((common.warmup, common.duration), (Duration::from_secs(1), Duration::from_secs(5)));
    }
}
