#!/usr/bin/env bash
# Download the ROS 2 Kilted wheels the offline GPU machine lacks (the ros() step of setup.sh,
# cv-bridge and their whole dependency closure) for CPython $PYVER / manylinux x86_64 into $OUT;
# scripts/gpu/gpu_ros_setup.sh installs them there. Left out, as that machine has them: numpy,
# PyYAML, setuptools, packaging, typing-extensions (and torch, OpenCV: nothing here needs them).
# usage: [PYVER=3.12] [OUT=.whl/ros] [PYTHON=python3] bash scripts/gpu/gpu_ros_wheels.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYVER=${PYVER:-3.12}; OUT=$(realpath -m "${OUT:-$ROOT/.whl/ros}"); PYTHON=${PYTHON:-python3}
SKIP='numpy pyyaml setuptools packaging typing-extensions'
ROOTS=(ros-kilted-rclpy ros-kilted-rmw-fastrtps-cpp ros-kilted-std-msgs ros-kilted-sensor-msgs
  ros-kilted-geometry-msgs ros-kilted-diagnostic-msgs ros-kilted-ament-cmake
  ros-kilted-ament-cmake-python ros-kilted-ament-cmake-include-directories
  ros-kilted-ament-cmake-ros-core ros-kilted-ament-package ros-kilted-rosidl-default-generators
  ros-kilted-rosidl-core-generators ros-kilted-rosidl-default-runtime catkin-pkg
  cv-bridge==1.13.0.post0)
TARGET=(--only-binary=:all: --python-version "$PYVER" --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform any)
PIP=("$PYTHON" -m pip -q --disable-pip-version-check)
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT; T0=$SECONDS

# empy is an sdist only: build its (pure-Python) wheel, offered to the resolver below.
"${PIP[@]}" wheel --no-deps -w "$T/dl" empy
# Resolve the closure for the target interpreter without installing, then download it less SKIP.
"${PIP[@]}" install --dry-run --ignore-installed --target "$T/none" --report "$T/report.json" \
  --find-links "$T/dl" "${TARGET[@]}" "${ROOTS[@]}"
"$PYTHON" - "$T/report.json" "$SKIP" >"$T/reqs.txt" <<'EOF'
import json, re, sys
skip = sys.argv[2].split()
for item in json.load(open(sys.argv[1]))['install']:
    name, version = item['metadata']['name'], item['metadata']['version']
    if re.sub(r'[-_.]+', '-', name).lower() not in skip + ['empy']:
        print(f'{name}=={version}')
EOF
"${PIP[@]}" download --no-deps -d "$T/dl" "${TARGET[@]}" -r "$T/reqs.txt"

mkdir -p "$OUT" && rm -f "$OUT"/*.whl && mv "$T"/dl/*.whl "$OUT"/
echo "[gpu_ros_wheels] $(find "$OUT" -name '*.whl' | wc -l) wheels for cp${PYVER/./}," \
  "$(du -sh "$OUT" | cut -f1) in $OUT ($((SECONDS - T0))s)"
