"""Serialized messages published through rcl with Python's GIL released (``publish_without_gil``).

Why: ``rclpy``'s ``Publisher.publish(bytes)`` copies the bytes into an rcl serialized message
and hands it to the middleware without releasing the GIL; for a 0.9 MB mask or a 2.7 MB
overlay that is the longest stretch the node's process spends in one call holding it. Every
other thread waits meanwhile: the tracking worker, the executor taking the next image, and
with two cameras the other camera's publisher, so one node serving a stereo pair sends camera
1's mask only after camera 0's. Here ``rcl_publish_serialized_message`` of the librcl that
rclpy loaded is called through ctypes, which releases the GIL for the call, on the bytes' own
buffer (no copy). The wire bytes are the same; a lifecycle publisher that is not active
drops the message as rclpy's does; a process where librcl cannot be found (not Linux, an
rclpy without the publisher's pointer) publishes through rclpy.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any, Callable, Optional

Send = Callable[[Any, bytes], None]       # (publisher, serialized message)


class _Allocator(ctypes.Structure):        # rcutils_allocator_t: not used by a publish
    _fields_ = [('allocate', ctypes.c_void_p), ('deallocate', ctypes.c_void_p),
                ('reallocate', ctypes.c_void_p), ('zero_allocate', ctypes.c_void_p),
                ('state', ctypes.c_void_p)]


class SerializedMessage(ctypes.Structure):
    """rcl_serialized_message_t (rcutils_uint8_array_t): the buffer and its length."""

    _fields_ = [('buffer', ctypes.c_void_p), ('buffer_length', ctypes.c_size_t),
                ('buffer_capacity', ctypes.c_size_t), ('allocator', _Allocator)]


def librcl_path(maps: str = '/proc/self/maps') -> Optional[str]:
    """The librcl this process has loaded (rclpy's), None if none is mapped."""
    try:
        with open(maps) as f:
            found = re.search(r'(/\S*/librcl\.so[\w.]*)\s*$', f.read(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def rcl_publish_function(path: Optional[str] = None) -> Optional[Callable[..., int]]:
    """librcl's ``rcl_publish_serialized_message`` as a ctypes function (the GIL released
    while it runs), None where it cannot be loaded."""
    path = path or librcl_path()
    if path is None:
        return None
    try:
        fn = ctypes.CDLL(path).rcl_publish_serialized_message
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(SerializedMessage), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


class GilFreePublish:
    """``send(pub, raw)``: ``raw`` (a serialized message) published on rclpy publisher
    ``pub`` through rcl with the GIL released; through ``pub.publish`` where that is not
    possible. ``calls``: messages that went through rcl."""

    def __init__(self, fn: Optional[Callable[..., int]] = None) -> None:
        self.fn = fn if fn is not None else rcl_publish_function()
        self.calls = 0

    @property
    def available(self) -> bool:
        return self.fn is not None

    def send(self, pub: Any, raw: bytes) -> None:
        if self.fn is None or not isinstance(raw, bytes):
            pub.publish(raw)
            return
        if not getattr(pub, 'is_activated', True):    # an inactive lifecycle publisher
            pub.publish(raw)                             # drops it, as rclpy decides
            return
        buf = ctypes.c_char_p(raw)          # a pointer into the bytes object, not a copy
        msg = SerializedMessage(ctypes.cast(buf, ctypes.c_void_p), len(raw), len(raw),
                                _Allocator())
        with pub.handle:                    # the publisher is not destroyed meanwhile
            ret = self.fn(pub.handle.pointer, ctypes.pointer(msg), None)
        if ret != 0:
            raise RuntimeError(f'rcl_publish_serialized_message failed ({ret}) on '
                               f'{pub.topic_name}')
        self.calls += 1


def sender(enabled: bool) -> Send:
    """The publish function of the node's raw images: GIL-free where ``enabled`` and
    possible, else rclpy's."""
    if enabled:
        gil_free = GilFreePublish()
        if gil_free.available:
            return gil_free.send
    return lambda pub, raw: pub.publish(raw)
