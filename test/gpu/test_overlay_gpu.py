"""The node's overlay rendered on the GPU (sam2_ros/overlay_device.py, overlay_on_gpu) against
the host's OpenCV rendering: the same pixels, labels included, from a host frame (a read-only
view, as a received message is) and from a frame already on the GPU (nvJPEG's), every host
copy through the same pinned buffers; the tracker's stream is left alone (the overlay's work
runs on a stream of its own)."""

import numpy as np
import pytest
import torch

from overlay_scenes import result, scene
from sam2_ros import overlay
from sam2_ros.overlay_device import DeviceOverlay

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]


@pytest.mark.parametrize('h,w', [(720, 1280), (1080, 1920), (37, 53)])
def test_gpu_overlay_equals_the_hosts(h, w):
    rgb, label = scene(h, w, seed=h)
    res = result(label)
    want = overlay.render_overlay(rgb, res)
    ov = DeviceOverlay('cuda')
    frozen = rgb.copy()
    frozen.flags.writeable = False
    ptrs = set()
    for frame in (frozen, torch.from_numpy(rgb).cuda(), frozen):     # staging reused
        np.testing.assert_array_equal(ov.render(frame, res), want)
        ptrs.add(tuple(b.data_ptr() for b in ov.pinned.values()))
    # every host copy through pinned buffers, the same ones frame after frame
    assert set(ov.pinned) == {'frame', 'label', 'out'} and len(ptrs) == 1
    assert all(b.is_pinned() for b in ov.pinned.values())
    assert ov.stream is not None and ov.stream != torch.cuda.current_stream()



def test_to_host_copies_a_gpu_frame_on_a_stream_of_its_own():
    """The host overlay's copy of a GPU-decoded frame (overlay_on_gpu off; the publisher's
    ``host_frame``): the frame's pixels, through one pinned buffer, on the instance's stream."""
    rgb, _ = scene(720, 1280, seed=9)
    frame = torch.from_numpy(rgb).cuda().permute(2, 0, 1).contiguous().permute(1, 2, 0)
    ov = DeviceOverlay('cuda')
    for _ in range(2):
        np.testing.assert_array_equal(ov.to_host(frame), rgb)
    assert set(ov.pinned) == {'host'} and ov.pinned['host'].is_pinned()
    assert ov.stream != torch.cuda.current_stream()
