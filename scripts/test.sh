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
"$V/bin/python" -m pytest -q -m "not gpu" -n "${TEST_WORKERS:-2}" --dist loadscope test "$@"
rc=$?
[ $rc = 5 ] && echo "[test] pytest collected no tests: failing" >&2
exit $(( rc == 5 ? 1 : rc ))
