//! In-process peers for the generator's own tests: a small MQTT broker, a JSON relay and a
//! content router, each doing just what the scenarios use, on 127.0.0.1 with a free port.
//!
//! The generator is kept outside the workspace, so it cannot start mesgd in-process; these
//! fakes follow the documented protocols (MQTT 3.1.1, docs/relay.md, docs/content.md) and let
//! the scenarios run end to end in a unit test. The WebSocket sides of the fake relay and router
//! are tokio-tungstenite, an implementation independent of the generator's own client. Against
//! the real brokers the generator is exercised by `tools/bench/run.sh` and by the
//! ignored test `against_mosquitto`.

pub(crate) mod fake_content;
pub(crate) mod fake_mqtt;
pub(crate) mod fake_relay;
mod scenarios;

use std::time::Duration;

use crate::procfs::Proc;
use crate::run::Timing;
use crate::stats::Meta;

/// Short timings for tests.
pub(crate) const TIMING: Timing =
    Timing { warmup: Duration::from_millis(100), duration: Duration::from_millis(400) };

/// The row's metadata, with this process as the "broker" (the fakes run in it).
pub(crate) fn meta() -> Meta {
    Meta { label: "fake".into(), round: Some(1), broker: Some(Proc::Pid(std::process::id())) }
}
