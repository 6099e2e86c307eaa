"""The fused groups (TrackerConfig.fused_kernels) in captured graphs, and the function-level
kernels, on the GPU (marked gpu: CI has none); module-level kernels: test_fused_kernels_gpu.py.

Tracker level, 60 frames, 3 objects (box mid-stream, mask, correction, removal), graphs with
fused kernels against graphs with sam2's modules (fused_kernels=False) and against the eager
reference: logits within 1e-3 (fp32) and 0.5 (bf16, as test_graphs_gpu.py: logits reach
|10|+ where a bf16 step is 0.06), every step a replay, no fallback.
The 'constants' group changes no value: graphs with it = graphs without, bitwise, alone and
beside the other groups; the kernels per steady frame it saves go to the JSON.
I/O (group 'io'): frame in bitwise frame_in.normalize; masks out flipping only at logits
within rounding of 0.
Hole filling (group 'holes'): bitwise holes.fill_holes at 128 and 256 px, B = 8, fp32 and bf16,
one kernel per call (profiler count), also replayed from a CUDA graph.
Measured values go to $OUT/gpu_fused_kernels.json.
"""

import pytest
import torch

from gpu_common import (cuda_kernels, record_fused as _record, tiny_cuda_cfg as _cfg,
                        tracker_stream, worst_logits)
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.config import FUSED_GROUPS
from sam2_ros.engine.tracker import StreamingTracker

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]


@pytest.mark.parametrize('steady', ['auto', 'split'])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_graphs_equal_sam2_graphs_and_eager(precision, steady):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False     # fp32: sam2's convolutions as ours, no TF32
    frames = synthetic_frames(60, h=360, w=640)
    events = schedule(360, 640, add2=10, add3=20, fix=30, remove=45)
    base = dict(precision=precision, steady_attention=steady)
    fused, fstats, tr = tracker_stream(_cfg(**base), frames, events)
    assert type(tr.runner.graphs.model.memory_attention).__name__ == 'FusedMemoryAttention'
    assert type(tr.runner.graphs.model.sam_mask_decoder).__name__ == 'FusedMaskDecoder'
    assert type(tr.runner.graphs.model.obj_ptr_proj).__name__ == 'FusedMLP'
    assert type(tr.runner.graphs.model.memory_encoder).__name__ == 'FusedMemoryEncoder'
    plain, _, tr0 = tracker_stream(_cfg(fused_kernels=False, **base), frames, events)
    assert tr0.runner.graphs.model is tr0.runner.model
    eager, _, _ = tracker_stream(_cfg(use_cuda_graphs=False, **base), frames, events)
    worst = {'fused_vs_sam2_graphs': worst_logits(fused, plain),
             'fused_vs_eager': worst_logits(fused, eager),
             'sam2_graphs_vs_eager': worst_logits(plain, eager)}
    _record(f'tracker_{precision}_{steady}', {'worst_logits': worst, 'stats': fstats,
                                             'groups': list(FUSED_GROUPS)})
    print(precision, steady, worst, fstats)
    assert fstats.get('graph_steps', 0) > 100 and fstats.get('eager_steps', 0) == 0, fstats
    assert fstats.get('fallbacks', 0) == 0, tr.fallback_reasons
    tol = 1e-3 if precision == 'fp32' else 0.5
    assert worst['fused_vs_eager'] <= tol and worst['fused_vs_sam2_graphs'] <= tol, worst


# ---- group 'io': frame in and masks out (kernels/io_frame.py, io_masks.py) ----------------
def _blobs(b, s, seed, dtype=torch.float32):
    """[b, 1, s, s]: per object a noisy disc of logits (about -40..+20) at a random place, the
    last object empty (all negative)."""
    g = torch.Generator(device='cuda').manual_seed(seed)
    yy, xx = torch.meshgrid(*(torch.arange(s, device='cuda').float(),) * 2, indexing='ij')
    c = torch.rand(b, 3, device='cuda', generator=g) * torch.tensor([s, s, s / 3], device='cuda')
    d = ((yy - c[:, 0, None, None]) ** 2 + (xx - c[:, 1, None, None]) ** 2).sqrt()
    lo = (c[:, 2, None, None] + 2 - d) * 0.5 + torch.randn(b, s, s, device='cuda', generator=g)
    lo[-1] = -4.0
    return lo[:, None].to(dtype)


@pytest.mark.parametrize('size', [512, 1024])
@pytest.mark.parametrize('hw', [(720, 1280), (1600, 700), (37, 53)])
def test_io_frame_in_gpu_bitwise(size, hw):
    """Our two kernels = frame_in.normalize on the GPU and on the CPU, bit for bit (float32;
    (1600, 700) -> S runs Pillow 13's vertical pass first)."""
    from sam2_ros.engine import frame_in
    from sam2_ros.engine.cuda.kernels.io_frame import frame_to_input
    img = torch.randint(0, 256, (*hw, 3), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(size + hw[0]))
    got = frame_to_input(img.cuda(), size)
    assert torch.equal(got, frame_in.normalize(img.cuda(), size))
    assert torch.equal(got.cpu(), frame_in.normalize(img, size))


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('size', [512, 1024])
def test_io_masks_out_gpu(size, dtype):
    """8 objects' logits (S/4 side) -> 1280x720 masks, stats, label: masks flip against
    masks_out.on_device only where the exact logit is within 1e-4 x max |logit| of 0 (count
    recorded); stats and label exactly the reference functions of the masks, and the
    reference's own where no mask pixel flipped."""
    import torch.nn.functional as F
    from sam2_ros.engine import masks_out
    from sam2_ros.engine.cuda.kernels.io_masks import masks_label_stats
    h, w, b = 720, 1280, 8
    lo = _blobs(b, size // 4, seed=size, dtype=dtype)
    ids = torch.tensor([1, 2, 3, 4, 5, 6, 0, 8], dtype=torch.uint8, device='cuda')
    scores = torch.randn(b, device='cuda')
    masks, stats, label = masks_label_stats(lo, h, w, ids, scores)
    ref_m, ref_s = masks_out.on_device(lo, h, w, scores)
    flipped = masks != ref_m
    exact = F.interpolate(lo.double(), size=(h, w), mode='bilinear', align_corners=False)[:, 0]
    worst = float(exact[flipped].abs().max()) if flipped.any() else 0.0
    _record(f'io_masks_out_{size}_{str(dtype)[6:]}', {
        'flipped_pixels': int(flipped.sum()), 'of': masks.numel(), 'worst_abs_logit': worst})
    assert worst <= 1e-4 * max(1.0, float(lo.float().abs().max()))
    assert torch.equal(stats, masks_out.stats_of(masks, scores))
    assert torch.equal(label, masks_out.label_on_device(masks, ids))
    if not flipped.any():
        assert torch.equal(stats, ref_s)
    assert stats[-1, 0] == 0 and (stats[-1, 1:7] == -1).all() and ref_m[:-1].any()


def test_io_graphs_capture_the_kernels_gpu():
    """A tracker's I/O graphs (fused_kernels on by default) run our kernels: the frame-in
    graph writes frame_in.normalize's input bitwise, the masks-out graph of 8 objects gives
    the eager reference's masks/stats/label (flips only near 0, as above); with 'io' off the
    graphs capture the reference functions."""
    from sam2_ros.engine import frame_in, masks_out
    for groups, fused in ((True, True), (tuple(g for g in FUSED_GROUPS if g != 'io'), False)):
        tr = StreamingTracker(_cfg(max_objects=8, fused_kernels=groups))
        io = tr.runner.graphs.io
        assert io.fused is fused
        img = torch.randint(0, 256, (720, 1280, 3), dtype=torch.uint8,
                            generator=torch.Generator().manual_seed(5)).numpy()
        with torch.inference_mode():
            assert io.load_frame(img)
            assert torch.equal(tr.runner.graphs.encoder.inputs,
                               frame_in.normalize(torch.from_numpy(img).cuda(), 512))
            lo = _blobs(8, 128, seed=3).to(tr.bank.logits.dtype)
            scores, ids = torch.randn(8, device='cuda'), [1, 2, 3, 4, 5, 6, 7, 9]
            m, st, lab = io.results(lo, scores, 720, 1280, ids)
            rm, rst, rlab = masks_out.host_results(lo, 720, 1280, scores, ids)
        flips = int((m != rm).sum())
        _record(f'io_graphs_fused_{fused}', {'flipped_pixels': flips})
        if flips == 0:
            assert (st == rst).all() and (lab == rlab).all()
        assert flips <= 1e-6 * m.size and not tr.fallback_reasons, tr.fallback_reasons


def _replay_kernels(tr, frames) -> float:
    """CUDA kernels per tracked frame (memcpy/memset aside) over ``frames``."""
    n, _ = cuda_kernels(lambda: [tr.track(fr) for fr in frames], warm_up=False)
    return n / len(frames)


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_constants_group_graphs_equal_without_and_launch_fewer_kernels(precision):
    """The 'constants' group (values that depend on the weights alone, computed once) changes
    no value: graphs with it alone = graphs of sam2's modules, and graphs with every group =
    graphs with every group but it, bitwise, over the stream with hole filling on (its
    tables too). Kernels per steady frame (1 object) with and without it go to the JSON."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False     # fp32: sam2's convolutions as ours, no TF32
    frames = synthetic_frames(60, h=360, w=640)
    events = schedule(360, 640, add2=10, add3=20, fix=30, remove=45)
    rest = tuple(g for g in FUSED_GROUPS if g != 'constants')
    runs, kernels = {}, {}
    steady = synthetic_frames(24, h=360, w=640, seed=1)
    for name, groups in (('sam2', False), ('constants', ('constants',)), ('rest', rest),
                         ('all', True)):
        cfg = _cfg(precision=precision, fused_kernels=groups, fill_hole_area=8)
        runs[name], stats, tr = tracker_stream(cfg, frames, events)
        assert stats.get('fallbacks', 0) == 0, tr.fallback_reasons
        assert hasattr(tr.runner.graphs.model, 'constants') == (name in ('constants', 'all'))
        one = StreamingTracker(cfg)               # one object, past its 15 frames after a box
        one.track(steady[0])
        one.add_prompt(events[10][0][1])
        for fr in steady[1:20]:
            one.track(fr)
        kernels[name] = _replay_kernels(one, steady[20:])
    worst = {'constants_vs_sam2_graphs': worst_logits(runs['constants'], runs['sam2']),
             'all_vs_all_but_constants': worst_logits(runs['all'], runs['rest'])}
    _record(f'constants_{precision}', {'worst_logits': worst, 'kernels_per_frame': kernels})
    print(precision, worst, kernels)
    assert worst['constants_vs_sam2_graphs'] == 0.0, worst
    assert worst['all_vs_all_but_constants'] == 0.0, worst
    assert kernels['constants'] < kernels['sam2'] and kernels['all'] < kernels['rest'], kernels


def _hole_logits(batch, size, dtype, seed):
    """[B, 1, S, S] logits: background densities from sparse specks to near 8-connected
    percolation (0.05..0.45), exact zeros, two smooth decoder-like images, NaNs sprinkled."""
    g = torch.Generator(device='cuda').manual_seed(seed)
    shape = (batch, 1, size, size)
    dens = torch.linspace(0.05, 0.45, batch, device='cuda').view(batch, 1, 1, 1)
    bg = torch.rand(shape, device='cuda', generator=g) < dens
    mag = torch.rand(shape, device='cuda', generator=g) * 4
    x = torch.where(bg, -mag, mag + 1e-3)
    x[bg & (torch.rand(shape, device='cuda', generator=g) < 0.1)] = 0.0
    noise = torch.randn((2, 1, size, size), device='cuda', generator=g)
    x[-2:] = torch.nn.functional.avg_pool2d(noise, 5, stride=1, padding=2) * 8 + 0.5
    x[torch.rand(shape, device='cuda', generator=g) < 0.005] = float('nan')
    return x.to(dtype)


@pytest.mark.parametrize('size', [128, 256])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_fused_hole_filling_gpu(size, dtype):
    """The one-kernel fill (group 'holes') = holes.fill_holes bit for bit, B = 8, max_area 1,
    2 and 8, NaNs included; one kernel per call, also when replayed from a CUDA graph."""
    from sam2_ros.engine.cuda.kernels.holes import fill_holes_fused
    from sam2_ros.engine.holes import FILL_VALUE, fill_holes
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    x = _hole_logits(8, size, dtype, seed=size)
    filled = {}
    with torch.inference_mode():
        for area in (1, 2, 8):
            out, ref = fill_holes_fused(x, area), fill_holes(x, area)
            assert out.dtype == ref.dtype and out.stride() == ref.stride()
            assert torch.equal(out.view(bits), ref.view(bits)), area
            filled[area] = int(((ref == FILL_VALUE) & (x <= 0)).sum())
        n_fused, us_fused = cuda_kernels(lambda: fill_holes_fused(x, 8))
        n_ref, us_ref = cuda_kernels(lambda: fill_holes(x, 8))
        static = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fill_holes_fused(static, 8)                  # compiled before the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            replayed = fill_holes_fused(static, 8)
        other = _hole_logits(8, size, dtype, seed=size + 1)
        static.copy_(other)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(replayed.view(bits), fill_holes(other, 8).view(bits))
    _record(f'holes_{size}_{str(dtype)[6:]}', {
        'filled_px': filled, 'kernels': n_fused, 'kernels_reference': n_ref,
        'kernel_us': round(us_fused, 1), 'kernel_us_reference': round(us_ref, 1)})
    print(size, dtype, filled, (n_fused, us_fused), (n_ref, us_ref))
    assert n_fused == 1, n_fused
    assert filled[1] > 100 and filled[8] > filled[2] > filled[1], filled
