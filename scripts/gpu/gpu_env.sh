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
# the fused kernels once (a minute or more of a device command; 300 s of GPU tests on
# 2026-12-05). The GPU scripts hand the cache back (pack_triton_cache below): the whole of it
# as $OUT/triton_cache.tar.xz where it fits a file that comes back (16 MiB), else only the
# kernels this machine built, as $OUT/triton_cache_new.tar.xz. Copied here into .cache/ and
# carried, every .cache/triton_cache*.t?z is unpacked into an empty cache (Triton keys each
# entry by source, options, GPU and version: a stale one is never used).
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/.cache/triton}
mkdir -p "$TRITON_CACHE_DIR"
if [ -z "$(ls -A "$TRITON_CACHE_DIR")" ]; then
  for a in .cache/triton_cache*.t?z .cache/triton_cache*.tar.xz; do
    [ -f "$a" ] && { tar xf "$a" -C "$TRITON_CACHE_DIR" || echo "$a unreadable"; }
  done
  touch "$TRITON_CACHE_DIR.unpacked"      # what is newer was built on this machine
fi
pack_triton_cache() {   # Triton's cache for the next machine (see above)
  [ -d "$TRITON_CACHE_DIR" ] || return 0
  # nothing built here: the carried archive already holds the whole cache, and packing it
  # again costs minutes of a device command
  if [ -e "$TRITON_CACHE_DIR.unpacked" ] && [ -z "$(find "$TRITON_CACHE_DIR" -type f \
      -newer "$TRITON_CACHE_DIR.unpacked" -print -quit)" ]; then
    return 0
  fi
  local whole="$OUT/triton_cache.tar.xz" new="$OUT/triton_cache_new.tar.xz" max=15000000
  XZ_OPT="-6 -T0" tar cJf "$whole" -C "$TRITON_CACHE_DIR" . 2> /dev/null   # every core
  (( $(stat -c %s "$whole" 2> /dev/null || echo $max) < max )) && return 0
  rm -f "$whole"
  [ -e "$TRITON_CACHE_DIR.unpacked" ] || return 0
  ( cd "$TRITON_CACHE_DIR" && find . -type f -newer "$TRITON_CACHE_DIR.unpacked" -print0 |
      XZ_OPT="-6 -T0" tar cJf "$new" --null -T - ) 2> /dev/null
  (( $(stat -c %s "$new" 2> /dev/null || echo $max) < max )) || rm -f "$new"
}
export -f pack_triton_cache    # for the scripts run after sourcing this (bash children)
