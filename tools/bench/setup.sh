#!/usr/bin/env bash
# Prepares a machine for the side-by-side benchmark: Mosquitto (Debian package), the load
# generator (tools/loadgen, release) and, with RUMQTTD=1, rumqttd from crates.io.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
command -v mosquitto >/dev/null || { apt-get update -qq && apt-get install -y -qq mosquitto; }
if [ "${RUMQTTD:-0}" = 1 ] && [ ! -x "$HOME/.cargo/bin/rumqttd" ]; then
    # rumqttd's lock file pins a crate that no longer builds on a current rustc: no --locked.
    cargo install rumqttd
fi
cargo build --release --manifest-path "$ROOT/tools/loadgen/Cargo.toml"
cargo build --release --manifest-path "$ROOT/Cargo.toml" --bin mesgd
echo "ready: $(command -v mosquitto), ${CARGO_TARGET_DIR:-$ROOT/tools/loadgen/target}/release/loadgen"
