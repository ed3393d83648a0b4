#!/usr/bin/env bash
# mesgd with authentication against mesgd without, interleaved in one run.
#
# Two brokers pinned to core 0 (A: ANON_CONFIG on port 29885, B: AUTH_CONFIG moved to port
# 29886), the load generator of ../shared/bench pinned to core 1, alternating A and B scenario
# by scenario so that machine noise hits both alike. Prints, per scenario, the median over
# rounds of B/A: delivered msg/s, broker CPU per delivery, p50 and p99 latency.
#
# usage: benches/auth-ab.sh [ROUNDS]
#   env: ANON_CONFIG (/tmp/bench-mesgd.toml), AUTH_CONFIG (/tmp/bench-mesgd-auth.toml),
#        MQTTLOAD_USERNAME / MQTTLOAD_PASSWORD (bench / bench-secret), MESGD (target/release/mesgd),
#        MQTTLOAD (/tmp/mqttload-target/release/mqttload), OUT (/tmp/bench/auth-ab.jsonl)
set -u
ROUNDS=${1:-3}
MESGD=${MESGD:-target/release/mesgd}
L=${MQTTLOAD:-/tmp/mqttload-target/release/mqttload}
ANON_CONFIG=${ANON_CONFIG:-/tmp/bench-mesgd.toml}
AUTH_CONFIG=${AUTH_CONFIG:-/tmp/bench-mesgd-auth.toml}
USER_NAME=${MQTTLOAD_USERNAME:-bench}; USER_PASSWORD=${MQTTLOAD_PASSWORD:-bench-secret}
OUT=${OUT:-/tmp/bench/auth-ab.jsonl}
mkdir -p "$(dirname "$OUT")"; : > "$OUT"
B_CONFIG=$(mktemp --suffix=.toml)
sed 's/29885/29886/' "$AUTH_CONFIG" > "$B_CONFIG"
setsid taskset -c 0 "$MESGD" serve --config "$ANON_CONFIG" > /dev/null 2>&1 < /dev/null & PA=$!
setsid taskset -c 0 "$MESGD" serve --config "$B_CONFIG" > /dev/null 2>&1 < /dev/null & PB=$!
trap 'kill $PA $PB; rm -f "$B_CONFIG"' EXIT
for port in 29885 29886; do
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
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
  for s in "${SCEN[@]}"; do
    # shellcheck disable=SC2086
    env -u MQTTLOAD_USERNAME -u MQTTLOAD_PASSWORD timeout 60 taskset -c 1 "$L" $s \
      --addr 127.0.0.1:29885 --label anonymous --broker-pid $PA --warmup 1 --duration 5 \
      | sed "s/}$/,\"round\":$r}/" >> "$OUT"
    # shellcheck disable=SC2086
    MQTTLOAD_USERNAME=$USER_NAME MQTTLOAD_PASSWORD=$USER_PASSWORD timeout 60 taskset -c 1 "$L" $s \
      --addr 127.0.0.1:29886 --label auth --broker-pid $PB --warmup 1 --duration 5 \
      | sed "s/}$/,\"round\":$r}/" >> "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
runs = collections.defaultdict(dict)
for r in rows:
    runs[(r["scenario"], r["params"].get("qos"), r["round"])][r["broker"]] = r
ratios = collections.defaultdict(list)
for (scenario, qos, _), pair in runs.items():
    if len(pair) == 2:
        a, b = pair["anonymous"], pair["auth"]
        ratios[(scenario, qos)].append((
            b["delivered_msgs_per_s"] / a["delivered_msgs_per_s"],
            b["broker_cpu_us_per_delivery"] / a["broker_cpu_us_per_delivery"],
            b["lat_us"]["p50"] / a["lat_us"]["p50"],
            b["lat_us"]["p99"] / a["lat_us"]["p99"],
        ))
print("| scenario | msg/s auth ÷ anonymous | CPU per delivery | p50 | p99 |")
print("|---|---|---|---|---|")
for (scenario, qos), xs in sorted(ratios.items()):
    m = [statistics.median(x[i] for x in xs) for i in range(4)]
    print(f"| {scenario} QoS {qos} | **{m[0]:.2f}×** | {m[1]:.2f}× | {m[2]:.2f}× | {m[3]:.2f}× |")
PY
