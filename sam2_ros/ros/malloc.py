"""Keep multi-megabyte message buffers in the heap instead of fresh ``mmap`` regions.

Every 720p image a ROS process receives goes through a few buffers of 2.7 MB (Fast DDS's
sample, the deserialized C struct, the Python array). glibc serves allocations above its mmap
threshold with a fresh ``mmap`` (and gives freed heap tops back), and every page of such a
buffer then costs a page fault when first written: on the receiving side, a 720p image
between two processes took more than twice as long without the thresholds below
(``python -m tools.dds_probe --profile config/fastdds_large_frames.xml --tune-malloc``
measures it; setting them in the publisher alone made no difference). This is a process-wide
allocator setting, so it lives in the node's process with an off switch (the node parameter
``tune_malloc``), and the benchmarks set it in their receiving process. Nothing to do (False)
where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Callable, Optional

M_TRIM_THRESHOLD = -1       # mallopt parameter numbers of glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20   # glibc's maximum: buffers up to 32 MiB (4K rgb8) come from the heap
TRIM_THRESHOLD = 256 << 20  # keep up to this much freed memory at the heap top for reuse


def glibc() -> Optional[ctypes.CDLL]:
    """The C library when it is glibc (it has mallopt), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
        return libc if hasattr(libc, 'mallopt') and hasattr(libc, 'gnu_get_libc_version') \
            else None
    except OSError:
        return None


def keep_large_buffers(mmap_threshold: int = MMAP_THRESHOLD,
                       trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True when both were set."""
    libc = glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))) and \
        bool(libc.mallopt(M_TRIM_THRESHOLD, int(trim_threshold)))


class Tuning:
    """The node's ``tune_malloc``: the thresholds set once (before the image subscription
    exists), and a warning through ``warn`` where the C library cannot do it."""

    def __init__(self) -> None:
        self.tuned = False

    def apply(self, enabled: bool, warn: Callable[[str], None]) -> None:
        if enabled and not self.tuned:
            # module attribute looked up at call time, so a test can stand in for glibc
            self.tuned = keep_large_buffers()
            if not self.tuned:
                warn('tune_malloc: not glibc or mallopt refused; large images take longer '
                     'to receive')
