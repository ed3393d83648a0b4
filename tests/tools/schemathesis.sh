#!/usr/bin/env bash
# Schemathesis against a real mesgd: it reads /api/v1/openapi.json and sends generated requests
# to every operation with an admin API token. Fails on any 5xx, any response that does not match
# the document (status code, content type, schema), and any refused valid request.
#
# Bounded: a fixed seed, a few examples per operation and a time budget, so it fits well inside
# CI time. Needs the built binary (MESGD_BIN, default target/debug/mesgd) and a Python with
# schemathesis (MESGD_TEST_PYTHON, default target/ci-venv/bin/python; .ci/run installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${MESGD_BIN:-$PWD/target/debug/mesgd}
python=${MESGD_TEST_PYTHON:-$PWD/target/ci-venv/bin/python}
dir=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$dir/mesgd.toml" <<EOF
[storage]
dir = "$dir/state"
[[listeners]]
name = "http"
kind = "http"
bind = "127.0.0.1:$port"
[auth]
allow_anonymous = true
[[auth.providers]]
type = "builtin"
pbkdf2_iterations = 1000
[http]
login_delay_ms = 1
EOF
mesgd() { "$bin" --config "$dir/mesgd.toml" "$@"; }
echo "schemathesis-admin-pw" | mesgd admin add root --password-stdin >/dev/null
token=$(mesgd admin token create schemathesis --scope admin)
mesgd user add alice --password-stdin <<<"alice-pw" >/dev/null
mesgd acl add alice 'devices/%u/#' read >/dev/null

# The binary itself, not the shell function: $! must be the broker's pid for the cleanup to stop
# it (a backgrounded function is a subshell, and killing that leaves the broker running).
"$bin" --config "$dir/mesgd.toml" serve >"$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    if "$python" -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null; then break; fi
    sleep 0.1
done

status=0
schemathesis=$(dirname "$python")/schemathesis
# From the scratch directory, where schemathesis keeps its cache.
(cd "$dir" && "$schemathesis" run "http://127.0.0.1:$port/api/v1/openapi.json" \
    --header "Authorization: Bearer $token" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --phases examples,coverage,fuzzing \
    --mode positive \
    --max-examples 25 \
    --exclude-path /api/v1/stats/stream \
    --seed 15 \
    --max-time 90 \
    --request-timeout 10 \
    --workers 2 \
    --generation-database none \
    --no-color \
    --report-dir "$dir/report") || status=$?
if [ "$status" -ne 0 ]; then
    echo "--- server log ---"
    tail -n 50 "$dir/server.log"
fi
exit "$status"
