"""Which shapes get a graph: the typed keys of every captured graph and the policy behind them.

A graph has fixed shapes, so every shape a frame can need is a bucket decided before capture,
from the configuration and the bank's capacity alone (nothing here touches a tensor or a GPU):

* track steps: an object with c conditioning frames that has tracked long enough reads c + 6
  spatial memories and c + 15 pointers (its steady state, ``MemoryCounts.steady``). Each
  (object batch, c) gets an exact graph of that shape (sam2's own attention call) and, with
  padded graphs, one whose memories are padded and flagged, for objects with fewer (the frames
  after a prompt). Batch sizes are 1 in 'swap' mode, else ``batch_buckets`` or, by default,
  the masks-out buckets, so any object count runs in one replay per c;
* masks out: powers of two up to the capacity, and the capacity itself; frames in: one per
  source resolution and camera;
* prompts: one graph per kind (a new object with or without output on the frame, a
  correction reading memories padded to bucket c, a mask) and point count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

from sam2_ros.engine.config import TrackerConfig

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base


@dataclass(frozen=True, order=True)
class StepKey:
    """A track-step graph: ``batch`` objects, memories of bucket ``cond``."""

    batch: int
    cond: int


@dataclass(frozen=True)
class StepBucket:
    """Which graphs can run an object: padded or exact, of conditioning bucket ``cond``."""

    padded: bool
    cond: int


@dataclass(frozen=True)
class FrameInKey:
    """The frame-in graph of one source resolution, writing camera ``camera``'s slot of
    the encoder graph's input (0: the only one of a one-camera runner)."""

    h: int
    w: int
    camera: int = 0

    @property
    def hw(self) -> Tuple[int, int]:
        return self.h, self.w


@dataclass(frozen=True)
class MasksOutKey:
    """The masks-out graph of up to ``batch`` objects at one source resolution."""

    batch: int
    h: int
    w: int

    @property
    def hw(self) -> Tuple[int, int]:
        return self.h, self.w


IOKey = Union[FrameInKey, MasksOutKey]


@dataclass(frozen=True)
class InitPromptKey:
    """A new object's first frame: ``points`` points (a box is 2), ``has_prev`` when the
    object already has output on this frame (sam2 then feeds those logits with the points)."""

    points: int
    has_prev: bool


@dataclass(frozen=True)
class CorrectionKey:
    """A correction: ``points`` points and the previous logits, memories padded to ``cond``."""

    cond: int
    points: int


@dataclass(frozen=True)
class ReusedCorrectionKey:
    """A correction of the latest tracked frame from the conditioned features its track step
    kept (``MemoryBank.holds_conditioned``): ``points`` points and the previous logits, no
    memory attention."""

    points: int


@dataclass(frozen=True)
class MaskPromptKey:
    """A mask prompt."""


PromptKey = Union[InitPromptKey, CorrectionKey, ReusedCorrectionKey, MaskPromptKey]


@dataclass(frozen=True)
class MemoryCounts:
    """How many memories a model's step reads: the bucket arithmetic of one model."""

    num_maskmem: int        # sam2's num_maskmem: spatial memory slots, the cond slot included
    max_ptrs: int           # sam2's max_obj_ptrs_in_encoder

    @classmethod
    def of(cls, model: SAM2Base) -> MemoryCounts:
        return cls(model.num_maskmem, model.max_obj_ptrs_in_encoder)

    def steady(self, n_cond: int) -> Tuple[int, int]:
        """(n_spatial, n_pointers) of an object with n_cond conditioning frames that has
        tracked long enough for every memory slot to be filled."""
        return n_cond + self.num_maskmem - 1, n_cond + self.max_ptrs - 1

    def n_cond(self, tpos_idx: Sequence[int]) -> int:
        """Conditioning frames among an object's spatial memories (they carry the last
        temporal-position index)."""
        return sum(1 for t in tpos_idx if t == self.num_maskmem - 1)

    def smallest_holding(self, key: Tuple[int, int], conds: Sequence[int]) -> Optional[int]:
        """The smallest bucket of ``conds`` whose steady shape holds memories of shape
        ``key`` (n_spatial, n_pointers); None when none does."""
        fits = [c for c in conds if all(n <= m for n, m in zip(key, self.steady(c)))]
        return min(fits) if fits else None


def padded_graphs_on(cfg: TrackerConfig) -> bool:
    """Whether padded step graphs are captured: inductor would re-trace the swapped attention
    module on every call, so compiled graphs keep sam2's attention and exact buckets."""
    return cfg.padded_graphs and cfg.compile_mode is None


def out_buckets(capacity: int) -> Tuple[int, ...]:
    """Object-count buckets of the masks-out graphs: powers of two, and the capacity."""
    return tuple(sorted({min(2 ** i, capacity) for i in range(capacity.bit_length() + 1)}))


def batch_sizes(cfg: TrackerConfig, capacity: int) -> Tuple[int, ...]:
    """Step graphs' object batch sizes: 1 ('swap'), ``cfg.batch_buckets``, or by default the
    masks-out buckets."""
    if cfg.graph_mode == 'swap':
        return (1,)
    if cfg.batch_buckets:
        return tuple(sorted(set(cfg.batch_buckets)))
    return out_buckets(capacity)


def cond_buckets(cfg: TrackerConfig) -> Tuple[int, ...]:
    """Conditioning-frame buckets: ``cfg.graph_cond_buckets`` or 1..max_cond_frames."""
    return tuple(cfg.graph_cond_buckets or range(1, cfg.max_cond_frames + 1))


def step_keys(cfg: TrackerConfig, capacity: int) -> List[StepKey]:
    """Every track-step graph, largest batch first (the order they are captured in)."""
    return [StepKey(b, c) for b in sorted(batch_sizes(cfg, capacity), reverse=True)
            for c in cond_buckets(cfg)]


def prompt_keys(cfg: TrackerConfig) -> List[PromptKey]:
    """Every prompt graph captured at start-up: corrections re-running memory attention only
    with padded graphs (they read padded memories), in the conditioning buckets of the step
    graphs; corrections from the kept conditioned features with ``corrections_reuse_
    attention``."""
    pts = cfg.prompt_point_buckets
    keys: List[PromptKey] = [InitPromptKey(p, prev) for p in pts for prev in (False, True)]
    if padded_graphs_on(cfg):
        keys += [CorrectionKey(c, p) for c in sorted(set(cond_buckets(cfg))) for p in pts]
    if cfg.corrections_reuse_attention:
        keys += [ReusedCorrectionKey(p) for p in pts]
    return keys + [MaskPromptKey()]


def smallest_batch(batches: Sequence[int], n: int) -> Optional[int]:
    """The smallest of ``batches`` that holds n objects; None when none does."""
    return min((b for b in batches if b >= n), default=None)
