#!/usr/bin/env bash
# Run the test suite in the venv made by scripts/setup.sh (GPU tests deselected), on
# TEST_WORKERS pytest-xdist workers (default 2, CI's cores; 0: one process), a test module per
# worker at a time (--dist loadscope: module fixtures such as a shared node stay in one process;
# every ROS test leases a ROS domain of its own, so workers never see each other's nodes).
# Extra arguments go to pytest, e.g.  bash scripts/test.sh -k messages -x
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
V=${V:-.venv}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST PYTHONUNBUFFERED=1 TQDM_DISABLE=1
# The tests of the ros2 / colcon command-line tools run afterwards in a pytest process of their
# own: in a worker that had run hundreds of other tests, `ros2 launch` ignored the SIGINT of
# their Ctrl-C checks (they pass on their own, with or without workers).
"$V/bin/python" -m pytest -q -m "not gpu and not ros_cli" -n "${TEST_WORKERS:-2}" \
  --dist loadscope test "$@"
rc=$?
"$V/bin/python" -m pytest -q -m "ros_cli and not gpu" -n 0 test "$@"
rc2=$?
[ $rc = 5 ] && echo "[test] pytest collected no tests: failing" >&2
# a second run that selects nothing (e.g. -k for other tests) is not a failure
[ $rc2 = 5 ] && rc2=0
[ $rc = 0 ] && rc=$rc2
exit $(( rc == 5 ? 1 : rc ))
