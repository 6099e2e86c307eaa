"""One function per benchmarked variant, each driving the same synthetic stream.

Workload: 1280x720 synthetic source frames (a textured background with moving discs), each
object prompted with a box on frame 0, then steady tracking. Every variant delivers, every
frame, a boolean mask per object at source resolution on the HOST (official: ``video_res_masks
> 0`` then ``.cpu()``; ours: ``FrameResult.objects[i].mask`` is already a host array).

A variant is a generator factory ``fn(spec) -> Run``: ``Run.step()`` processes the next frame
and returns the host masks; ``Run.compile_s`` is the compile (or graph capture) time, known
after ``Run.start()`` for ours and after the warm-up frames for compiled official variants.
Random weights throughout: timings only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import numpy as np
import torch

SRC_H, SRC_W = 720, 1280
WITH_GELU = ('gelu_epilogue',)                    # opt-in groups (config.FUSED_OPT_IN)
WITH_WINDOW = ('window_attention',)
WITH_VALUES = ('memory_values',)
WITH_OPT_IN = ('gelu_epilogue', 'window_attention')   # the 'optin' rows (before memory_values)
WITH_PATCH = WITH_OPT_IN + WITH_VALUES                # the default before 'patch_embed'
WITH_ALL = WITH_PATCH + ('patch_embed',)              # the default before 'self_flash'


@dataclass
class Spec:
    model: str
    res: int
    objects: int
    frames: int                      # total frames in the stream (prompt frame included)
    device: str = 'cuda'
    precision: str = 'bf16'
    seed: int = 0


def camera(spec: Spec):
    """The workload's synthetic camera (``sam2_ros.synthetic``): one disc per object, at least
    two discs, at the source resolution."""
    from sam2_ros.synthetic import SyntheticCamera
    return SyntheticCamera(SRC_W, SRC_H, objects=max(2, spec.objects), seed=spec.seed)


@dataclass
class Run:
    step: Callable[[], list]
    compile_s: Optional[float] = None
    close: Callable[[], None] = lambda: None
    info: Dict[str, object] = field(default_factory=dict)


def _autocast(precision: str, device: str):
    if precision != 'bf16':
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


# ---- ours -------------------------------------------------------------------------------
def as_received(frame: np.ndarray) -> np.ndarray:
    """The frame as the ROS node gets it: a read-only view of a message's bytes."""
    return np.ndarray(frame.shape, np.uint8, memoryview(frame.tobytes()))


def _ours(spec: Spec, graphs: bool, mode: str = 'swap', received: bool = False,
          **cfg_kw) -> Run:
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt

    cfg = TrackerConfig(model_size=spec.model, image_size=spec.res, random_weights=True,
                        seed=spec.seed, device=spec.device, precision=spec.precision,
                        max_objects=max(8, spec.objects), use_cuda_graphs=graphs,
                        graph_mode=mode, **cfg_kw)
    tr = StreamingTracker(cfg)
    stream = camera(spec)
    # frames made before timing, as the official variants read theirs from init_state
    frames = [stream.frame(t) for t in range(spec.frames)]
    if received:
        frames = [as_received(f) for f in frames]
    state = {'t': 0}
    res = tr.track(frames[0])
    for i, box in enumerate(stream.boxes(0, spec.objects)):
        res = tr.add_prompt(Prompt(i + 1, box=box))
    assert len(res.objects) == spec.objects

    def step():
        state['t'] += 1
        r = tr.track(frames[state['t']])
        return [o.mask for o in r.objects]

    run = Run(step, info={'tracker': tr})
    if graphs:
        run.compile_s = float(getattr(tr.runner, 'capture_s', 0.0))
    run.info['stats'] = tr.stats
    return run


def ours_graph_batched_cams2(spec: Spec) -> Run:
    """Two cameras in one ``MultiStreamTracker`` (the default configuration, as one node
    serving a stereo pair runs it): both frames encoded as one batch, ``spec.objects`` objects
    per camera tracked in one batched step; a step is both cameras' frame. The engine's part of
    a stereo node's frame, without ROS."""
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.multistream import MultiStreamTracker
    from sam2_ros.engine.types import Prompt

    cfg = TrackerConfig(model_size=spec.model, image_size=spec.res, random_weights=True,
                        seed=spec.seed, device=spec.device, precision=spec.precision,
                        max_objects=max(8, spec.objects),
                        use_cuda_graphs=torch.device(spec.device).type == 'cuda',
                        graph_mode='batched')
    tr = MultiStreamTracker(cfg, cameras=2)
    cams = [camera(spec), camera(Spec(**{**spec.__dict__, 'seed': spec.seed + 1}))]
    frames = [[c.frame(t) for c in cams] for t in range(spec.frames)]
    state = {'t': 0}
    tr.track(frames[0])
    for c, cam in enumerate(cams):
        for i, box in enumerate(cam.boxes(0, spec.objects)):
            tr.stream(c).add_prompt(Prompt(i + 1, box=box))

    def step():
        state['t'] += 1
        out = tr.track(frames[state['t']])
        assert not any(out.errors), out.errors
        return [o.mask for r in out.results for o in r.objects]

    return Run(step, compile_s=float(getattr(tr.runner, 'capture_s', 0.0)),
               info={'tracker': tr, 'stats': tr.stats, 'cameras': 2})


def ours_eager(spec: Spec) -> Run:
    return _ours(spec, graphs=False)


def ours_graph(spec: Spec) -> Run:
    return _ours(spec, graphs=True, mode='swap')


def ours_graph_batched(spec: Spec) -> Run:
    return _ours(spec, graphs=True, mode='batched')


def ours_graph_batched_unfused(spec: Spec) -> Run:
    """ours_graph_batched with sam2's modules in the graphs (the off switch of
    fused_kernels)."""
    return _ours(spec, graphs=True, mode='batched', fused_kernels=False)


def with_fused(opt_in: tuple, mode: str, doc: str) -> Callable[[Spec], Run]:
    """A variant of ours with the graphs of ``mode`` and only the opt-in fused groups
    ``opt_in`` beside ``FUSED_GROUPS``, set as a user sets them (``fused_opt_in``)."""
    def variant(spec: Spec) -> Run:
        return _ours(spec, graphs=True, mode=mode, fused_opt_in=list(opt_in))
    variant.__doc__ = doc
    return variant


# name -> (the opt-in groups beside FUSED_GROUPS, graph mode, what the row is)
WITH_FUSED = {
    'ours_graph_gelu': (WITH_GELU, 'swap', "ours_graph with the opt-in 'gelu_epilogue'"),
    'ours_graph_batched_gelu': (WITH_GELU, 'batched',
                                "ours_graph_batched with the opt-in 'gelu_epilogue'"),
    'ours_graph_winattn': (WITH_WINDOW, 'swap', "ours_graph with the opt-in 'window_attention'"),
    'ours_graph_batched_winattn': (WITH_WINDOW, 'batched',
                                   "ours_graph_batched with the opt-in 'window_attention'"),
    'ours_graph_optin': (WITH_OPT_IN, 'swap',
                         "ours_graph with 'gelu_epilogue' and 'window_attention'"),
    'ours_graph_memvals': (WITH_VALUES, 'swap', "ours_graph with the opt-in 'memory_values'"),
    'ours_graph_batched_memvals': (WITH_VALUES, 'batched',
                                   "ours_graph_batched with the opt-in 'memory_values'"),
    'ours_graph_allopt': (WITH_ALL, 'swap', "ours_graph's opt-in groups before 'self_flash'"),
    'ours_graph_noopt': ((), 'swap',
                         'ours_graph without the opt-in groups (their off switch, '
                         'fused_opt_in: [])'),
    'ours_graph_nopatch': (WITH_PATCH, 'swap', "ours_graph without 'patch_embed'"),
    'ours_graph_batched_nopatch': (WITH_PATCH, 'batched',
                                   "ours_graph_batched without 'patch_embed'"),
    'ours_graph_batched_noopt': ((), 'batched',
                                 'ours_graph_batched without the opt-in groups '
                                 '(fused_opt_in: [])'),
    'ours_graph_batched_optin': (WITH_OPT_IN, 'batched', "ours_graph_batched with "
                                 "'gelu_epilogue' and 'window_attention'"),
    'ours_graph_selfflash': (WITH_ALL + ('self_flash',), 'swap',
                             "ours_graph with 'self_flash' (its default since 2026-12-06)"),
    'ours_graph_batched_selfflash': (WITH_ALL + ('self_flash',), 'batched',
                                     "ours_graph_batched with 'self_flash' (the default since)"),
    'ours_graph_batched_noselfflash': (WITH_ALL, 'batched', "ours_graph_batched without "
                                       "'self_flash' (its off switch)"),
}


def ours_graph_batched_received(spec: Spec) -> Run:
    """ours_graph_batched fed read-only frames, as the node receives them (views of the
    message's bytes): their staging copy must cost what an array's does."""
    return _ours(spec, graphs=True, mode='batched', received=True)


def ours_graph_unfused(spec: Spec) -> Run:
    return _ours(spec, graphs=True, mode='swap', fused_kernels=False)


def ours_graph_batched_seqmajor(spec: Spec) -> Run:
    """ours_graph_batched with sam2's [L, B, C] memory-attention inputs (the off switch of
    batch_major_memory)."""
    return _ours(spec, graphs=True, mode='batched', batch_major_memory=False)


def ours_graph_batched_b8(spec: Spec) -> Run:
    """ours_graph_batched with the object buckets 1, 2, 4, 8 (10 objects: 8 + 2 replays)
    instead of the default, which adds max_objects."""
    return _ours(spec, graphs=True, mode='batched', batch_buckets=(1, 2, 4, 8))


def ours_graph_unpadded(spec: Spec) -> Run:
    """Graphs for the steady state only, sam2's attention call, prompts eager (the off
    switches of padded and prompt graphs)."""
    return _ours(spec, graphs=True, mode='swap', padded_graphs=False, prompt_graphs=False)


def ours_graph_batched_unpadded(spec: Spec) -> Run:
    return _ours(spec, graphs=True, mode='batched', padded_graphs=False, prompt_graphs=False)


def ours_graph_sam2attn(spec: Spec) -> Run:
    """ours_graph with sam2's own attention call at steady state (steady_attention off)."""
    return _ours(spec, graphs=True, mode='swap', steady_attention='sam2')


def ours_graph_split(spec: Spec) -> Run:
    """ours_graph with split-KV memory attention forced at steady state."""
    return _ours(spec, graphs=True, mode='swap', steady_attention='split')


def ours_graph_batched_split(spec: Spec) -> Run:
    return _ours(spec, graphs=True, mode='batched', steady_attention='split')


def ours_graph_noio(spec: Spec) -> Run:
    """ours_graph with frame preprocessing and mask postprocessing eager (graph_io off)."""
    return _ours(spec, graphs=True, mode='swap', graph_io=False)


def ours_graph_noprecast(spec: Spec) -> Run:
    """ours_graph with autocast casting the weights on every call (precast_weights off)."""
    return _ours(spec, graphs=True, mode='swap', precast_weights=False)


def ours_eager_noprecast(spec: Spec) -> Run:
    """ours_eager with autocast casting the weights on every call (precast_weights off)."""
    return _ours(spec, graphs=False, precast_weights=False)


def ours_graph_compiled(spec: Spec) -> Run:
    """ours_graph with torch.compile (mode 'default') inside the captured graphs. Only the
    1-conditioning-frame bucket is captured (the benchmark prompts each object once), so
    compile_s counts one compile per captured shape, not a full set of buckets."""
    return _ours(spec, graphs=True, mode='swap', compile_mode='default',
                 graph_cond_buckets=(1,))


def ours_graph_autotuned(spec: Spec) -> Run:
    """ours_graph_compiled with mode 'max-autotune-no-cudagraphs' (inductor benchmarks GEMM,
    conv and Triton configs; our graphs do the capturing). Start-up is long: run it in the
    background (scripts/gpu/gpu_vos_bg.sh with ROW=tiny@512:1:ours_graph_autotuned)."""
    return _ours(spec, graphs=True, mode='swap', compile_mode='max-autotune-no-cudagraphs',
                 graph_cond_buckets=(1,))


def ours_graph_batched_compiled(spec: Spec) -> Run:
    """ours_graph_batched compiled likewise, buckets of 8 and 2 objects (10 = 8 + 2)."""
    return _ours(spec, graphs=True, mode='batched', compile_mode='default',
                 graph_cond_buckets=(1,), batch_buckets=(2, 8))


def ours_graph_precompiled(spec: Spec) -> Run:
    """ours_graph with the encoder and the tracking heads precompiled (``precompile``): the
    first start compiles them into the cache folder, later starts load them."""
    return _ours(spec, graphs=True, mode='swap', precompile=('encoder', 'heads'))


def ours_graph_batched_precompiled(spec: Spec) -> Run:
    """ours_graph_batched (the default configuration) with the same parts precompiled."""
    return _ours(spec, graphs=True, mode='batched', precompile=('encoder', 'heads'))


# ---- official -----------------------------------------------------------------------------
@contextlib.contextmanager
def _compile_mode(mode: Optional[str]):
    """Force every torch.compile call made while building the model to ``mode``."""
    if mode is None:
        yield
        return
    orig = torch.compile

    def patched(*args, **kwargs):
        kwargs['mode'] = mode
        return orig(*args, **kwargs)

    torch.compile = patched
    try:
        yield
    finally:
        torch.compile = orig


def _official(spec: Spec, vos: bool, compile_mode: Optional[str] = None) -> Run:
    from sam2.build_sam import build_sam2_video_predictor
    from sam2_ros.engine.config import MODEL_CONFIGS

    torch.manual_seed(spec.seed)
    with _compile_mode(compile_mode):
        predictor = build_sam2_video_predictor(
            MODEL_CONFIGS[spec.model], ckpt_path=None, device=spec.device,
            vos_optimized=vos, hydra_overrides_extra=[f'++model.image_size={spec.res}'])
    stream = camera(spec)
    tmp = tempfile.mkdtemp(prefix='sam2bench_')
    from PIL import Image
    for t in range(spec.frames):
        Image.fromarray(stream.frame(t)).save(os.path.join(tmp, f'{t:05d}.jpg'), quality=95)
    ctx = contextlib.ExitStack()
    ctx.enter_context(torch.inference_mode())
    ctx.enter_context(_autocast(spec.precision, spec.device))
    # offload_video_to_cpu: each frame is copied to the GPU when it is tracked (as a stream
    # would be) instead of holding the whole clip in GPU memory (would inflate peak_mib).
    state = predictor.init_state(tmp, offload_video_to_cpu=True)
    for i, box in enumerate(stream.boxes(0, spec.objects)):
        predictor.add_new_points_or_box(state, 0, i + 1, box=np.array(box, np.float32))
    gen = predictor.propagate_in_video(state)
    first = next(gen)                      # frame 0 (the prompt frame), already computed
    assert first[0] == 0

    def step():
        _, ids, video_res_masks = next(gen)
        m = (video_res_masks > 0).cpu()
        return list(m[:, 0].numpy())

    def close():
        ctx.close()
        gen.close()
        shutil.rmtree(tmp, ignore_errors=True)

    return Run(step, close=close, info={'predictor': predictor})


def official_eager(spec: Spec) -> Run:
    return _official(spec, vos=False)


def official_vos(spec: Spec) -> Run:
    """SAM2VideoPredictorVOS: torch.compile max-autotune of every component."""
    return _official(spec, vos=True)


def official_compile_default(spec: Spec) -> Run:
    """The same components as official_vos, compiled with torch.compile mode='default'."""
    return _official(spec, vos=True, compile_mode='default')


VARIANTS = {
    'official_eager': official_eager,
    'official_vos': official_vos,
    'official_compile_default': official_compile_default,
    'ours_eager': ours_eager,
    'ours_graph': ours_graph,
    'ours_graph_batched': ours_graph_batched,
    'ours_graph_batched_unfused': ours_graph_batched_unfused,
    'ours_graph_batched_cams2': ours_graph_batched_cams2,
    'ours_graph_batched_received': ours_graph_batched_received,
    'ours_graph_unfused': ours_graph_unfused,
    'ours_graph_batched_seqmajor': ours_graph_batched_seqmajor,
    'ours_graph_batched_b8': ours_graph_batched_b8,
    'ours_graph_unpadded': ours_graph_unpadded,
    'ours_graph_batched_unpadded': ours_graph_batched_unpadded,
    'ours_graph_sam2attn': ours_graph_sam2attn,
    'ours_graph_split': ours_graph_split,
    'ours_graph_batched_split': ours_graph_batched_split,
    'ours_graph_batched_bands4': lambda s: _ours(s, True, 'batched', staging_bands=4),
    'ours_graph_noio': ours_graph_noio,
    'ours_graph_noprecast': ours_graph_noprecast,
    'ours_eager_noprecast': ours_eager_noprecast,
    'ours_graph_compiled': ours_graph_compiled,
    'ours_graph_batched_compiled': ours_graph_batched_compiled,
    'ours_graph_autotuned': ours_graph_autotuned,
    'ours_graph_precompiled': ours_graph_precompiled,
    'ours_graph_batched_precompiled': ours_graph_batched_precompiled,
    **{name: with_fused(*spec) for name, spec in WITH_FUSED.items()},
}
COMPILED = {'official_vos', 'official_compile_default'}
