#!/usr/bin/env bash
# On the offline GPU machine, from the repo root: a venv $V that sees the host's torch, numpy...,
# with the carried wheels ($WHL/ros/*.whl from scripts/gpu/gpu_ros_wheels.sh, and $WHL/*.whl: sam2,
# hydra, ...) and our messages built into it, as setup.sh's ros() and msgs() steps do.
# usage: [V=/tmp/rosv] [PYTHON=python3] [WHL=.whl] bash scripts/gpu/gpu_ros_setup.sh
# then:  PYTHONPATH=$PWD:/tmp/site /tmp/rosv/bin/python -m tools.bench.node_latency ...
# (after `source scripts/gpu/gpu_env.sh`, pip sees sam2 & co. in /tmp/site and skips them here,
#  so /tmp/site must stay on PYTHONPATH)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
V=$(realpath -m "${V:-/tmp/rosv}"); PYTHON=${PYTHON:-python3}; WHL=${WHL:-$ROOT/.whl}
T0=$SECONDS; T=$SECONDS
step() { echo "[gpu_ros_setup] $1: $((SECONDS - T))s"; T=$SECONDS; }
trap 'rc=$?; [ $rc = 0 ] || echo "[gpu_ros_setup] FAILED (exit $rc)" >&2' EXIT

# Host packages stay visible: --system-site-packages, and a .pth adding the host's site dirs
# (for a host python that is itself a venv). No ensurepip there: the host's pip does the job.
"$PYTHON" -m venv --clear --system-site-packages "$V" 2>/dev/null ||
  "$PYTHON" -m venv --clear --system-site-packages --without-pip "$V"
PY=$V/bin/python
SP=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
HOST=$("$PYTHON" -c "import sys; print([p for p in sys.path if p.endswith('-packages')])")
"$PY" -c "import sys; d = [p for p in $HOST if p not in sys.path]
d and print(f'import site; list(map(site.addsitedir, {d!r}))')" >"$SP/_host_site.pth"
"$PY" -c "import numpy, yaml, setuptools, packaging, typing_extensions" ||
  { echo "[gpu_ros_setup] the host python lacks a package named above" >&2; exit 1; }
step venv

# not a sam2_ros wheel (scripts/gpu/gpu_wheels.sh makes one): our source tree is used, on
# PYTHONPATH
shopt -s nullglob; W=()
for w in "$WHL"/ros/*.whl "$WHL"/*.whl; do [[ $w == */sam2_ros-* ]] || W+=("$w"); done
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile "${W[@]}"
step "install ${#W[@]} wheels"

# As setup.sh ros(): the exported CMake files name the wheel build machine's Python/numpy headers.
PYINC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
NPINC=$("$PY" -c "import numpy; print(numpy.get_include())")
[ -f "$PYINC/Python.h" ] || { echo "[gpu_ros_setup] no $PYINC/Python.h" >&2; exit 1; }
O='/opt/python/cp3[0-9]*-cp3[0-9]*'
{ grep -rl '/opt/python/cp3' "$V/share" --include='*.cmake' || true; } | xargs -r sed -i \
  -e "s#$O/lib/python3\.[0-9]*/site-packages/numpy/_core/include#$NPINC#g" \
  -e "s#$O/include/python3\.[0-9]*#$PYINC#g"

# As setup.sh msgs(): build msg/*.msg into the venv prefix, then drop the generated
# sam2_ros/__init__.py and egg-info so that our sam2_ros (on PYTHONPATH) extends its __path__.
B=$(mktemp -d)
(export PATH="$V/bin:$PATH" AMENT_PREFIX_PATH="$V" CMAKE_PREFIX_PATH="$V"
  cmake -S "$ROOT" -B "$B" -G Ninja -Wno-dev -DCMAKE_INSTALL_PREFIX="$V" -DBUILD_TESTING=OFF \
    -DPython3_EXECUTABLE="$PY" -DSAM2_ROS_INSTALL_PYTHON=OFF >"$B/log" 2>&1 &&
  cmake --build "$B" >>"$B/log" 2>&1 && cmake --install "$B" >>"$B/log" 2>&1) ||
  { tail -n 40 "$B/log" >&2; echo "[gpu_ros_setup] message build failed: $B/log" >&2; exit 1; }
rm -rf "$B" "$SP/sam2_ros/__init__.py" "$SP/sam2_ros/__pycache__" "$SP"/sam2_ros-*.egg-info
step msgs

(cd / && PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} "$PY" -c "import rclpy, cv_bridge, sam2_ros.ros.node
from rclpy.serialization import serialize_message as ser
from sam2_ros.msg import Prompt, TrackingState
from sensor_msgs.msg import Image
[ser(m()) for m in (Prompt, TrackingState, Image)]  # loads the compiled type support
import sam2_ros; assert sam2_ros.__file__ == '$ROOT/sam2_ros/__init__.py', sam2_ros.__file__")
step check
echo "[gpu_ros_setup] ready in $((SECONDS - T0))s: $V ($(du -sh "$V" | cut -f1))"
