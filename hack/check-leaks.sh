#!/usr/bin/env bash
# Fails if any process that an e2e test started is still running. Every such
# process has the test binary's temporary folder, named helm-locker-e2e-*, in
# its arguments.
set -uo pipefail
# Give processes killed by the kernel a moment to be reaped.
for _ in 1 2 3 4 5 6 7 8 9 10; do
  pgrep -f 'helm-locker-e2e-' >/dev/null || { echo "check-leaks: no test process left running"; exit 0; }
  sleep 0.5
done
echo "check-leaks: processes left running by the tests:" >&2
pgrep -af 'helm-locker-e2e-' >&2
exit 1
