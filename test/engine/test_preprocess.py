"""Preprocessing equals the official SAM2VideoPredictor's path, bit for bit.

Frames: sam2 loads each frame with PIL (``_load_img_as_tensor``: ``Image.resize((S, S))``,
bicubic on 8-bit RGB, Pillow's fixed-point arithmetic), divides by 255 and normalizes with
mean (0.485, 0.456, 0.406) / std (0.229, 0.224, 0.225). Ours runs the same integer arithmetic
in torch (``pil_resize.py``); the resized uint8 image and the normalized float32 input are
compared for exact equality with PIL and with sam2's own loader function, on many source
sizes (up- and down-scaling, odd sizes, camera frames, portrait and very tall or wide images,
the Pillow-13 pass order in both directions). ``test_graphs_gpu.py`` checks the captured
frame-in graph on the GPU against the same function.

Prompts: point/box coordinates and mask resizing are compared with the exact arithmetic of
``add_new_points_or_box`` / ``add_new_mask`` (sam2 1.1.0).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from conftest import smooth_image
from sam2_ros.engine import frame_in, pil_resize, prompts
from sam2_ros.engine.errors import FrameError, PromptError
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')

CPU = torch.device('cpu')

# (h, w): camera frames, up, down, mixed, odd, square, portrait, very tall and very wide
SHAPES = [(720, 1280), (1080, 1920), (480, 640), (640, 480), (1080, 1080), (96, 128),
          (37, 91), (401, 177), (250, 260), (300, 200), (1200, 500), (2000, 300), (17, 3000),
          (513, 511), (1023, 1025)]


def pil_resized(img: np.ndarray, size: int) -> np.ndarray:
    """[H, W, 3] uint8 -> [S, S, 3] uint8 as sam2's loader resizes (PIL's default filter)."""
    return np.array(Image.fromarray(img).convert('RGB').resize((size, size)))


def ours_resized(img: np.ndarray, size: int, device=CPU) -> np.ndarray:
    x = torch.from_numpy(img).to(device).permute(2, 0, 1)
    return pil_resize.resize_u8(x, size).permute(1, 2, 0).cpu().numpy()


def random_image(h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize('size', [512, 1024])
@pytest.mark.parametrize('h, w', SHAPES)
def test_resize_bitwise_equals_pil(h, w, size):
    img = random_image(h, w, h * 7 + w)
    got, ref = ours_resized(img, size), pil_resized(img, size)
    assert got.dtype == np.int32 and got.shape == ref.shape == (size, size, 3)
    assert np.array_equal(got, ref), int((got != ref).sum())


def test_resize_bitwise_equals_pil_random_shapes():
    """60 random (h, w, S), S from 32 to 320 in steps of 32 (the sizes above cover 512 and
    1024), sides from 16 to 3 S, both pass orders covered."""
    rng = np.random.default_rng(15)
    orders = set()
    for i in range(60):
        size = int(rng.integers(1, 11)) * 32
        h, w = (int(v) for v in rng.integers(16, max(3 * size, 64), 2))
        img = random_image(h, w, i) if i % 2 else smooth_image(h, w, seed=i)
        assert np.array_equal(ours_resized(img, size), pil_resized(img, size)), (h, w, size)
        orders.add(pil_resize.vertical_first_rule(h, w, size))
    assert orders == {True, False}


@pytest.mark.parametrize('h, w, size', [(64, 40, 32), (33, 20, 32), (100, 60, 32),
                                        (60, 46, 32), (62, 47, 32), (90, 61, 32)])
def test_pass_order_boundary(h, w, size):
    """Shapes on both sides of Pillow 13's vertical-first rule (h - S > 2 (w - S)): the two
    orders give different images there, and ours picks the installed Pillow's."""
    img = random_image(h, w, h + w)
    x = torch.from_numpy(img).permute(2, 0, 1).int()
    hv = pil_resize.resize_passes(x, size, vertical_first=False).permute(1, 2, 0).numpy()
    vh = pil_resize.resize_passes(x, size, vertical_first=True).permute(1, 2, 0).numpy()
    ref = pil_resized(img, size)
    assert not np.array_equal(hv, vh)
    vertical = pil_resize.pillow_reorders() and pil_resize.vertical_first_rule(h, w, size)
    assert np.array_equal(vh if vertical else hv, ref)


def test_resize_weights_sum_to_one_and_widen_when_downscaling():
    """Every output's fixed-point weights sum to one unit within rounding, indices stay in
    the source, and down-scaling widens the window with the scale (antialiasing)."""
    unit = 1 << pil_resize.PRECISION_BITS
    for n_in, n_out in [(1920, 512), (720, 1024), (37, 64), (1024, 1024)]:
        idx, w = pil_resize.coefficients(n_in, n_out)
        assert idx.shape == w.shape and w.dtype == np.int32
        assert idx.min() >= 0 and idx.max() < n_in
        assert np.abs(w.astype(np.int64).sum(1) - unit).max() <= w.shape[1]
    assert pil_resize.coefficients(1920, 512)[0].shape[1] == 17          # support 2 * 3.75
    assert pil_resize.coefficients(512, 1024)[0].shape[1] == 5           # up: support 2


def official_frame(img: np.ndarray, size: int, tmp_path) -> torch.Tensor:
    """sam2's own loader function on a lossless file of the frame, then the normalization of
    load_video_frames_from_jpg_images (float32 tensor, -= mean, /= std)."""
    from sam2.utils.misc import _load_img_as_tensor
    path = str(tmp_path / 'frame.png')
    Image.fromarray(img).save(path)
    images = torch.zeros(1, 3, size, size, dtype=torch.float32)
    images[0], h, w = _load_img_as_tensor(path, size)
    assert (h, w) == img.shape[:2]
    images -= torch.tensor(frame_in.IMG_MEAN, dtype=torch.float32)[:, None, None]
    images /= torch.tensor(frame_in.IMG_STD, dtype=torch.float32)[:, None, None]
    return images


def test_resize_tables_stay_bounded_over_many_resolutions():
    """A stream of ever new frame sizes keeps at most MAX_TABLES uploaded tables; an evicted
    key is built again, equal, and what a graph kept (``tables_of``) stays alive and intact."""
    pil_resize.TABLES.clear()
    kept = pil_resize.tables_of(37, 91, 64, CPU)
    first = [t.clone() for pair in kept for t in pair]
    for n in range(100, 100 + 3 * pil_resize.MAX_TABLES):
        pil_resize.tables(n, 64, CPU)
    assert len(pil_resize.TABLES) == pil_resize.MAX_TABLES
    assert (37, 64, CPU) not in pil_resize.TABLES                  # evicted, least recent
    assert all(torch.equal(a, b) for a, b in zip(first, (t for p in kept for t in p)))
    again = pil_resize.tables(37, 64, CPU)
    assert torch.equal(again[0], kept[0][0]) and torch.equal(again[1], kept[0][1])
    img = random_image(37, 91, 64)                                  # and resizes stay exact
    assert np.array_equal(ours_resized(img, 64, CPU), pil_resized(img, 64))


@pytest.mark.parametrize('h, w, size', [(720, 1280, 512), (480, 640, 1024), (37, 91, 64),
                                        (300, 200, 128), (128, 128, 128)])
def test_model_input_bitwise_equals_official_loader(h, w, size, tmp_path):
    img = random_image(h, w, size)
    ours = frame_in.to_model_input(img, size, CPU)
    assert ours.dtype == torch.float32
    assert torch.equal(ours, official_frame(img, size, tmp_path))


@pytest.mark.gpu
@pytest.mark.parametrize('h, w, size', [(720, 1280, 512), (1080, 1920, 1024), (640, 480, 512)])
def test_resize_on_gpu_bitwise_equals_pil(h, w, size):
    img = random_image(h, w, 3)
    dev = torch.device('cuda')
    assert np.array_equal(ours_resized(img, size, dev), pil_resized(img, size))
    cpu = frame_in.to_model_input(img, size, CPU)
    assert torch.equal(frame_in.to_model_input(img, size, dev).cpu(), cpu)


@pytest.mark.gpu
def test_frame_in_graph_bitwise_equals_official_loader(tmp_path):
    """The captured frame-in graph (cuda/io_graphs.py) writes the official loader's input into the
    encoder graph's static input, for two source sizes (one of each pass order)."""
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.cuda.buckets import FrameInKey
    from sam2_ros.engine.tracker import StreamingTracker
    tr = StreamingTracker(TrackerConfig(model_size='tiny', image_size=512, device='cuda',
                                        random_weights=True, max_objects=2))
    for h, w in [(720, 1280), (1600, 700)]:
        img = random_image(h, w, 9)
        with torch.inference_mode():          # as track() runs it
            assert tr.runner.graphs.io.load_frame(img)
        assert FrameInKey(h, w) in tr.runner.io
        got = tr.runner.graphs.encoder.inputs.cpu()
        assert torch.equal(got, official_frame(img, 512, tmp_path)), (h, w)


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


def test_host_view_reads_received_bytes_without_a_copy_or_a_warning():
    """A read-only frame (a message's bytes) is wrapped, not copied, for the copy to pinned
    memory or the device, and torch's warning about non-writable arrays does not escape; a
    reversed view is not wrapped (None: numpy copies it); on the CPU the model input of a
    read-only frame is a copy (the tensor is used as the frame from there on)."""
    import warnings

    rgb = np.random.default_rng(2).integers(0, 256, (60, 80, 3), dtype=np.uint8)
    raw = rgb.tobytes()
    received = np.ndarray(rgb.shape, np.uint8, memoryview(raw))
    assert not received.flags.writeable
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        view = frame_in.host_view(received)
    assert caught == [] and torch.equal(view, torch.from_numpy(rgb))
    assert view.data_ptr() == received.__array_interface__['data'][0]          # no copy
    assert frame_in.host_view(rgb[..., ::-1]) is None
    on_cpu = frame_in.to_device(received, CPU)
    assert torch.equal(on_cpu, view) and on_cpu.data_ptr() != view.data_ptr()
    assert torch.equal(frame_in.to_model_input(received, 64, CPU),
                       frame_in.to_model_input(rgb, 64, CPU))


@pytest.mark.parametrize('bad', [
    np.zeros((40, 50, 3), np.float32), np.zeros((40, 50, 3), bool), np.zeros((40, 50), np.uint8),
    np.zeros((40, 50, 4), np.uint8), np.zeros((40, 50, 1), np.uint8), np.zeros((1, 40, 50, 3),
                                                                               np.uint8),
    np.zeros((15, 50, 3), np.uint8), np.zeros((40, 8193, 3), np.uint8), torch.zeros(40, 50, 3),
    np.zeros((0, 0, 3), np.uint8), [[[0, 0, 0]] * 20] * 20, None, 'frame.jpg',
])
def test_frame_of_a_wrong_type_dtype_or_shape_is_a_frame_error(bad):
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
