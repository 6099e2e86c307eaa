#!/usr/bin/env bash
# Run the test suite in the venv made by scripts/setup.sh (GPU tests deselected).
# Extra arguments go to pytest, e.g.  bash scripts/test.sh -k messages -x
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
V=${V:-.venv}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST PYTHONUNBUFFERED=1 TQDM_DISABLE=1
"$V/bin/python" -m pytest -q -m "not gpu" test "$@"
rc=$?
[ $rc = 5 ] && echo "[test] pytest collected no tests: failing" >&2
exit $(( rc == 5 ? 1 : rc ))
