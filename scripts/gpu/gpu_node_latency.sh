#!/usr/bin/env bash
# End-to-end node latency on the GPU machine, in one device command (about 4 minutes):
# DDS alone (default transports and the large-frames profile), then the node at 720p, 30 Hz,
# with each, then 3 and 8 objects with the profile. Everything lands in
# $OUT/node_latency.tgz (the device tool returns few files).
#   here: bash scripts/gpu/gpu_wheels.sh && bash scripts/gpu/gpu_ros_wheels.sh   (carry .whl)
#   there: bash scripts/gpu/gpu_node_latency.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/gpu_env.sh
W=$OUT/node_latency; mkdir -p "$W"
bash scripts/gpu/gpu_ros_setup.sh > "$W/ros_setup.log" 2>&1 || { echo "ROS setup failed"; tail "$W/ros_setup.log"; }
export PYTHONPATH=$PWD:/tmp/site
PY=/tmp/rosv/bin/python; XML=$PWD/config/fastdds_large_frames.xml
for t in default largeframes; do
  [ $t = largeframes ] && export FASTDDS_DEFAULT_PROFILES_FILE=$XML
  timeout 90 $PY -m sam2_ros.ros.dds_probe --rate 30 --frames 300 --out "$W/dds_probe_$t.json" \
    > "$W/dds_probe_$t.log" 2>&1; tail -n 1 "$W/dds_probe_$t.log"
done
# the node: 1 object with each transport, then 3 objects (swap) and 8 (batched) with the profile
for run in "default:" "largeframes:" "largeframes_3obj:--objects 3" \
           "largeframes_8obj_batched:--objects 8 --graph-mode batched"; do
  t=${run%%:*}; unset FASTDDS_DEFAULT_PROFILES_FILE
  [ "$t" != default ] && export FASTDDS_DEFAULT_PROFILES_FILE=$XML
  timeout 150 $PY -m sam2_ros.bench.node_latency --width 1280 --height 720 --frames ${FRAMES:-320} \
    --rate ${RATE:-30} --model tiny --image-size 512 --device cuda ${run#*:} \
    --out "$W/node_latency_h200_$t.json" > "$W/node_latency_$t.log" 2>&1
  echo "== node, $t"; grep -A12 "queued" "$W/node_latency_$t.log"
done
tar czf "$OUT/node_latency.tgz" -C "$W" . && echo "wrote $OUT/node_latency.tgz"
