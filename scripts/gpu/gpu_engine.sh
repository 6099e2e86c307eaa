#!/usr/bin/env bash
# The engine's evidence in one device command (sized to fit one 10-minute command): GPU
# equivalence tests, the headline engine rows (one run), the interaction benchmark and two
# fresh starts. With 'precompile' (a second command of its own): the precompiled parts' GPU tests,
# fresh starts with them (the first compiles, the second loads) and the interaction rows.
#   source scripts/gpu/gpu_env.sh
#   SAM2_ROS_COMMIT=<sha> bash scripts/gpu/gpu_engine.sh [precompile]
# Writes $OUT/h200.json (+ h200_extra.json), h200_interaction.json, gpu_equivalence.json,
# startup rows in h200_extra.json; merge them into benchmarks/results/ with
# `python -m tools.bench.merge <the folder they came back to>`.
set -uo pipefail
OUT=${OUT:-/tmp/out}
export OUT
if [ "${1:-}" = precompile ]; then
  python3 -m pytest -q test/gpu/test_precompiled_gpu.py -m gpu -rf --tb=line -p no:warnings \
    2>&1 | grep -E '^(FAILED|ERROR)|passed|failed' 
  [ -e out/gpu_equivalence.json ] && cp out/gpu_equivalence.json "$OUT/"
  for m in "tiny 512" "large 1024"; do
    set -- $m
    python3 -m tools.bench.startup --model $1 --res $2 --starts 2 \
      --precompile encoder,heads --out "$OUT/h200_extra.json" 2>&1 | grep '^start'
  done
  python3 -m tools.bench.interaction --model tiny --res 512 --objects 1,3,10 \
    --variants batched --precompile encoder,heads --random-weights \
    --out "$OUT/h200_interaction.json" 2>&1 | grep '^|'
  exit 0
fi
if [ "${ENGINE_TESTS:-1}" = 1 ]; then    # ENGINE_TESTS=0: benchmarks only (tests separately)
  # the log in $OUT, the failing tests' names and the summary printed (a long tail of warnings
  # must not hide which test failed)
  python3 -m pytest -q test/gpu/test_graphs_gpu.py test/gpu/test_multistream_gpu.py \
    test/gpu/test_fused_kernels_gpu.py test/gpu/test_fused_fpn_gpu.py \
    test/gpu/test_fused_graphs_gpu.py -m gpu -k "not compiled" -rf --tb=line -p no:warnings \
    > "$OUT/engine_pytest.log" 2>&1
  grep -E '^(FAILED|ERROR)|^/.*(Error|assert)' "$OUT/engine_pytest.log" | cut -c1-300
  tail -n 1 "$OUT/engine_pytest.log"
  [ -e out/gpu_equivalence.json ] && cp out/gpu_equivalence.json "$OUT/"
fi
T=tiny@512; L=large@1024
# the targets' rows and each fast path's off switch beside it (same run)
ONLY="$T:1:official_eager;$T:1:ours_graph_batched;$T:1:ours_graph_batched_unfused;"
ONLY+="$T:1:ours_graph;$T:3:ours_graph_batched;$T:10:official_eager;$T:10:ours_graph_batched;"
ONLY+="$T:10:ours_graph_batched_unfused;$L:1:official_eager;$L:1:ours_graph;$L:1:ours_graph_unfused"
python3 -m tools.bench.cli --only "$ONLY" --frames 30 --slow-frames 20 --warmup 16 \
  --profile-frames 3 --census --out "$OUT/h200.json" | grep -E '^\||^census|FAILED'
python3 -m tools.bench.interaction --model tiny --res 512 --objects 1,3,8 \
  --variants batched --corrections immediate,deferred --random-weights \
  --out "$OUT/h200_interaction.json" 2>&1 |
  grep '^|'
for m in "tiny 512" "large 1024"; do
  set -- $m
  python3 -m tools.bench.startup --model $1 --res $2 --starts 2 \
    --out "$OUT/h200_extra.json" 2>&1 | grep '^start'
done
