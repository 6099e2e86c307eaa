"""``sensor_msgs/CameraInfo`` -> :class:`sam2_ros.stereo.Camera` (the core takes plain arrays).

Works on any object with CameraInfo's fields (the generated message or a stand-in), so it is
tested without DDS. Binning and a region of interest change the image's pixel grid against
the calibration's; neither is supported (refused with the reason) rather than guessed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sam2_ros.stereo import Calibration, Camera


def camera_from_msg(msg: Any, rectified: bool = False) -> Camera:
    """One CameraInfo -> Camera (ValueError naming the defect: uncalibrated, binned, ROI,
    wrong array sizes, NaN, unsupported distortion model). rectified: the tracked images are
    the rectified ones, whose intrinsics are P's; K and D (of the raw images, maybe a fisheye
    model the raw path cannot undistort) are not used, so not checked."""
    binning = (int(msg.binning_x), int(msg.binning_y))
    if any(b > 1 for b in binning):
        raise ValueError(f'camera_info of {msg.header.frame_id!r}: binning {binning} is not '
                         f'supported (publish the full-resolution images)')
    roi = msg.roi
    if any(int(v) for v in (roi.x_offset, roi.y_offset, roi.width, roi.height)) and not (
            int(roi.x_offset) == 0 and int(roi.y_offset) == 0
            and int(roi.width) == int(msg.width) and int(roi.height) == int(msg.height)):
        raise ValueError(f'camera_info of {msg.header.frame_id!r}: a region of interest '
                         f'({roi.x_offset}, {roi.y_offset}, {roi.width}x{roi.height}) is not '
                         f'supported')
    p = np.asarray(msg.p, np.float64)
    raw = not rectified or p.size != 12
    try:
        return Camera(K=np.asarray(msg.k, np.float64) if raw else p.reshape(3, 4)[:, :3],
                      P=p, R=np.asarray(msg.r, np.float64), width=int(msg.width),
                      height=int(msg.height), frame_id=str(msg.header.frame_id),
                      D=np.asarray(msg.d, np.float64) if raw else np.zeros(0),
                      distortion_model=str(msg.distortion_model) if raw else 'plumb_bob')
    except ValueError as exc:
        raise ValueError(f'camera_info of {msg.header.frame_id!r}: {exc}') from exc


def calibration_from_msgs(left: Any, right: Any, rectified: bool = False) -> Calibration:
    """The pair's two CameraInfo messages -> Calibration (points in the left camera's frame;
    ValueError naming the defect, also a pair without a baseline)."""
    return Calibration(camera_from_msg(left, rectified), camera_from_msg(right, rectified))
