"""CUDA graphs of the lean image path (``engine/image.py``): the encoder, and the batched decoder.

Why: one image at 1024 px is a few hundred small kernels of the encoder and a few hundred of the
prompt encoder and mask decoder; replaying them removes the launch overhead that dominates
at small models.

* Encoder: one graph over a static [1, 3, S, S] input (preprocessing stays outside: it depends
  on the source size); its static outputs are the segmenter's features, which the decoder
  graphs read without a copy.
* Decoder: one graph per (prompt-count bucket, points per prompt, mask input or not,
  multimask_output). N prompts are padded up to the next bucket of
  ``TrackerConfig.image_prompt_buckets`` by repeating the last one (decoder rows are
  independent: the extra rows are dropped); more than the largest bucket run in chunks of it.
  Point counts outside ``prompt_point_buckets`` run eagerly (a mask input alone always fits).
* Every graph is captured on first use, so a tracker that never segments an image pays
  nothing. A capture failure disables that graph (eager from then on), a replay failure reruns
  the call eagerly; both are reported to ``on_fallback`` with the reason.

All graphs share one memory pool: they never run concurrently, so their intermediates can
share memory; outputs are cloned out of the static buffers, so a later replay never changes
what a caller holds.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import torch

from sam2_ros.engine.image_types import ImageFeatures, Prediction, cat_predictions
from sam2_ros.engine.image_prompts import PromptBatch
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.cuda.capture import CapturedGraph, Capturer

class ImageGraphs:
    """Captures and replays the image path's graphs; None from a method means: run eagerly."""

    def __init__(self, cfg: TrackerConfig, encode_fn: Callable[[torch.Tensor], ImageFeatures],
                 decode_fn: Callable[[ImageFeatures, PromptBatch, bool], Prediction],
                 on_fallback: Callable[[str], None]):
        self.cfg = cfg
        self.encode_fn, self.decode_fn, self.on_fallback = encode_fn, decode_fn, on_fallback
        self.buckets = tuple(sorted(set(cfg.image_prompt_buckets)))
        self.capturer = Capturer()         # one memory pool for the image path's graphs
        self.encoder: Optional[CapturedGraph] = None
        self.encoder_failed = False
        # (bucket, points, mask input, multimask) -> graph; None: its capture failed
        self.decoders: Dict[Tuple[int, int, bool, bool], Optional[CapturedGraph]] = {}

    def encode(self, image: torch.Tensor) -> Optional[ImageFeatures]:
        """image [1, 3, S, S] -> the encoder graph's static output features (overwritten by
        the next call), or None (run eagerly)."""
        if self.encoder_failed:
            return None
        if self.encoder is None:
            try:
                self.encoder = self.capture(self.encode_fn, image.clone())
            except Exception as exc:  # noqa: BLE001 - any capture failure means eager
                self.encoder_failed = True
                self.on_fallback(f'image encoder capture failed, eager from now on: {exc!r}')
                return None
        try:
            self.encoder.inputs.copy_(image)
            self.encoder.graph.replay()
        except Exception as exc:  # noqa: BLE001 - this image is encoded eagerly
            self.on_fallback(f'image encoder replay failed: {exc!r}')
            return None
        return self.encoder.outputs

    def decode(self, feats: ImageFeatures, batch: PromptBatch,
               multimask: bool) -> Optional[Prediction]:
        """The decoder for ``batch`` on the encoder graph's features, or None (eager): other
        features (encoded eagerly), a point count without graphs, or a failed graph."""
        if self.encoder is None or feats is not self.encoder.outputs:
            return None
        if batch.points and batch.points not in self.cfg.prompt_point_buckets:
            return None
        top = self.buckets[-1]
        parts = []
        for start in range(0, batch.n, top):
            out = self._replay(batch.rows(start, start + top), multimask)
            if out is None:
                return None
            parts.append(out)
        return cat_predictions(parts)

    def _replay(self, batch: PromptBatch, multimask: bool) -> Optional[Prediction]:
        n = batch.n
        size = next(b for b in self.buckets if b >= n)
        key = (size, batch.points, batch.mask_input is not None, multimask)
        if key not in self.decoders:
            feats = self.encoder.outputs
            # Only the first decoder graph warms up: an eager decode of a large bucket is the
            # image path's memory peak (sam2's eager intermediates on top of what the graphs
            # hold), and the first warm-up already initialised the modules every decoder runs.
            warm = not any(c is not None for c in self.decoders.values())
            try:
                self.decoders[key] = self.capture(
                    lambda b: self.decode_fn(feats, b, multimask), batch.padded(size), warm)
            except Exception as exc:  # noqa: BLE001 - this shape runs eagerly from now on
                self.decoders[key] = None
                self.on_fallback(f'image decoder capture failed for {key}: {exc!r}')
        cap = self.decoders[key]
        if cap is None:
            return None
        try:
            for dst, src in ((cap.inputs.coords, batch.coords), (cap.inputs.labels, batch.labels),
                             (cap.inputs.mask_input, batch.mask_input)):
                if dst is not None:
                    dst[:n].copy_(src)
                    dst[n:].copy_(src[-1:].expand_as(dst[n:]))     # padding: the last prompt
            cap.graph.replay()
        except Exception as exc:  # noqa: BLE001 - the call is redone eagerly
            self.on_fallback(f'image decoder replay failed: {exc!r}')
            return None
        o = cap.outputs
        return Prediction(o.low_res_logits[:n].clone(), o.iou[:n].clone(),
                          o.object_score[:n].clone())

    def capture(self, fn: Callable[[Any], Any], inputs: Any,
                warm_up: bool = True) -> CapturedGraph:
        """Warm up (unless told not to) and capture ``fn(inputs)`` into a graph of the shared
        pool (the caller's autocast and inference mode apply to both)."""
        return self.capturer.capture(fn, inputs, warm_up)

    def n_graphs(self) -> int:
        return (self.encoder is not None) + sum(c is not None for c in self.decoders.values())
