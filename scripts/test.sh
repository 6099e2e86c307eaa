#!/usr/bin/env bash
# Run the test suite in the venv made by scripts/setup.sh (GPU tests deselected), on
# TEST_WORKERS pytest-xdist workers (default 3, one more than CI's 2 cores: many tests wait on
# node processes and DDS, and a third worker fills that time; 0: one process), a test module per
# worker at a time (--dist loadscope: module fixtures such as a shared node stay in one process;
# every ROS test leases a ROS domain of its own, so workers never see each other's nodes).
# Extra arguments go to both pytest runs, e.g.  bash scripts/test.sh -k messages -x
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
V=${V:-.venv}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST PYTHONUNBUFFERED=1 TQDM_DISABLE=1
# The tests of the ros2 / colcon command-line tools run in a pytest process of their own (in a
# worker that had run hundreds of other tests, `ros2 launch` ignored the SIGINT of their Ctrl-C
# checks), alongside the workers: they mostly wait on process starts, discovery and the
# compiler, using about one core, so side by side they fill the workers' idle time instead of
# adding their own. Their output follows the workers'. ROS_CLI_AFTER=1 runs them afterwards.
cli_out=$(mktemp -d)
trap 'rm -rf "$cli_out"' EXIT
cli_tests() {
  "$V/bin/python" -m pytest -q -m "ros_cli and not gpu" -n 0 --basetemp "$cli_out/tmp" \
    -p no:cacheprovider test "$@"
}
if [ "${ROS_CLI_AFTER:-0}" = 1 ]; then
  cli_pid=
else
  cli_tests "$@" > "$cli_out/log" 2>&1 &
  cli_pid=$!
  trap 'kill "$cli_pid" 2>/dev/null; rm -rf "$cli_out"' EXIT
fi
"$V/bin/python" -m pytest -q -m "not gpu and not ros_cli" -n "${TEST_WORKERS:-3}" \
  --dist loadscope test "$@"
rc=$?
if [ -n "$cli_pid" ]; then
  wait "$cli_pid"
  rc2=$?
  echo "[test] the ros2 / colcon tests (run alongside):"
  cat "$cli_out/log"
else
  cli_tests "$@"
  rc2=$?
fi
[ $rc = 5 ] && echo "[test] pytest collected no tests: failing" >&2
# a second run that selects nothing (e.g. -k for other tests) is not a failure
[ $rc2 = 5 ] && rc2=0
[ $rc = 0 ] && rc=$rc2
exit $(( rc == 5 ? 1 : rc ))
