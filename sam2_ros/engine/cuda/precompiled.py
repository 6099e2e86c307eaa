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
checkpoint of a model size (``test_precompiled_gpu.py`` runs a file compiled for other weights).
The file name is a hash of all the compiled code depends on (``Store.key_facts``): torch,
Triton, sam2's version and installed source, this package's engine source, the GPU, the model
(its resolved hydra config: size, overrides, and each module's plain attributes, which the
compiled code holds as constants; its parameters' and buffers' shapes, strides and dtypes),
precision, input shapes; a file of another model or build has another name and is never
loaded. Loading or compiling may fail (an older torch, a full disk, a corrupt file): the part
then runs sam2's kernels, logged, never an error. Results are not bitwise the eager path's
(fused kernels round in another order): ``test_precompiled_gpu.py`` holds them to the
tolerance of the other kernel changes (``docs/design.md``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from sam2_ros.engine import encoder, step
from sam2_ros.engine.config import MODEL_CONFIGS, TrackerConfig
from sam2_ros.engine.cuda import cache_files
from sam2_ros.engine.model import hydra_overrides

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

log = logging.getLogger('sam2_ros.precompiled')
PARTS = ('encoder', 'heads')


def default_dir() -> Path:
    """$SAM2_ROS_CACHE/precompiled, else ~/.cache/sam2_ros/precompiled."""
    root = os.environ.get('SAM2_ROS_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'sam2_ros')
    return Path(root) / 'precompiled'


# ---- the compiled functions (module level: aot_compile saves their bytecode) -------------
def encode_fn(model: SAM2Base, image: torch.Tensor, bf16: bool) -> Tuple[torch.Tensor, ...]:
    """image [N, 3, S, S] (one frame per camera) -> (3 vision feats, 3 vision pos) as
    ``encoder.encode_image``."""
    with torch.autocast(image.device.type, dtype=torch.bfloat16, enabled=bf16):
        f = encoder.encode_image(model, image)
    return (*f.vision_feats, *f.vision_pos)


def heads_fn(model: SAM2Base, pix_feat: torch.Tensor, vf0: torch.Tensor, vf1: torch.Tensor,
             vf2: torch.Tensor, fill_hole_area: int, bf16: bool
             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """pix_feat [B, C, h, w], the frame's vision feats (batch 1, shared by the B objects) or
    each object's (batch B, several cameras) -> ``tracking_heads``."""
    sizes = encoder.feat_sizes(model.image_size)
    feats = encoder.expand(encoder.Features([vf0, vf1, vf2], [], sizes), pix_feat.shape[0])
    with torch.autocast(pix_feat.device.type, dtype=torch.bfloat16, enabled=bf16):
        o = step.tracking_heads(model, pix_feat, feats, fill_hole_area)
    return o.low_res_logits, o.obj_ptr, o.score, o.mem_feats


# The engine's source the key hashes: every .py file of sam2_ros/engine, not a list of the
# modules the traced functions reach. Such a list went stale unnoticed (step.tracking_heads
# reaches glue.py and attention.py, which it missed), and the traced code also reaches modules
# through the objects the model carries (kernels/); all of them hash in milliseconds, and an
# edit of the engine that did not need it costs one compile.
ENGINE = Path(__file__).resolve().parents[1]
# sam2's installed files the key hashes: its source and the hydra configs the model is
# resolved from (its version alone misses an editable or patched install).
SAM2_SUFFIXES = ('.py', '.yaml')


class Store:
    """Loads (or compiles and saves) the precompiled parts of one model and configuration."""

    def __init__(self, model: SAM2Base, cfg: TrackerConfig):
        self.model, self.cfg = model, cfg
        self.dir = Path(cfg.precompile_dir) if cfg.precompile_dir else default_dir()
        self.bf16 = cfg.precision == 'bf16'
        self.events: List[dict] = []      # one per part: loaded / compiled / failed, seconds
        # (batch, features' batch: 1 or B) -> heads (None: failed)
        self._heads: Dict[Tuple[int, int], Optional[Bound]] = {}

    def encoder(self, image: torch.Tensor) -> Optional[Callable]:
        """image -> Features by the precompiled encoder; None when the encoder is not a
        precompiled part or failed (use sam2's kernels)."""
        if 'encoder' not in self.cfg.precompile:
            return None
        fn = self.load_or_compile('encoder', encode_fn, (image,), (self.bf16,))
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
            self._heads[batch, fb] = self.load_or_compile(
                name, heads_fn, (pix_feat, *feats.vision_feats[:3]),
                (self.cfg.fill_hole_area, self.bf16))
        fn = self._heads[batch, fb]
        if fn is None or not fn.fits(pix_feat):
            return None
        return lambda pix, f: step.StepOut(*fn(pix, *f.vision_feats[:3]))

    # ---- load or compile ----------------------------------------------------------------
    def load_or_compile(self, name: str, fn: Callable, args: Sequence[torch.Tensor],
                        consts: tuple) -> Optional['Bound']:
        """The part bound to the model, after one trial call on ``args`` (so a file that loads
        but does not run is compiled again, and a part that fails costs only itself, not the
        capture of every graph); None on any failure."""
        t0 = time.perf_counter()
        path = self.dir / f'{name}-{self.key(name, args, consts)}.bin'
        bound, how = None, 'loaded'
        try:
            if path.exists():
                bound = self._trial(self.load(path), args, consts, path)
            if bound is None:
                how = 'compiled'
                bound = Bound(self.compile(fn, args, consts, path), self.model, args, consts)
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

    def _trial(self, compiled, args, consts, path: Path) -> Optional['Bound']:
        """A loaded function bound and called once; None (compile it again) if it fails."""
        if compiled is None:
            return None
        bound = Bound(compiled, self.model, args, consts)
        try:
            bound(*args)
        except Exception as exc:  # noqa: BLE001 - e.g. a file from another build of torch
            log.warning('precompiled file %s failed its first call (%r): compiling it again',
                        path, exc)
            return None
        return bound

    def load(self, path: Path) -> Any:
        """The compiled function saved at ``path``, its guards off; None when unreadable."""
        try:
            with open(path, 'rb') as f:
                compiled = torch.compiler.load_compiled_function(f)
        except Exception as exc:  # noqa: BLE001 - a stale or corrupt file: compile anew
            log.warning('precompiled file %s unreadable (%r): compiling it again', path, exc)
            return None
        compiled.disable_guard_check()     # Bound checks the inputs instead
        cache_files.touch(path)            # used: retention keeps it
        return compiled

    def compile(self, fn: Callable, args: Sequence[torch.Tensor], consts: tuple,
                path: Path) -> Any:
        """``fn`` compiled ahead for ``args`` and ``consts`` (weights as inputs), saved at
        ``path`` when the disk takes it, its guards off; raises when it cannot be compiled."""
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
        try:
            self._save(compiled, path)
        except OSError as exc:   # a read-only or full disk: the compiled part is still used
            log.warning('precompiled part not cached (it is compiled again at the next start):'
                        ' %r', exc)
        compiled.disable_guard_check()
        return compiled

    @staticmethod
    def _save(compiled, path: Path) -> None:
        """``compiled`` to ``path`` atomically (a concurrent start sees all or nothing), then
        the folder's old files pruned."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=cache_files.TMP_PREFIX,
                                   suffix='.tmp')
        os.close(fd)
        try:
            compiled.save_compiled_function(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        cache_files.prune(path.parent)

    def key(self, name: str, args: Sequence[torch.Tensor], consts: tuple) -> str:
        """The part's file key: a hash of ``key_facts``."""
        facts = self.key_facts(name, args, consts)
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]

    def key_facts(self, name: str, args: Sequence[torch.Tensor], consts: tuple) -> dict:
        """Everything the compiled part depends on, which its file name hashes: a file found
        under that name was compiled from the same code for the same model and inputs."""
        import sam2
        dev = args[0].device
        return {
            'name': name, 'torch': torch.__version__, 'triton': version('triton'),
            'sam2': version('sam2'), 'sam2_src': tree_digest(Path(sam2.__file__).parent,
                                                             SAM2_SUFFIXES),
            'src': tree_digest(ENGINE, ('.py',)),
            # the device index too: inductor writes it into the generated code
            'gpu': [torch.cuda.get_device_name(dev), torch.cuda.get_device_capability(dev),
                    torch.version.cuda, dev.index] if dev.type == 'cuda' else dev.type,
            # torch refuses a file of another Python: two interpreters sharing the folder
            # would overwrite each other's file at every start
            'python': platform.python_version(),
            'model': [self.cfg.model_size, MODEL_CONFIGS[self.cfg.model_size],
                      *hydra_overrides(self.cfg)],
            'image_size': self.model.image_size, 'modules': model_digest(self.model),
            'consts': list(consts),
            'args': [(tuple(a.shape), tuple(a.stride()), str(a.dtype)) for a in args],
        }


class Bound:
    """A loaded compiled function bound to the model and its constants. Its own guards are
    off (they reject the inference tensors the tracker runs on); instead each call checks
    that the inputs have the shapes, strides and dtypes it was compiled for."""

    def __init__(self, compiled: Callable[..., Any], model: SAM2Base,
                 args: Sequence[torch.Tensor], consts: Sequence[Any]) -> None:
        self.compiled, self.model, self.consts = compiled, model, consts
        self.sig = [(a.shape, a.stride(), a.dtype, a.device) for a in args]

    def fits(self, *args: torch.Tensor) -> bool:
        """Whether the leading args have the shapes, strides and dtypes compiled for."""
        return [(a.shape, a.stride(), a.dtype, a.device) for a in args] == \
            self.sig[:len(args)]

    def __call__(self, *args: torch.Tensor) -> Any:
        if not self.fits(*args) or len(args) != len(self.sig):
            got = [(a.shape, a.stride(), a.dtype) for a in args]
            raise ValueError(f'precompiled function called with {got}, compiled for '
                             f'{self.sig}')
        # outside inference mode (as compiled); the tracker's inference tensors are read
        with torch.inference_mode(False), torch.no_grad():
            return self.compiled(self.model, *args, *self.consts)


def version(dist: str) -> str:
    """The installed version of distribution ``dist``, or '' when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ''


def tree_digest(root: Path, suffixes: Tuple[str, ...]) -> str:
    """sha256 of the files under ``root`` ending in ``suffixes``: their paths and bytes."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob('*') if p.suffix in suffixes and p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b'\0')
        h.update(path.read_bytes())
    return h.hexdigest()


def model_digest(model: torch.nn.Module) -> str:
    """sha256 of what tracing reads from ``model`` besides tensor values: each module's class
    and its plain attributes (numbers, strings, their tuples: hydra's resolved config, which
    the compiled code holds as constants, e.g. ``sigmoid_scale_for_mem_enc``), and the name,
    shape, stride and dtype of its parameters and buffers. Not their values: weights are
    inputs. Nor other tensors: those are caches sam2 fills or resizes as it runs (positional
    encodings, RoPE tables), so the key would depend on what ran before the part is loaded."""
    rows = []
    for name, mod in model.named_modules():
        attrs = {k: _described(v) for k, v in vars(mod).items()
                 if k not in ('_parameters', '_buffers', '_modules')
                 and not isinstance(v, torch.Tensor)}
        tensors = {k: None if t is None else [list(t.shape), list(t.stride()), str(t.dtype)]
                   for k, t in (*mod._parameters.items(), *mod._buffers.items())}
        rows.append([name, _described(type(mod)), sorted(attrs.items()),
                     sorted(tensors.items())])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def _described(v: Any) -> Any:
    """``v`` as JSON that is the same in every process: plain values as they are, containers
    without the tensors they hold (caches), classes and functions by name, anything else by
    its type's name alone."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (torch.dtype, torch.device)):
        return str(v)
    if isinstance(v, dict):
        return sorted([str(k), _described(x)] for k, x in v.items()
                      if not isinstance(x, torch.Tensor))
    if isinstance(v, (tuple, list)):
        return [_described(x) for x in v if not isinstance(x, torch.Tensor)]
    if isinstance(v, functools.partial):
        return ['partial', _described(v.func), _described(v.args), _described(v.keywords)]
    if isinstance(v, type) or callable(v) and hasattr(v, '__qualname__'):
        return f'{getattr(v, "__module__", "")}.{v.__qualname__}'
    return type(v).__qualname__


def _plain(args: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Copies of ``args`` (same strides) that are not inference tensors, to trace with."""
    with torch.inference_mode(False):
        return [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype,
                                    device=a.device).copy_(a) for a in args]
