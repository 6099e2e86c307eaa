"""The label mask as a PNG ``sensor_msgs/CompressedImage`` (``~/mask/compressed``).

A label mask is a few flat regions (0 background, the object ids): at 720p it is 0.9 MB as a
mono8 ``sensor_msgs/Image`` and a few KB as a PNG, lossless. What makes the PNG cheap to
build: no row filter (a label image has nothing for one to predict) and zlib's run-length
strategy at level 1 (runs of one id are all there is); both keep every pixel, so the decoded
PNG is the label mask. The format string is image_transport's (``compressed_image_transport``
writes ``"<encoding>; png compressed "`` for a mono image), so rqt_image_view and
``image_transport republish`` read it.

No rclpy at module level: :func:`encode_label_png` is plain numpy/cv2; :func:`mask_msg` imports
the message type when called.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from sam2_ros.ros.images import image_data

MASK_FORMAT = 'mono8; png compressed '
# zlib level 1 with the run-length strategy and no PNG row filter (see the module docstring)
PNG_PARAMS = (cv2.IMWRITE_PNG_COMPRESSION, 1, cv2.IMWRITE_PNG_STRATEGY,
              cv2.IMWRITE_PNG_STRATEGY_RLE, cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_NONE)


def encode_label_png(label: np.ndarray) -> np.ndarray:
    """[H, W] uint8 label mask -> the bytes of a lossless 8-bit gray PNG (a 1-D uint8 array)."""
    if label.ndim != 2 or label.dtype != np.uint8:
        raise ValueError(f'label mask must be [H, W] uint8, got {label.dtype} '
                         f'{tuple(label.shape)}')
    ok, buf = cv2.imencode('.png', np.ascontiguousarray(label), list(PNG_PARAMS))
    if not ok:
        raise ValueError(f'PNG encoding of a {label.shape[1]}x{label.shape[0]} mask failed')
    return buf.reshape(-1)


def mask_msg(label: np.ndarray, header: Any) -> Any:
    """[H, W] uint8 label mask -> sensor_msgs/CompressedImage (PNG) with ``header`` as given."""
    from sensor_msgs.msg import CompressedImage

    msg = CompressedImage()
    msg.header = header
    msg.format = MASK_FORMAT
    msg.data = image_data(encode_label_png(label))
    return msg
