#!/usr/bin/env bash
# A session's evidence in ONE device command (<= ~9 minutes, every part time-capped so a slow
# one cuts the next, never the whole): the fused kernels' GPU tests, the engine's headline rows
# with their off switch and the kernel census, the interaction rows (deferred and immediate
# corrections), image mode tiny/large against SAM2ImagePredictor (bf16), two fresh starts
# (warm configure), then the deferred-prompt and two-camera GPU tests. Each part logs to $OUT;
# failing tests are named. Each part's time cap is an environment variable, 0 skips it:
# FUSED_S (FUSED_TESTS: the test files or node ids, FUSED_K: a -k expression), ENGINE_S
# (ENGINE_ONLY: its rows instead of the default list),
# PACED_S (tiny x1 and x3 at 60 Hz against back to back, one run; PACED_EXTRA: more rows;
# KEEPER_US: e.g. 0,12000, each row also with the GPU clock keeper's spin after each frame),
# OVERLAY_S (tools.probes.overlay_probe: a two-camera step with overlays none/gpu/host beside),
# CORRECTION_S (tools.probes.correction_probe: a correction's cost, reuse of the frame's
# memory attention on and off), PROBE_S (tools.probes.interaction_frames_probe --trace:
# PROBE_OBJECTS, default 8, PROBE_WINDOW of frames, default 110-112, or PROBE_RUNS, a list of
# objects:window; PROBE_CORRECTIONS),
# SDPA_S (tools.probes.sdpa_probe: the attention backends and split-KV on a frame's shapes),
# VALUES_S (tools.probes.value_attention_probe: the 'memory_values' kernel against
# FlashAttention), LAUNCH_S (tools.probes.launch_probe at 1 object; LAUNCH_ARGS, e.g.
# "--only _pass_kernel --flag TAPS_FROM_FIRST=0,1"),
# INTERACTION_S (REUSE: its --reuse-attention, MERGE: its --merge-buckets, e.g. on,always,
# BESIDE: its --deferred-beside, default on each; INTERACTION_OBJECTS, default 1,3,8;
# CORRECTIONS, default immediate,deferred; INTERACTION_ARGS: more, e.g. --replay-at-capture 0),
# IMAGE_S, STARTUP_S (STARTUP_ARGS, e.g. --replay-at-capture 0). The logs come back as
# $OUT/quick_logs.tgz.
#   source scripts/gpu/gpu_env.sh && SAM2_ROS_COMMIT=<hash> bash scripts/gpu/gpu_quick.sh
# Then `python -m tools.bench.merge <the folder the files came back to>` and run
# `python -m tools.bench.report`. Triton's cache comes back as $OUT/triton_cache*.tar.xz:
# copied to .cache/ here and carried, the next machine skips the kernels' compilation
# (gpu_env.sh unpacks every .cache/triton_cache*).
set -uo pipefail
OUT=${OUT:-/tmp/out}; export OUT
T0=$(date +%s)
if [ ! -e /tmp/site/.installed_gpu ]; then    # torchvision (nvJPEG, sam2's image predictor)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/gpu/*.whl &&
    touch /tmp/site/.installed_gpu
fi
tests() {  # tests NAME SECONDS PYTEST-ARGS...
  local name=$1 secs=$2; shift 2
  timeout "$secs" python3 -m pytest -q -m gpu -rf --tb=line -p no:warnings -p no:cacheprovider \
    "$@" > "$OUT/pytest_$name.log" 2>&1
  echo "== tests $name (rc $?, $(( $(date +%s) - T0 )) s)"
  grep -E '^(FAILED|ERROR)|^/.*(Error|assert)' "$OUT/pytest_$name.log" | cut -c1-240 | head -12
  tail -n 1 "$OUT/pytest_$name.log" | cut -c1-200
}
on() { (( ${!1:-$2} > 0 )); }    # on VAR DEFAULT: the part's cap is above 0
G=test/gpu
FUSED_DEFAULT="$G/test_fused_kernels_gpu.py $G/test_fused_fpn_gpu.py"
FUSED_DEFAULT+=" $G/test_fused_upscaling_gpu.py $G/test_q_pool_gpu.py $G/test_fused_graphs_gpu.py"
FUSED_DEFAULT+=" $G/test_pointer_pos_gpu.py $G/test_window_attention_gpu.py"
FUSED_DEFAULT+=" $G/test_patch_embed_gpu.py $G/test_launch_recording_gpu.py"
FUSED_DEFAULT+=" $G/test_self_flash_gpu.py"
# the fused kernels under the precast_weights off switch (float32 weights, bf16 compute): a
# kernel out of shared memory there fell back to sam2's modules unnoticed until 2026-12-05
FUSED_DEFAULT+=" $G/test_graphs_gpu.py::test_precast_bitwise_equal_to_per_call_casts"
read -r -a FUSED_TESTS <<< "${FUSED_TESTS:-$FUSED_DEFAULT}"
on FUSED_S 200 && tests fused "${FUSED_S:-200}" "${FUSED_TESTS[@]}" ${FUSED_K:+-k "$FUSED_K"}
T=tiny@512; L=large@1024
PACED_EXTRA=${PACED_EXTRA:-$T:1:ours_graph_batched_cams2;$T:1:ours_graph_batched_received}
ONLY="$T:1:official_eager;$T:1:ours_graph_batched;$T:1:ours_graph_batched_unfused;"
ONLY+="$T:3:ours_graph_batched;$T:10:ours_graph_batched;$T:10:ours_graph_batched_unfused;"
ONLY+="$L:1:ours_graph;$L:1:ours_graph_unfused;"
ONLY+="$T:1:ours_graph_batched_cams2;$T:3:ours_graph_batched_cams2"   # a stereo node's step
ONLY+=";$T:1:ours_graph_batched_gelu;$T:10:ours_graph_batched_gelu;$L:1:ours_graph_gelu"   # opt-in
ONLY+=";$T:1:ours_graph_batched_winattn;$L:1:ours_graph_winattn;$L:1:ours_graph_optin"
ONLY=${ENGINE_ONLY:-$ONLY}     # another list of rows (the same syntax), e.g. for a short call
if on ENGINE_S 150; then
  timeout "${ENGINE_S:-150}" python3 -m tools.bench.cli --only "$ONLY" --frames 30 \
    --slow-frames 20 --warmup 16 --profile-frames 3 --census --out "$OUT/h200.json" \
    > "$OUT/engine.log" 2>&1
  echo "== engine (rc $?, $(( $(date +%s) - T0 )) s)"
  grep -E '^\||^census|^host gaps|FAILED|Error' "$OUT/engine.log" | cut -c1-400 | head -60
fi
if on PACED_S 0; then   # the engine at a camera's cadence (60 Hz) against back to back, one run
  timeout "$PACED_S" python3 -m tools.bench.cli --pace-hz 0,60 --frames 120 --warmup 16 \
    --clock-keeper-us "${KEEPER_US:-0}" \
    --profile-frames 3 --only "$T:1:ours_graph_batched;$T:3:ours_graph_batched;$PACED_EXTRA" \
    --out "$OUT/h200.json" > "$OUT/paced.log" 2>&1
  echo "== paced engine rows (rc $?, $(( $(date +%s) - T0 )) s)"
  grep -E '^\||FAILED|Error' "$OUT/paced.log" | cut -c1-200 | head -"${PACED_LINES:-12}"
fi
if on OVERLAY_S 0; then   # the overlays beside a two-camera step (tools/probes/overlay_probe.py)
  timeout "$OVERLAY_S" python3 -m tools.probes.overlay_probe --objects 1,3 \
    --out "$OUT/overlay_probe.json" > "$OUT/overlay.log" 2>&1
  echo "== overlay probe (rc $?, $(( $(date +%s) - T0 )) s)"
  grep '^{' "$OUT/overlay.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['objects_per_camera'], r['overlay'], r['track_ms_p50'], r['track_ms_p99'],
          r['overlays_rendered'], r['overlay_steps_behind_at_end'])"
fi
if on CORRECTION_S 0; then
  timeout "$CORRECTION_S" python3 -m tools.probes.correction_probe --objects 1,3 \
    --reuse-attention on,off --out "$OUT/correction.json" > "$OUT/correction.log" 2>&1
  echo "== correction probe (rc $?, $(( $(date +%s) - T0 )) s)"
  python3 - "$OUT/correction.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{'):
        r = json.loads(line); c, t = r['correction_profile'], r['track_profile']
        print(r['objects'], 'reuse' if r['reuse_attention'] else 'rerun', 'track',
              r['track_ms_p50'], t['kernels'], t['kernel_ms'], 'correction',
              r['correction_ms_p50'], c['kernels'], c['kernel_ms'])
PY
fi
if on INTERACTION_S 90; then
  timeout "${INTERACTION_S:-90}" python3 -m tools.bench.interaction --model tiny --res 512 \
    --objects "${INTERACTION_OBJECTS:-1,3,8}" --variants batched --random-weights \
    --corrections "${CORRECTIONS:-immediate,deferred}" --deferred-beside "${BESIDE:-on}" \
    --reuse-attention "${REUSE:-on}" --merge-buckets "${MERGE:-on}" --steady-frames 300 \
    ${INTERACTION_ARGS:-} --out "$OUT/h200_interaction.json" > "$OUT/interaction.log" 2>&1
  echo "== interaction (rc $?, $(( $(date +%s) - T0 )) s)"
  grep '^|' "$OUT/interaction.log" | cut -c1-250
fi
if on PROBE_S 0; then   # an interaction row's slow frames: their kernels and host calls (--trace)
  # PROBE_RUNS: "objects:window ..." (e.g. "1:179-181 3:205-220"), each its own file
  read -r -a RUNS <<< "${PROBE_RUNS:-${PROBE_OBJECTS:-8}:${PROBE_WINDOW:-110-112}}"
  for RUN in "${RUNS[@]}"; do
    timeout $(( PROBE_S / ${#RUNS[@]} )) python3 -m tools.probes.interaction_frames_probe \
      --objects "${RUN%%:*}" --corrections "${PROBE_CORRECTIONS:-deferred}" \
      --window "${RUN#*:}" --trace --out "$OUT/interaction_frames_${RUN%%:*}obj.json" \
      > "$OUT/probe_${RUN%%:*}obj.log" 2>&1
    echo "== interaction frames probe $RUN (rc $?, $(( $(date +%s) - T0 )) s)"
    grep -E '^(slow frame|traced slow frame)' "$OUT/probe_${RUN%%:*}obj.log" | cut -c1-300
  done
fi
if on SDPA_S 0; then     # PyTorch's attention backends and split-KV on a frame's shapes
  timeout "$SDPA_S" python3 -m tools.probes.sdpa_probe --out "$OUT/sdpa_probe.json" \
    > "$OUT/sdpa.log" 2>&1
  echo "== sdpa probe (rc $?, $(( $(date +%s) - T0 )) s)"
  grep '^{' "$OUT/sdpa.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['shape'], r['backend'], r.get('splits', ''), r.get('us', r.get('refused', '')[:60]))"
fi
if on VALUES_S 0; then   # the 'memory_values' kernel against FlashAttention (its choices)
  timeout "$VALUES_S" python3 -m tools.probes.value_attention_probe \
    --out "$OUT/value_attention_probe.json" > "$OUT/values.log" 2>&1
  echo "== value attention probe (rc $?, $(( $(date +%s) - T0 )) s)"
  grep -E '^[a-z_]+: current' "$OUT/values.log" | cut -c1-200
fi
if on LAUNCH_S 0; then   # tools.probes.launch_probe at 1 object (LAUNCH_ARGS: more options)
  read -r -a LAUNCH_EXTRA <<< "${LAUNCH_ARGS:-}"
  timeout "$LAUNCH_S" python3 -m tools.probes.launch_probe --objects 1 --max-objects 8 \
    --total-s $(( LAUNCH_S * 2 / 3 )) "${LAUNCH_EXTRA[@]}" --out "$OUT/launch_probe.json" \
    > "$OUT/launch.log" 2>&1
  echo "== launch probe (rc $?, $(( $(date +%s) - T0 )) s)"
  grep '^{' "$OUT/launch.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['kernel'], r['launches'], r['us'], r.get('best', ''), r.get('saved_us', ''))" |
    head -30
fi
if on IMAGE_S 90; then
  timeout "${IMAGE_S:-90}" python3 -m tools.bench.image_mode --res 1024 --prompts 1,8 \
    --variants sam2_predictor,ours --sam2-models tiny,large --precision bf16 --images 20 \
    --warmup 3 --profile-images 2 --out "$OUT/h200_image.json" > "$OUT/image.log" 2>&1
  echo "== image (rc $?, $(( $(date +%s) - T0 )) s)"
  grep -v '^{' "$OUT/image.log" | grep '^|' | cut -c1-250 | tail -12
fi
if on STARTUP_S 0; then
  timeout "$STARTUP_S" python3 -m tools.bench.startup --model tiny --res 512 --starts 2 \
    ${STARTUP_ARGS:-} --out "$OUT/h200_extra.json" > "$OUT/startup.log" 2>&1
  echo "== startup (rc $?, $(( $(date +%s) - T0 )) s)"; grep -v '^{' "$OUT/startup.log" | tail -n 6
fi
left=$(( ${LIMIT_S:-560} - ($(date +%s) - T0) ))
(( left > 30 )) && tests deferred_multistream "$left" test/gpu/test_overlay_gpu.py \
  test/gpu/test_deferred_gpu.py test/gpu/test_result_ring_gpu.py \
  test/gpu/test_multistream_gpu.py
[ -e out/gpu_equivalence.json ] && cp out/gpu_equivalence.json "$OUT/"
[ -e out/gpu_fused_kernels.json ] && cp out/gpu_fused_kernels.json "$OUT/"
# Triton's cache, for the next machine (gpu_env.sh's pack_triton_cache)
type pack_triton_cache > /dev/null 2>&1 && pack_triton_cache
# the logs in one archive: a device command returns only a few files from $OUT
( cd "$OUT" && ls ./*.log > /dev/null 2>&1 && tar czf quick_logs.tgz ./*.log && rm -f ./*.log )
echo "[gpu_quick] $(( $(date +%s) - T0 )) s (logs: \$OUT/quick_logs.tgz)"
