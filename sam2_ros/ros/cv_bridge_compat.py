"""cv_bridge's ``imgmsg_to_cv2`` with a self-test, and numpy where the installed pair is broken.

The PyPI cv_bridge port reads the channel count with OpenCV 4's type layout
(``(flags & (63 << 3)) >> 3) + 1``); OpenCV 5 keeps channels from bit 5, so ``CV_8UC3`` reads as
9 channels and every colour image fails with 'buffer is too small for requested array' (seen
on the GPU machine: opencv-python-headless 5.0.0, every camera frame skipped). cv_bridge stays
the decoder; each bridge object is probed once on tiny images, and only the calls it gets wrong
are computed with numpy (bit-identical to cv_bridge under OpenCV 4), with one warning.
"""

from __future__ import annotations

import logging
import threading
import weakref
from importlib import metadata
from types import SimpleNamespace
from typing import Any, Dict, FrozenSet, Optional, Tuple

import cv2
import numpy as np

# Raw encodings accepted on the image topic, with their channel count (all 8-bit).
ENCODING_CHANNELS = {'rgb8': 3, 'bgr8': 3, 'rgba8': 4, 'bgra8': 4, 'mono8': 1}
# Source channel of R, G, B per raw encoding (mono8: gray repeated), as cv2.cvtColor maps them.
RGB_CHANNELS = {'rgb8': (0, 1, 2), 'bgr8': (2, 1, 0), 'rgba8': (0, 1, 2), 'bgra8': (2, 1, 0),
                'mono8': (0, 0, 0)}
# Every (encoding, desired_encoding) call conversions.py makes on cv_bridge's imgmsg_to_cv2.
BRIDGE_CALLS = tuple((enc, 'rgb8') for enc in ENCODING_CHANNELS) + (('mono8', 'passthrough'),)

log = logging.getLogger(__name__)
# Per bridge object (weakly held, so CvBridge and test stand-ins must allow weak references).
_broken: weakref.WeakKeyDictionary[Any, FrozenSet[Tuple[str, str]]] = weakref.WeakKeyDictionary()
_probe_lock = threading.Lock()


def _numpy_decode(view: Any, desired: str) -> np.ndarray:
    """What cv_bridge's imgmsg_to_cv2 returns for a packed 8-bit ``view``, computed with numpy.

    The stand-in for a bridge that fails its self-test; bit-identical to cv_bridge under OpenCV
    4 (pure channel copies). Copied channel by channel: 1-3 ms for 720p, several times
    faster than copying a reversed or cut channel slice. Returns a view where cv_bridge does.
    """
    channels = ENCODING_CHANNELS[view.encoding]
    src = np.frombuffer(view.data, np.uint8, count=view.height * view.width * channels)
    src = src.reshape(view.height, view.width, channels)
    if desired == 'passthrough' or view.encoding == desired:  # cv_bridge returns these as is
        return src[..., 0] if channels == 1 else src
    out = np.empty((view.height, view.width, 3), np.uint8)
    for dst, ch in enumerate(RGB_CHANNELS[view.encoding]):
        out[..., dst] = src[..., ch]
    return out


def _probe(bridge: Any, encoding: str, desired: str) -> Optional[str]:
    """None if ``bridge`` decodes a tiny image right, else why not (the error or 'wrong pixels').

    Every byte of the probe differs, so a wrong channel count or order cannot pass unnoticed.
    """
    channels = ENCODING_CHANNELS[encoding]
    view = SimpleNamespace(encoding=encoding, is_bigendian=0, height=2, width=3,
                           step=3 * channels, data=bytes(range(1, 6 * channels + 1)))
    try:
        got = np.asarray(bridge.imgmsg_to_cv2(view, desired_encoding=desired))
    except Exception as exc:  # exactly what a broken bridge does: TypeError, KeyError, ...
        return f'{type(exc).__name__}: {exc}'
    want = _numpy_decode(view, desired)
    if got.dtype != np.uint8 or not np.array_equal(got, want):
        return 'wrong pixels'
    return None


def broken_calls(bridge: Any) -> FrozenSet[Tuple[str, str]]:
    """The (encoding, desired) calls of BRIDGE_CALLS that ``bridge`` gets wrong, probed once.

    Why: the PyPI cv_bridge port decodes channels with OpenCV 4's type layout, so under OpenCV
    5 every colour image fails ('buffer is too small for requested array'); a probe catches that
    and any future variant, while a working bridge keeps decoding everything itself.
    """
    with _probe_lock:
        broken = _broken.get(bridge)
        if broken is None:
            reasons = {c: _probe(bridge, *c) for c in BRIDGE_CALLS}
            broken = _broken[bridge] = frozenset(c for c, r in reasons.items() if r)
            if broken:
                _warn_fallback(reasons)
        return broken


def _warn_fallback(reasons: Dict[Tuple[str, str], Optional[str]]) -> None:
    """The ONE warning per bridge object: which calls fall back, the versions and why."""
    bad = {c: r for c, r in reasons.items() if r}
    calls = ', '.join(f'{enc}->{desired}' for enc, desired in bad)
    log.warning('sam2_ros: cv_bridge %s with OpenCV %s and numpy %s fails its self-test for '
                '%s (%s); decoding those with numpy instead (same pixels). The PyPI cv_bridge '
                'port hard-codes OpenCV 4\'s type layout: opencv-python-headless<5 avoids this.',
                _version('cv-bridge'), cv2.__version__, np.__version__, calls,
                next(iter(bad.values())))


def _version(dist: str) -> str:
    """An installed distribution's version for the warning; never fails (the log must go out)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return '(unknown version)'


def decode(bridge: Any, view: Any, desired: str) -> np.ndarray:
    """cv_bridge's imgmsg_to_cv2 (the project's decoder), or numpy where that call is broken."""
    if (view.encoding, desired) in broken_calls(bridge):
        return _numpy_decode(view, desired)
    return bridge.imgmsg_to_cv2(view, desired_encoding=desired)
