#!/usr/bin/env bash
# official_vos (SAM 2's vos_optimized: torch.compile max-autotune of every component) compiles
# for longer than one device command may run, so it runs in the background and is polled.
# ROW picks another long-compiling row, e.g. ROW=tiny@512:1:ours_graph_autotuned; THEN is a
# command run after it in the same background job, with the same inductor cache, e.g.
# THEN='python3 -m pytest -m gpu test/gpu/test_autotune_gpu.py' (its records go to $D).
#   GPU=1 bash scripts/gpu/gpu_vos_bg.sh start     # after `source scripts/gpu/gpu_env.sh`
#   bash scripts/gpu/gpu_vos_bg.sh status [OUT]    # progress line; copies log + JSON to OUT
#   bash scripts/gpu/gpu_vos_bg.sh stop
set -euo pipefail
D=${VOS_DIR:-/tmp/vos}
case ${1:-status} in
  start)
    mkdir -p "$D/cache"
    date +%s >"$D/start"
    CUDA_VISIBLE_DEVICES=${GPU:-1} TORCHINDUCTOR_CACHE_DIR=$D/cache \
      TORCHINDUCTOR_COMPILE_THREADS=${THREADS:-12} \
      OUT=$D ROW=${ROW:-tiny@512:1:official_vos} THEN=${THEN:-true} \
      setsid nohup bash -c 'python3 -m tools.bench.cli --only "$ROW" --frames 40 \
        --warmup 16 --profile-frames 5 --out "$OUT/vos.json"; eval "$THEN"' \
      >"$D/log" 2>&1 </dev/null &
    echo $! >"$D/pid"
    echo "${ROW:-tiny@512:1:official_vos} started (pid $(cat "$D/pid"), GPU ${GPU:-1})" ;;
  status)
    s=$(( $(date +%s) - $(cat "$D/start") ))
    state=finished
    kill -0 "$(cat "$D/pid")" 2>/dev/null && state=running
    echo "background row $state after ${s}s: $(grep -c '^AUTOTUNE' "$D/log" || true) autotune" \
      "rounds, $(find "$D/cache" -name '*.py' | wc -l) generated kernel files," \
      "$(du -sh "$D/cache" | cut -f1) cache"
    tail -n 3 "$D/log"
    if [ -n "${2:-}" ]; then
      mkdir -p "$2" && cp "$D/log" "$2/vos.log" && echo "$state ${s}s" >"$2/vos_state.txt"
      cp "$D"/*.json "$2/" 2>/dev/null || true
    fi ;;
  stop)
    kill -- -"$(cat "$D/pid")" 2>/dev/null || true ;;
esac
