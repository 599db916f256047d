#!/usr/bin/env bash
# Runs the test suite while busy loops keep the CPUs loaded, the way a shared
# CI machine or a developer's laptop mid-build is: a test that passes only on
# an idle machine fails here. The exit status is the suite's.
#
#   scripts/stress-test.sh [vitest arguments…]      (default: the whole suite, npm test)
#
#   STRESS_HOGS      busy processes to start (default: the number of CPUs)
#   STRESS_MAX_SECS  the most a hog lives, even if this script is killed (default 3600)
#
# The hogs are this script's own children: it remembers their pids and kills
# exactly those on exit (normal, error, Ctrl-C, SIGTERM); each also ends by
# itself after STRESS_MAX_SECS, so a SIGKILLed script leaves nothing running
# for long.
set -u

cd "$(dirname "$0")/.."

hogs="${STRESS_HOGS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}"
max_secs="${STRESS_MAX_SECS:-3600}"
case "$hogs" in '' | *[!0-9]*) echo "STRESS_HOGS must be a number" >&2; exit 2 ;; esac
case "$max_secs" in '' | *[!0-9]*) echo "STRESS_MAX_SECS must be a number" >&2; exit 2 ;; esac

pids=()
stop_hogs() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  pids=()
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for ((i = 0; i < hogs; i++)); do
  # A busy loop in a shell of its own that checks the clock now and then:
  # bounded in time whatever happens to this script.
  bash -c 'end=$((SECONDS + $1)); while ((SECONDS < end)); do for ((j = 0; j < 100000; j++)); do :; done; done' hog "$max_secs" &
  pids+=("$!")
done
echo "stress-test: ${#pids[@]} busy loops (pids ${pids[*]}), at most ${max_secs}s each" >&2

if [ "$#" -gt 0 ]; then
  npx vitest run "$@"
else
  npm test
fi
status=$?
stop_hogs
echo "stress-test: suite exited $status" >&2
exit "$status"
