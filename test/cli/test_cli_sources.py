"""The offline tool's frame sources (sam2_ros/cli/sources.py) read a file as the node's
decoders do, so one file is the same frame offline and in ROS."""

import struct

import cv2
import numpy as np

from sam2_ros.cli.sources import open_source
from sam2_ros.engine import decode


def _with_exif_orientation(jpeg: bytes, orientation: int) -> bytes:
    """``jpeg`` with an EXIF APP1 segment (little-endian TIFF, one IFD entry: Orientation)
    right after its start-of-image marker."""
    ifd = struct.pack('<H', 1) + struct.pack('<HHIHH', 0x0112, 3, 1, orientation, 0) + \
        struct.pack('<I', 0)
    body = b'Exif\x00\x00' + b'II*\x00' + struct.pack('<I', 8) + ifd
    return jpeg[:2] + b'\xff\xe1' + struct.pack('>H', len(body) + 2) + body + jpeg[2:]


def test_folder_jpeg_with_exif_rotation_is_the_nodes_frame(tmp_path):
    rgb = np.zeros((24, 32, 3), np.uint8)
    rgb[:, :16] = 255                              # left half white: a rotation shows
    ok, buf = cv2.imencode('.jpg', rgb, [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    data = _with_exif_orientation(buf.tobytes(), 6)    # 6: "rotate 90 degrees clockwise"
    assert cv2.imread(_write(tmp_path, data), cv2.IMREAD_COLOR).shape[:2] == (32, 24)
    (_, _, offline), = list(open_source(str(tmp_path)))
    node = decode.decode_cpu(data, decode.check_compressed(data, 'jpeg'))
    assert offline.shape == node.shape == (24, 32, 3)
    np.testing.assert_array_equal(offline, node)


def _write(folder, data: bytes) -> str:
    path = folder / 'f0.jpg'
    path.write_bytes(data)
    return str(path)
