#!/usr/bin/env bash
# End-to-end node latency on the GPU machine at 60 Hz, ONE device command per machine kind:
#   bash scripts/gpu/gpu_node_latency.sh          # nvidia-h200: the 1-GPU matrix (LIMIT below)
#   bash scripts/gpu/gpu_node_latency.sh 2gpu     # nvidia-h200-x2: two cameras, one GPU each
#   bash scripts/gpu/gpu_node_latency.sh pipeline # pipelined vs serial node, 3 and 8 objects
#   bash scripts/gpu/gpu_node_latency.sh malloc   # tune_malloc on vs off, 1 and 3 objects
#   bash scripts/gpu/gpu_node_latency.sh precompile  # 1 and 8 objects, precompile on
#   bash scripts/gpu/gpu_node_latency.sh short    # 3 and 1 objects only (LIMIT_S for a budget;
#                                                 # SHORT_OBJECTS="8" for other counts)
#   bash scripts/gpu/gpu_node_latency.sh stereo   # 2 cameras on one GPU, 1 and 3 objects each:
#     ONE node serving both (--one-node, cameras [cam0, cam1], frame pairs stamped alike) and
#     two nodes for comparison; within ~8 minutes (LIMIT_S, default 470 here)
#   bash scripts/gpu/gpu_node_latency.sh session  # one call's headline rows of three issues:
#     raw 1 object, one node serving two cameras with 1 object each, raw 3, jpeg 1, raw 8,
#     one node for two cameras with 3 objects each (what LIMIT_S leaves room for)
#   bash scripts/gpu/gpu_node_latency.sh receiver # image_receiver_process on against off:
#     one node serving two cameras (1 and 3 objects each) and one camera (1, 3, 8 objects)
#   bash scripts/gpu/gpu_node_latency.sh targets  # every target row of the transport and stereo
#     issues in one call, most wanted first: one node serving two cameras (1 object each) with
#     receiving processes and without, raw 1, two cameras with 3 objects each (receiving
#     processes), raw 3/8, jpeg 1/8, two nodes (1, 3), raw 8 with receivers
#   bash scripts/gpu/gpu_node_latency.sh stall    # one node for two cameras (1 object each) and
#     raw 3 objects with stall_trace_ms (STALL_MS, 12), then both with CUDA_MODULE_LOADING=EAGER
#   bash scripts/gpu/gpu_node_latency.sh stereostall  # one node for two cameras without
#     receiving processes (the default), 1 then 3 objects each, twice, with stall_trace_ms
#     (STALL_MS, 12): the stacks of a one-off slow pair (the stereo issue's one event of
#     page faults, run 20261206T072146Z-targets)
#   bash scripts/gpu/gpu_node_latency.sh diag     # one node for two cameras (1 object each)
#     with stall_trace_ms 8, the same without the overlay subscribed, and raw 1 object
#   bash scripts/gpu/gpu_node_latency.sh threads  # one node for two cameras (1, 3 objects each)
#     with OpenCV's default pool and opencv_threads 1, raw 3/8/1 objects
#   bash scripts/gpu/gpu_node_latency.sh overlay  # one node for two cameras, overlay_on_gpu on
#     and off, with raw 1 / 3 objects after each pair, then jpeg 1, raw 8, jpeg 8, raw 1 with
#     the camera publishing rclpy messages (--camera-publish message), and 3 objects per
#     camera with merge_step_buckets off
#   bash scripts/gpu/gpu_node_latency.sh headline # the target rows of the transport and stereo
#     issues once each (one node for two cameras with 1 and 3 objects, merging on and off at 3;
#     raw 1/3/8, jpeg 1/8)
#   bash scripts/gpu/gpu_node_latency.sh twonodes # two cameras on one GPU, a node each, 1 and 3
#     objects per camera (the comparison rows of one node serving both)
#   bash scripts/gpu/gpu_node_latency.sh nogil    # publish_without_gil with a 0.5 ms GIL
#     switch interval, one node for two cameras with a publisher per camera and shared, against
#     neither; raw 1; 3 objects per camera with a publisher each
#   bash scripts/gpu/gpu_node_latency.sh keeper   # the GPU clock keeper (KEEP_US after each
#     frame, default 12000) against none:
#     raw 1, one node for two cameras (1 object each), then 3 each with it
#   bash scripts/gpu/gpu_node_latency.sh gil      # the node's GIL switch interval 0.5 ms
#     against Python's 5 ms: one node for two cameras (1 object each, then 3), raw 1
#   bash scripts/gpu/gpu_node_latency.sh merge    # merge_step_buckets on / off / on, two cameras
#   bash scripts/gpu/gpu_node_latency.sh hostpath # the node's host-side options, each against
#     its off switch in the same run, most wanted first: the transport floor (dds_probe rows:
#     720p60 between two processes as the node takes it, single and events executor), one node
#     for two cameras with the shared publisher and without, raw 1 object with either executor
#     and with the camera preparing frames right after the previous publish (prep 0), two
#     nodes for two cameras (1, then 3 each, beside one node's 3), raw 3 with either executor,
#     masks_from_worker (raw 1; jpeg 1 with the events executor), one node's stereo on events,
#     raw 1 with a receiving process
#   bash scripts/gpu/gpu_node_latency.sh input    # raw 1/3/8 and jpeg 1/8 objects,
#     after test/gpu/test_decode_gpu.py (nvJPEG against cv2: $OUT/gpu_decode.json); installs
#     the torchvision wheel of .whl/gpu/ (scripts/gpu/gpu_wheels.sh) into /tmp/site
# 1280x720 rgb8 at 60 Hz, tiny@512 with the engine's defaults (config/tracker.yaml), a click on
# a tracked object every 2 s, process_every_frame (nothing dropped: a slow node shows as
# latency and deadline misses). 1-GPU matrix: 1/3/8 objects with the overlay subscribed and
# not (shm transport), 1 object with Fast DDS's default transport, 1 object with the serial
# node (pipeline off), and two cameras (two tracker nodes) on one GPU with 1 and 3 objects.
# Rows are merged into $OUT/h200_node_latency.json (a copy of benchmarks/results') - copy it
# back and run `python -m tools.bench.report`; per-frame JSONs and logs: $OUT/node_latency.tgz.
#   here: bash scripts/gpu/gpu_wheels.sh && bash scripts/gpu/gpu_ros_wheels.sh   (carry .whl)
#   there: SAM2_ROS_COMMIT=<hash> bash scripts/gpu/gpu_node_latency.sh [2gpu]
# A dry run of the same matrix on a CPU (tiny sizes, seconds per run):
#   CPU_DRY_RUN=1 OUT=/tmp/nl bash scripts/gpu/gpu_node_latency.sh [2gpu]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MODE=${1:-1gpu}
# Everything ends within LIMIT s (under a device command's 10 minutes): a run starts only if
# the longest run so far (node start-up and graph capture included) still fits, and is killed
# at the limit.
T0=$(date +%s); LIMIT=${LIMIT_S:-$([ "$MODE" = stereo ] && echo 470 || echo 530)}; LONGEST=${FIRST_RUN_GUESS_S:-60}
if [ -n "${CPU_DRY_RUN:-}" ]; then
  export OUT=${OUT:-/tmp/out}; W=$OUT/node_latency; mkdir -p "$W"
  PY=${PY:-.venv/bin/python}; D0=cpu; D1=cpu
  SIZE=(--width 160 --height 120 --rate 4 --frames "${FRAMES:-6}" --warmup 1 --image-size 64
        --device cpu --corrections-every 0.5 --start-timeout 90 --timeout 30)
else
  source scripts/gpu/gpu_env.sh
  W=$OUT/node_latency; mkdir -p "$W"
  bash scripts/gpu/gpu_ros_setup.sh > "$W/ros_setup.log" 2>&1 || { echo "ROS setup failed"; tail "$W/ros_setup.log"; }
  export PYTHONPATH=$PWD:/tmp/site
  PY=/tmp/rosv/bin/python; D0=cuda:0; D1=cuda:1
  SIZE=(--width 1280 --height 720 --rate 60 --frames "${FRAMES:-500}" --image-size 512
        --device cuda --corrections-every 2)
fi
if [[ "$MODE" =~ ^(input|session|targets|overlay|headline|hostpath)$ ]] && [ -z "${CPU_DRY_RUN:-}" ]; then   # nvJPEG: torchvision
  if [ ! -e /tmp/site/.installed_gpu ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
      .whl/gpu/*.whl && touch /tmp/site/.installed_gpu
  fi
  $PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision',
torchvision.__version__)"
  [ "$MODE" = input ] && timeout 150 $PY -m pytest -q -p no:cacheprovider -m gpu \
    test/gpu/test_decode_gpu.py -s 2>&1 | tail -n 5
fi
unset FASTDDS_DEFAULT_PROFILES_FILE FASTDDS_BUILTIN_TRANSPORTS
RESULTS=$OUT/h200_node_latency.json
cp benchmarks/results/h200_node_latency.json "$RESULTS"
RUN=${RUN_ID:-$(date -u +%Y%m%dT%H%M%SZ)-$MODE}
BASE=("${SIZE[@]}" --model tiny --results "$RESULTS" --run-id "$RUN")

# Nothing of a run may outlive it: a node left running by a run killed at the limit (rc 124)
# loads every run after it, and the next device command on a warm machine too (a session's
# later rows collapsed to 60-1000 ms after one). Every process of this script inherits its tag;
# after each run, any left is named and killed (first: those of an earlier invocation).
export SAM2_BENCH_TAG="gpu_node_latency_$$_$(date +%s)"
reap() {  # reap WHEN TAG-PATTERN
  local pid pids=()
  for pid in $(pgrep -f 'python' || true); do
    [ "$pid" = $$ ] && continue
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "SAM2_BENCH_TAG=$2" &&
      pids+=("$pid")
  done
  (( ${#pids[@]} )) || return 0
  echo "   $1: killed ${#pids[@]} stray process(es):"
  ps -o pid=,etime=,args= -p "$(IFS=,; echo "${pids[*]}")" | cut -c1-150 | sed 's/^/     /'
  kill -9 "${pids[@]}" 2>/dev/null
}
reap "before the runs" 'gpu_node_latency_.*'

run() {  # run NAME ARGS...: one benchmark invocation, skipped when it would not fit
  local name=$1; shift; local t0 left rc
  t0=$(date +%s); left=$(( LIMIT - (t0 - T0) ))
  if (( left < LONGEST + 10 )); then echo "== $name: SKIPPED (${left} s left)"; return; fi
  timeout "$left" $PY -m tools.bench.node_latency "${BASE[@]}" "$@" \
    --out "$W/$name.json" > "$W/$name.log" 2>&1; rc=$?
  (( $(date +%s) - t0 > LONGEST )) && LONGEST=$(( $(date +%s) - t0 ))
  echo "== $name (rc $rc, $(( $(date +%s) - t0 )) s)"
  reap "after $name" "$SAM2_BENCH_TAG"
  grep -E "^camera|image published -> mask" "$W/$name.log"
  # which frames were slow and why (a one-off stall or every correction), and any long full
  # garbage collection the node logged (gc_policy.PauseMonitor)
  [ -e "$W/$name.json" ] && $PY -m tools.bench.slow_frames "$W/$name.json" -n "${SLOW_N:-4}"
  grep -h "full garbage collection" "$W/$name".node*.log 2>/dev/null | cut -c1-160 | head -4
  # stalled tracking calls with the threads' stacks (--stall-trace-ms; stall_trace.py)
  grep -h -A 9 "a tracking call took" "$W/$name".node*.log 2>/dev/null | cut -c1-230 |
    head -"${STALL_LINES:-30}"
}

if [ "$MODE" = malloc ]; then   # tune_malloc on (default) against off, 1 and 3 objects
  for n in 1 3; do
    run "shm_${n}obj_overlay" --objects "$n" --transport shm --overlay
    run "shm_${n}obj_overlay_nomalloc" --objects "$n" --transport shm --overlay --no-tune-malloc
  done
elif [ "$MODE" = pipeline ]; then   # pipelined against serial node at 3 and 8 objects
  for n in 3 8; do
    run "shm_${n}obj_overlay" --objects "$n" --transport shm --overlay
    run "shm_${n}obj_overlay_serial" --objects "$n" --transport shm --overlay --no-pipeline
  done
elif [ "$MODE" = precompile ]; then   # precompile: [encoder, heads]; the first start compiles
  for n in ${SHORT_OBJECTS:-1 8}; do
    run "shm_${n}obj_overlay_precompile" --objects "$n" --transport shm --overlay \
      --precompile encoder,heads --start-timeout 400
  done
elif [ "$MODE" = short ]; then   # the headline rows only (3 then 1 object), for a short budget
  for n in ${SHORT_OBJECTS:-3 1}; do
    run "shm_${n}obj_overlay" --objects "$n" --transport shm --overlay
  done
elif [ "$MODE" = input ]; then   # raw and JPEG cameras; the target rows first
  run shm_1obj_overlay --objects 1 --transport shm --overlay
  run shm_1obj_overlay_jpeg --objects 1 --transport shm --overlay --input jpeg
  run shm_8obj_overlay --objects 8 --transport shm --overlay
  run shm_8obj_overlay_jpeg --objects 8 --transport shm --overlay --input jpeg
  run shm_3obj_overlay --objects 3 --transport shm --overlay
elif [ "$MODE" = receiver ]; then   # receiving processes on/off, stereo first (what they are for)
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node)
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}" --receiver-process
  run cams2_1gpu_1node_1obj --objects 1 "${ONE[@]}" --no-receiver-process
  run shm_1obj_overlay_rxproc --objects 1 --transport shm --overlay --receiver-process
  run shm_1obj_overlay --objects 1 --transport shm --overlay --no-receiver-process
  run cams2_1gpu_1node_3obj_rxproc --objects 3 "${ONE[@]}" --receiver-process
  run cams2_1gpu_1node_3obj --objects 3 "${ONE[@]}" --no-receiver-process
  run shm_3obj_overlay_rxproc --objects 3 --transport shm --overlay --receiver-process
  run shm_8obj_overlay_rxproc --objects 8 --transport shm --overlay --receiver-process
  run shm_1obj_overlay_jpeg --objects 1 --transport shm --overlay --input jpeg
elif [ "$MODE" = targets ]; then   # the rows the targets are judged on, most wanted first
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}"
  # the frames received in the node's process (the events executor's serialized
  # subscriptions) against the receiving processes' hand-off (0.85 ms p50 queue at fb7e4ed)
  run cams2_1gpu_1node_1obj --objects 1 --transport shm --overlay --devices "$D0,$D0" \
    --one-node --no-receiver-process
  run shm_1obj_overlay --objects 1 --transport shm --overlay
  run cams2_1gpu_1node_3obj_rxproc --objects 3 "${ONE[@]}"
  run shm_3obj_overlay --objects 3 --transport shm --overlay
  run shm_8obj_overlay --objects 8 --transport shm --overlay
  run shm_1obj_overlay_jpeg --objects 1 --transport shm --overlay --input jpeg
  run shm_8obj_overlay_jpeg --objects 8 --transport shm --overlay --input jpeg
  run cams2_1gpu_1obj --objects 1 --transport shm --overlay --devices "$D0,$D0"
  run cams2_1gpu_3obj --objects 3 --transport shm --overlay --devices "$D0,$D0"
  run shm_8obj_overlay_rxproc --objects 8 --transport shm --overlay --receiver-process
elif [ "$MODE" = stall ]; then   # the one-off slow track calls: stacks, and lazy CUDA loading
  ST=(--stall-trace-ms "${STALL_MS:-12}")
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  run cams2_1gpu_1node_1obj_rxproc_trace --objects 1 "${ONE[@]}" "${ST[@]}"
  run shm_3obj_overlay_trace --objects 3 --transport shm --overlay "${ST[@]}"
  export CUDA_MODULE_LOADING=EAGER     # every kernel module loaded at start, none on first use
  run cams2_1gpu_1node_1obj_rxproc_trace_eager --objects 1 "${ONE[@]}" "${ST[@]}"
  run shm_3obj_overlay_trace_eager --objects 3 --transport shm --overlay "${ST[@]}"
  unset CUDA_MODULE_LOADING
elif [ "$MODE" = stereostall ]; then   # the default stereo path's one-off slow pairs
  ST=(--stall-trace-ms "${STALL_MS:-12}")
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --no-receiver-process)
  for k in 1 2; do
    run "cams2_1gpu_1node_1obj_trace$k" --objects 1 "${ONE[@]}" "${ST[@]}"
    run "cams2_1gpu_1node_3obj_trace$k" --objects 3 "${ONE[@]}" "${ST[@]}"
  done
elif [ "$MODE" = diag ]; then   # where one node's two-camera time goes: stall trace, overlay
  ONE=(--transport shm --devices "$D0,$D0" --one-node --receiver-process)
  run cams2_1gpu_1node_1obj_rxproc_trace --objects 1 "${ONE[@]}" --overlay --stall-trace-ms 8
  run cams2_1gpu_1node_1obj_rxproc_nooverlay --objects 1 "${ONE[@]}" --no-overlay
  run shm_1obj_overlay --objects 1 --transport shm --overlay
elif [ "$MODE" = threads ]; then   # OpenCV's pool (opencv_threads) in the one-node stereo rows
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}"
  run cams2_1gpu_1node_1obj_rxproc_cv1 --objects 1 "${ONE[@]}" --opencv-threads 1
  run shm_3obj_overlay --objects 3 --transport shm --overlay
  run cams2_1gpu_1node_3obj_rxproc_cv1 --objects 3 "${ONE[@]}" --opencv-threads 1
  run cams2_1gpu_1node_3obj_rxproc --objects 3 "${ONE[@]}"
  run shm_8obj_overlay --objects 8 --transport shm --overlay
  run shm_1obj_overlay --objects 1 --transport shm --overlay
  run shm_1obj_overlay_cv1 --objects 1 --transport shm --overlay --opencv-threads 1
elif [ "$MODE" = nogil ]; then   # masks and overlays published with the GIL released
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  NG=(--publish-without-gil --gil-switch-ms 0.5)
  run cams2_1gpu_1node_1obj_rxproc_nogil_pubpercam --objects 1 "${ONE[@]}" "${NG[@]}" \
    --no-shared-publisher
  run cams2_1gpu_1node_1obj_rxproc_nogil --objects 1 "${ONE[@]}" "${NG[@]}"
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}"
  run shm_1obj_overlay_nogil --objects 1 --transport shm --overlay "${NG[@]}"
  run cams2_1gpu_1node_3obj_rxproc_nogil_pubpercam --objects 3 "${ONE[@]}" "${NG[@]}" \
    --no-shared-publisher
elif [ "$MODE" = keeper ]; then   # the GPU clock keeper (a spin after each frame) against none
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  K=${KEEP_US:-12000}; KA=(--clock-keeper-us "$K")
  run "shm_1obj_overlay_keep$K" --objects 1 --transport shm --overlay "${KA[@]}"
  run "cams2_1gpu_1node_1obj_rxproc_keep$K" --objects 1 "${ONE[@]}" "${KA[@]}"
  run shm_1obj_overlay --objects 1 --transport shm --overlay
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}"
  run "cams2_1gpu_1node_3obj_rxproc_keep$K" --objects 3 "${ONE[@]}" "${KA[@]}"
elif [ "$MODE" = gil ]; then   # Python's GIL switch interval 0.5 ms against the default 5
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  run cams2_1gpu_1node_1obj_rxproc_gil05 --objects 1 "${ONE[@]}" --gil-switch-ms 0.5
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}"
  run cams2_1gpu_1node_3obj_rxproc_gil05 --objects 3 "${ONE[@]}" --gil-switch-ms 0.5
  run shm_1obj_overlay_gil05 --objects 1 --transport shm --overlay --gil-switch-ms 0.5
elif [ "$MODE" = merge ]; then   # merge_step_buckets on and off: one node, two cameras, 3 each
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  run cams2_1gpu_1node_3obj_rxproc --objects 3 "${ONE[@]}"
  run cams2_1gpu_1node_3obj_rxproc_separate --objects 3 "${ONE[@]}" --no-merge-buckets
  run cams2_1gpu_1node_3obj_rxproc_again --objects 3 "${ONE[@]}"
elif [ "$MODE" = overlay ]; then   # the GPU overlay on and off, then the target rows
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}"
  run cams2_1gpu_1node_1obj_rxproc_hostoverlay --objects 1 "${ONE[@]}" --no-gpu-overlay
  run shm_1obj_overlay --objects 1 --transport shm --overlay
  run cams2_1gpu_1node_3obj_rxproc --objects 3 "${ONE[@]}"
  run cams2_1gpu_1node_3obj_rxproc_hostoverlay --objects 3 "${ONE[@]}" --no-gpu-overlay
  run shm_3obj_overlay --objects 3 --transport shm --overlay
  run shm_1obj_overlay_jpeg --objects 1 --transport shm --overlay --input jpeg
  run shm_8obj_overlay --objects 8 --transport shm --overlay
  run shm_8obj_overlay_jpeg --objects 8 --transport shm --overlay --input jpeg
  run shm_1obj_overlay_campubmsg --objects 1 --transport shm --overlay --camera-publish message
  run cams2_1gpu_1node_3obj_rxproc_separate --objects 3 "${ONE[@]}" --no-merge-buckets
elif [ "$MODE" = headline ]; then   # every target row once, merged buckets on and off
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}"
  run cams2_1gpu_1node_3obj_rxproc --objects 3 "${ONE[@]}"
  run cams2_1gpu_1node_3obj_rxproc_separate --objects 3 "${ONE[@]}" --no-merge-buckets
  run shm_1obj_overlay --objects 1 --transport shm --overlay
  run shm_3obj_overlay --objects 3 --transport shm --overlay
  run shm_8obj_overlay --objects 8 --transport shm --overlay
  run shm_1obj_overlay_jpeg --objects 1 --transport shm --overlay --input jpeg
  run shm_8obj_overlay_jpeg --objects 8 --transport shm --overlay --input jpeg
elif [ "$MODE" = session ]; then   # the target rows of transport and stereo, most wanted first
  run shm_1obj_overlay --objects 1 --transport shm --overlay
  run cams2_1gpu_1node_1obj --objects 1 --transport shm --overlay --devices "$D0,$D0" --one-node
  run shm_3obj_overlay --objects 3 --transport shm --overlay
  run shm_1obj_overlay_jpeg --objects 1 --transport shm --overlay --input jpeg
  run shm_8obj_overlay --objects 8 --transport shm --overlay
  run cams2_1gpu_1node_3obj --objects 3 --transport shm --overlay --devices "$D0,$D0" --one-node
elif [ "$MODE" = stereo ]; then   # one node for both cameras (the targets), then two nodes
  for n in 1 3; do
    run "cams2_1gpu_1node_${n}obj" --objects "$n" --transport shm --overlay --devices "$D0,$D0" \
      --one-node
  done
  for n in 1 3; do
    run "cams2_1gpu_${n}obj" --objects "$n" --transport shm --overlay --devices "$D0,$D0"
  done
elif [ "$MODE" = hostpath ]; then   # host-side options against their off switches
  for ex in single events; do   # the middleware alone, as the node and its camera use it
    timeout 60 $PY -m tools.dds_probe --rate 60 --frames 600 --raw --tune-malloc \
      --publish serialized --profile config/fastdds_large_frames.xml --executor "$ex" \
      --results "$RESULTS" --run-id "$RUN" 2>&1 | tail -n 1 | cut -c1-160
  done
  ONE=(--transport shm --overlay --devices "$D0,$D0" --one-node --receiver-process)
  TWO=(--transport shm --overlay --devices "$D0,$D0")
  run cams2_1gpu_1node_1obj_rxproc --objects 1 "${ONE[@]}" --shared-publisher
  run cams2_1gpu_1node_1obj_rxproc_pubpercam --objects 1 "${ONE[@]}" --no-shared-publisher
  run shm_1obj_overlay --objects 1 --transport shm --overlay --executor single
  run shm_1obj_overlay_events --objects 1 --transport shm --overlay --executor events
  run shm_1obj_overlay_prep0 --objects 1 --transport shm --overlay --camera-prepare-ms 0
  run cams2_1gpu_1obj --objects 1 "${TWO[@]}"
  run cams2_1gpu_1node_3obj_rxproc --objects 3 "${ONE[@]}"
  run cams2_1gpu_3obj --objects 3 "${TWO[@]}"
  run shm_3obj_overlay --objects 3 --transport shm --overlay --executor single
  run shm_3obj_overlay_events --objects 3 --transport shm --overlay --executor events
  run shm_1obj_overlay_workermasks --objects 1 --transport shm --overlay --masks-from-worker
  run shm_1obj_overlay_jpeg_events_workermasks --objects 1 --transport shm --overlay \
    --input jpeg --executor events --masks-from-worker
  run cams2_1gpu_1node_1obj_rxproc_events --objects 1 "${ONE[@]}" --executor events
  run shm_1obj_overlay_rxproc --objects 1 --transport shm --overlay --receiver-process
elif [ "$MODE" = twonodes ]; then   # the one-node stereo rows' comparison: a node per camera
  for n in 1 3; do
    run "cams2_1gpu_${n}obj" --objects "$n" --transport shm --overlay --devices "$D0,$D0"
  done
elif [ "$MODE" = 2gpu ]; then
  for n in 1 3 8; do
    run "cams2_2gpu_${n}obj" --objects "$n" --transport shm --overlay --devices "$D0,$D1"
  done
  run cams2_1gpu_1obj --objects 1 --transport shm --overlay --devices "$D0,$D0"
else   # most wanted first: the runs that judge the targets, then the comparisons
  for n in 1 3 8; do
    run "shm_${n}obj_overlay" --objects "$n" --transport shm --overlay
  done
  run cams2_1gpu_1obj --objects 1 --transport shm --overlay --devices "$D0,$D0"
  run default_1obj_overlay --objects 1 --transport default --overlay
  run shm_1obj_nooverlay --objects 1 --transport shm --no-overlay
  run shm_8obj_nooverlay --objects 8 --transport shm --no-overlay
  run shm_1obj_overlay_serial --objects 1 --transport shm --overlay --no-pipeline
  run shm_3obj_nooverlay --objects 3 --transport shm --no-overlay
  run cams2_1gpu_3obj --objects 3 --transport shm --overlay --devices "$D0,$D0"
fi
tar czf "$OUT/node_latency.tgz" -C "$W" . && echo "wrote $OUT/node_latency.tgz"
# Triton's cache, for the next machine (gpu_env.sh's pack_triton_cache)
type pack_triton_cache > /dev/null 2>&1 && pack_triton_cache
# the table, last: one line per row of this run
python3 - "$RESULTS" "$RUN" <<'EOF'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r.get('run') == sys.argv[2]]
for p in [r for r in rows if r.get('kind') == 'dds_probe']:   # the transport alone
    print(f"dds_probe {p['name']}: p50 {p['p50_ms']} p90 {p['p90_ms']} p99 {p['p99_ms']} "
          f"max {p['max_ms']} ms, {p['received']} / {p['sent']} frames")
rows = [r for r in rows if r.get('kind') != 'dds_probe']
print('cams cam node/cam objects input transport(shm segs) overlay pipeline | mask p50 p99 | '
      'state p99 | '
      'misses / frames | p50/p99 DDS in, hand-offs, decode, engine, mask publish, DDS out')
for r in rows:
    split = ', '.join(f"{r.get(n + '_p50')}/{r.get(n + '_p99')}" for n in (
        'dds_in', 'handoff', 'decode', 'engine_span', 'publish_mask', 'dds_out'))
    print(f"{r['cameras']} {r['camera']} {r.get('node_per_camera')} {r['objects']} "
          f"{r.get('input', 'raw')}{'+rxproc' if r.get('image_receiver_process') else ''} "
          f"{r['transport']}({r.get('shm_large_segments')}) {r['overlay']} {r['pipeline']} | "
          f"{r['e2e_mask_p50']} {r['e2e_mask_p99']} | {r['e2e_state_p99']} "
          f"| {r['deadline_misses']} / {r['frames']} | {split}")
EOF
echo "elapsed $(( $(date +%s) - T0 )) s; rows in $RESULTS (run $RUN)"
