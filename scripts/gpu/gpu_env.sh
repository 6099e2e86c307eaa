# Source on the GPU machine (repo root, .whl carried): installs the carried pure-Python wheels
# once into /tmp/site and sets the environment of every benchmark/test command there.
# Set SAM2_ROS_COMMIT to this machine's `git rev-parse --short HEAD` in the command: the copy
# there may carry an older git directory than the working tree it runs (rows of 2026-12-05 said
# 0e7cc45 for a tree at 0bf42a1).
#   source scripts/gpu/gpu_env.sh
if [ ! -e /tmp/site/.installed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
    touch /tmp/site/.installed
fi
export PYTHONPATH=$PWD:$PWD/test:/tmp/site PYTHONUNBUFFERED=1 TQDM_DISABLE=1
# Bytecode caches: the machine sets PYTHONDONTWRITEBYTECODE=1 and its torch ships without
# __pycache__, so every process would compile torch's modules from source (host_probe.py
# --part startup shows it). An installed torch has them; with this, processes after the first
# import from bytecode too, so start-up rows measure what a user's restart costs.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/pycache}
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# Triton's compiled kernels in the checkout (.cache/, ignored by git): a fresh machine compiles
# the fused kernels once (a minute or more of a device command); the GPU scripts put them in
# $OUT/triton_cache.tgz. Copied here to .cache/triton_cache.tgz and carried (7 MB, where the
# unpacked 45 MB would not fit beside .whl), it is unpacked into an empty cache (Triton keys
# each entry by source, options, GPU and version: a stale one is never used).
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/.cache/triton}
mkdir -p "$TRITON_CACHE_DIR"
if [ -f .cache/triton_cache.tgz ] && [ -z "$(ls -A "$TRITON_CACHE_DIR")" ]; then
  tar xzf .cache/triton_cache.tgz -C "$TRITON_CACHE_DIR" || echo "triton_cache.tgz unreadable"
fi
