"""The image path of the node: raw and compressed frames in, mask and overlay images out.

Incoming images are validated first: a bridge trusts ``height``/``width``/``data`` and would
read garbage or raise obscure numpy errors, so every defect a camera driver or a hand-written
publisher can produce becomes a :class:`FrameError` with a sentence a user can act on. A raw
frame is then a numpy view of the message's bytes honouring ``step`` (:func:`raw_view`, no
copy), decoded by cv_bridge with what that bridge needs worked around
(:mod:`sam2_ros.ros.cv_bridge_compat`). Compressed frames are checked from their header before
decoding. Outgoing images are built here with one copy of the pixels (:func:`image_msg`).
Pure functions of their inputs, tested without DDS.
"""

from __future__ import annotations

import array
import struct
from typing import Any, Optional, Tuple

import cv2
import numpy as np

from sam2_ros.engine.errors import FrameError, PromptError
from sam2_ros.ros import cv_bridge_compat, native_stderr
from sam2_ros.ros.cv_bridge_compat import ENCODING_CHANNELS

COMPRESSED_FORMATS = ('jpeg', 'jpg', 'png')
# Compressed images declaring more pixels are refused before decoding (the default of the
# node's max_image_pixels): 8K UHD.
MAX_IMAGE_PIXELS = 7680 * 4320


# ----------------------------------------------------------------------------- raw in

def check_image(msg: Any) -> int:
    """Validate a sensor_msgs/Image before decoding; return its channel count.

    Raises FrameError for an unknown encoding, zero size, ``step`` shorter than a row or
    ``data`` shorter than ``height * step``.
    """
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
    """sensor_msgs/Image -> [H, W, 3] uint8 RGB (a copy; the message may be reused)."""
    channels = check_image(msg)
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

def compressed_header(data: bytes) -> Optional[Tuple[str, int, int, int]]:
    """(kind, width, height, bits per sample) read from a PNG or JPEG header without
    decoding it; None when neither header is found. Neither OpenCV nor Pillow reports a
    JPEG's or PNG's bit depth without decoding, hence the few lines of header reading."""
    if data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) >= 26 and data[12:16] == b'IHDR':
        w, h = struct.unpack('>II', data[16:24])
        return 'png', w, h, data[24]
    if data[:2] == b'\xff\xd8':
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                return None
            marker = data[i + 1]
            if marker == 0xFF:          # fill byte
                i += 1
                continue
            if 0xD0 <= marker <= 0xD9 or marker == 0x01:   # markers without a length
                i += 2
                continue
            seg = struct.unpack('>H', data[i + 2:i + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):   # SOFn
                bits = data[i + 4]
                h, w = struct.unpack('>HH', data[i + 5:i + 9])
                return 'jpeg', w, h, bits
            i += 2 + seg
    return None


def compressed_to_rgb(msg: Any, bridge: Any,
                      max_pixels: int = MAX_IMAGE_PIXELS) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg or png, 8 bit) -> [H, W, 3] uint8 RGB.

    The header is checked before decoding: a small PNG can declare 20000x20000 (1.2 GB
    decoded, and the allocator keeps it), so more than ``max_pixels`` is refused; 16-bit
    images (depth, HDR) are refused rather than silently cut to 8 bit.
    """
    fmt = (msg.format or '').lower()
    if not any(f in fmt for f in COMPRESSED_FORMATS) or 'compresseddepth' in fmt:
        raise FrameError(f'unsupported compressed format {msg.format!r}; accepted: jpeg, png')
    if len(msg.data) == 0:
        raise FrameError('compressed image with no data')
    head = compressed_header(bytes(msg.data[:65536]))
    if head is None:
        raise FrameError(f'cannot decode compressed image ({msg.format!r}, '
                         f'{len(msg.data)} bytes): no PNG or JPEG header')
    kind, w, h, bits = head
    if w * h > max_pixels:
        raise FrameError(f'{kind} declares {w}x{h} = {w * h} pixels, more than '
                         f'max_image_pixels {max_pixels}: not decoded')
    if bits != 8:
        raise FrameError(f'{kind} has {bits} bits per sample; only 8-bit images are tracked '
                         f'(convert it, e.g. depth, to 8-bit colour first)')
    with native_stderr.captured() as said:   # libpng's own lines: this error's reason
        try:   # passthrough: what cv2.imdecode gives
            img, failed = bridge.compressed_imgmsg_to_cv2(msg), None
        except Exception as exc:
            img, failed = None, exc
    why = f' ({"; ".join(said)[:300]})' if said else ''
    if failed is not None:
        raise FrameError(f'cv_bridge could not decode {msg.format!r}: {failed}{why}') from failed
    if img is None or img.size == 0:
        raise FrameError(f'could not decode {msg.format!r} image ({len(msg.data)} bytes){why}')
    if img.dtype != np.uint8:
        raise FrameError(f'decoded {msg.format!r} image is {img.dtype}, expected 8-bit')
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    if img.shape[2] == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


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


def image_data(img: np.ndarray) -> array.array:
    """A C-contiguous uint8 array -> the ``array.array('B')`` that rclpy keeps as the message's
    ``data`` as is (any other type is converted by its setter). One copy of the pixels
    (``array.array('B', img.tobytes())`` makes two); publish() then serializes it once more,
    which no Python type avoids."""
    data = array.array('B')
    data.frombytes(memoryview(img).cast('B'))
    return data
