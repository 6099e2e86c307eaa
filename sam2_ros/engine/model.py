"""Build a SAM 2.1 model of a given size and resolution, and load a checkpoint with clear errors.

The model is built with sam2's own ``build_sam2_video_predictor`` so that it has exactly the
official video predictor's settings (binarized prompt masks for memory, dynamic multimask,
...). Only its ``SAM2Base`` methods are used by the tracker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING, ContextManager, Dict, List, Optional, TypeVar

import torch

from sam2_ros.engine.config import MODEL_CONFIGS, TrackerConfig
from sam2_ros.engine.errors import CheckpointError

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

# ``precast`` returns the kind of module it is given (a whole model or one of its modules)
ModuleT = TypeVar('ModuleT', bound=torch.nn.Module)

log = logging.getLogger(__name__)

# Hiera trunk width of each size: lets an error say which size a checkpoint belongs to.
_TRUNK_DIM = {96: 'tiny or small', 112: 'base_plus', 144: 'large'}
# Weights SAM 2.1 added to SAM 2.0's model: a SAM 2 state dict with none of them is a SAM 2.0
# checkpoint, which the SAM 2.1 configs cannot load (an error that blamed the size misled).
SAM21_ONLY = ('no_obj_embed_spatial', 'obj_ptr_tpos_proj.weight', 'obj_ptr_tpos_proj.bias')
# Weights both versions have: tell a SAM 2.0 state dict from one that is not SAM 2 at all.
_SAM2_CORE = ('maskmem_tpos_enc', 'no_obj_ptr', 'image_encoder.trunk.pos_embed')
_RANDOM_BANNER = """
################################################################################
#  sam2_ros: RANDOM WEIGHTS. No checkpoint was given, so the model is random.   #
#  Masks are meaningless; this only exercises the code paths and timings.       #
#  Pass an official SAM 2.1 checkpoint (.pt) for real tracking.                 #
################################################################################"""


def build_model(cfg: TrackerConfig) -> SAM2Base:
    """Return the SAM 2 model (eval mode, on cfg.device) for cfg; raise CheckpointError for a
    missing, unreadable or mismatched checkpoint."""
    cfg.validate()
    from sam2.build_sam import build_sam2_video_predictor  # heavy: hydra, sam2 modules

    if cfg.checkpoint is not None:
        state = read_checkpoint(cfg.checkpoint)
    torch.manual_seed(cfg.seed)
    model = build_sam2_video_predictor(MODEL_CONFIGS[cfg.model_size], ckpt_path=None,
                                       device='cpu', hydra_overrides_extra=hydra_overrides(cfg))
    if cfg.checkpoint is not None:
        load_state(model, state, cfg)
    else:
        print(_RANDOM_BANNER, file=sys.stderr, flush=True)
        log.warning('sam2_ros: using RANDOM weights (random_weights=True)')
    return model.to(cfg.device).eval()


def hydra_overrides(cfg: TrackerConfig) -> List[str]:
    """What ``build_model`` overrides in the size's SAM 2.1 hydra config
    (``MODEL_CONFIGS``): the two resolve to the model it builds."""
    overrides = [f'++model.image_size={cfg.image_size}', *cfg.extra_hydra_overrides]
    if cfg.corrections_as_cond:
        overrides.append('++model.add_all_frames_to_correct_as_cond=true')
    return overrides


def check_checkpoint_file(path: str) -> None:
    """CheckpointError unless ``path`` is a readable file (its contents are not read: the
    node checks a new checkpoint parameter with this before any configure)."""
    if os.path.isdir(path):
        raise CheckpointError(f'checkpoint {path!r} is a folder, not a .pt file')
    if not os.path.isfile(path):
        where = '' if os.path.isabs(path) else f' (relative to {os.getcwd()!r})'
        raise CheckpointError(f'checkpoint not found: {path!r}{where}')
    if not os.access(path, os.R_OK):
        raise CheckpointError(f'checkpoint {path!r} cannot be read (no permission)')


def read_checkpoint(path: str) -> Dict[str, torch.Tensor]:
    """The 'model' state dict of an official checkpoint file."""
    check_checkpoint_file(path)
    try:
        blob = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as exc:  # truncated zip, pickle garbage, not a torch file
        # torch's own text may be a bare number (a key of a corrupt pickle) or a page long;
        # a weights_only refusal starts with generic advice (to load it unsafely): its line
        # naming what is unsupported is the reason (the file holds more than tensors)
        lines = [ln for ln in str(exc).splitlines() if ln.strip()] or ['']
        line = next((ln for ln in lines[1:] if 'unsupported' in ln.lower()), lines[0])
        why = f'{type(exc).__name__}: {line.strip()[:160]}'
        raise CheckpointError(f'{path!r} is not a valid checkpoint (truncated, corrupt or not a '
                              f'PyTorch file; torch.load raised {why})') from exc
    state = blob.get('model') if isinstance(blob, dict) else None
    if not isinstance(state, dict):
        keys = list(blob)[:5] if isinstance(blob, dict) else type(blob).__name__
        raise CheckpointError(f'checkpoint {path!r} has no "model" state dict '
                              f'(found {keys}); expected an official SAM 2.1 .pt file')
    bad = [k for k, v in state.items() if not (isinstance(k, str) and torch.is_tensor(v))]
    if bad:
        raise CheckpointError(f'checkpoint {path!r}: its "model" state dict maps {bad[:3]} to '
                              f'something other than a tensor; expected an official SAM 2.1 '
                              f'.pt file')
    return state


def load_state(model: SAM2Base, state: Dict[str, torch.Tensor], cfg: TrackerConfig) -> None:
    """Load ``state`` strictly, or raise CheckpointError naming what does not match."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = [f'{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}'
             for k in sorted(set(own) & set(state)) if state[k].shape != own[k].shape]
    if missing or unexpected or wrong:
        raise CheckpointError(_mismatch_message(cfg, state, missing, unexpected, wrong))
    model.load_state_dict(state, strict=True)
    log.info('loaded SAM 2 %s checkpoint %s', cfg.model_size, cfg.checkpoint)


def is_sam2_0(state: Dict[str, torch.Tensor]) -> bool:
    """Whether ``state`` is the model state dict of a SAM 2.0 checkpoint."""
    return all(k in state for k in _SAM2_CORE) and not any(k in state for k in SAM21_ONLY)


def _mismatch_message(cfg: TrackerConfig, state, missing: List[str], unexpected: List[str],
                      wrong: List[str]) -> str:
    guess = ''
    pos = state.get('image_encoder.trunk.pos_embed')
    if pos is not None and pos.ndim >= 2:
        guess = f' (its Hiera trunk width {pos.shape[1]} looks like ' \
                f'{_TRUNK_DIM.get(int(pos.shape[1]), "an unknown size")})'
    mismatch = f'does not match model_size={cfg.model_size!r}{guess}:'
    if is_sam2_0(state):
        parts = [f'checkpoint {cfg.checkpoint!r} is a SAM 2.0 checkpoint (it has none of SAM '
                 f'2.1\'s {", ".join(SAM21_ONLY)}); only SAM 2.1 is supported: use '
                 f'sam2.1_hiera_{cfg.model_size}.pt']
        missing = [k for k in missing if k not in SAM21_ONLY]
        if not (missing or unexpected or wrong):
            return parts[0]
        parts[0] += f'. It also {mismatch}'
    else:
        parts = [f'checkpoint {cfg.checkpoint!r} {mismatch}']
    for name, items in (('missing keys', missing), ('unexpected keys', unexpected),
                        ('shape mismatches', wrong)):
        if items:
            parts.append(f'{len(items)} {name}, e.g. {items[:3]}')
    return ' '.join(parts)


# The modules torch.compile'd for compile_mode (those sam2's vos_optimized compiles).
COMPILED_MODULES = ('image_encoder', 'memory_attention', 'memory_encoder', 'sam_mask_decoder',
                    'sam_prompt_encoder')


def compiled_copy(model: SAM2Base, mode: Optional[str]) -> SAM2Base:
    """A shallow copy of ``model`` whose heavy modules are ``torch.compile``d with ``mode``
    (shapes static: one compile per captured shape), sharing every weight; ``model`` itself
    when mode is None. The graph runner captures the copy, its eager fallback keeps the
    original, so a fallback never triggers a compile in the middle of a stream."""
    if mode is None:
        return model
    import copy
    import torch._dynamo as dynamo
    for name in ('recompile_limit', 'cache_size_limit'):   # one compile per graph bucket
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, max(getattr(dynamo.config, name), 64))
    twin = copy.copy(model)
    twin._modules = dict(model._modules)     # a copy shares the dict: give it its own
    for name in COMPILED_MODULES:
        twin._modules[name] = torch.compile(model._modules[name], mode=mode, dynamic=False)
    return twin


# Modules whose weights bf16 autocast casts to bf16 on every call (linear and convolutions are
# on autocast's lower-precision list on CUDA and CPU; all their tensor arguments are cast).
_MATMUL_MODULES = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)


def precast(model: ModuleT, copy: bool = True, dtype: torch.dtype = torch.bfloat16) -> ModuleT:
    """``model`` with its Linear and Conv weights and biases stored in ``dtype``: a copy that
    shares every other tensor with ``model`` (left unchanged), or with copy=False ``model``
    itself, cast in place (no transient second set of weights).

    Why: under bf16 autocast each of these modules casts its fp32 weight and bias to bf16 on
    every call (autocast caches no cast under inference_mode, so the casts are captured into
    the CUDA graphs and replayed every frame too): hundreds of small cast kernels per frame.
    Autocast leaves a tensor that is already bf16 alone, and the cast itself is the same
    round-to-nearest-even, so every output is bit-identical to the official per-call casts
    (``test_precast_bitwise_*``). Only valid where these modules always run under bf16
    autocast, as everything the tracker runs does.

    The copy (``module_copy``) has modules of its own but shares every tensor that is not
    cast, also those that are neither parameters nor buffers (sam2's positional-encoding
    caches and RoPE tables live on the device as plain attributes): a copy of a model that is
    already cast holds no device memory of its own."""
    twin = module_copy(model) if copy else model
    with torch.no_grad():
        for mod in twin.modules():
            if not isinstance(mod, _MATMUL_MODULES):
                continue
            for name in ('weight', 'bias'):
                p = getattr(mod, name, None)
                if p is not None and p.is_floating_point() and p.dtype != dtype:
                    setattr(mod, name, torch.nn.Parameter(p.detach().to(dtype),
                                                          requires_grad=False))
    return twin


def module_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of the module tree: new module objects with their own ``_modules``,
    ``_parameters`` and ``_buffers`` dicts (so replacing a parameter of the copy leaves
    ``model`` alone), every other attribute shared as it is, tensors included (a deepcopy
    would duplicate the tensors that are not parameters or buffers on the device). A module
    reached twice is copied once."""
    import copy as copy_
    done: Dict[int, torch.nn.Module] = {}

    def visit(mod: torch.nn.Module) -> torch.nn.Module:
        if id(mod) not in done:
            twin = copy_.copy(mod)           # a new object whose __dict__ shares the values
            done[id(mod)] = twin
            twin._parameters = dict(mod._parameters)
            twin._buffers = dict(mod._buffers)
            twin._modules = {k: None if m is None else visit(m)
                             for k, m in mod._modules.items()}
        return done[id(mod)]
    return visit(model)


def autocast(cfg: TrackerConfig) -> ContextManager[None]:
    """bf16 autocast as the official predictor is run; a no-op for fp32."""
    if cfg.precision != 'bf16':
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(cfg.device).type, dtype=torch.bfloat16)
