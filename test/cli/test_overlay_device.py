"""The overlay's shading with torch ops (sam2_ros/overlay_device.py, the node's GPU overlay)
against OpenCV's (sam2_ros/overlay.py): the same pixels, on the CPU here; test/gpu/
test_overlay_gpu.py runs it on the GPU."""

import numpy as np
import pytest
import torch

from overlay_scenes import result, scene
from sam2_ros import overlay, overlay_device
from sam2_ros.engine.types import FrameResult


@pytest.mark.parametrize('h,w', [(720, 1280), (37, 53), (300, 301)])
@pytest.mark.parametrize('contours', [True, False])
@pytest.mark.parametrize('alpha', [0.5, 0.3])
def test_torch_shading_equals_opencvs(h, w, contours, alpha):
    rgb, label = scene(h, w, seed=h + w)
    want = rgb.copy()
    overlay.shade(want, label, alpha, contours)
    got = overlay_device.shade(torch.from_numpy(rgb), torch.from_numpy(label), alpha, contours)
    assert got.dtype == torch.uint8 and tuple(got.shape) == (h, w, 3)
    diff = np.abs(got.numpy().astype(int) - want.astype(int))
    # equal at the node's alpha (0.5: every sum is exact in float32, rounded half to even by
    # both); at others OpenCV's fused multiply-add rounds a few sums the other way
    assert diff.max() == (0 if alpha == 0.5 else diff.max()) <= 1, \
        (int(diff.max()), int((diff > 0).sum()))
    assert (diff > 0).mean() < 0.01
    assert (want != rgb).any()                          # something was drawn


def test_device_overlay_equals_render_overlay_with_labels_and_read_only_frames():
    rgb, label = scene(120, 160, seed=3)
    res = result(label)
    want = overlay.render_overlay(rgb, res)
    ov = overlay_device.DeviceOverlay('cpu')
    frozen = rgb.copy()
    frozen.flags.writeable = False                     # as a view of a received message
    for frame in (rgb, frozen, torch.from_numpy(rgb.copy())):
        got = ov.render(frame, res)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(rgb, frozen)         # the frame itself is not drawn on
    empty = FrameResult(0, 120, 160)
    np.testing.assert_array_equal(ov.render(frozen, empty), rgb)
    # a tensor frame with no object: copied out on the overlay's own stream (channels-last
    # view of a [3, H, W] tensor, as a GPU-decoded JPEG is handed on)
    chw = torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous().permute(1, 2, 0)
    np.testing.assert_array_equal(ov.render(chw, empty), rgb)


def test_to_host_copies_a_tensor_frame_through_one_reused_buffer():
    """The host overlay's copy of a GPU-decoded frame (a channels-last view of a [3, H, W]
    tensor) equals the frame, through one host buffer reused while the size holds."""
    rgb, _ = scene(40, 56, seed=5)
    ov = overlay_device.DeviceOverlay('cpu')
    chw = torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous().permute(1, 2, 0)
    first = ov.to_host(chw)
    np.testing.assert_array_equal(first, rgb)
    ptr = ov.pinned['host'].data_ptr()
    np.testing.assert_array_equal(ov.to_host(torch.from_numpy(rgb[::-1].copy())), rgb[::-1])
    assert ov.pinned['host'].data_ptr() == ptr
