"""Overlay rendering shared by the offline CLI and (later) the ROS node: each object's mask
tinted in its own color, outlined, and labelled with its id.

Colors are a pure function of the object id (golden-ratio hue steps), so an object keeps its
color across frames, runs and tools, and neighbouring ids get well separated hues. Overlaps are
drawn as :meth:`FrameResult.label_mask` resolves them (the higher id wins), so the overlay
shows exactly what the label-mask PNGs say.
"""

from __future__ import annotations

import colorsys
from typing import Tuple

import cv2
import numpy as np

from sam2_ros.engine.types import TRACKING, FrameResult

_GOLDEN = 0.618033988749895


def id_color(obj_id: int) -> Tuple[int, int, int]:
    """The RGB color of an object id: stable, and distinct for neighbouring ids."""
    r, g, b = colorsys.hsv_to_rgb((obj_id * _GOLDEN) % 1.0, 0.85, 1.0)
    return int(r * 255), int(g * 255), int(b * 255)


def _palette() -> np.ndarray:
    """[256, 1, 3] uint8 lookup table (cv2.LUT's layout): label value -> color (0, the
    background, is unused)."""
    lut = np.zeros((256, 1, 3), np.uint8)
    for i in range(1, 256):
        lut[i, 0] = id_color(i)
    return lut


_LUT = _palette()


def palette() -> np.ndarray:
    """[256, 3] uint8: label value -> RGB color (row 0, the background, unused)."""
    return _LUT[:, 0]


def render_overlay(rgb: np.ndarray, res: FrameResult, alpha: float = 0.5,
                   contours: bool = True, labels: bool = True) -> np.ndarray:
    """Return a copy of ``rgb`` ([H, W, 3] uint8) with the objects of ``res`` drawn on it.

    Everything but the id labels is drawn from :meth:`FrameResult.label_mask` (the tracker's
    results carry it, built on the device with the masks) with OpenCV
    whole-image operations, so the cost does not grow with the number of objects: masks
    alpha-blended (color lookup, weighted sum, masked copy), outlines as the band of pixels
    where the label changes within ``thick`` pixels (erosion and dilation of the label
    mask). Per-object passes (contour tracing, boolean indexing) would cost a full-image pass
    per object, too slow for a camera's rate with many objects. Objects that are not
    'tracking' are labelled with their state, so an occluded object's stale mask is not
    mistaken for a confident one. ``overlay_device.shade`` is the same shading with torch ops
    (on the GPU in the node); both then draw the labels with :func:`put_labels`.
    """
    out = rgb.copy()
    if not res.objects:
        return out
    shade(out, res.label_mask(), alpha, contours)
    if labels:
        put_labels(out, res)
    return out


def outline_kernel(h: int, w: int) -> int:
    """Side of the square window whose label changes mark an outline pixel (odd, >= 3)."""
    thick = outline_thickness(h, w)
    return 2 * thick - 1 if thick > 1 else 3


def outline_thickness(h: int, w: int) -> int:
    return max(1, round(min(h, w) / 300))


def shade(out: np.ndarray, label: np.ndarray, alpha: float = 0.5,
          contours: bool = True) -> None:
    """Blend each labelled pixel of ``out`` ([H, W, 3] uint8, in place) with its object's color
    and, with ``contours``, paint the object's inner outline in that color."""
    colored = cv2.LUT(cv2.merge((label, label, label)), _LUT)
    blend = cv2.addWeighted(out, 1.0 - alpha, colored, alpha, 0.0)
    cv2.copyTo(blend, (label > 0).view(np.uint8), out)     # in place, where any object
    if contours:
        k = outline_kernel(*label.shape)
        kernel = np.ones((k, k), np.uint8)
        changes = (cv2.erode(label, kernel) != label) | (cv2.dilate(label, kernel) != label)
        cv2.copyTo(colored, (changes & (label > 0)).view(np.uint8), out)   # inner outline


def put_labels(out: np.ndarray, res: FrameResult) -> None:
    """Each object's id (and state when not tracking) at its centroid, in place."""
    h, w = out.shape[:2]
    scale = max(0.35, min(h, w) / 700)
    thick = outline_thickness(h, w)
    for obj in sorted(res.objects, key=lambda o: o.obj_id):
        if obj.area > 0 and obj.centroid is not None:
            text = str(obj.obj_id) if obj.state == TRACKING else f'{obj.obj_id} {obj.state}'
            _put_label(out, text, obj.centroid, id_color(obj.obj_id), scale, thick)


def _put_label(img: np.ndarray, text: str, xy: Tuple[float, float],
               color: Tuple[int, int, int], scale: float, thick: int) -> None:
    """Text centred on xy, kept inside the image, with a dark outline to read on any color."""
    font = cv2.FONT_HERSHEY_SIMPLEX
    (tw, th), base = cv2.getTextSize(text, font, scale, thick)
    h, w = img.shape[:2]
    x = int(min(max(xy[0] - tw / 2, 0), max(w - tw, 0)))
    y = int(min(max(xy[1] + th / 2, th), max(h - base, th)))
    cv2.putText(img, text, (x, y), font, scale, (0, 0, 0), thick + 2, cv2.LINE_AA)
    cv2.putText(img, text, (x, y), font, scale, color, thick, cv2.LINE_AA)
