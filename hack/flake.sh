#!/usr/bin/env bash
# Runs the e2e suite RUNS times in a row (default 5), as `make test-e2e`
# runs it, and prints each test that failed with the number of runs it
# failed in, then how many runs passed. Exits non-zero if any run failed.
# Extra arguments go to `go test` (E2E_FLAGS in the Makefile), e.g.
# -run TestShard to repeat a few tests.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${1:-5}
shift || true
bin=$(bash "$ROOT/hack/tools.sh") || exit 1
export HELM_LOCKER_TOOLS_BIN=$bin
LOGS=$(mktemp -d)
declare -A failed
passed=0
for run in $(seq 1 "$RUNS"); do
  log=$LOGS/run-$run.log
  start=$SECONDS
  status=0
  (cd "$ROOT" && go test -count=1 -timeout 45m -parallel 6 "$@" ./e2e/...) >"$log" 2>&1 || status=$?
  bash "$ROOT/hack/check-leaks.sh" >>"$log" 2>&1 || { status=1; echo "--- FAIL: processes-left-running" >>"$log"; }
  # A test that failed, or a subtest; a package that failed without
  # naming a test (a panic, the timeout) counts as the package.
  tests=$(grep -oE -- '--- FAIL: [^ ]+' "$log" | sed 's/--- FAIL: //' | sort -u)
  if [ "$status" -ne 0 ] && [ -z "$tests" ]; then
    tests=$(grep -oE '^FAIL[[:space:]]+[^ ]+' "$log" | awk '{print "(package " $2 ")"}' | sort -u)
  fi
  for t in $tests; do failed[$t]=$(( ${failed[$t]:-0} + 1 )); done
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    echo "flake: run $run of $RUNS passed in $((SECONDS - start))s"
  else
    echo "flake: run $run of $RUNS failed in $((SECONDS - start))s; its log is $log"
  fi
done
for t in "${!failed[@]}"; do echo "${failed[$t]} $t"; done | sort -k1,1nr -k2 | awk -v runs="$RUNS" '{print "flake: " $2 " failed in " $1 " of " runs " runs"}'
echo "flake: $passed of $RUNS runs passed"
[ "$passed" -eq "$RUNS" ]
