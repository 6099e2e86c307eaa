#!/usr/bin/env bash
# Fidelity against an official sam2 install WITH its CUDA extension (sam2._C, hole filling), on
# the GPU machine (carry .whl): builds sam2 1.1.0 from its sdist with SAM2_BUILD_CUDA=1 against
# the host's torch and nvcc into /tmp/site_c (ahead of the pure-Python sam2 on PYTHONPATH), then
# runs test/gpu/test_fidelity_gpu.py. Results: $OUT/gpu_fidelity.json,
# $OUT/h200_equivalence_rows.json, the pytest log $OUT/fidelity_pytest.log.
#   bash scripts/gpu/gpu_fidelity_holes.sh
# Needs, made here:  .venv/bin/pip download --no-deps --no-binary :all: --no-build-isolation \
#   sam2==1.1.0 -d .whl/sdist   and   .venv/bin/pip download --no-deps --only-binary :all: \
#   setuptools==79.0.1 -d .whl/build   (setuptools only for a host Python without it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/gpu_env.sh        # pure-Python wheels into /tmp/site, PYTHONPATH, OUT
SDIST=$(ls .whl/sdist/sam2-1.1.0.tar.gz)
SITE_C=/tmp/site_c
t0=$SECONDS
if [ ! -e "$SITE_C/.built" ]; then
  if ! python3 -c 'import setuptools' 2>/dev/null; then       # build backend, offline
    python3 -m pip install -q --no-index --no-deps --target /tmp/build_deps .whl/build/*.whl
    export PYTHONPATH=/tmp/build_deps:$PYTHONPATH
  fi
  command -v nvcc >/dev/null || export PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH
  nvcc --version | tail -n 2
  # H200 only (sm_90): one architecture keeps the build short; a failed build must
  # fail here, not leave sam2 silently without its extension (SAM2_BUILD_ALLOW_ERRORS=0)
  SAM2_BUILD_CUDA=1 SAM2_BUILD_ALLOW_ERRORS=0 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} \
    MAX_JOBS=${MAX_JOBS:-8} python3 -m pip wheel -q --no-deps --no-index --no-build-isolation \
    -w /tmp/sam2_c_wheel "$SDIST"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE_C" \
    /tmp/sam2_c_wheel/sam2-1.1.0-*.whl
  touch "$SITE_C/.built"
fi
export PYTHONPATH=$SITE_C:$PYTHONPATH
python3 -c 'import torch, sam2._C; print("[fidelity] sam2 with _C:", sam2._C.__file__)'
echo "[fidelity] build $((SECONDS - t0)) s"
rc=0
python3 -m pytest -q -p no:cacheprovider -m gpu test/gpu/test_fidelity_gpu.py -s -rfE \
  > "$OUT/fidelity_pytest.log" 2>&1 || rc=$?
grep -E '^official_C|Error|assert' "$OUT/fidelity_pytest.log" | cut -c1-400 | tail -n 30 || true
tail -n 5 "$OUT/fidelity_pytest.log"
echo "[fidelity] pytest exit $rc, total $((SECONDS - t0)) s; log and JSON in $OUT"
python3 - <<'EOF' || true
import json, os
d = json.load(open(os.path.join(os.environ['OUT'], 'h200_equivalence_rows.json')))
for k, v in d.items():
    if k.startswith('official_C'):
        print(f"{k:26s} logits {v['worst'].get('logits')!s:.10} prompt "
              f"{v['worst'].get('prompt_logits')!s:.10} fill-mismatch px "
              f"{v['fill_mismatch_px']} hole px {v['official_hole_px']} bitwise {v['bitwise']}")
    elif not k.startswith('_'):
        print(k, v)
EOF
exit $rc
