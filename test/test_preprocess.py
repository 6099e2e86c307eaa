"""Preprocessing equals the official SAM2VideoPredictor's path.

Frames: sam2 loads each frame with PIL, ``Image.resize((S, S))`` (bicubic, antialiased, uint8),
divides by 255 and normalizes with mean (0.485, 0.456, 0.406) / std (0.229, 0.224, 0.225).
Ours resizes with torch on the device in the same two rounded passes (horizontal, then
vertical). Measured on this machine (Pillow 13, torch 2.13), differences in uint8 levels:
  * upscaling, landscape/square downscaling (every usual camera frame), random and smooth
    images: max 1 level (2 seen once on noise), under 1 % of values differ at all; a level is
    1/255/std ~= 0.0175 after normalization;
  * portrait frames downscaled (taller than wide, taller than S): Pillow 13 sometimes runs the
    vertical pass first (older Pillow never does); smooth images stay within 2 levels, pure
    noise (PIL clips the overshoot of the first pass) up to 24 levels at single pixels.
The bounds asserted below are those plus a little headroom.

Prompts: point/box coordinates and mask resizing are compared with the exact arithmetic of
``add_new_points_or_box`` / ``add_new_mask`` (sam2 1.1.0).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from conftest import smooth_image
from sam2_ros.engine import frame_in, prompts
from sam2_ros.engine.errors import FrameError, PromptError
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')

CPU = torch.device('cpu')
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
LEVEL = 1 / 255 / STD.min()          # one uint8 level after normalization (largest channel)


def official_frame(img: np.ndarray, size: int) -> np.ndarray:
    """sam2.utils.misc._load_img_as_tensor + the normalization of load_video_frames."""
    x = np.array(Image.fromarray(img).convert('RGB').resize((size, size))) / 255.0
    return ((x - MEAN) / STD).transpose(2, 0, 1)


def levels(img, size):
    ours = frame_in.to_model_input(img, size, CPU)[0].double().numpy()
    return np.abs(ours - official_frame(img, size)) * STD[:, None, None] * 255


# (h, w, S): up, down, mixed, landscape camera shapes, odd sizes, unchanged
LANDSCAPE = [(96, 128, 256), (48, 64, 128), (480, 640, 256), (720, 1280, 256), (1024, 1024, 128),
             (100, 100, 256), (37, 91, 64), (200, 333, 128), (250, 260, 256), (128, 128, 128),
             (128, 300, 128), (300, 128, 128)]
PORTRAIT_DOWN = [(300, 200, 128), (640, 480, 256), (401, 177, 64)]


@pytest.mark.parametrize('h, w, size', LANDSCAPE)
@pytest.mark.parametrize('content', ['random', 'smooth'])
def test_frame_matches_pil(h, w, size, content):
    img = np.random.default_rng(h * w).integers(0, 256, (h, w, 3), dtype=np.uint8) \
        if content == 'random' else smooth_image(h, w, seed=h)
    lv = levels(img, size)
    assert lv.max() <= 2 + 1e-6, lv.max()
    assert (lv > 0.5).mean() <= 0.02, (lv > 0.5).mean()
    if (h, w) == (size, size):
        assert lv.max() < 1e-4                               # no resize: only normalization


@pytest.mark.parametrize('h, w, size', PORTRAIT_DOWN)
def test_portrait_downscale_within_bound(h, w, size):
    smooth = levels(smooth_image(h, w, seed=3), size)
    assert smooth.max() <= 2 + 1e-6
    noise = levels(np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8), size)
    assert noise.max() <= 32 and noise.mean() <= 0.5


def test_frame_forms_are_equivalent():
    """numpy, torch, non-contiguous and negative-stride views (bgr[..., ::-1]) all work and
    give the same input; the output is on the device, [1, 3, S, S] float32."""
    rgb = np.random.default_rng(1).integers(0, 256, (60, 80, 3), dtype=np.uint8)
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    ref = frame_in.to_model_input(rgb, 64, CPU)
    assert ref.shape == (1, 3, 64, 64) and ref.dtype == torch.float32
    padded = np.zeros((60, 100, 3), np.uint8)
    padded[:, :80] = rgb
    for form in (bgr[..., ::-1], torch.from_numpy(rgb), padded[:, :80], rgb[::-1][::-1]):
        assert frame_in.frame_size(form) == (60, 80)
        assert torch.equal(frame_in.to_model_input(form, 64, CPU), ref)


@pytest.mark.parametrize('bad', [
    np.zeros((40, 50, 3), np.float32), np.zeros((40, 50, 3), bool), np.zeros((40, 50), np.uint8),
    np.zeros((40, 50, 4), np.uint8), np.zeros((40, 50, 1), np.uint8), np.zeros((1, 40, 50, 3),
                                                                               np.uint8),
    np.zeros((15, 50, 3), np.uint8), np.zeros((40, 8193, 3), np.uint8), torch.zeros(40, 50, 3),
    np.zeros((0, 0, 3), np.uint8), [[[0, 0, 0]] * 20] * 20, None, 'frame.jpg',
])
def test_bad_frames(bad):
    with pytest.raises(FrameError):
        frame_in.frame_size(bad)


# ---- prompts ------------------------------------------------------------------------------
def official_points(points, labels, box, h, w, size):
    """The coordinate math of SAM2VideoPredictor.add_new_points_or_box (normalize_coords)."""
    pts = torch.zeros(0, 2) if points is None else torch.tensor(points, dtype=torch.float32)
    lab = torch.zeros(0, dtype=torch.int32) if labels is None else \
        torch.tensor(labels, dtype=torch.int32)
    pts, lab = pts.unsqueeze(0), lab.unsqueeze(0)
    if box is not None:
        b = torch.tensor(box, dtype=torch.float32).reshape(1, 2, 2)
        pts = torch.cat([b, pts], dim=1)
        lab = torch.cat([torch.tensor([[2, 3]], dtype=torch.int32), lab], dim=1)
    pts = pts / torch.tensor([w, h]) * size
    return pts, lab


@pytest.mark.parametrize('h, w, size', [(96, 128, 256), (480, 640, 1024), (1080, 1920, 512),
                                        (37, 91, 64), (256, 256, 256)])
def test_prompt_coordinates_match_add_new_points_or_box(h, w, size):
    rng = np.random.default_rng(size)
    points = rng.uniform(0, [w, h], (5, 2))
    labels = rng.integers(0, 2, 5)
    box = (w * 0.1, h * 0.2, w * 0.7, h * 0.9)
    for kw in (dict(points=points, labels=labels), dict(box=box),
               dict(points=points, labels=labels, box=box),
               dict(points=np.array([[0.0, 0.0], [w, h]]), labels=np.array([1, 0]))):
        got = prompts.prompt_points(Prompt(3, **kw), h, w, size, CPU)
        ref_pts, ref_lab = official_points(kw.get('points'), kw.get('labels'), kw.get('box'),
                                           h, w, size)
        assert torch.equal(got['point_coords'], ref_pts)
        assert torch.equal(got['point_labels'], ref_lab)
        assert got['point_labels'].dtype == torch.int32


def official_mask(mask, size):
    """The resize of SAM2VideoPredictor.add_new_mask."""
    m = torch.tensor(mask, dtype=torch.bool)[None, None].float()
    if m.shape[-2:] != (size, size):
        m = F.interpolate(m, size=(size, size), align_corners=False, mode='bilinear',
                          antialias=True)
        m = (m >= 0.5).float()
    return m


@pytest.mark.parametrize('h, w, size', [(96, 128, 256), (480, 640, 128), (64, 64, 64),
                                        (37, 91, 64)])
def test_mask_resize_matches_add_new_mask(h, w, size):
    yy, xx = np.mgrid[0:h, 0:w]
    mask = ((xx - w / 2) ** 2 / (w / 4) ** 2 + (yy - h / 2) ** 2 / (h / 3) ** 2) < 1
    mask |= np.random.default_rng(0).random((h, w)) < 0.05        # speckles near the cutoff
    ref = official_mask(mask, size)
    for form in (mask, mask.astype(np.uint8), mask.astype(np.uint8) * 255,
                 mask.astype(np.float32)):
        got = prompts.prompt_mask(Prompt(1, mask=form), h, w, size, CPU)
        assert got.shape == (1, 1, size, size)
        assert torch.equal(got, ref)


H, W = 48, 64
PTS = np.array([[10.0, 10.0]])


@pytest.mark.parametrize('prompt', [
    Prompt(1, points=np.array([[np.nan, 3.0]]), labels=[1]),
    Prompt(1, points=np.array([[np.inf, 3.0]]), labels=[1]),
    Prompt(1, points=np.array([[W + 0.5, 3.0]]), labels=[1]),
    Prompt(1, points=np.array([[-1.0, 3.0]]), labels=[1]),
    Prompt(1, points=np.array([[3.0, H + 1.0]]), labels=[1]),
    Prompt(1, points=np.array([[1e300, 1e300]]), labels=[1]),
    Prompt(1, points=PTS, labels=[1, 1]),
    Prompt(1, points=PTS, labels=None),
    Prompt(1, points=PTS, labels=[2]),
    Prompt(1, points=PTS, labels=[-1]),
    Prompt(1, points=PTS, labels=[0.5]),
    Prompt(1, points=np.zeros((65, 2)), labels=np.ones(65)),
    Prompt(1, points=np.zeros((3,)), labels=[1, 1, 1]),
    Prompt(1, points=5.0, labels=[1]),
    Prompt(1, points=[[1, 2], [3]], labels=[1, 1]),
    Prompt(1, points=[['a', 'b']], labels=[1]),
    Prompt(1, points=PTS, labels=['x']),
    Prompt(1),
    Prompt(1, points=np.zeros((0, 2)), labels=[]),
    Prompt(1, box=(10, 10, 10, 20)),
    Prompt(1, box=(20, 10, 10, 20)),
    Prompt(1, box=(10, 20, 30, 5)),
    Prompt(1, box=(1, 2, 3)),
    Prompt(1, box=(0, 0, W + 1, H)),
    Prompt(1, box=(0, np.nan, 5, 5)),
    Prompt(1, box='abcd'),
    Prompt(1, mask=np.ones((H, W + 1), bool)),
    Prompt(1, mask=np.ones((W, H), bool)),
    Prompt(1, mask=np.ones((H, W, 1), bool)),
    Prompt(1, mask=np.zeros((H, W), bool)),
    Prompt(1, mask=np.full((H, W), 0.0)),        # all zero: empty (nonzero counts)
    Prompt(1, mask=np.full((H, W), np.nan)),
    Prompt(1, mask=np.full((H, W), 'a')),
    Prompt(1, mask=[[1, 0], [1]]),
    Prompt(1, mask=np.ones((H, W), bool), points=PTS, labels=[1]),
    Prompt(1, mask=np.ones((H, W), bool), box=(1, 1, 5, 5)),
    Prompt(0, points=PTS, labels=[1]),
    Prompt(256, points=PTS, labels=[1]),
    Prompt(-1, points=PTS, labels=[1]),
    Prompt(1.0, points=PTS, labels=[1]),
    Prompt('1', points=PTS, labels=[1]),
    Prompt(True, points=PTS, labels=[1]),
    Prompt(None, points=PTS, labels=[1]),
    Prompt(0, mask=np.ones((H, W), bool)),
    Prompt(300, mask=np.ones((H, W), bool)),
])
def test_bad_prompts_raise_prompt_error(prompt):
    fn = prompts.prompt_mask if prompt.mask is not None else prompts.prompt_points
    with pytest.raises(PromptError):
        fn(prompt, H, W, 128, CPU)


@pytest.mark.parametrize('prompt', [
    Prompt(1, points=np.array([[0.0, 0.0], [W, H]]), labels=[1, 0]),    # edges are inside
    Prompt(np.int64(255), points=PTS, labels=np.array([True])),
    Prompt(2, points=[[3, 4]], labels=[[1]]),
    Prompt(3, points=np.zeros((0, 2)), labels=[], box=(1, 1, 5, 5)),
    Prompt(4, box=np.array([1, 1, 5, 5], np.float32)),
    Prompt(5, points=np.zeros((64, 2)), labels=np.zeros(64)),
])
def test_valid_edge_prompts(prompt):
    out = prompts.prompt_points(prompt, H, W, 128, CPU)
    assert out['point_coords'].shape[:2] == out['point_labels'].shape
    assert torch.isfinite(out['point_coords']).all()
    assert (out['point_coords'] >= 0).all() and (out['point_coords'] <= 128).all()
