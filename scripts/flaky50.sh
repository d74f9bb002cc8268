#!/usr/bin/env bash
# Runs the three scenarios E2B's own suite reports as flaky (test/e2e/flaky_test.go: the kill
# of a long command mid-stream, files and commands in flight across pause and resume, and
# auto-resume by proxied traffic) N times each (default 50), with snapshot pause forced
# (COVE_PAUSE=snapshot: a pause that cannot snapshot fails, it never falls back to a freeze),
# on a cove server of its own (a fresh temp data dir, the shared test templates), and prints
# each scenario's pass count. Exit status 0 only when every attempt passed.
#
#   scripts/flaky50.sh          # 50 attempts of each
#   scripts/flaky50.sh 5        # 5
#
# It loads the machine for several minutes (each pause of scenario b dumps 50 MB of /dev/shm).
# Needs root and CRIU 4 (scripts/criu.sh). The whole go test output is kept in the log it names.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-50}
if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
	echo "flaky50: N must be a positive number, not '$n'" >&2
	exit 2
fi
if ! criu --version 2>/dev/null | grep -Eq 'Version: ([4-9]|[1-9][0-9])\.'; then
	echo "flaky50: snapshot pause needs CRIU 4 or newer (scripts/criu.sh builds it)" >&2
	exit 2
fi
data=$(mktemp -d /tmp/cove-flaky50-XXXXXX)
log=$data.log
trap 'rm -rf "$data"' EXIT

tests=(TestKillMidStream TestFilesSurvivePauseResume TestAutoResume)
echo "==> ${tests[*]}, $n attempts each, snapshot pause; log $log"
begun=$(date +%s)
status=0
COVE_E2E_DATA=$data COVE_E2E_REPEAT=$n COVE_PAUSE=snapshot \
	COVE_TEST_TEMPLATES=${COVE_TEST_TEMPLATES:-/var/lib/cove-test-templates} \
	go test -count=1 -v -timeout 4h -run "^($(IFS='|'; echo "${tests[*]}"))\$" ./test/e2e/ >"$log" 2>&1 || status=$?

all=0
for t in "${tests[@]}"; do
	pass=$(grep -cE "^    --- PASS: $t/attempt_[0-9]+_of_$n " "$log" || true)
	fail=$(grep -cE "^    --- FAIL: $t/attempt_[0-9]+_of_$n " "$log" || true)
	skip=$(grep -cE "^--- SKIP: $t " "$log" || true)
	if ((skip)); then
		echo "$t: skipped: $(grep -A1 -E "^--- SKIP: $t " "$log" | tail -1 | sed 's/^ *//')"
	else
		echo "$t: $pass/$n passed, $fail failed"
	fi
	all=$((all + pass))
done
echo "==> $all/$((3 * n)) attempts passed in $(($(date +%s) - begun)) s (go test exit $status)"
if ((all != 3 * n || status != 0)); then
	grep -E -- "--- FAIL|^\s+[a-z_]+_test.go:[0-9]+:" "$log" | head -40 >&2 || true
	exit 1
fi
