#!/usr/bin/env bash
# Image mode against SAM on the GPU machine (sized for one 10-minute device command):
#   source scripts/gpu/gpu_env.sh && SAM2_ROS_COMMIT=<hash> bash scripts/gpu/gpu_image_mode.sh
# Needs .whl/ from scripts/gpu/gpu_wheels.sh (segment-anything is among the pure-Python wheels;
# torchvision, which sam2's and SAM's image predictors import, is a binary wheel for the GPU
# machine's torch in .whl/gpu/). First the exact-preprocessing tests and image mode against the
# real SAM2ImagePredictor (test/gpu/test_image_gpu.py, $OUT/gpu_image.json) on the GPU, then the
# benchmark: ours / SAM2ImagePredictor (SAM 2.1 tiny..large) / SamPredictor (ViT-B/L/H) at
# 1024 px, 1 and 8 box prompts, bf16 and fp32, and the resize-alone rows. Rows are saved one by
# one into $OUT/h200_image.json, so a run cut short by TIME keeps what it measured.
set -uo pipefail
OUT=${OUT:-/tmp/out}
if [ ! -e /tmp/site/.installed_gpu ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/gpu/*.whl &&
    touch /tmp/site/.installed_gpu
fi
python3 -c "import torch, torchvision, segment_anything; print('torch', torch.__version__,
'torchvision', torchvision.__version__, torch.cuda.get_device_name())"
timeout 240 python3 -m pytest -q -m gpu test/engine/test_preprocess.py test/gpu/test_image_gpu.py \
  2>&1 | tail -n 15
# the blog's comparison first (sam2's predictor, SAM), ours last: a run cut short keeps those
timeout ${TIME:-360} python3 -m tools.bench.image_mode --res 1024 --prompts 1,8 \
  --variants sam2_predictor,sam,ours --precision bf16,fp32 --images ${IMAGES:-50} --warmup 5 \
  --profile-images 3 --preprocess --out "$OUT/h200_image.json" | grep -v '^{' | tail -n 70
rc=${PIPESTATUS[0]}
rows=$(python3 -c "import json; print(len(json.load(open('$OUT/h200_image.json'))))" 2>/dev/null)
echo "[gpu_image_mode] benchmark exit $rc (124: cut short by TIME);" \
  "rows in $OUT/h200_image.json: $rows"
