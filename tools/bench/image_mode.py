"""Image-mode benchmark: one still with prompts, ours against sam2's and SAM's image predictors.

    python -m tools.bench.image_mode --res 1024 --prompts 1,8 --images 50 \
        --out benchmarks/results/h200_image.json

Why: a blog post claims SAM 2 is ~3x slower than SAM on single images because its image path
keeps a memory bank. This measures it. Variants (random weights, same synthetic images):

- ``ours``: ``ImageSegmenter.segment`` (engine/image.py, what ``StreamingTracker.segment_image``
  runs; SAM 2.1 tiny/small/base_plus/large): sam2's image-predictor computation, the encoder
  and one batched decoder call as CUDA graphs, no memory bank;
- ``sam2_predictor``: sam2's ``SAM2ImagePredictor`` on ``build_sam2`` (``set_image`` then one
  batched ``predict``), as sam2's README runs it;
- ``sam``: ``SamPredictor`` of the ``segment-anything`` package (ViT-B/L/H built with
  ``sam_model_registry[...](checkpoint=None)``), ``set_image`` then ``predict_torch`` with
  the boxes transformed as its README does.

Prompts: 1 or 8 boxes per image (a 4x2 grid), one mask each (``multimask_output=False``),
masks at source resolution delivered to the host. Per row (variant, model, res, prompts,
precision): wall ms per image p50/p99 over ``--images`` images after ``--warmup``;
``encoder_ms_p50`` (``set_image``; for ours ``ImageSegmenter.set_image``, timed in a loop of
its own) and ``decoder_ms_p50`` (the rest); ``gpu_kernel_ms`` (CUDA kernel time per image under
torch.profiler); ``peak_mib`` (max allocated since the model was built, model included;
the same definition for every variant; the pass that counts module calls is left out: for
ours it runs an eager twin that a user never runs); ``held_mib`` (the distinct tensor storages
on the device that the variant's objects keep alive after the row: ``held.py``, on the CPU too);
``memory_attention_calls`` / ``memory_encoder_calls`` per image (forward calls of sam2's
MemoryAttention / MemoryEncoder modules, counted on one eager image; ours counted on an eager
twin, since graph replays call no module). bf16 runs every variant under bf16 autocast (sam2's
README does so; SAM's does not, so its fp32 rows are its default); fp32 runs without autocast.

``--preprocess`` adds rows of the frame resize alone (``preprocess_*``: the exact PIL resize
of ``pil_resize.py`` against torch's antialiased bicubic it replaced, eager and captured).
Rows carry run, date, commit, GPU and command like the other benchmarks; each row is saved as
soon as it is measured, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from typing import Callable, Dict, List, Optional

import numpy as np

from tools.bench.held import held_bytes
from tools.bench.image_variants import BUILDERS, Variant
from tools.bench.profiling import sync as _sync
from tools.bench.results import csv, fmt as _fmt, save_json

SAM2_MODELS = ('tiny', 'small', 'base_plus', 'large')
SAM_MODELS = ('vit_b', 'vit_l', 'vit_h')
VARIANTS = ('ours', 'sam2_predictor', 'sam')


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog='python -m tools.bench.image_mode',
                                description=__doc__.split('\n')[0])
    p.add_argument('--variants', default=','.join(VARIANTS))
    p.add_argument('--sam2-models', default=','.join(SAM2_MODELS))
    p.add_argument('--sam-models', default=','.join(SAM_MODELS))
    p.add_argument('--res', type=int, default=1024,
                   help='model input side of ours (SAM2ImagePredictor and SAM: 1024 only)')
    p.add_argument('--source', default='1024x1024', help='WxH of the synthetic images')
    p.add_argument('--prompts', default='1,8')
    p.add_argument('--precision', default='bf16,fp32')
    p.add_argument('--images', type=int, default=50, help='measured images per row')
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--profile-images', type=int, default=3)
    p.add_argument('--preprocess', action='store_true', help='also the resize-alone rows')
    p.add_argument('--device', default='cuda')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', default=None)
    return p.parse_args(argv)


# ---- inputs --------------------------------------------------------------------------------
def images(n: int, w: int, h: int, seed: int) -> List[np.ndarray]:
    """n distinct smooth colour images [h, w, 3] uint8 (sines of random periods)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = []
    for _ in range(n):
        ch = [127 + 120 * np.sin(xx / rng.uniform(8, 40) + rng.uniform(0, 6))
              * np.cos(yy / rng.uniform(8, 40)) for _ in range(3)]
        out.append(np.stack(ch, -1).round().astype(np.uint8))
    return out


def boxes(n: int, w: int, h: int) -> np.ndarray:
    """[n, 4] float32 (x0, y0, x1, y1): cells of a 4x2 grid, shrunk by a margin."""
    cells = [(c, r) for r in range(2) for c in range(4)][:n]
    cw, rh = w / 4, h / 2
    return np.array([(c * cw + 0.15 * cw, r * rh + 0.15 * rh, (c + 1) * cw - 0.15 * cw,
                      (r + 1) * rh - 0.15 * rh) for c, r in cells], np.float32)




# ---- measurement ---------------------------------------------------------------------------
def _pct(ms: List[float], q: float) -> Optional[float]:
    return round(float(np.percentile(ms, q)), 3) if ms else None


def _count_calls(fn: Callable) -> Dict[str, int]:
    """Forward calls of sam2's memory modules while ``fn`` runs (a global hook: it also sees
    modules of twins and copies)."""
    import torch
    counts = {'MemoryAttention': 0, 'MemoryEncoder': 0}

    def hook(module, args, out):
        name = type(module).__name__
        if name in counts:
            counts[name] += 1
    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        fn()
    finally:
        handle.remove()
    return counts


class _Steps:
    """What ``kernel_ms`` drives: one image per step."""

    def __init__(self, fn: Callable):
        self.step, self.info = fn, {}


def measure(v: Variant, family: str, a: argparse.Namespace, imgs: List[np.ndarray],
            bx: np.ndarray) -> Dict[str, object]:
    """Timings of one variant at one prompt count (see the module doc for the fields)."""
    from tools.bench.profiling import kernel_ms
    for i in range(a.warmup):
        v.run(imgs[i % len(imgs)], bx)
    _sync(a.device)
    wall, dec = [], []
    for i in range(a.images):
        t0 = time.perf_counter()
        out = v.run(imgs[i % len(imgs)], bx)
        _sync(a.device)
        wall.append((time.perf_counter() - t0) * 1e3)
        if isinstance(out, tuple):          # predictors: time after set_image returned
            dec.append(out[1] * 1e3)
    enc = []
    if family == 'ours':
        for i in range(min(a.images, 20)):
            t0 = time.perf_counter()
            v.encode(imgs[i % len(imgs)])
            enc.append((time.perf_counter() - t0) * 1e3)
    steps = _Steps(lambda: v.run(imgs[0], bx))
    kms = kernel_ms(steps, a.profile_images, a.device)
    # The peak before the counting pass: ours counts on an eager twin, an instrument of this
    # benchmark that a user never runs, whose activations would otherwise count as ours.
    peak = _peak_mib(a.device)
    calls = _count_calls(lambda: v.counted(imgs[0], bx)) if family != 'sam' else None
    _restart_peak(a.device)
    p50 = _pct(wall, 50)
    if dec:
        dec_p50 = _pct(dec, 50)
        enc_p50 = round(p50 - dec_p50, 3)
    else:
        enc_p50 = _pct(enc, 50)
        dec_p50 = round(p50 - enc_p50, 3) if enc_p50 is not None else None
    return {'ms_p50': p50, 'ms_p99': _pct(wall, 99), 'encoder_ms_p50': enc_p50,
            'decoder_ms_p50': dec_p50, 'gpu_kernel_ms': None if kms is None else round(kms, 3),
            'memory_attention_calls': None if calls is None else calls['MemoryAttention'],
            'memory_encoder_calls': None if calls is None else calls['MemoryEncoder'],
            'images': a.images, 'peak_mib': peak}


def _peak_mib(device: str) -> Optional[float]:
    import torch
    if torch.device(device).type != 'cuda':
        return None
    return round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)


def torch_device_type(device: str) -> str:
    import torch
    return torch.device(device).type


def _restart_peak(device: str) -> None:
    """The peak from now on starts at what is allocated now (nothing freed)."""
    import torch
    if torch.device(device).type == 'cuda':
        torch.cuda.reset_peak_memory_stats()


def _reset_peak(device: str) -> None:
    """Free what the previous rows left cached, then restart the peak."""
    import torch
    gc.collect()
    if torch.device(device).type == 'cuda':
        torch.cuda.empty_cache()
    _restart_peak(device)


def model_rows(family: str, model: str, a: argparse.Namespace, imgs, save) -> None:
    """Every precision and prompt count of one model (built once, shared by the rows). The
    peak memory of a row counts the model and what its precision's rows allocated (another
    precision's trackers and graphs are freed first)."""
    cache: dict = {}
    w, h = imgs[0].shape[1], imgs[0].shape[0]
    for precision in csv(a.precision):
        for k in [k for k in cache if isinstance(k, tuple)]:
            del cache[k]                            # ours: the previous precision's trackers
        _reset_peak(a.device)
        peak = None                                 # since the build, counting passes excluded
        for n in csv(a.prompts, int):
            row = {'variant': family, 'model': model, 'res': 1024 if family == 'sam' else a.res,
                   'prompts': n, 'precision': precision, 'source': f'{w}x{h}'}
            try:
                v = BUILDERS[family](model, a, precision, cache)
                row.update(measure(v, family, a, imgs, boxes(n, w, h)))
                if row['peak_mib'] is not None:
                    peak = row['peak_mib'] = max(peak or 0.0, row['peak_mib'])
                row['held_mib'] = round(held_bytes(*v.holds, device=torch_device_type(a.device))
                                        / 2 ** 20, 1)
            except Exception as exc:  # noqa: BLE001 - one failed row must not end the run
                traceback.print_exc()
                row['error'] = f'{type(exc).__name__}: {exc}'[:300]
            save(row)
    cache.clear()
    _reset_peak(a.device)


# ---- preprocessing alone ---------------------------------------------------------------------
def _interpolate_resize(x, size: int):
    """Torch's antialiased bicubic in two rounded passes: the approximation of PIL that
    ``pil_resize.py`` replaced (one uint8 level off on a few values); timed for
    comparison only."""
    import torch.nn.functional as F
    x = x.permute(2, 0, 1).unsqueeze(0).float()
    h, w = x.shape[-2:]
    for side, hw in ((w, (h, size)), (h, (size, size))):     # horizontal, then vertical
        if side != size:
            x = F.interpolate(x, size=hw, mode='bicubic', antialias=True).round_().clamp_(0, 255)
    return x


PREPROCESS_SIZES = ((1280, 720, 512), (1280, 720, 1024), (1920, 1080, 1024))   # (w, h, S)


def preprocess_rows(a: argparse.Namespace, save, sizes=PREPROCESS_SIZES) -> None:
    """ms per frame of the resize alone, [H, W, 3] uint8 on the device -> [1, 3, S, S]."""
    import torch

    from tools.bench.profiling import kernel_ms
    from sam2_ros.engine import frame_in
    methods = {'exact': lambda x, s: frame_in.normalize(x, s),
               'interpolate': _interpolate_resize}
    cuda = torch.device(a.device).type == 'cuda'
    for (w, h, s) in sizes:
        x = torch.from_numpy(images(1, w, h, 0)[0]).to(a.device)
        for name, fn in methods.items():
            for mode in (('eager', 'graph') if cuda else ('eager',)):
                run = (lambda: fn(x, s))
                if mode == 'graph':
                    run = _graphed(lambda: fn(x, s))
                for _ in range(3):
                    run()
                _sync(a.device)
                n = 200 if cuda else 3
                t0 = time.perf_counter()
                for _ in range(n):
                    run()
                _sync(a.device)
                ms = (time.perf_counter() - t0) * 1e3 / n
                kms = kernel_ms(_Steps(run), 10, a.device)
                save({'variant': f'preprocess_{name}_{mode}', 'model': f'{w}x{h}', 'res': s,
                      'prompts': 0, 'precision': 'uint8', 'ms_p50': round(ms, 4),
                      'gpu_kernel_ms': None if kms is None else round(kms, 4)})


def _graphed(fn: Callable) -> Callable:
    """``fn`` captured in a CUDA graph after a warm-up on a side stream."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


# ---- rows on disk and on screen ------------------------------------------------------------
def row_key(r: dict) -> tuple:
    return (r['variant'], r['model'], r['res'], r['prompts'], r['precision'])


ORDER = {m: i for i, m in enumerate(SAM2_MODELS + SAM_MODELS)}


def table(rows: List[dict]) -> List[str]:
    """Markdown lines: one row per measured (variant, model, precision, prompts)."""
    rows = sorted((r for r in rows if not r['variant'].startswith('preprocess')),
                  key=lambda r: (r['precision'], r['prompts'], VARIANTS.index(r['variant'])
                                 if r['variant'] in VARIANTS else 9, ORDER.get(r['model'], 9)))
    out = ['| precision | prompts | variant | model | ms p50 | ms p99 | encoder ms | '
           'decoder ms | GPU kernel ms | peak MiB | memory attention / encoder calls |',
           '|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        calls = '-' if r.get('memory_attention_calls') is None else \
            f"{r['memory_attention_calls']} / {r['memory_encoder_calls']}"
        if r.get('error'):
            out.append(f"| {r['precision']} | {r['prompts']} | {r['variant']} | {r['model']} | "
                       f"failed: {r['error'][:60]} | | | | | | |")
            continue
        out.append(f"| {r['precision']} | {r['prompts']} | {r['variant']} | {r['model']} | "
                   f"{_fmt(r['ms_p50'])} | {_fmt(r['ms_p99'])} | {_fmt(r['encoder_ms_p50'])} | "
                   f"{_fmt(r['decoder_ms_p50'])} | {_fmt(r['gpu_kernel_ms'])} | "
                   f"{_fmt(r.get('peak_mib'), 0)} | {calls} |")
    return out


def preprocess_table(rows: List[dict]) -> List[str]:
    rows = [r for r in rows if r['variant'].startswith('preprocess')]
    out = ['| source -> S | method | ms per frame | GPU kernel ms |', '|---|---|---|---|']
    for r in rows:
        out.append(f"| {r['model']} -> {r['res']} | {r['variant'][len('preprocess_'):]} | "
                   f"{_fmt(r['ms_p50'], 3)} | {_fmt(r['gpu_kernel_ms'], 3)} |")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    a = parse(argv)
    from tools.bench.results import provenance, stamp
    prov = provenance(a.device, 'python -m tools.bench.image_mode',
                      sys.argv[1:] if argv is None else list(argv))
    done: List[dict] = []

    def save(row: dict) -> None:
        done.append(stamp(row, prov))
        if a.out:
            save_json(a.out, [row], key=row_key)
        print(json.dumps({k: row.get(k) for k in ('variant', 'model', 'precision', 'prompts',
                                                   'ms_p50', 'gpu_kernel_ms', 'error')}),
              flush=True)

    w, h = (int(v) for v in a.source.lower().split('x'))
    imgs = images(8, w, h, a.seed)
    if a.preprocess:                        # first: a few seconds, and a run may be cut short
        preprocess_rows(a, save)
    for family in csv(a.variants):
        models = csv(a.sam_models) if family == 'sam' else csv(a.sam2_models)
        for model in models:
            model_rows(family, model, a, imgs, save)
    print('\n'.join(table(done)))
    if a.preprocess:
        print('\n'.join(preprocess_table(done)))
    return 1 if any(r.get('error') for r in done) else 0


if __name__ == '__main__':
    sys.exit(main())
