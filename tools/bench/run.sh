#!/usr/bin/env bash
# mesgd against Mosquitto (and rumqttd, when installed) on loopback, in one interleaved run.
#
#   tools/bench/run.sh [ROUNDS] [OUT.jsonl]          (after tools/bench/setup.sh)
#
# Every broker is pinned to core 0 and the load generator to core 1. Each round restarts the
# brokers, measures idle connections on the fresh brokers (memory and connect rate), runs the
# throughput and latency scenarios broker after broker, then measures the connect rate again on
# the brokers that carried that traffic ("after"). summarize.py prints per-round ratios against
# Mosquitto and their median.
#
# Environment:
#   MESGD (target/release/mesgd)  MESGD_CONFIG (an anonymous, in-memory config written here)
#   MESGD_BASE: a second mesgd build (say, of the previous commit), run beside the first as
#   "mesgd-base" with the same config on port 29886: an A/B comparison in the same run
#   LOADGEN (tools/loadgen/target/release/loadgen)  MOSQ_BIN (mosquitto)
#   RUMQTTD_BIN (~/.cargo/bin/rumqttd; skipped when absent)
#   DUR (5) WARMUP (1) IDLE_CONNS (10000) ONLY (regex over scenario lines) SKIP_IDLE (0)
#   LOADGEN_USERNAME / LOADGEN_PASSWORD: credentials for every mesgd connection (Mosquitto and
#   rumqttd stay anonymous).
#   AUTH=1: every broker checks a password and a 10-rule ACL (the same rules for each): mesgd
#   its builtin provider, Mosquitto a password_file and an acl_file; rumqttd, which has no
#   ACL, is left out. The generator logs in as bench / bench-secret, and each idle test is
#   preceded by an unrecorded one of 100 connections, so that mesgd's verification cache is
#   warm when it is measured (Mosquitto verifies every connect: it has none).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/tools/bench"
ROUNDS=${1:-3}
OUT=${2:-/tmp/mesgd-bench/results.jsonl}
WORK=${WORK:-/tmp/mesgd-bench}
MESGD=${MESGD:-${CARGO_TARGET_DIR:-$ROOT/target}/release/mesgd}
LOADGEN=${LOADGEN:-${CARGO_TARGET_DIR:-$ROOT/tools/loadgen/target}/release/loadgen}
MOSQ_BIN=${MOSQ_BIN:-mosquitto}
RUMQTTD_BIN=${RUMQTTD_BIN:-$HOME/.cargo/bin/rumqttd}
DUR=${DUR:-5}; WARMUP=${WARMUP:-1}; IDLE_CONNS=${IDLE_CONNS:-10000}
ONLY=${ONLY:-.}; SKIP_IDLE=${SKIP_IDLE:-0}; AUTH=${AUTH:-0}
MOSQ_PORT=29883; RUMQ_PORT=29884; MESGD_PORT=29885; BASE_PORT=29886; ECHO_PORT=29870
mkdir -p "$WORK" "$(dirname "$OUT")"; : > "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n 20000
for bin in "$MESGD" "$LOADGEN"; do [ -x "$bin" ] || { echo "missing $bin: run tools/bench/setup.sh" >&2; exit 1; }; done

# The ACL of AUTH=1, one rule per line as mesgd's `acl add` takes it: a deny, rules with %u and
# %c, a $SYS deny, ... and last the grant of the benchmark's topics, so that every publish and
# delivery is checked against rules that do not match first.
ACL_RULES=('admin/# deny' 'devices/%u/# readwrite' 'sensors/+/temp read' 'cmd/%c write'
  'logs/# read' '$SYS/# deny' 'alerts/# read' 'config/+ read' 'status/%u write' 'b/# readwrite')
if [ "$AUTH" = 1 ]; then
  export LOADGEN_USERNAME=bench LOADGEN_PASSWORD=bench-secret
  command -v mosquitto_passwd >/dev/null || { echo "AUTH=1 needs mosquitto_passwd (package mosquitto)" >&2; exit 1; }
  rm -f "$WORK/mosquitto.passwd"
  mosquitto_passwd -b -c "$WORK/mosquitto.passwd" bench bench-secret
  { echo "user bench"
    for rule in "${ACL_RULES[@]}"; do
      topic=${rule% *}; access=${rule##* }
      # Mosquitto's file: %u / %c only in `pattern` lines (which apply to every user).
      if [[ $topic == *%* ]]; then echo "pattern $access $topic"; else echo "topic $access $topic"; fi
    done; } > "$WORK/mosquitto.acl"
  MOSQ_AUTH="allow_anonymous false
password_file $WORK/mosquitto.passwd
acl_file $WORK/mosquitto.acl"
  RUMQTTD_BIN=/nonexistent
else
  MOSQ_AUTH="allow_anonymous true"
fi
cat > "$WORK/mosquitto.conf" <<CONF
listener $MOSQ_PORT 127.0.0.1
$MOSQ_AUTH
max_connections -1
persistence false
max_queued_messages 100000
max_inflight_messages 20
set_tcp_nodelay true
log_dest stderr
log_type error
CONF
cat > "$WORK/rumqttd.toml" <<CONF
id = 0
[router]
id = 0
max_connections = 20010
max_outgoing_packet_count = 200
max_segment_size = 104857600
max_segment_count = 10
[v4.1]
name = "v4-1"
listen = "127.0.0.1:$RUMQ_PORT"
next_connection_delay_ms = 0
    [v4.1.connections]
    connection_timeout_ms = 60000
    max_payload_size = 20480
    max_inflight_count = 100
    dynamic_filters = true
CONF
if [ "$AUTH" = 1 ]; then
  MESGD_AUTH='allow_anonymous = false
[[auth.providers]]
type = "builtin"'
else
  MESGD_AUTH="allow_anonymous = true"
fi
if [ -z "${MESGD_CONFIG:-}" ]; then
  MESGD_CONFIG="$WORK/mesgd.toml"
  rm -rf "$WORK/mesgd-data" "$WORK/mesgd-data-base"
  cat > "$MESGD_CONFIG" <<CONF
[storage]
dir = "$WORK/mesgd-data"
durability = "none"
[[listeners]]
name = "bench"
kind = "mqtt"
bind = "127.0.0.1:$MESGD_PORT"
[auth]
$MESGD_AUTH
[log]
level = "warn"
[limits]
max_queued_messages = 100000
# The generator opens every connection from 127.0.0.1: the per-address limit (1,000) would
# refuse most of the idle test's 10,000.
exempt = ["127.0.0.0/8"]
CONF
fi

if [ "$AUTH" = 1 ]; then
  "$MESGD" --config "$MESGD_CONFIG" user add bench --password-stdin <<< bench-secret >/dev/null
  for rule in "${ACL_RULES[@]}"; do
    # shellcheck disable=SC2086
    "$MESGD" --config "$MESGD_CONFIG" acl add bench $rule >/dev/null
  done
fi

declare -A PID CMD PORT
PORT[mosquitto]=$MOSQ_PORT; CMD[mosquitto]="$MOSQ_BIN -c $WORK/mosquitto.conf"
PORT[mesgd]=$MESGD_PORT; CMD[mesgd]="$MESGD serve --config $MESGD_CONFIG"
BROKERS=(mosquitto mesgd)
if [ -x "$RUMQTTD_BIN" ]; then
  PORT[rumqttd]=$RUMQ_PORT; CMD[rumqttd]="$RUMQTTD_BIN -q -c $WORK/rumqttd.toml"; BROKERS=(mosquitto rumqttd mesgd)
fi
if [ -n "${MESGD_BASE:-}" ]; then
  sed "s/127.0.0.1:$MESGD_PORT/127.0.0.1:$BASE_PORT/; s#^dir = \"\(.*\)\"#dir = \"\1-base\"#" "$MESGD_CONFIG" > "$WORK/mesgd-base.toml"
  [ "$AUTH" = 1 ] && { rm -rf "$WORK/mesgd-data-base"; cp -r "$WORK/mesgd-data" "$WORK/mesgd-data-base"; }
  PORT[mesgd-base]=$BASE_PORT; CMD[mesgd-base]="$MESGD_BASE serve --config $WORK/mesgd-base.toml"
  BROKERS+=(mesgd-base)
fi

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
stop_pid() { kill "$1" 2>/dev/null; for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done; kill -9 "$1" 2>/dev/null; }
start() { # name: (re)starts one broker pinned to core 0
  local b=$1
  [ -n "${PID[$b]:-}" ] && stop_pid "${PID[$b]}"
  # shellcheck disable=SC2086
  setsid taskset -c 0 ${CMD[$b]} >> "$WORK/$b.log" 2>&1 < /dev/null &
  PID[$b]=$!
  wait_port "${PORT[$b]}" || { echo "$b did not open port ${PORT[$b]}" >&2; exit 1; }
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
quiet() { # waits (at most 10 s) until a broker has stopped working off the previous scenario
  local a b
  for _ in $(seq 20); do a=$(cpu_ticks "$1"); sleep 0.5; b=$(cpu_ticks "$1"); [ $((b - a)) -le 1 ] && return; done
}
cleanup() { for b in "${BROKERS[@]}"; do [ -n "${PID[$b]:-}" ] && stop_pid "${PID[$b]}"; done; [ -n "${EP:-}" ] && stop_pid "$EP"; }
trap cleanup EXIT INT TERM

setsid taskset -c 0 "$LOADGEN" echo-server --addr 127.0.0.1:$ECHO_PORT > "$WORK/echo.log" 2>&1 < /dev/null &
EP=$!; wait_port $ECHO_PORT

gen() { # broker round phase args...: one scenario against one broker, one JSON row appended
  local b=$1 r=$2 phase=$3; shift 3
  quiet "${PID[$b]}"
  # shellcheck disable=SC2068
  timeout 180 taskset -c 1 "$LOADGEN" $@ --addr "127.0.0.1:${PORT[$b]}" --label "$b" --round "$r" \
    --broker-pid "${PID[$b]}" | sed "s/}\$/,\"phase\":\"$phase\"}/" | tee -a "$OUT"
}
idle() { # round phase
  [ "$SKIP_IDLE" = 1 ] && return
  for b in "${BROKERS[@]}"; do
    if [ "$AUTH" = 1 ]; then # warms mesgd's verification cache; not recorded
      timeout 60 taskset -c 1 "$LOADGEN" idle --conns 100 --conc 10 --hold 0 --addr "127.0.0.1:${PORT[$b]}" \
        --label "$b" --round "$1" --broker-pid "${PID[$b]}" > /dev/null
    fi
    gen "$b" "$1" "$2" idle --conns "$IDLE_CONNS" --conc 200 --hold 3
  done
}

SCEN=(
  "pairs --qos 0 --pairs 10 --window 16"
  "pairs --qos 1 --pairs 10 --window 16"
  "fanout --qos 0 --subs 100 --window 16"
  "fanout --qos 1 --subs 100 --window 16"
  "fanin --qos 0 --pubs 100 --window 16"
  "fanin --qos 1 --pubs 100 --window 16"
  "latency --qos 0 --pairs 10 --rate 5000"
  "latency --qos 1 --pairs 10 --rate 5000"
)
for r in $(seq "$ROUNDS"); do
  for b in "${BROKERS[@]}"; do start "$b"; done
  idle "$r" fresh
  timeout 180 taskset -c 1 "$LOADGEN" echo --addr 127.0.0.1:$ECHO_PORT --label echo --round "$r" \
    --broker-pid "$EP" --conns 10 --window 16 --warmup "$WARMUP" --duration "$DUR" \
    | sed 's/}$/,"phase":"-"}/' | tee -a "$OUT"
  for s in "${SCEN[@]}"; do
    [[ $s =~ $ONLY ]] || continue
    for b in "${BROKERS[@]}"; do gen "$b" "$r" run $s --warmup "$WARMUP" --duration "$DUR"; done
  done
  idle "$r" after
  for b in "${BROKERS[@]}"; do
    echo "{\"scenario\":\"rss\",\"label\":\"$b\",\"round\":$r,\"phase\":\"end\",\"params\":{},\"broker_rss_kib\":$(awk '/VmRSS/{print $2}' "/proc/${PID[$b]}/status")}" | tee -a "$OUT"
  done
done
python3 "$HERE/summarize.py" "$OUT"
