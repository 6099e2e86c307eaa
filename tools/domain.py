"""An exclusive ROS_DOMAIN_ID per process, for tests and benchmarks that start their own nodes.

Several node processes on one machine (parallel tests, a benchmark beside a test run) must not
see each other's topics. Each lease is an flock on a per-domain file in the temp directory, so
leases are exclusive across processes and vanish when the holder exits. Imports no rclpy.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO, Tuple

DOMAIN_RANGE = range(120, 230)


def lease_domain() -> Tuple[int, IO]:
    """(domain id, open lock file); closing the file releases the domain."""
    start = os.getpid() % len(DOMAIN_RANGE)
    for i in range(len(DOMAIN_RANGE)):
        d = DOMAIN_RANGE[(start + i) % len(DOMAIN_RANGE)]
        fh = open(Path(tempfile.gettempdir()) / f'sam2_ros_domain_{d}.lock', 'w')
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            continue
        return d, fh
    raise RuntimeError(f'no free ROS_DOMAIN_ID in {DOMAIN_RANGE.start}..{DOMAIN_RANGE.stop - 1}')
