#!/usr/bin/env bash
# One-command setup: a venv with PyTorch, SAM 2, ROS 2 Kilted (PyPI wheels), our messages and
# sam2_ros installed editable.   usage: [V=.venv] [VARIANT=cpu|cuda] [PYTHON=python3] bash scripts/setup.sh
# Idempotent: each step leaves a stamp keyed on its own code and inputs; a re-run skips done steps.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
V=$(realpath -m "${V:-$ROOT/.venv}"); VARIANT=${VARIANT:-cpu}; PYTHON=${PYTHON:-python3}
STAMPS=$V/.setup-stamps; PIP=("$V/bin/python" -m pip install -qq --progress-bar off)
T0=$SECONDS
trap 'rc=$?; [ $rc = 0 ] || echo "[setup] FAILED (exit $rc) after $((SECONDS - T0))s" >&2' EXIT

# run_step NAME [INPUT FILE...]: run function NAME unless its stamp (code, inputs, variant, repo path) exists
run_step() {
  local name=$1 key s=$SECONDS; shift
  key=$({ declare -f "$name"; echo "$VARIANT $ROOT"; cat "$@"; } | sha256sum | cut -c1-16)
  if [ -e "$STAMPS/$name.$key" ]; then echo "[setup] $name: up to date"; return; fi
  rm -f "$STAMPS/$name".*
  "$name"
  mkdir -p "$STAMPS" && touch "$STAMPS/$name.$key"
  echo "[setup] $name: $((SECONDS - s))s"
}

tools() {  # build tools for the messages (present on project machines; Debian packages otherwise)
  local missing=()
  for t in cmake ninja g++; do command -v $t >/dev/null || missing+=("$t"); done
  [ ${#missing[@]} = 0 ] && return
  echo "[setup] installing ${missing[*]} from Debian" >&2
  apt-get update -qq && apt-get install -y -qq cmake ninja-build g++ >/dev/null
}

venv() { "$PYTHON" -m venv "$V"; }

torch() {  # cpu: the CPU build (small, enough for the tests); cuda: the CUDA build (several GB)
  if [ "$VARIANT" = cuda ]; then "${PIP[@]}" torch==2.14.1 torchvision==0.29.1
  else "${PIP[@]}" torch==2.13.0; fi
}

python_deps() {
  "${PIP[@]}" 'setuptools>=70,<80' wheel numpy pyyaml hydra-core 'omegaconf<2.4' iopath tqdm pillow \
    'opencv-python-headless<5' triton==3.6.0 cv-bridge==1.13.0.post0 rosbags pytest pytest-xdist hypothesis scipy
}

sam2() {  # no build isolation: it would pull a multi-GB torch (and torchvision would replace ours)
  SAM2_BUILD_CUDA=0 "${PIP[@]}" --no-build-isolation --no-deps sam2==1.1.0
}

ros() {  # ROS 2 Kilted wheels: runtime + the rosidl build set
  "${PIP[@]}" ros-kilted-rclpy ros-kilted-rmw-fastrtps-cpp ros-kilted-std-msgs ros-kilted-sensor-msgs \
    ros-kilted-geometry-msgs ros-kilted-diagnostic-msgs ros-kilted-ament-cmake \
    ros-kilted-ament-cmake-python ros-kilted-ament-cmake-include-directories \
    ros-kilted-ament-cmake-ros-core ros-kilted-ament-package ros-kilted-rosidl-default-generators \
    ros-kilted-rosidl-core-generators ros-kilted-rosidl-default-runtime catkin-pkg
  # The wheels' exported CMake files point at the wheel build machine's Python and numpy headers.
  local pyinc npinc
  pyinc=$("$V/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  npinc=$("$V/bin/python" -c "import numpy; print(numpy.get_include())")
  { grep -rl '/opt/python/cp3' "$V/share" --include='*.cmake' || true; } | xargs -r sed -i \
    -e "s#/opt/python/cp3[0-9]*-cp3[0-9]*/lib/python3\.[0-9]*/site-packages/numpy/_core/include#$npinc#g" \
    -e "s#/opt/python/cp3[0-9]*-cp3[0-9]*/include/python3\.[0-9]*#$pyinc#g"
}

msgs() (  # generate + compile msg/*.msg, srv/*.srv into the venv prefix (see CMakeLists.txt)
  local b sp
  b=$(mktemp -d)
  export PATH="$V/bin:$PATH" AMENT_PREFIX_PATH="$V" CMAKE_PREFIX_PATH="$V"
  cmake -S "$ROOT" -B "$b" -G Ninja -Wno-dev -DCMAKE_INSTALL_PREFIX="$V" -DBUILD_TESTING=OFF \
    -DPython3_EXECUTABLE="$V/bin/python" -DSAM2_ROS_INSTALL_PYTHON=OFF >"$b/log" 2>&1 &&
    cmake --build "$b" >>"$b/log" 2>&1 && cmake --install "$b" >>"$b/log" 2>&1 ||
    { tail -n 40 "$b/log" >&2; echo "[setup] message build failed, log: $b/log" >&2; return 1; }
  rm -rf "$b"
  # Our editable sam2_ros must come first on import: drop the generated (empty) __init__.py, which
  # would make site-packages/sam2_ros a regular package shadowing ours (our __init__ extends
  # __path__ to it), and the generated egg-info, which pip would "uninstall" with the whole folder.
  sp=$("$V/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  rm -rf "$sp/sam2_ros/__init__.py" "$sp/sam2_ros/__pycache__" "$sp"/sam2_ros-*.egg-info
)

editable() {  # our code, editable: a .pth puts the repo root on sys.path; console scripts in $V/bin
  "${PIP[@]}" --no-deps --no-build-isolation --use-pep517 -e "$ROOT" \
    --config-settings editable_mode=compat
}

ros_layout() {  # what colcon installs besides the Python package, so `ros2 launch sam2_ros ...`
  # and `ros2 run sam2_ros ...` work from this venv: share/sam2_ros/{launch,config} (per-file
  # symlinks to the repo, like `colcon build --symlink-install`: ros2 launch does not follow a
  # symlinked folder) and lib/sam2_ros/<executable> wrappers, named as CMakeLists.txt names them.
  local d f ep
  for d in launch config; do
    rm -rf "${V:?}/share/sam2_ros/$d" && mkdir -p "$V/share/sam2_ros/$d"
    for f in "$ROOT/$d"/*; do [ -f "$f" ] && ln -s "$f" "$V/share/sam2_ros/$d/"; done
  done
  rm -rf "$V/lib/sam2_ros" && mkdir -p "$V/lib/sam2_ros"
  for ep in $(grep -o '"[a-z_]*=sam2_ros\.[a-z_.]*"' "$ROOT/CMakeLists.txt" | tr -d '"'); do
    printf '#!%s\nimport sys\nfrom %s import main\nsys.exit(main())\n' "$V/bin/python" "${ep#*=}" \
      >"$V/lib/sam2_ros/${ep%%=*}"
    chmod +x "$V/lib/sam2_ros/${ep%%=*}"
  done
}

colcon() {  # colcon-common-extensions: the workspace build a ROS user runs (`colcon build`),
  # tested from a scratch workspace by test/ros/test_ros_colcon.py (colcon-core needs setuptools<80)
  "${PIP[@]}" colcon-common-extensions
}

ros_cli() {  # optional: ROS 2 launch + the ros2 CLI from the offline bundle beside the repo
  bash "$ROS_CLI/install.sh" "$V"
}

tools
[ -x "$V/bin/python" ] || venv
run_step torch
run_step python_deps
run_step sam2
run_step ros
run_step msgs "$ROOT"/msg/*.msg "$ROOT"/srv/*.srv "$ROOT/CMakeLists.txt" "$ROOT/package.xml"
run_step editable "$ROOT/setup.py"
run_step ros_layout "$ROOT/CMakeLists.txt" <(ls "$ROOT/launch" "$ROOT/config")
run_step colcon
# ../shared/ros_cli (launch, launch_ros, the ros2 CLI; not on PyPI) when present; without it the
# tests that run `ros2 launch` / `ros2 ...` skip and say why. Its own stamp makes a re-run skip it.
ROS_CLI=${ROS_CLI:-$ROOT/../shared/ros_cli}
if [ -f "$ROS_CLI/install.sh" ]; then ros_cli
else echo "[setup] ros_cli: $ROS_CLI absent, ros2 launch/CLI not installed"; fi
# Always check the result, from outside the repo so that only the installed paths count.
(cd / && "$V/bin/python" -c "import sam2_ros.engine.config, sam2_ros.msg, rclpy, torch, sam2, cv2
from sam2_ros.msg import Prompt, TrackingState
assert sam2_ros.__file__ == '$ROOT/sam2_ros/__init__.py', sam2_ros.__file__")
echo "[setup] ready in $((SECONDS - T0))s: $V ($(du -sh "$V" | cut -f1))"
