#!/usr/bin/env bash
# Runs Mosquitto's own broker tests (github.com/eclipse/mosquitto, test/broker/[01]*.py: connect,
# subscribe/publish, retain, sessions, wills, persistence, properties, malformed packets)
# against mesgd through mosquitto_shim.py, one test at a time, at most 60 s each. Bridges,
# plugins, TLS and password/ACL files have no equivalent and are skipped (exit 77).
#
#   tools/conformance/run-mosquitto.sh PATH/TO/mosquitto [MESGD_BINARY]
#
# Prints "<exit code> <test>" per test (0 passed, 77 skipped) and the counts; each test's
# output is kept in $MESGD_SUITE_LOGS (default: a temporary directory, named at the end).
# Needs python3 with psutil (pip install psutil) for the tests that use it.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tests="$(cd "$1/test/broker" && pwd)"
export MESGD="${2:-$here/../../target/debug/mesgd}"
MESGD="$(cd "$(dirname "$MESGD")" && pwd)/$(basename "$MESGD")"
logs="${MESGD_SUITE_LOGS:-$(mktemp -d)}"
mkdir -p "$logs"
cd "$tests"
passed=0 failed=0 skipped=0
for t in $(ls [01][0-9]-*.py | grep -v -e '^06-' -e helper); do
    timeout 60 python3 "$here/mosquitto_shim.py" "$t" >"$logs/$t.log" 2>&1
    rc=$?
    echo "$rc $t"
    case $rc in 0) passed=$((passed + 1)) ;; 77) skipped=$((skipped + 1)) ;; *) failed=$((failed + 1)) ;; esac
done
echo "passed $passed, failed $failed, skipped $skipped; logs in $logs"
