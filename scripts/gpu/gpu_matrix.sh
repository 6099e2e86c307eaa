#!/usr/bin/env bash
# The benchmark matrix on the GPU machine, in parts that each fit one device command.
#   source scripts/gpu/gpu_env.sh && bash scripts/gpu/gpu_matrix.sh PART
# PART: tiny (tiny at 512 and 1024, plus the extra variants at 512), small, big (base_plus,
# large). Rows are merged into $OUT/h200.json (seeded from benchmarks/results/h200.json).
set -euo pipefail
OUT=${OUT:-/tmp/out}
[ -e "$OUT/h200.json" ] || cp benchmarks/results/h200.json "$OUT/h200.json"
V4=official_eager,ours_eager,ours_graph,ours_graph_batched
rows() {  # rows MODELS RESES OBJECTS VARIANTS -> model@res:objects:variant;...
  local m r o v
  for m in ${1//,/ }; do for r in ${2//,/ }; do for o in ${3//,/ }; do for v in ${4//,/ }; do
    printf '%s@%s:%s:%s;' "$m" "$r" "$o" "$v"; done; done; done; done
}
case $1 in
  tiny) ONLY="$(rows tiny 512 1,3,10 $V4)tiny@512:1:ours_graph_noio;"
        ONLY+="tiny@512:1:ours_graph_compiled;tiny@512:10:ours_graph_batched_compiled;"
        ONLY+="$(rows tiny 1024 1,3,10 $V4)" ;;
  small) ONLY=$(rows small 512,1024 1,3,10 $V4) ;;
  big) ONLY=$(rows base_plus,large 512,1024 1,3,10 $V4) ;;
  *) ONLY=$1 ;;
esac
python3 -m tools.bench.cli --only "${ONLY%;}" --frames ${FRAMES:-30} \
  --slow-frames ${SLOW:-20} --warmup 16 --profile-frames ${PROF:-3} \
  --out "$OUT/h200.json" --table "$OUT/table.md" | grep -v '^{' | tail -n 60
