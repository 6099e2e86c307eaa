"""``sensor_msgs/Image`` read from its serialized form (CDR), the pixels a view of the buffer;
and written in it, for ``Publisher.publish(bytes)``.

Why: rclpy converts every received message into a Python object, a 2.7 MB 720p image
included (the C struct, then the Python array: two copies), holding the GIL throughout,
while the tracking worker waits for it (``tools/dds_probe.py --gil-probe``). A subscription
with ``raw=True`` hands over the serialized bytes instead (one copy); this reads the fields
from them, and the pixels stay a view of those bytes. Little-endian CDR (XCDR1) only, as Fast
DDS and Cyclone DDS write on x86 and ARM; anything else is a clear ValueError.

Publishing is the mirror image: ``publish(msg)`` copies the pixels into the message's array,
converts the message to its C struct (a second copy) and serializes it (a third), all under
the GIL; ``image_to_cdr`` writes the serialized bytes directly (one copy of the pixels), and
rclpy hands them to the middleware as they are. They are rclpy's ``serialize_message`` of
the same message but for the padding bytes (zeros here; Fast CDR leaves them unset), and
read back as the same message (``test/ros/test_image_cdr.py``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

CDR_LE = b'\x00\x01'            # encapsulation id: plain CDR, little-endian
CDR_BE = b'\x00\x00'            # and big-endian


@dataclass
class CdrImage:
    """The fields of a ``sensor_msgs/Image`` as the node reads them (``header`` a real
    std_msgs/Header, ``data`` a memoryview of the serialized buffer, not a copy)."""

    header: Any
    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: memoryview
    # non-empty: a message the node received but could not take (refused_image); decoding it
    # raises this as the frame's error, so it is reported like any bad frame
    refused: str = ''


class _Reader:
    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 4            # alignment counts from after the 4-byte id

    def take(self, fmt: str, size: int, align: int):
        self.pos = 4 + -(-(self.pos - 4) // align) * align
        if self.pos + size > len(self.buf):
            raise ValueError(f'truncated Image message ({len(self.buf)} bytes)')
        out = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return out

    def string(self) -> str:
        (n,) = self.take('<I', 4, 4)
        if n < 1 or self.pos + n > len(self.buf):
            raise ValueError(f'truncated or malformed Image message ({len(self.buf)} bytes)')
        s = bytes(self.buf[self.pos:self.pos + n - 1]).decode('utf-8', 'replace')
        self.pos += n
        return s


def image_from_cdr(raw: Union[bytes, bytearray, memoryview]) -> CdrImage:
    """A serialized ``sensor_msgs/Image`` -> its fields; ValueError if it is not one."""
    buf = memoryview(raw)
    if len(buf) < 4 or bytes(buf[:2]) != CDR_LE:
        raise ValueError('not a little-endian CDR message')
    r = _Reader(buf)
    sec, nanosec = r.take('<iI', 8, 4)
    frame_id = r.string()
    height, width = r.take('<II', 8, 4)
    encoding = r.string()
    (big,) = r.take('<B', 1, 1)
    step, n = r.take('<II', 8, 4)
    if r.pos + n > len(buf):
        raise ValueError(f'truncated Image message: {n} data bytes declared, '
                         f'{len(buf) - r.pos} present')
    return CdrImage(ros_header(sec, nanosec, frame_id), height, width, encoding, big, step,
                    buf[r.pos:r.pos + n])


def header_stamp(raw: Union[bytes, bytearray, memoryview, np.ndarray]
                 ) -> Optional[Tuple[int, int]]:
    """(sec, nanosec) of the ``std_msgs/Header`` a serialized message (``sensor_msgs/Image``)
    starts with, from its first 12 bytes, in either byte order; None when they are not CDR."""
    buf = memoryview(raw).cast('B')
    order = {CDR_LE: '<', CDR_BE: '>'}.get(bytes(buf[:2])) if len(buf) >= 12 else None
    if order is None:
        return None
    sec, nanosec = struct.unpack_from(order + 'iI', buf, 4)
    return sec, nanosec


def refused_image(sec: int, nanosec: int, reason: str) -> CdrImage:
    """An image message received but not taken (e.g. larger than the receiving process hands
    over): its stamp, no pixels, and ``reason``, which decoding it raises as a FrameError
    (``images.check_image``), so the frame is reported like any bad frame: in the next
    TrackingState's errors and the frame error count."""
    return CdrImage(ros_header(sec, nanosec, ''), 0, 0, '', 0, 0, memoryview(b''),
                    refused=reason)


def _cdr_string(s: str, pos: int) -> bytes:
    """A CDR string at offset ``pos`` (after the id): padding to 4, length with the NUL,
    the bytes, the NUL."""
    raw = s.encode('utf-8')
    return b'\x00' * (-pos % 4) + struct.pack('<I', len(raw) + 1) + raw + b'\x00'


def image_to_cdr(img: np.ndarray, encoding: str, header: Any) -> bytes:
    """[H, W] or [H, W, C] uint8 array -> a serialized ``sensor_msgs/Image`` (little-endian
    CDR) with ``header`` (a std_msgs/Header, or anything with ``stamp.sec``,
    ``stamp.nanosec`` and ``frame_id``), step = W * C, not big-endian."""
    img = np.ascontiguousarray(img, dtype=np.uint8)
    if img.ndim not in (2, 3):
        raise ValueError(f'expected an [H, W] or [H, W, C] image, got shape {img.shape}')
    h, w = int(img.shape[0]), int(img.shape[1])
    step = w * (1 if img.ndim == 2 else int(img.shape[2]))
    head = bytearray(CDR_LE + b'\x00\x00')
    head += struct.pack('<iI', int(header.stamp.sec), int(header.stamp.nanosec))
    head += _cdr_string(header.frame_id, len(head) - 4)
    head += b'\x00' * (-(len(head) - 4) % 4) + struct.pack('<II', h, w)
    head += _cdr_string(encoding, len(head) - 4)
    head += struct.pack('<B', 0)                                      # is_bigendian
    head += b'\x00' * (-(len(head) - 4) % 4) + struct.pack('<II', step, img.nbytes)
    return b''.join((head, memoryview(img).cast('B')))


def ros_header(sec: int, nanosec: int, frame_id: str) -> Any:
    from builtin_interfaces.msg import Time
    from std_msgs.msg import Header

    return Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=frame_id)


def subscribe_images(node: Any, topic: str, callback: Callable[[Any], None], qos: Any,
                     serialized: bool) -> Any:
    """``node``'s subscription of sensor_msgs/Image on ``topic``; ``serialized``: taken as
    serialized messages and read by ``image_from_cdr`` (``callback`` gets a ``CdrImage``;
    one that cannot be read is logged and skipped), else rclpy's messages."""
    from sensor_msgs.msg import Image

    if not serialized:
        return node.create_subscription(Image, topic, callback, qos)

    def take(raw: bytes) -> None:
        try:
            msg = image_from_cdr(raw)
        except ValueError as exc:
            node.get_logger().error(f'{topic}: unreadable image message: {exc}',
                                    throttle_duration_sec=5.0)
            return
        callback(msg)
    return node.create_subscription(Image, topic, take, qos, raw=True)
