"""Inductor-fused components, compiled once, saved on disk and loaded by every later start.

Why: a frame replays sam2's kernels one by one, most of them small elementwise ones
(``tools/probes/kernel_census.py`` counts them). Inductor fuses them into fewer, faster
kernels (``tools/probes/precompile_probe.py`` times each part; the ``_precompiled`` rows of
benchmarks/results/h200.json), but ``torch.compile`` traces and compiles at every start, for
every graph bucket (``compile_mode``). ``torch.compile(fullgraph=True).aot_compile`` compiles
ahead and saves a function that a later process loads without tracing; the graph runner
then captures the loaded function into its CUDA graphs exactly as it captures the eager one.

Parts (``TrackerConfig.precompile``):

* ``encoder``: Hiera + FPN of one frame (one shape per model and resolution);
* ``heads``: what follows memory attention on a tracking frame, SAM decoder, hole filling,
  memory encoder (``step.tracking_heads``; one shape per batch bucket).

Memory attention keeps its kernels (its shapes vary with the memory buckets, and it already
runs FlashAttention). Prompted steps keep sam2's kernels (rare frames, many shapes).

Weights are inputs of the compiled function, not constants in it, so one file serves every
checkpoint of a model size. The file name is a hash of all the compiled code depends on:
torch, sam2 and this package's source, the GPU, model size, precision, weight dtype, input
shapes. Loading or compiling may fail (an older torch, a full disk, a corrupt file): the part
then runs sam2's kernels, logged, never an error. Results are not bitwise the eager path's
(fused kernels round in another order): ``test_precompiled_gpu.py`` holds them to the
tolerance of the other kernel changes (``docs/design.md``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from sam2_ros.engine import encoder, step
from sam2_ros.engine.config import TrackerConfig

log = logging.getLogger('sam2_ros.precompiled')
PARTS = ('encoder', 'heads')


def default_dir() -> Path:
    """$SAM2_ROS_CACHE/precompiled, else ~/.cache/sam2_ros/precompiled."""
    root = os.environ.get('SAM2_ROS_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'sam2_ros')
    return Path(root) / 'precompiled'


# ---- the compiled functions (module level: aot_compile saves their bytecode) -------------
def encode_fn(model, image: torch.Tensor, bf16: bool):
    """image [N, 3, S, S] (one frame per camera) -> (3 vision feats, 3 vision pos) as
    ``encoder.encode_image``."""
    with torch.autocast(image.device.type, dtype=torch.bfloat16, enabled=bf16):
        f = encoder.encode_image(model, image)
    return (*f.vision_feats, *f.vision_pos)


def heads_fn(model, pix_feat: torch.Tensor, vf0: torch.Tensor, vf1: torch.Tensor,
             vf2: torch.Tensor, fill_hole_area: int, bf16: bool):
    """pix_feat [B, C, h, w], the frame's vision feats (batch 1, shared by the B objects) or
    each object's (batch B, several cameras) -> ``tracking_heads``."""
    sizes = encoder.feat_sizes(model.image_size)
    feats = encoder.expand(encoder.Features([vf0, vf1, vf2], [], sizes), pix_feat.shape[0])
    with torch.autocast(pix_feat.device.type, dtype=torch.bfloat16, enabled=bf16):
        o = step.tracking_heads(model, pix_feat, feats, fill_hole_area)
    return o.low_res_logits, o.obj_ptr, o.score, o.mem_feats


_SOURCES = ('encoder.py', 'step.py', 'holes.py', 'cuda/precompiled.py')   # under engine/


class Store:
    """Loads (or compiles and saves) the precompiled parts of one model and configuration."""

    def __init__(self, model, cfg: TrackerConfig):
        self.model, self.cfg = model, cfg
        self.dir = Path(cfg.precompile_dir) if cfg.precompile_dir else default_dir()
        self.bf16 = cfg.precision == 'bf16'
        self.events: List[dict] = []      # one per part: loaded / compiled / failed, seconds
        # (batch, features' batch: 1 or B) -> heads (None: failed)
        self._heads: Dict[Tuple[int, int], Optional[_Bound]] = {}

    def encoder(self, image: torch.Tensor) -> Optional[Callable]:
        """image -> Features by the precompiled encoder; None when the encoder is not a
        precompiled part or failed (use sam2's kernels)."""
        if 'encoder' not in self.cfg.precompile:
            return None
        fn = self._get('encoder', encode_fn, (image,), (self.bf16,))
        if fn is None:
            return None
        sizes = encoder.feat_sizes(self.model.image_size)

        def run(x: torch.Tensor) -> encoder.Features:
            out = fn(x)
            return encoder.Features(list(out[:3]), list(out[3:]), sizes)
        return run

    def heads(self, pix_feat: torch.Tensor,
              feats: encoder.Features) -> Optional[Callable[..., step.StepOut]]:
        """(pix_feat, feats) -> StepOut by the precompiled tracking heads of pix_feat's batch
        size (loaded or compiled on first use), or None: not a precompiled part, failed, or
        pix_feat not of the layout they were compiled for. ``feats`` are the frame's (batch
        1) features, the encoder graph's outputs, or with several cameras each object's
        (batch B, selected from them)."""
        batch, fb = pix_feat.shape[0], feats.vision_feats[0].shape[1]
        if 'heads' not in self.cfg.precompile:
            return None
        if (batch, fb) not in self._heads:
            name = f'heads_b{batch}' + ('' if fb == 1 else '_streams')
            self._heads[batch, fb] = self._get(name, heads_fn,
                                               (pix_feat, *feats.vision_feats[:3]),
                                               (self.cfg.fill_hole_area, self.bf16))
        fn = self._heads[batch, fb]
        if fn is None or not fn.fits(pix_feat):
            return None
        return lambda pix, f: step.StepOut(*fn(pix, *f.vision_feats[:3]))

    # ---- load or compile ----------------------------------------------------------------
    def _get(self, name: str, fn, args: Sequence[torch.Tensor], consts: tuple):
        """The part bound to the model, after one trial call on ``args`` (so a file that loads
        but does not run is compiled again, and a part that fails costs only itself, not the
        capture of every graph); None on any failure."""
        t0 = time.perf_counter()
        path = self.dir / f'{name}-{self._key(name, args, consts)}.bin'
        bound, how = None, 'loaded'
        try:
            if path.exists():
                bound = self._trial(self._load(path), args, consts, path)
            if bound is None:
                how = 'compiled'
                bound = _Bound(self._compile(fn, args, consts, path), self.model, args, consts)
                bound(*args)
        except Exception as exc:  # noqa: BLE001 - any failure: this part runs sam2's kernels
            self.events.append({'part': name, 'how': 'failed', 'error': repr(exc)[:300]})
            log.warning('precompiled %s unavailable, running sam2 kernels: %r', name, exc)
            return None
        self.events.append({'part': name, 'how': how, 's': time.perf_counter() - t0,
                            'file': str(path)})
        log.info('precompiled %s %s in %.1f s (%s)', name, how, time.perf_counter() - t0,
                 path)
        return bound

    def _trial(self, compiled, args, consts, path: Path) -> Optional['_Bound']:
        """A loaded function bound and called once; None (compile it again) if it fails."""
        if compiled is None:
            return None
        bound = _Bound(compiled, self.model, args, consts)
        try:
            bound(*args)
        except Exception as exc:  # noqa: BLE001 - e.g. a file from another build of torch
            log.warning('precompiled file %s failed its first call (%r): compiling it again',
                        path, exc)
            return None
        return bound

    def _load(self, path: Path):
        try:
            with open(path, 'rb') as f:
                compiled = torch.compiler.load_compiled_function(f)
        except Exception as exc:  # noqa: BLE001 - a stale or corrupt file: compile anew
            log.warning('precompiled file %s unreadable (%r): compiling it again', path, exc)
            return None
        compiled.disable_guard_check()     # _Bound checks the inputs instead
        return compiled

    def _compile(self, fn, args, consts, path: Path):
        import torch._dynamo
        if hasattr(torch._dynamo.config, 'enable_aot_compile'):   # off by default in 2.11
            torch._dynamo.config.enable_aot_compile = True
        if any(p.is_inference() for p in self.model.parameters()):
            raise RuntimeError('the model was built in inference mode: its weights cannot be '
                               'inputs of a compiled function (build it outside inference '
                               'mode)')
        example = _plain(args)
        with torch.inference_mode(False), torch.no_grad():
            compiled = torch.compile(fn, fullgraph=True, dynamic=False).aot_compile(
                ((self.model, *example, *consts), {}))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix='.tmp')
        os.close(fd)
        try:
            compiled.save_compiled_function(tmp)
            os.replace(tmp, path)          # atomic: a concurrent start sees all or nothing
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        compiled.disable_guard_check()
        return compiled

    def _key(self, name: str, args, consts) -> str:
        here = Path(__file__).parents[1]          # sam2_ros/engine
        src = hashlib.sha256()
        for f in _SOURCES:
            src.update((here / f).read_bytes())
        import sam2
        weight = next(m.weight.dtype for m in self.model.modules()
                      if isinstance(m, torch.nn.Linear))
        dev = args[0].device
        facts = {
            'name': name, 'torch': torch.__version__,
            'sam2': getattr(sam2, '__version__', ''), 'src': src.hexdigest(),
            'gpu': torch.cuda.get_device_name(dev) if dev.type == 'cuda' else dev.type,
            'model': self.cfg.model_size, 'image_size': self.model.image_size,
            'weights': str(weight), 'consts': list(consts),
            'args': [(tuple(a.shape), tuple(a.stride()), str(a.dtype)) for a in args],
        }
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]


class _Bound:
    """A loaded compiled function bound to the model and its constants. Its own guards are
    off (they reject the inference tensors the tracker runs on); instead each call checks
    that the inputs have the shapes, strides and dtypes it was compiled for."""

    def __init__(self, compiled, model, args, consts):
        self.compiled, self.model, self.consts = compiled, model, consts
        self.sig = [(a.shape, a.stride(), a.dtype, a.device) for a in args]

    def fits(self, *args: torch.Tensor) -> bool:
        """Whether the leading args have the shapes, strides and dtypes compiled for."""
        return [(a.shape, a.stride(), a.dtype, a.device) for a in args] == \
            self.sig[:len(args)]

    def __call__(self, *args: torch.Tensor):
        if not self.fits(*args) or len(args) != len(self.sig):
            got = [(a.shape, a.stride(), a.dtype) for a in args]
            raise ValueError(f'precompiled function called with {got}, compiled for '
                             f'{self.sig}')
        # outside inference mode (as compiled); the tracker's inference tensors are read
        with torch.inference_mode(False), torch.no_grad():
            return self.compiled(self.model, *args, *self.consts)


def _plain(args: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Copies of ``args`` (same strides) that are not inference tensors, to trace with."""
    with torch.inference_mode(False):
        return [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype,
                                    device=a.device).copy_(a) for a in args]
