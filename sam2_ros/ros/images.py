"""The image path of the node: raw and compressed frames in, mask and overlay images out.

Incoming images are validated first: a bridge trusts ``height``/``width``/``data`` and would
read garbage or raise obscure numpy errors, so every defect a camera driver or a hand-written
publisher can produce becomes a :class:`FrameError` with a sentence a user can act on. A raw
frame is then a numpy view of the message's bytes honouring ``step`` (:func:`raw_view`, no
copy), decoded by cv_bridge with what that bridge needs worked around
(:mod:`sam2_ros.ros.cv_bridge_compat`). Compressed frames are checked from their header before
decoding, by :mod:`sam2_ros.engine.decode` (one header parser for the host and GPU decoders).
Outgoing images are built here with one copy of the pixels (:func:`image_msg`).
Pure functions of their inputs, tested without DDS.
"""

from __future__ import annotations

import array
from typing import Any

import cv2
import numpy as np

from sam2_ros.engine import decode
from sam2_ros.engine.decode import MAX_IMAGE_PIXELS
from sam2_ros.engine.errors import FrameError, PromptError
from sam2_ros.ros import cv_bridge_compat, native_stderr
from sam2_ros.ros.cv_bridge_compat import ENCODING_CHANNELS

# Outgoing JPEGs (the overlay of a compressed input): image_transport's format string for an
# rgb8 image, and a quality for eyes (the overlay is never measured on).
JPEG_FORMAT = 'rgb8; jpeg compressed bgr8'
JPEG_QUALITY = 90

# ----------------------------------------------------------------------------- raw in

def check_image(msg: Any) -> int:
    """Validate a sensor_msgs/Image before decoding; return its channel count.

    Raises FrameError for an unknown encoding, zero size, ``step`` shorter than a row or
    ``data`` shorter than ``height * step``, and with its reason for a message the node
    received but could not take (``image_cdr.refused_image``).
    """
    refused = getattr(msg, 'refused', '')      # a CdrImage; sensor_msgs/Image has no such field
    if refused:
        raise FrameError(refused)
    enc = msg.encoding
    if enc not in ENCODING_CHANNELS:
        raise FrameError(f'unsupported image encoding {enc!r}; accepted: '
                         f'{", ".join(ENCODING_CHANNELS)}')
    if msg.width == 0 or msg.height == 0:
        raise FrameError(f'zero-size image ({msg.width}x{msg.height})')
    channels = ENCODING_CHANNELS[enc]
    row = msg.width * channels
    if msg.step < row:
        raise FrameError(f'image step {msg.step} < width*channels {row} ({enc})')
    if len(msg.data) < msg.height * msg.step:
        raise FrameError(f'image data has {len(msg.data)} bytes, height*step needs '
                         f'{msg.height * msg.step}')
    return channels


def raw_view(msg: Any, channels: int) -> np.ndarray:
    """The [H, W, C] uint8 pixels of a validated Image as a view of its data (rows ``step``
    bytes apart; no copy). ``is_bigendian`` means nothing for these 8-bit encodings."""
    return np.ndarray((msg.height, msg.width, channels), np.uint8, memoryview(msg.data),
                      strides=(msg.step, channels, 1))


def image_to_rgb(msg: Any, bridge: Any) -> np.ndarray:
    """sensor_msgs/Image -> [H, W, 3] uint8 RGB. rgb8 (what most pipelines into the tracker
    carry): a view of the message's bytes (read-only where they are, e.g. a frame-ring slot,
    which the view keeps from being reused): the frame's one host copy is then the tracker's
    own into pinned memory, not a fresh 2.7 MB array per 720p frame as well. Other encodings:
    converted by cv_bridge, a new array."""
    channels = check_image(msg)
    if msg.encoding == 'rgb8':
        return raw_view(msg, channels)
    try:
        img = cv_bridge_compat.decode(bridge, msg, raw_view(msg, channels), 'rgb8')
    except Exception as exc:  # cv_bridge raises CvBridgeError, KeyError, TypeError...
        raise FrameError(f'cv_bridge could not convert {msg.encoding}: {exc}') from exc
    return np.array(img, dtype=np.uint8, copy=True, order='C')


def mask_to_bool(msg: Any, bridge: Any) -> np.ndarray:
    """A mono8 mask image (sensor_msgs/Image) -> [H, W] bool (nonzero = object)."""
    if msg.encoding != 'mono8':
        raise PromptError(f'prompt mask must be mono8, got {msg.encoding!r}')
    try:
        channels = check_image(msg)
    except FrameError as exc:
        raise PromptError(f'prompt mask: {exc}') from exc
    px = raw_view(msg, channels)
    return np.asarray(cv_bridge_compat.decode(bridge, msg, px, 'passthrough')) > 0


# ----------------------------------------------------------------------------- compressed in

def compressed_to_rgb(msg: Any, max_pixels: int = MAX_IMAGE_PIXELS) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg or png, 8 bit) -> [H, W, 3] uint8 RGB on the host.

    Checked from the header before decoding (a small PNG can declare 20000x20000: 1.2 GB
    decoded, and the allocator keeps it; 16-bit images are refused rather than cut to 8 bit;
    truncated data is refused) and decoded by ``cv2.imdecode`` as cv_bridge's
    ``compressed_imgmsg_to_cv2`` does (the same pixels), both by the ROS-free
    :mod:`sam2_ros.engine.decode`, whose :class:`~sam2_ros.engine.decode.FrameDecoder` the node
    uses to decode JPEG on the GPU. What libpng / libjpeg print meanwhile is the error's
    reason, not stray stderr lines (:mod:`~sam2_ros.ros.native_stderr`).
    """
    head = decode.check_compressed(msg.data, msg.format or '', max_pixels)
    return decode.decode_cpu(msg.data, head, native_stderr.captured)


# ----------------------------------------------------------------------------- images out

def image_msg(img: np.ndarray, encoding: str, header: Any) -> Any:
    """[H, W] mono8 or [H, W, 3] rgb8 array -> sensor_msgs/Image with ``header`` as given."""
    from sensor_msgs.msg import Image

    img = np.ascontiguousarray(img, dtype=np.uint8)
    msg = Image()
    msg.header = header
    msg.height, msg.width = int(img.shape[0]), int(img.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = msg.width * (1 if img.ndim == 2 else int(img.shape[2]))
    msg.data = image_data(img)
    return msg


def jpeg_msg(rgb: np.ndarray, header: Any, quality: int = JPEG_QUALITY) -> Any:
    """[H, W, 3] uint8 RGB -> sensor_msgs/CompressedImage (JPEG, image_transport's format for
    an rgb8 image) with ``header`` as given."""
    from sensor_msgs.msg import CompressedImage

    ok, buf = cv2.imencode('.jpg', np.ascontiguousarray(rgb[..., ::-1]),
                           [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError(f'JPEG encoding of a {rgb.shape[1]}x{rgb.shape[0]} image failed')
    msg = CompressedImage()
    msg.header = header
    msg.format = JPEG_FORMAT
    msg.data = image_data(buf.reshape(-1))
    return msg


def image_data(img: np.ndarray) -> array.array:
    """A C-contiguous uint8 array -> the ``array.array('B')`` that rclpy keeps as the message's
    ``data`` as is (any other type is converted by its setter). One copy of the pixels
    (``array.array('B', img.tobytes())`` makes two); publish() then serializes it once more,
    which no Python type avoids."""
    data = array.array('B')
    data.frombytes(memoryview(img).cast('B'))
    return data
