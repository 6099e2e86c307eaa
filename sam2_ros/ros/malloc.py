"""Keep multi-megabyte message buffers in the heap instead of fresh ``mmap`` regions.

Every 720p image a Python ROS process publishes or receives goes through a few buffers of
2.7 MB (the message's C struct, the serialized CDR bytes). glibc serves allocations above its
mmap threshold (128 KiB at start, raised dynamically only up to what it has seen freed) with a
fresh ``mmap``, and every one of its pages then costs a page fault when first written: measured
on the 2-core CI VM, ``rclpy.serialization.serialize_message`` of a 1280x720 rgb8 Image took
5.3 ms, and 0.38 ms with the thresholds below, since the freed buffers are reused. This is a
process-wide allocator setting, so it lives in the node's process and has an off switch
(the node parameter ``tune_malloc``). Nothing to do (False) where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Optional

M_TRIM_THRESHOLD = -1       # mallopt parameter numbers of glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20   # glibc's maximum: buffers up to 32 MiB (4K rgb8) come from the heap
TRIM_THRESHOLD = 256 << 20  # keep up to this much freed memory at the heap top for reuse


def _libc() -> Optional[ctypes.CDLL]:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
        return libc if hasattr(libc, 'mallopt') and hasattr(libc, 'gnu_get_libc_version') \
            else None
    except OSError:
        return None


def keep_large_buffers(mmap_threshold: int = MMAP_THRESHOLD,
                       trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True when both were set."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))) and \
        bool(libc.mallopt(M_TRIM_THRESHOLD, int(trim_threshold)))
