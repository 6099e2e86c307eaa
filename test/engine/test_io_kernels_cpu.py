"""The fused I/O kernels (group 'io': cuda/kernels/io_frame.py, io_masks.py) against the
reference functions they replace, on the CPU (Triton's interpreter, ``launch.Kernel``).

Frame in: bitwise equal to ``frame_in.normalize`` (float32, hence after any cast too) on
up- and down-scaling, odd, non-square sources, both Pillow pass orders, a side already S, none
changing, strided sources and outputs; 2 launches, 1 where a side is S.
Masks out: masks equal ``masks_out.on_device``'s except at pixels whose exact (float64)
interpolated logit is within 1e-4 x max(1, max |logit|) of 0 (the kernel rounds as CUDA's
upsample_bilinear2d does, torch's CPU kernel otherwise: none flipped on these cases), and
bitwise equal to a numpy model of CUDA's arithmetic; stats and label exactly the reference
functions of the masks; 2 launches. Graph level: the I/O graphs capture the kernels when the
group is on, a tracker replaying them equals the eager reference, a failing fused capture
captures the reference.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip('triton')

from conftest import LEAN, smooth_image, tracker_on_shared_model  # noqa: E402
from graph_standin import graphs_on_cpu  # noqa: E402
from scenarios import schedule, synthetic_frames  # noqa: E402
from sam2_ros.engine import frame_in, masks_out, pil_resize  # noqa: E402
from sam2_ros.engine.config import TrackerConfig  # noqa: E402
from sam2_ros.engine.tracker import StreamingTracker  # noqa: E402
from sam2_ros.engine.cuda import runner  # noqa: E402
from sam2_ros.engine.cuda.buckets import FrameInKey, MasksOutKey  # noqa: E402
from sam2_ros.engine.cuda.kernels import io_masks, launch  # noqa: E402
from sam2_ros.engine.cuda.kernels.io_frame import frame_to_input  # noqa: E402
from sam2_ros.engine.cuda.kernels.io_masks import masks_label_stats  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')
NEAR_ZERO = 1e-4


def _frame(h, w, seed):
    if seed % 2:
        return torch.from_numpy(smooth_image(h, w, seed=seed))
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


@pytest.fixture
def launches(monkeypatch):
    """Counts kernel launches of our Kernel wrapper by kernel name."""
    seen = []
    original = launch.Kernel.__getitem__

    def counting(self, grid):
        run = original(self, grid)

        def counted(*args, **kwargs):
            seen.append(self.fn.__name__)
            return run(*args, **kwargs)
        return counted
    monkeypatch.setattr(launch.Kernel, '__getitem__', counting)
    return seen


# (h, w, S): up, down, odd, non-square; vertical-first (64x40, 100x60 -> 32); a side already
# S (width only, height only); nothing to resize; very wide
FRAME_CASES = [(37, 53, 64), (53, 37, 32), (64, 40, 32), (100, 60, 32), (50, 64, 64),
               (64, 50, 64), (64, 64, 64), (20, 150, 64), (17, 33, 96)]


@pytest.mark.parametrize('h, w, size', FRAME_CASES)
def test_frame_to_input_bitwise_equals_reference(h, w, size, launches):
    x = _frame(h, w, h + w)
    got = frame_to_input(x, size)
    ref = frame_in.normalize(x, size)
    assert got.shape == ref.shape == (1, 3, size, size) and got.dtype == torch.float32
    assert torch.equal(got, ref), int((got != ref).sum())
    assert torch.equal(got.bfloat16(), ref.bfloat16())
    both = h != size and w != size
    assert len(launches) == (2 if both else 1), launches


def test_frame_cases_cover_both_pass_orders():
    orders = {pil_resize.first_pass_vertical(h, w, s) for h, w, s in FRAME_CASES
              if h != s and w != s}
    assert orders == {True, False}


def test_frame_to_input_strided_source_and_output():
    """A crop view of a larger frame in, camera row 1 of a two-camera input out: row 0 and
    the rest of the buffer untouched."""
    big = _frame(60, 80, 4)
    crop = big[5:46, 7:70]                                  # [41, 63, 3], not contiguous
    assert not crop.is_contiguous()
    image = torch.full((2, 3, 32, 32), 7.0)
    frame_to_input(crop, 32, out=image[1:2])
    assert torch.equal(image[1:2], frame_in.normalize(crop.contiguous(), 32))
    assert (image[0] == 7.0).all()


def _logits(b, s, seed):
    """[b, 1, s, s] float32: per object a smooth blob of random centre and radius (logits
    about -20..+10), object b - 1 empty (all negative), one all zero where b > 2."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(s).float(), torch.arange(s).float(), indexing='ij')
    out = []
    for i in range(b):
        cy, cx, r = (torch.rand(3, generator=g) * torch.tensor([s, s, s / 2])).tolist()
        d = ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()
        out.append((r + 1 - d) * 2.0 + torch.randn(s, s, generator=g))
    lo = torch.stack(out)[:, None]
    lo[-1] = -4.0
    if b > 2:
        lo[1] = 0.0
    return lo


def _exact(logits, h, w):
    """The interpolated logits in float64 (what a logit near the threshold is measured by)."""
    return F.interpolate(logits.double(), size=(h, w), mode='bilinear',
                         align_corners=False)[:, 0]


def _fma(a, b, c):
    return (a.astype(np.float64) * b.astype(np.float64) + c).astype(np.float32)


def _cuda_model(logits, h, w):
    """numpy model of CUDA's upsample_bilinear2d_out_frame (float32, the fused multiply-adds
    of its expressions) thresholded: [B, H, W] bool."""
    x = logits[:, 0].float().numpy()
    f32 = np.float32

    def axis(n_in, n_out):
        i = np.arange(n_out).astype(f32) + f32(0.5)
        r = _fma(np.full_like(i, f32(n_in) / f32(n_out)), i, np.float64(-0.5))
        r = np.where(r < 0, f32(0), r)
        i0 = r.astype(np.int64)
        l1 = (r - i0.astype(f32)).astype(f32)
        return i0, np.where(i0 < n_in - 1, i0 + 1, i0), (f32(1) - l1).astype(f32), l1
    y0, y1, h0, h1 = axis(x.shape[1], h)
    x0, x1, w0, w1 = axis(x.shape[2], w)
    g = lambda ys, xs: x[:, ys][:, :, xs]                   # noqa: E731
    w0, w1 = np.broadcast_to(w0, (h, w)), np.broadcast_to(w1, (h, w))
    h0, h1 = np.broadcast_to(h0[:, None], (h, w)), np.broadcast_to(h1[:, None], (h, w))
    top = _fma(w0, g(y0, x0), w1 * g(y0, x1))
    bottom = _fma(w0, g(y1, x0), w1 * g(y1, x1))
    return _fma(h0, top, h1 * bottom) > 0


# (objects, logit side, H, W): up, down, same size, odd and non-square
MASK_CASES = [(3, 16, 37, 53), (2, 32, 24, 20), (1, 16, 16, 16), (4, 16, 48, 64),
              (2, 64, 45, 31)]


@pytest.mark.parametrize('b, s, h, w', MASK_CASES)
@pytest.mark.parametrize('with_extra', [True, False])
def test_masks_label_stats_equal_reference(b, s, h, w, with_extra, launches):
    logits = _logits(b, s, seed=b * s + h)
    ids = torch.tensor([3, 9, 0, 5][:b], dtype=torch.uint8)      # 0: a padding row
    extra = torch.rand(b) if with_extra else None
    masks, stats, label = masks_label_stats(logits, h, w, ids, extra)
    assert len(launches) == 2, launches
    ref_m, ref_s = masks_out.on_device(logits, h, w, extra)
    assert masks.dtype == torch.bool and masks.shape == ref_m.shape
    flipped = masks != ref_m
    bound = NEAR_ZERO * max(1.0, logits.abs().max().item())
    assert (_exact(logits, h, w)[flipped].abs() <= bound).all()
    assert int(flipped.sum()) == 0                     # measured on these cases: none
    assert np.array_equal(masks.numpy(), _cuda_model(logits, h, w))
    assert stats.dtype == torch.float64 and torch.equal(stats, masks_out.stats_of(masks, extra))
    assert torch.equal(stats, ref_s)
    assert torch.equal(label, masks_out.label_on_device(masks, ids))
    assert (stats[-1, 1:7] == -1).all() and stats[-1, 0] == 0            # the empty object
    if b > 2:
        assert not masks[1].any()                                        # logits 0: not > 0


def test_masks_from_strided_bf16_logits():
    """The bank's rows as a strided view, in bf16: read in place, as .float() would."""
    bank = _logits(6, 16, seed=3).bfloat16()
    rows = bank[::2]
    ids = torch.tensor([1, 2, 3], dtype=torch.uint8)
    masks, stats, label = masks_label_stats(rows, 29, 41, ids)
    ref_m, ref_s = masks_out.on_device(rows, 29, 41)
    assert torch.equal(masks, ref_m) and torch.equal(stats, ref_s)
    assert torch.equal(label, masks_out.label_on_device(ref_m, ids))


def test_io_kernels_have_host_side_constants_only_once():
    """The tables a graph replay reads are built before capture and reused, not rebuilt."""
    x = _frame(37, 53, 2)
    frame_to_input(x, 64)
    tables = pil_resize.tables(53, 64, x.device)
    frame_to_input(x, 64)
    assert pil_resize.tables(53, 64, x.device) is tables
    assert frame_in.level_table(x.device) is frame_in.level_table(x.device)


def _graph_tracker(monkeypatch, fused):
    graphs_on_cpu(monkeypatch)
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, batch_buckets=(1,),
                        max_cond_frames=1, max_objects=2, steady_attention='sam2',
                        extra_hydra_overrides=list(LEAN))
    tr = tracker_on_shared_model(cfg)
    reports = []
    tr.runner = runner.GraphRunner(tr.model, cfg, reports.append)
    with torch.inference_mode():
        tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
    assert tr.runner.graphs.io.fused is False            # the CPU: the reference I/O
    tr.runner.graphs.io.fused = fused                    # as enabled_groups says on CUDA
    return tr, cfg, reports


def test_fused_io_graphs_equal_eager(monkeypatch, launches):
    """The frame-in and masks-out graphs capture our kernels (their launches are what a
    replay runs) and a tracker replaying them gives the eager runner's results."""
    tr, cfg, reports = _graph_tracker(monkeypatch, True)
    ref = StreamingTracker(cfg.replace(use_cuda_graphs=False), model=tr.model)
    frames = synthetic_frames(4, h=48, w=80)             # both sides resized: 2 launches
    p = schedule(48, 80, 1, 2, 3, 4)[0][0][1]
    for t in (tr, ref):
        t.track(frames[0])
        t.add_prompt(p)
    launches.clear()
    for fr in frames[1:]:
        a, b = tr.track(fr), ref.track(fr)
        assert a.mode == 'graph'
        for oa, ob in zip(a.objects, b.objects):
            assert (oa.mask == ob.mask).all() and oa.area == ob.area and oa.box == ob.box
            assert oa.centroid == ob.centroid
        assert (a.label_mask() == b.label_mask()).all()
    assert FrameInKey(48, 80) in tr.runner.io and MasksOutKey(1, 48, 80) in tr.runner.io
    per_frame = {'_pass_kernel': 2, '_masks_kernel': 1, '_stats_kernel': 1}
    assert {k: launches.count(k) for k in per_frame} == {k: 3 * v for k, v in
                                                         per_frame.items()}, launches
    assert not reports, reports


def test_failed_fused_io_capture_captures_the_reference(monkeypatch):
    tr, cfg, reports = _graph_tracker(monkeypatch, True)

    def broken(*a, **k):
        raise RuntimeError('triton compile failed (test)')
    monkeypatch.setattr(io_masks, 'masks_label_stats', broken)
    frames = synthetic_frames(3, h=48, w=80)
    tr.track(frames[0])
    tr.add_prompt(schedule(48, 80, 1, 2, 3, 4)[0][0][1])
    assert tr.track(frames[1]).objects[0].mask.any()
    assert MasksOutKey(1, 48, 80) in tr.runner.io
    # one report per mask graph (the first of a resolution captures every object bucket)
    assert len(reports) == len(tr.runner.graphs.io.out_buckets), reports
    assert all('captured the reference instead' in r for r in reports), reports
    assert FrameInKey(48, 80) in tr.runner.io                # frame in: still our kernels


def test_io_group_is_switched_with_the_others():
    """'io' is a fused group: on by default where groups run (CUDA), off with False, off on
    the CPU; it swaps no module of the model."""
    from conftest import shared_model, small_cfg
    from sam2_ros.engine.cuda.kernels import fused
    small_cfg(fused_kernels=('io',)).validate()
    model = shared_model(64)
    assert fused.fused_model(model, ('io',)) is model
    assert fused.enabled_groups(small_cfg()) == ()
    assert fused.enabled_groups(small_cfg(fused_kernels=False), 'cuda') == ()


@pytest.mark.parametrize('n_in', [1, 7, 300, 512, 720, 1080, 1280, 1920, 4000])
@pytest.mark.parametrize('n_out', [256, 512, 1024])
def test_resize_taps_follow_from_the_first(n_in, n_out):
    """io_frame's pass kernel computes tap k's source pixel as min(first + k, n_in - 1)
    instead of loading it: the tables must be built so (up- and downscaling alike)."""
    idx, _ = pil_resize.coefficients(n_in, n_out)
    taps = np.arange(idx.shape[1])
    assert np.array_equal(idx, np.minimum(idx[:, :1] + taps[None, :], n_in - 1))
