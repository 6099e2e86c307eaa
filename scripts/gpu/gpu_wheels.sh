#!/usr/bin/env bash
# Build into .whl/ the pure-Python wheels the GPU machine lacks (it has torch, numpy, pillow, cv2,
# tqdm, PyYAML, pytest but no sam2 stack and cannot download): carry .whl to it and install there.
# Needs the venv from scripts/setup.sh (V=.venv).   usage: bash scripts/gpu/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
V=${V:-.venv}; W=.whl
WHEEL=("$V/bin/python" -m pip wheel -qq --no-deps --progress-bar off -w "$W")
mkdir -p "$W" && rm -f "$W"/*.whl   # ours only: .whl/ros/ holds the ROS wheels
# sam2 (no CUDA extension: it only does hole filling), built against the venv's torch
SAM2_BUILD_CUDA=0 "${WHEEL[@]}" --no-build-isolation sam2==1.1.0
"${WHEEL[@]}" hydra-core==1.3.8 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 iopath==0.1.10 portalocker
# SAM (segment-anything 1.0, pure Python) for the image-mode benchmark; its predictor and sam2's
# SAM2ImagePredictor import torchvision, which the GPU machine lacks: the binary wheel matching
# its torch 2.11 (CUDA 13, cp312) goes to .whl/gpu/, installed by scripts/gpu/gpu_image_mode.sh
"${WHEEL[@]}" segment-anything==1.0
mkdir -p "$W/gpu" && rm -f "$W"/gpu/*.whl
"$V/bin/python" -m pip download -qq --no-deps --progress-bar off --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d "$W/gpu" \
  torchvision==0.26.0
# sam2's sdist, to build it WITH its CUDA extension there (gpu_fidelity_holes.sh), and a
# setuptools wheel as its build backend for a host Python without one (not installed by
# gpu_env.sh: they live in subfolders)
mkdir -p "$W/sdist" "$W/build"
[ -e "$W/sdist/sam2-1.1.0.tar.gz" ] || SAM2_BUILD_CUDA=0 "$V/bin/python" -m pip download -qq \
  --no-deps --no-binary :all: --no-build-isolation -d "$W/sdist" sam2==1.1.0
ls "$W"/build/setuptools-*.whl >/dev/null 2>&1 || "$V/bin/python" -m pip download -qq --no-deps \
  --only-binary :all: -d "$W/build" setuptools==79.0.1
# our package (the GPU machine has no ROS: only the tracker core, benchmarks and CLI are used there)
src=$(mktemp -d) && cp -r setup.py sam2_ros "$src"   # build outside the tree: no build/ left here
"${WHEEL[@]}" --no-build-isolation --use-pep517 "$src" && rm -rf "$src"
# every wheel must be pure Python (the GPU machine runs another Python version)
bad=$(ls "$W"/*.whl | grep -v -- '-py3-none-any\.whl$' || true)
[ -z "$bad" ] || { echo "[gpu_wheels] not pure-Python: $bad" >&2; exit 1; }
ls -s "$W"
echo "[gpu_wheels] $(du -sh "$W" | cut -f1) in $W; on the device machine (carry $W):"
echo "python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $W/*.whl"
