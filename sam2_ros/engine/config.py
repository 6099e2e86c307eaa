"""The one configuration of the tracker core: every knob, its default and why.

ROS parameters, the offline CLI and the benchmarks all map onto :class:`TrackerConfig`, so a
default changes in exactly one place. Each field is a :func:`sam2_ros.knobs.knob`: its type,
user description and whether it is a tuning choice are its metadata, from which the ROS
parameters, their docs table and config/tracker.yaml are derived; the comments say why.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from sam2_ros.knobs import knob

MAX_IMAGE_SIZE = 4096

MODEL_SIZES = ('tiny', 'small', 'base_plus', 'large')
PRECISIONS = ('bf16', 'fp32')
GRAPH_MODES = ('swap', 'batched')
STEADY_ATTENTION = ('auto', 'sam2', 'flash', 'split')
COMPILE_MODES = (None, 'default', 'max-autotune-no-cudagraphs')
PRECOMPILE_PARTS = ('encoder', 'heads')
# Groups of sam2 modules the captured graphs can run as fused Triton kernels of our own
# (sam2_ros/engine/cuda/kernels/fused.py says what each one fuses); 'io' is not a module
# group: the frame-in and masks-out graphs (cuda/io_graphs.py) run our kernels; 'constants'
# needs no Triton: what depends on the weights and shapes alone, computed once instead of on
# every replay.
FUSED_GROUPS = ('hiera', 'memory_attention', 'rope', 'decoder', 'decoder_heads',
                'memory_encoder', 'layernorm2d', 'io', 'constants', 'holes', 'sam_glue', 'fpn',
                'pointer_pos')
TRITON_FREE_GROUPS = ('constants',)
# batch_buckets' bound, far above any rig's object count (256 objects for each of 16 cameras):
# a larger bucket is a typo that would capture a graph of that batch at start-up
MAX_BATCH_BUCKET = 4096
# Fused groups with a switch each (``fused_opt_in``; kernels/fused.py says what each fuses).
# DEFAULT_OPT_IN round elsewhere than sam2's ops, within a bf16 step of them: 'gelu_epilogue'
# (cuBLASLt's tanh GELU; 16-bit only), 'window_attention' (16-bit only), 'memory_values' (the
# same function, other rounding points), 'patch_embed' (sam2's values up to the summation
# order; bf16 rounds the operands as sam2's convolution does), 'self_flash' (one object's
# memory self-attention by FlashAttention, 16-bit only: another kernel's rounding).
FUSED_OPT_IN = ('gelu_epilogue', 'window_attention', 'memory_values', 'patch_embed',
                'self_flash')
DEFAULT_OPT_IN = FUSED_OPT_IN             # each timed on the GPU

# SAM 2.1 hydra config of each size, as shipped inside the sam2 package.
MODEL_CONFIGS = {
    'tiny': 'configs/sam2.1/sam2.1_hiera_t.yaml',
    'small': 'configs/sam2.1/sam2.1_hiera_s.yaml',
    'base_plus': 'configs/sam2.1/sam2.1_hiera_b+.yaml',
    'large': 'configs/sam2.1/sam2.1_hiera_l.yaml',
}


def default_precision(device: str) -> str:
    """The precision where none is given: bf16 on CUDA, fp32 elsewhere (bf16 autocast on the
    CPU is several times slower than fp32). The node, the launch files, the offline CLI and
    the demo all take it from here."""
    return 'bf16' if str(device).startswith('cuda') else 'fp32'


@dataclass
class TrackerConfig:
    """Everything the streaming tracker needs to know before the first frame."""

    model_size: str = knob('tiny', kind='str', doc=(
        'SAM 2.1 size: tiny, small, base_plus, large'))
    # Square model input side in pixels; multiple of 32 (sam2 backbone stride x 2).
    image_size: int = knob(1024, kind='int', doc=(
        'square model input side in px, multiple of 32 (smaller: faster, coarser masks)'))
    checkpoint: Optional[str] = knob(None, kind='str', doc=(
        'path of an official SAM 2.1 .pt file of model_size (SAM 2.0 ones are refused); empty = '
        'none (needs random_weights)'))
    # Random weights are only for tests and the demo; the loader says so loudly.
    random_weights: bool = knob(False, kind='bool', doc=(
        'random model weights: tests and demo only, masks are meaningless'))
    # Seed for random weights, so two processes build the same random model.
    seed: int = knob(0, kind='int', doc='seed of random weights (same seed, same model)')
    device: str = knob('cuda', kind='str', doc='torch device, e.g. cuda, cuda:1, cpu')
    # The default device's precision; the ROS parameter's '' and the CLIs' default are the
    # device's, default_precision(device).
    precision: str = knob('bf16', kind='str', doc=(
        "bf16 or fp32; '' = by device: bf16 on CUDA, fp32 on the CPU"))
    max_objects: int = knob(8, kind='int', doc=(
        'capacity of the preallocated object table, per camera (ids are 1..255); more objects '
        'are rejected'))
    # Conditioning (prompted) frames kept per object. The first prompt frame is always
    # kept; beyond the cap the oldest later one is evicted (see docs/streaming.md).
    max_cond_frames: int = knob(4, kind='int', doc=(
        'prompted frames kept per object (the first one always kept)'))
    # Official SAM2VideoPredictor option: a correction click on an already tracked frame
    # makes that frame a conditioning frame (True) or only replaces its ordinary memory
    # (False, the official default). True keeps corrections alive past 15 frames.
    corrections_as_cond: bool = knob(True, kind='bool', doc=(
        'a correction on a tracked frame becomes a conditioning frame'))
    # An object whose score stays <= 0 this many frames is reported 'lost' (not just
    # 'occluded'); it keeps tracking and can re-appear.
    lost_after_frames: int = knob(30, kind='int', doc=(
        'frames with score <= 0 before an object is reported LOST (not OCCLUDED)'))
    # sam2's hole filling: background components (logit <= 0, 8-connected) of at most this
    # many low-resolution pixels become foreground (logit 0.1) before a mask is stored, as the
    # official SAM2VideoPredictor does where sam2's CUDA extension is built. 8 is the value
    # build_sam2_video_predictor sets; 0 turns it off (as an install without the extension).
    fill_hole_area: int = knob(8, kind='int', doc=(
        "sam2's hole filling: background specks (8-connected, logit <= 0) of at most this many "
        'low-resolution pixels (image_size/4 square) become mask, as the official predictor does '
        "with sam2's CUDA extension; 0: off"))
    # CUDA graphs for the image encoder and the steady-state track step (CUDA only).
    use_cuda_graphs: bool = knob(True, kind='bool', doc=(
        'capture CUDA graphs of the per-frame step (CUDA only; false: eager)'))
    # 'swap': one graph, each object's memory copied in before its replay.
    # 'batched': objects of one bucket in one replay, stacked on the batch axis. The default
    # because the interaction benchmark (tools/bench/interaction.py; rows in
    # benchmarks/results/h200_interaction.json) finds it no slower at one object and faster
    # with several; it costs more capture time and graph memory (one graph per bucket).
    graph_mode: str = knob('batched', kind='str', tuning=True, doc=(
        "'batched' (the objects of one graph bucket stacked in one replay) or 'swap' (one replay "
        'per object; at steady state bitwise equal to the eager path); batched costs more '
        'capture time and graph memory'))
    # Batch sizes captured for graph_mode='batched' (objects padded up to a bucket; more
    # objects than the largest bucket run in several replays). None: powers of two up to
    # max_objects, and max_objects itself, so any object count runs in one replay per
    # conditioning-frame count: two replays (e.g. 10 objects as 8 + 2) repeat the per-replay
    # work that one replay of the whole batch pays once.
    batch_buckets: Optional[tuple] = knob(None, kind='int_array', tuning=True, doc=(
        "object batch sizes captured for graph_mode 'batched'; unset = powers of two up to "
        'max_objects, and max_objects (any object count in one replay per conditioning-frame '
        'count)'))
    # Batched step graphs hand sam2's memory attention its inputs as views of batch-major
    # storage, so its layers run on contiguous tensors instead of [L, B, C] transposed to
    # [B, L, C] (step.condition_on_memory). False: sam2's layout.
    batch_major_memory: bool = knob(True, kind='bool', tuning=True, doc=(
        "batched graphs hand sam2's memory attention its inputs as views of batch-major storage "
        "(the same values; false: sam2's layout)"))
    # Track-step graphs take memories padded to their bucket, flagged valid or not, and
    # attend only to the valid ones (FlashAttention's variable-length kernel): every tracking
    # frame replays a graph, the 15 after each prompt included. Outputs equal the eager
    # path's within rounding (another attention kernel; docs/design.md). False: graphs for the
    # steady state only, with sam2's own attention call; frames after a prompt run eagerly
    # (also the case with compile_mode set).
    padded_graphs: bool = knob(True, kind='bool', tuning=True, doc=(
        'the frames after a prompt replay graphs too: memories padded to the bucket, attention '
        'over the valid ones only (false: those frames run eagerly)'))
    # Padded memories (the frames after a prompt, corrections) attended in key chunks merged by
    # log-sum-exp where one call is too small for the GPU (one head of a few thousand queries):
    # the same softmax over the same keys in another summation order. False: one
    # variable-length FlashAttention call per layer.
    padded_split_attention: bool = knob(True, kind='bool', tuning=True, doc=(
        'padded memories (frames after a prompt, corrections) are attended in key chunks in '
        'parallel, merged by log-sum-exp, where one call would leave the GPU idle'))
    # Objects of one step in different buckets (after a prompt or a correction) replay ONE
    # padded graph that holds them all: a replay's fixed work (the heads, the memory encoder,
    # their launches) is paid once, and a frame's cost stops jumping for the 15 frames after
    # every prompt; steady objects then attend through the padded graph's kernel (as 'flash').
    # A merge can cost more than it saves (a larger bucket, every object's memories padded to
    # the widest), so where configure timed the replays (steady_attention 'auto') buckets stay
    # apart where that is clearly faster (StepGraphs.merge_pays). False: one replay per bucket
    # (exact buckets bitwise the eager step). Needs padded_graphs.
    merge_step_buckets: bool = knob(True, kind='bool', tuning=True, doc=(
        'objects of one step in different buckets (after a prompt, other conditioning-frame '
        'counts) replay one padded graph holding them all, not one graph per bucket, unless '
        "configure's replay timings (steady_attention 'auto') find the replays per bucket 15% "
        'faster; untimed: always'))
    # Attention kernel of steady-state objects: 'sam2' (sam2's own call, cuDNN on recent torch;
    # bitwise the eager step), 'flash' (the padded graph's variable-length FlashAttention;
    # padded_graphs only), 'split' (split-KV: the memory attention's keys in chunks attended in
    # parallel and merged by log-sum-exp, for calls too small to fill the GPU), 'auto' (all
    # timed at capture, once per batch size; sam2's call is left only for one >= 5% faster).
    # Not with compile_mode.
    steady_attention: str = knob('auto', kind='str', tuning=True, doc=(
        "attention kernel at steady state: 'sam2' (sam2's own call; bitwise the eager step), "
        "'flash' (the padded graph's FlashAttention), 'split' (split-KV: key chunks attended in "
        "parallel, merged by log-sum-exp), 'auto' (all timed at configure, once per batch size)"))
    # Prompted steps as CUDA graphs too (a new object, a correction click, a mask), one per
    # kind and point count in prompt_point_buckets (a click is 1 point, a box 2, a box and a
    # click 3); other counts run eagerly. False: every prompt runs eagerly.
    prompt_graphs: bool = knob(True, kind='bool', tuning=True, doc=(
        'prompted steps (new object, correction click, mask) replay graphs too'))
    prompt_point_buckets: tuple = knob((1, 2, 3), kind='int_array', tuning=True, doc=(
        'point counts with a prompt graph (a click is 1, a box 2, a box and a click 3); others '
        'run eagerly'))
    # A correction on the latest tracked frame reads the same memories that frame's tracking
    # step read (nothing of the object was written since), so memory attention would give
    # the same features again: the track-step graphs keep them per object and the correction's
    # graph starts from them (SAM heads with the click, memory encoder). False: the
    # correction re-runs memory attention, as sam2 does. Graphs only; the eager path re-runs.
    corrections_reuse_attention: bool = knob(True, kind='bool', tuning=True, doc=(
        "a correction on the latest tracked frame starts from that frame's memory-conditioned "
        'features (kept by its track-step graph) instead of re-running memory attention'))
    # A prompt deferred to the next track (defer_prompt) runs after that frame's encode is
    # queued, from a copy of its own frame's features (cuda/kept_features.py): the host
    # prepares it while the GPU encodes, and on CUDA its kernels run beside the encoder's on a
    # second stream. Graphs only; False: before the encode, on one stream (the reference).
    deferred_beside_encoder: bool = knob(True, kind='bool', tuning=True, doc=(
        "a deferred prompt's step runs beside the next frame's image encoder (a second CUDA "
        "stream, on a copy of its frame's features) instead of before it"))
    # Image mode (engine/image.py, sam2's image-predictor computation) as CUDA graphs (with
    # use_cuda_graphs, CUDA only): the image encoder, and prompt encoder + mask decoder per
    # prompt count in image_prompt_buckets and point count in prompt_point_buckets (or a mask
    # input alone), each captured on first use; other shapes run eagerly. False: eager.
    image_graphs: bool = knob(True, kind='bool', tuning=True, doc=(
        "image mode (segment_image: sam2's image-predictor computation) replays CUDA graphs: the "
        'image encoder, and prompt encoder + mask decoder per prompt count and point count, '
        'captured on first use (false: eager)'))
    # Prompt counts of the image-mode decoder graphs: a call is padded up to the next bucket;
    # more prompts than the largest run in chunks of it.
    image_prompt_buckets: tuple = knob((1, 2, 4, 8, 16), kind='int_array', tuning=True, doc=(
        'prompt counts of the image-mode decoder graphs: a call is padded up to the next, more '
        'prompts than the largest run in chunks of it'))
    graph_cond_buckets: Optional[tuple] = knob(None, kind='int_array', tuning=True, doc=(
        'conditioning-frame counts captured as graph buckets; unset = 1..max_cond_frames'))
    # Frame preprocessing and mask postprocessing as CUDA graphs too (per source resolution,
    # captured on first use); False runs them eagerly while the model steps stay graphs.
    graph_io: bool = knob(True, kind='bool', tuning=True, doc=(
        'frame preprocessing and mask postprocessing as CUDA graphs too'))
    # A host frame goes to the device in row bands: one band's copy to the device runs while
    # the host copies the next into pinned memory (each band costs its own copy calls). 1 (the
    # reference) until the GPU machine has timed the bands against it.
    staging_bands: int = knob(1, kind='int', tuning=True, doc=(
        "a host frame is staged in this many row bands, each band's copy to the device "
        'running while the host stages the next (1: the whole frame, then one copy)'))
    # (width, height) of the camera's frames when known: their I/O graphs are captured at
    # start-up, not on the first frame. None: captured on first use, per resolution.
    io_resolution: Optional[tuple] = knob(None, kind='int_array', tuning=True, doc=(
        '[width, height] of the camera: its frame-in and mask-out graphs are captured at '
        'configure instead of on the first frame; unset = on first use, per resolution'))
    # torch.compile mode for the modules inside the captured graphs ('default',
    # 'max-autotune-no-cudagraphs'), or None. Fewer, fused kernels; start-up takes minutes
    # instead of seconds and outputs differ from the eager reference by rounding.
    compile_mode: Optional[str] = knob(None, kind='str', tuning=True, doc=(
        "torch.compile the modules inside the graphs: '' (off), 'default' or "
        "'max-autotune-no-cudagraphs' (start-up takes minutes)"))
    # Parts of the graphs that run inductor-fused kernels, compiled ahead once per model,
    # resolution, GPU and torch and loaded from precompile_dir by every later start
    # (precompiled.py): 'encoder' (image encoder), 'heads' (a tracking frame's SAM decoder,
    # hole filling and memory encoder). The first start compiles (inductor: slow, timed by
    # tools/probes/precompile_probe.py), later starts only load;
    # outputs differ from the eager reference by rounding. () : sam2's kernels throughout.
    precompile: tuple = knob((), kind='str_array', tuning=True, doc=(
        'parts run as inductor-fused kernels compiled once and loaded from disk by later starts: '
        "'encoder', 'heads' (a tracking step's SAM decoder, hole filling and memory encoder); "
        'the first start compiles them'))
    # Folder of the precompiled files; None: $SAM2_ROS_CACHE/precompiled or
    # ~/.cache/sam2_ros/precompiled.
    precompile_dir: Optional[str] = knob(None, kind='str', tuning=True, doc=(
        'folder of the precompiled files; empty = $SAM2_ROS_CACHE/precompiled or '
        '~/.cache/sam2_ros/precompiled'))
    # bf16 only: store Linear/Conv weights in bf16 once at start-up instead of letting
    # autocast cast them on every call (bit-identical outputs, no cast kernel per weight and
    # call, less weight memory). False keeps the official per-call casts.
    precast_weights: bool = knob(True, kind='bool', tuning=True, doc=(
        'bf16: Linear/Conv weights cast to bf16 once at start-up, not by autocast on every call '
        '(bit-identical; false: the official per-call casts)'))
    # Fused kernels in the captured graphs (CUDA with triton importable, no compile_mode):
    # the graphs run a copy of the model, sharing its weights, whose modules of FUSED_GROUPS
    # run Triton kernels of our own (kernels/fused.py says what each fuses) and read the
    # frame-independent values computed once ('constants', CUDA without triton too). True:
    # every group; a tuple (from Python): those groups; False or (): sam2's modules and the
    # reference I/O throughout, as the eager runner (the reference, every fallback) always
    # runs. Graph outputs differ from it by rounding (docs/streaming.md).
    fused_kernels: Union[bool, tuple] = knob(True, kind='bool', tuning=True, doc=(
        "the captured graphs run fused Triton kernels of our own (residual add + LayerNorm + "
        "cast or window copy in one kernel, one-kernel RoPE, LayerNorm2d, the memory encoder "
        "in eleven kernels, the glue around the SAM heads in one kernel and around the memory "
        "encoder in its kernels, one-kernel hole filling, frame in and masks out in two "
        "kernels each; CUDA with triton, not with compile_mode), within rounding of the eager "
        "reference, and read what depends on the weights alone (positional encodings, the "
        "no-prompt embedding) computed once; false: sam2's modules and the reference I/O"))
    # The groups of FUSED_OPT_IN that are on where fused_kernels is on: each one's off switch
    # (the node's parameters, the launch files and YAML take fused_kernels as a bool).
    fused_opt_in: list = knob(default_factory=lambda: list(DEFAULT_OPT_IN), kind='str_array',
                              tuning=True, doc=(
        "fused kernels with a switch each, on where fused_kernels is on ([] for none; "
        "docs/design.md): by default those that round elsewhere than sam2's ops, within bf16 "
        "rounding of them: 'gelu_epilogue' (Hiera's MLP GELU in its first GEMM, 16-bit only), "
        "'window_attention' (Hiera's attention in windows of up to 64 tokens in our Triton "
        "kernel, 16-bit only), 'memory_values' (the memory cross-attention over the raw "
        "64-channel memory as values, its value projection folded into the output one), "
        "'patch_embed' (Hiera's patch embedding in one kernel), 'self_flash' (one object's "
        "memory self-attention over up to 2,048 tokens by FlashAttention, 16-bit only)"))
    # MultiStreamTracker (several cameras on one model): the present frames of a step are
    # encoded as one batch and every object of every camera runs in one track call. False: one
    # encode and one track call per camera, in camera order (the reference path).
    batch_streams: bool = knob(True, kind='bool', tuning=True, doc=(
        'several cameras on one tracker: their frames of a step encoded as one batch and every '
        'object of every camera in one track step (false: one encode and one track step per '
        'camera, the reference)'))
    extra_hydra_overrides: list = knob(default_factory=list, kind='str_array', tuning=True, doc=(
        'extra hydra overrides for the sam2 model config (expert use)'))

    def validate(self) -> 'TrackerConfig':
        """Raise ValueError naming the first bad field; return self for chaining."""
        if self.model_size not in MODEL_SIZES:
            raise ValueError(f'model_size must be one of {MODEL_SIZES}, got {self.model_size!r}')
        if self.precision not in PRECISIONS:
            raise ValueError(f'precision must be one of {PRECISIONS}, got {self.precision!r}')
        if self.graph_mode not in GRAPH_MODES:
            raise ValueError(f'graph_mode must be one of {GRAPH_MODES}, got {self.graph_mode!r}')
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f'compile_mode must be one of {COMPILE_MODES}, '
                             f'got {self.compile_mode!r}')
        _names_in(self, 'precompile', PRECOMPILE_PARTS, 'parts')
        if not isinstance(self.fused_kernels, bool) and (
                not isinstance(self.fused_kernels, (tuple, list))
                or any(g not in FUSED_GROUPS + FUSED_OPT_IN for g in self.fused_kernels)):
            raise ValueError(f'fused_kernels must be True, False or a tuple of '
                             f'{FUSED_GROUPS + FUSED_OPT_IN}, '
                             f'got {self.fused_kernels!r}')
        _names_in(self, 'fused_opt_in', FUSED_OPT_IN, 'groups')
        if self.precompile and self.compile_mode is not None:
            raise ValueError('precompile and compile_mode both compile the same modules: set '
                             'one of them')
        if not isinstance(self.image_size, int) or self.image_size < 64 or self.image_size % 32:
            raise ValueError(f'image_size must be a multiple of 32 >= 64, got {self.image_size!r}')
        if self.image_size > MAX_IMAGE_SIZE:      # SAM 2 is trained at 1024
            raise ValueError(f'image_size must be <= {MAX_IMAGE_SIZE}, got {self.image_size!r}')
        _int_in(self, 'max_objects', 1, 256)
        _int_in(self, 'max_cond_frames', 1, 64)
        if self.steady_attention not in STEADY_ATTENTION:
            raise ValueError(f'steady_attention must be one of {STEADY_ATTENTION}, got '
                             f'{self.steady_attention!r}')
        if not isinstance(self.prompt_point_buckets, (tuple, list)) or not all(
                isinstance(p, int) and 1 <= p <= 64 for p in self.prompt_point_buckets):
            raise ValueError(f'prompt_point_buckets must be point counts in 1..64, got '
                             f'{self.prompt_point_buckets!r}')
        if not isinstance(self.image_prompt_buckets, (tuple, list)) or not all(
                isinstance(n, int) and 1 <= n <= 256 for n in self.image_prompt_buckets) \
                or not self.image_prompt_buckets:
            raise ValueError(f'image_prompt_buckets must be prompt counts in 1..256, got '
                             f'{self.image_prompt_buckets!r}')
        _int_in(self, 'fill_hole_area', 0, 1024)                 # 0: off
        _int_in(self, 'lost_after_frames', 1, None)
        _int_in(self, 'staging_bands', 1, 64)
        _buckets_in(self, 'graph_cond_buckets', self.max_cond_frames,
                    'conditioning-frame counts', ' (max_cond_frames)')
        _buckets_in(self, 'batch_buckets', MAX_BATCH_BUCKET, 'object batch sizes')
        import torch        # here: the config module itself stays importable without torch
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f'device must be a torch device such as cpu, cuda or cuda:1, got '
                             f'{self.device!r}') from exc
        if self.io_resolution is not None and not (
                len(self.io_resolution) == 2 and all(isinstance(v, int) and v >= 1
                                                     for v in self.io_resolution)):
            raise ValueError(f'io_resolution must be (width, height) in pixels or None, got '
                             f'{self.io_resolution!r}')
        if self.checkpoint is None and not self.random_weights:
            # the same words for every front end: the node's user types the ROS spelling
            raise ValueError('no checkpoint given: set checkpoint to an official SAM 2.1 .pt '
                             'file, or random weights for tests (masks meaningless): '
                             'random_weights=True in Python, -p random_weights:=true for the '
                             'node, random_weights:=true for a launch file')
        return self

    @property
    def cuda_graphs_in_use(self) -> bool:
        """use_cuda_graphs as it takes effect: graphs exist on CUDA devices only."""
        return bool(self.use_cuda_graphs) and str(self.device).startswith('cuda')

    def replace(self, **changes: Any) -> 'TrackerConfig':
        return dataclasses.replace(self, **changes)


def _names_in(cfg: TrackerConfig, name: str, allowed: tuple, what: str) -> None:
    """ValueError unless the field ``name`` is a tuple or list of distinct names of
    ``allowed``."""
    v = getattr(cfg, name)
    if not isinstance(v, (tuple, list)) or len(set(v)) != len(v) or \
            any(n not in allowed for n in v):
        shown = tuple(v) if isinstance(v, (tuple, list)) else v
        raise ValueError(f'{name} takes distinct {what} of {allowed}, got {shown!r}')


def _buckets_in(cfg: TrackerConfig, name: str, hi: int, what: str, bound: str = '') -> None:
    """ValueError unless the field ``name`` is None (the default buckets) or distinct ints in
    1..hi: a bucket above what can occur would capture a graph no step replays (start-up time
    and GPU memory for nothing), a repeated one capture it twice."""
    v = getattr(cfg, name)
    if v is None:
        return
    if not isinstance(v, (tuple, list)) or not v or len(set(v)) != len(v) or not all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) and 1 <= n <= hi
            for n in v):
        raise ValueError(f'{name} must be distinct {what} in 1..{hi}{bound}, or unset for '
                         f'the default, got {v!r}')


def _int_in(cfg: TrackerConfig, name: str, lo: int, hi: Optional[int]) -> None:
    """ValueError unless the field ``name`` is an int (not a bool) in lo..hi (hi None: no
    upper bound)."""
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo or \
            (hi is not None and v > hi):
        span = f'>= {lo}' if hi is None else f'in {lo}..{hi}'
        raise ValueError(f'{name} must be an int {span}, got {v!r}')
