"""cv_bridge as the raw-image decoder, and every workaround a bridge needs, in one place.

A robot's ROS 2 cv_bridge honours ``step`` (when it is a multiple of the pixel size) and, with
OpenCV 4 or 5, converts right; it is used as it is. The PyPI port (ROS 1's cv_bridge 1.13)
needs three workarounds, each found by a probe rather than by the package's name, so a bridge
that gets them right is never worked around:

* ``broken``: it hard-codes OpenCV 4's type layout (``CV_MAT_CN``), so under OpenCV 5
  ``CV_8UC3`` reads as 9 channels and every colour image fails ('buffer is too small for
  requested array'). Those calls are computed with numpy from the frame's view (bit-identical
  to cv_bridge under OpenCV 4), with one warning naming the versions.
* ``ignores_step``: it reads rows as ``width * channels`` bytes (a driver's padded rows would
  shear the image); the ROS 2 bridge rounds ``step`` down to whole pixels. Padded frames are
  repacked into a stand-in message first.
* ``byte_order_fails``: ``is_bigendian`` makes it call ``ndarray.newbyteorder`` (removed in
  numpy 2; meaningless for 8-bit data). Such frames get a stand-in with the flag cleared (the
  pixels are not copied).

Each bridge object is probed once, on tiny images whose bytes all differ (a wrong channel count
or order cannot pass unnoticed). Outgoing images never go through a bridge: the port's
``cv2_to_imgmsg`` is broken under numpy 2 and both bridges copy the pixels twice
(:func:`sam2_ros.ros.images.image_msg` copies them once).
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass
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
Call = Tuple[str, str]   # (encoding, desired_encoding) of imgmsg_to_cv2
# Every call sam2_ros/ros/images.py makes on cv_bridge's imgmsg_to_cv2.
BRIDGE_CALLS: Tuple[Call, ...] = tuple((enc, 'rgb8') for enc in ENCODING_CHANNELS) + (
    ('mono8', 'passthrough'),)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BridgeReport:
    """What one bridge object gets wrong, per call (see the module docstring)."""

    broken: FrozenSet[Call]             # decoded with numpy instead
    ignores_step: FrozenSet[Call]       # padded rows repacked before the call
    byte_order_fails: FrozenSet[Call]   # is_bigendian cleared before the call


# Per bridge object (weakly held, so CvBridge and test stand-ins must allow weak references).
_reports: 'weakref.WeakKeyDictionary[Any, BridgeReport]' = weakref.WeakKeyDictionary()
_probe_lock = threading.Lock()


def numpy_decode(px: np.ndarray, encoding: str, desired: str) -> np.ndarray:
    """What cv_bridge's imgmsg_to_cv2 returns for the [H, W, C] uint8 view ``px`` of a frame.

    The stand-in for a call a bridge gets wrong; bit-identical to cv_bridge under OpenCV 4
    (pure channel copies). Copied channel by channel, which is several times faster than
    copying a reversed or cut channel slice. Returns a view where cv_bridge does.
    """
    if desired == 'passthrough' or encoding == desired:   # cv_bridge returns these as is
        return px[..., 0] if px.shape[2] == 1 else px
    out = np.empty(px.shape[:2] + (3,), np.uint8)
    for dst, ch in enumerate(RGB_CHANNELS[encoding]):
        out[..., dst] = px[..., ch]
    return out


def _probe_msg(encoding: str, pad: int = 0, bigendian: int = 0) -> SimpleNamespace:
    channels = ENCODING_CHANNELS[encoding]
    step = 3 * channels + pad
    return SimpleNamespace(encoding=encoding, is_bigendian=bigendian, height=2, width=3,
                           step=step, data=bytes(range(1, 2 * step + 1)))


def _probe(bridge: Any, call: Call, pad: int = 0, bigendian: int = 0) -> Optional[str]:
    """None if ``bridge`` decodes a tiny image of this layout right, else why not."""
    encoding, desired = call
    msg = _probe_msg(encoding, pad, bigendian)
    try:
        got = np.asarray(bridge.imgmsg_to_cv2(msg, desired_encoding=desired))
    except Exception as exc:  # exactly what a broken bridge does: TypeError, KeyError, ...
        return f'{type(exc).__name__}: {exc}'
    rows = np.frombuffer(msg.data, np.uint8).reshape(2, msg.step)
    px = rows[:, :3 * ENCODING_CHANNELS[encoding]].reshape(2, 3, -1)
    if got.dtype != np.uint8 or not np.array_equal(got, numpy_decode(px, encoding, desired)):
        return 'wrong pixels'
    return None


def report(bridge: Any) -> BridgeReport:
    """What ``bridge`` gets wrong, probed once per bridge object. A call that fails on a packed
    image is not probed further (it is never made)."""
    with _probe_lock:
        found = _reports.get(bridge)
        if found is None:
            reasons = {c: _probe(bridge, c) for c in BRIDGE_CALLS}
            ok = [c for c, r in reasons.items() if r is None]
            found = _reports[bridge] = BridgeReport(
                broken=frozenset(c for c, r in reasons.items() if r),
                ignores_step=frozenset(c for c in ok if _probe(bridge, c, pad=1)),
                byte_order_fails=frozenset(c for c in ok if _probe(bridge, c, bigendian=1)))
            if found.broken:
                _warn_fallback(reasons)
        return found


def broken_calls(bridge: Any) -> FrozenSet[Call]:
    """The calls of BRIDGE_CALLS that ``bridge`` gets wrong even on a packed image."""
    return report(bridge).broken


def _warn_fallback(reasons: Dict[Call, Optional[str]]) -> None:
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


def decode(bridge: Any, msg: Any, px: np.ndarray, desired: str) -> np.ndarray:
    """cv_bridge's imgmsg_to_cv2 of a validated Image ``msg`` whose [H, W, C] view is ``px``,
    with the workarounds this bridge needs (numpy for a broken call)."""
    call = (msg.encoding, desired)
    found = report(bridge)
    if call in found.broken:
        return numpy_decode(px, msg.encoding, desired)
    row = msg.width * px.shape[2]
    pack = call in found.ignores_step and (msg.step != row or len(msg.data) != msg.height * row)
    if pack or (msg.is_bigendian and call in found.byte_order_fails):
        msg = SimpleNamespace(encoding=msg.encoding, is_bigendian=0, height=msg.height,
                              width=msg.width, step=row if pack else msg.step,
                              data=px.tobytes() if pack else msg.data)
    return bridge.imgmsg_to_cv2(msg, desired_encoding=desired)
