"""The lean image path: SAM 2 on one still, computed as sam2's ``SAM2ImagePredictor`` does.

Each step as the predictor (``sam2/sam2_image_predictor.py``, ``sam2/utils/transforms.py``):
  * preprocessing as its ``SAM2Transforms``: ``ToTensor`` (v / 255 in float32), torchvision's
    ``Resize((S, S))`` of that float tensor (bilinear, antialiased, align_corners=False; no
    resize when the image is already S x S), then ``Normalize`` (ImageNet mean and std). Not
    the video predictor's PIL bicubic resize of ``frame_in.py``: image mode is the image
    predictor's computation;
  * ``set_image``: the image encoder once, ``no_mem_embed`` added to the coarsest level;
  * ``predict``: prompt encoder and mask decoder once for a batch of prompts (all N at once,
    ``repeat_image`` as ``_predict`` sets it). ``multimask_output``: the three multimask
    outputs, or the single-mask output, which sam2's decoder replaces by the best multimask
    one when it is unstable (``dynamic_multimask_via_stability``, set by sam2's builders);
  * masks: the low-res logits upsampled bilinearly to the source size, thresholded at 0.
No memory attention, memory encoder or bank; no hole filling (the predictor's defaults,
``max_hole_area=0``, ``max_sprinkle_area=0``).

Ours on top: ``segment`` takes ``Prompt``s (validated, grouped by shape: ``image_prompts.py``)
and returns one mask per prompt, the one of highest predicted IoU when ``multimask_output`` is
on. Frames are copied to the device as uint8 and preprocessed there. The encoder and the
decoder calls replay CUDA graphs (``cuda/image_graphs.py``; off: ``TrackerConfig.image_graphs``).

``ImageSegmenter(cfg)`` builds a model and nothing else (no memory bank); on a running
tracker's model (``StreamingTracker.segment_image``) it keeps its own features and graphs and
never touches the tracker's state. Imports no ROS.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from sam2_ros.engine import encoder, frame_in, image_prompts, masks_out
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.errors import PromptError, StepError
from sam2_ros.engine.image_prompts import PromptArray, PromptBatch
from sam2_ros.engine.image_types import ImageFeatures, Prediction, cat_predictions
from sam2_ros.engine.model import autocast, build_model, precast
from sam2_ros.engine.prompts import check_obj_id
from sam2_ros.engine.types import OCCLUDED, TRACKING, FrameResult, ObjectResult, Prompt

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

    from sam2_ros.engine.cuda.image_graphs import ImageGraphs

log = logging.getLogger(__name__)
# output pixels upsampled at once (masks and their stats, about 5 bytes each on the device)
MASK_CHUNK_PIXELS = 1 << 28


@dataclass
class ImageResult:
    """One mask per prompt, in the prompts' order, at the image's size, on the host."""

    height: int
    width: int
    masks: np.ndarray                # [N, H, W] bool
    iou: np.ndarray                  # [N] predicted IoU of each mask
    object_score: np.ndarray         # [N] object score logits
    stats: np.ndarray                # [N, 7] area, x0, y0, x1, y1, cx, cy (masks_out)
    # [N, 1, S/4, S/4] fp32 logits of the masks (device), not clamped: as a mask input for a
    # refinement, clamp to +-32 first, as sam2's predict() returns them
    low_res_logits: torch.Tensor
    mode: str = 'eager'              # 'graph': encoder and every decoder call replayed
    engine_ms: float = 0.0


# ---- the computation, as pure functions of tensors (run eagerly and inside the graphs) ------
def preprocess(x: torch.Tensor, size: int) -> torch.Tensor:
    """x [H, W, 3] uint8 on the device -> [1, 3, S, S] float32, as ``SAM2Transforms``. v / 255
    is a table computed by the host's division (the predictor divides on the host; a device
    may divide by a scalar as a multiplication by its reciprocal, which rounds differently)."""
    x = x.permute(2, 0, 1).contiguous()                                 # [3, H, W] uint8
    unit, mean, std = _constants(x.device)
    x = unit.index_select(0, x.flatten().int()).view(1, *x.shape)       # [1, 3, H, W]
    if tuple(x.shape[-2:]) != (size, size):
        x = F.interpolate(x, size=(size, size), mode='bilinear', align_corners=False,
                          antialias=True)
    return (x - mean) / std


_CONSTANTS: Dict[torch.device, Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _constants(device: torch.device):
    """v / 255 for v in 0..255 (ToTensor's float32 division, on the host) and the mean and
    std as Normalize makes them (float32), uploaded once per device."""
    if device not in _CONSTANTS:
        unit = torch.arange(256, dtype=torch.float32).div(255)
        _CONSTANTS[device] = (unit.to(device),
                              torch.tensor(frame_in.IMG_MEAN, device=device).view(1, 3, 1, 1),
                              torch.tensor(frame_in.IMG_STD, device=device).view(1, 3, 1, 1))
    return _CONSTANTS[device]


def encode(model: SAM2Base, image: torch.Tensor) -> ImageFeatures:
    """image [1, 3, S, S] normalized -> the features ``set_image`` keeps."""
    f = encoder.encode_image(model, image)
    feats = list(f.vision_feats)                                        # [HW_l, 1, C_l]
    if model.directly_add_no_mem_embed:
        feats[-1] = feats[-1] + model.no_mem_embed
    maps = [x.permute(1, 2, 0).reshape(1, x.shape[2], *s) for x, s in zip(feats, f.feat_sizes)]
    return ImageFeatures(maps[-1], maps[:-1])


def decode(model: SAM2Base, feats: ImageFeatures, batch: PromptBatch,
           multimask: bool) -> Prediction:
    """Prompt encoder + mask decoder for the N prompts of ``batch``, as ``_predict``.
    ``_predict`` fails on several mask inputs without points (it repeats the image only for
    points, and the decoder wants one image per prompt): those run one by one here, so each
    gives what the predictor gives it alone."""
    if batch.coords is None and batch.n > 1:
        return cat_predictions([decode(model, feats, batch.rows(i, i + 1), multimask)
                                for i in range(batch.n)])
    points = None if batch.coords is None else (batch.coords, batch.labels)
    sparse, dense = model.sam_prompt_encoder(points=points, boxes=None, masks=batch.mask_input)
    low, iou, _, score = model.sam_mask_decoder(
        image_embeddings=feats.image_embed, image_pe=model.sam_prompt_encoder.get_dense_pe(),
        sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
        multimask_output=multimask, repeat_image=points is not None and batch.n > 1,
        high_res_features=feats.high_res)
    return Prediction(low, iou, score)


# ---- the segmenter ----------------------------------------------------------------------
class ImageSegmenter:
    """SAM 2 on single images: ``set_image`` then ``predict`` (sam2's predictor's API), or
    ``segment`` (an image and ``Prompt``s in, one mask per prompt out).

    Not thread safe; one image at a time (``set_image`` replaces the features)."""

    def __init__(self, cfg: TrackerConfig, model: Optional[SAM2Base] = None,
                 on_fallback: Optional[Callable[[str], None]] = None):
        """Args:
            cfg: the tracker's configuration (model, device, precision, graphs).
            model: a built ``SAM2Base`` to share (a tracker's: nothing of the tracker's state is
                used); None builds one from ``cfg``.
            on_fallback: called with the reason of each CUDA graph fallback (logged if None).
        """
        self.cfg = cfg.validate()
        self.device = torch.device(cfg.device)
        with torch.inference_mode(False):      # weights as ordinary tensors, as the tracker's
            self.model = model if model is not None else build_model(cfg)
            if cfg.precision == 'bf16' and cfg.precast_weights:
                self.model = precast(self.model, copy=model is not None)
        self.size = self.model.image_size
        self.stats: Dict[str, int] = collections.Counter()
        self.fallback_reasons: Dict[str, int] = collections.Counter()
        self.on_fallback = on_fallback
        self.graphs = make_graphs(self.model, cfg, self._count_fallback)
        self.features: Optional[ImageFeatures] = None
        self.hw: Optional[Tuple[int, int]] = None
        self.encoded_by = 'eager'        # how the current features were computed

    @torch.inference_mode()
    def set_image(self, frame: frame_in.Frame) -> None:
        """Encode one image [H, W, 3] uint8 RGB (numpy or torch, any size 16..8192 per side).
        Raises FrameError for a bad frame (the previous image stays set)."""
        self._encode(frame, frame_in.frame_size(frame))

    @torch.inference_mode()
    def predict(self, point_coords: Optional[PromptArray] = None,
                point_labels: Optional[PromptArray] = None, box: Optional[PromptArray] = None,
                mask_input: Optional[PromptArray] = None,
                multimask_output: bool = True) -> Prediction:
        """The decoder on the set image, with ``SAM2ImagePredictor.predict``'s arguments in
        source pixels (point_coords [N, P, 2], point_labels [N, P], box [N, 4], mask_input
        [N, 1, S/4, S/4] logits; the N axis may be left out for one prompt). Returns the
        device tensors (logits not clamped; sam2's ``predict`` clamps the low-res logits it
        returns to +-32). Raises PromptError for bad prompts or when no image is set."""
        if self.features is None:
            raise PromptError('no image set: call set_image() first')
        h, w = self.hw
        batch = image_prompts.from_arrays(point_coords, point_labels, box, mask_input, h, w,
                                          self.size, self.device)
        with autocast(self.cfg):
            return self._decode(batch, multimask_output)[0]

    @torch.inference_mode()
    def segment(self, frame: frame_in.Frame, prompts: Sequence[Prompt],
                multimask_output: bool = False) -> ImageResult:
        """Encode ``frame`` and decode every prompt: one decoder call per prompt shape (point
        count, or a mask), all prompts of a shape at once.

        ``Prompt.mask`` (source resolution) is a mask input (sam2's mask-to-logits mapping,
        ``image_prompts.mask_logits``); points and boxes as ``predict``. With
        multimask_output, each prompt's mask of highest predicted IoU.

        No prompts: an empty result and nothing encoded (an image set before stays set).

        Raises:
            FrameError / PromptError: bad frame or prompt, or more than
                ``image_prompts.MAX_PROMPTS`` prompts (checked first; nothing changed).
            StepError: the computation failed: in the encoder (no image is set afterwards)
                or after it (this image stays set).
        """
        t0 = time.perf_counter()
        h, w = frame_in.frame_size(frame)
        groups = image_prompts.group(prompts, h, w, self.size, self.device)
        if not groups:
            return ImageResult(h, w, np.zeros((0, h, w), bool), np.zeros(0), np.zeros(0),
                               np.zeros((0, 7)), torch.zeros(0, 1, self.size // 4,
                                                             self.size // 4, device=self.device),
                               'eager', (time.perf_counter() - t0) * 1e3)   # as frame_mode([])
        self._encode(frame, (h, w))
        modes = {self.encoded_by}
        parts, order = [], []
        try:
            with autocast(self.cfg):
                for idx, batch in groups:
                    pred, mode = self._decode(batch, multimask_output)
                    parts.append(pred.best())
                    order += idx
                    modes.add(mode)
        except Exception as exc:  # noqa: BLE001 - report it; the image stays set
            raise StepError(f'image decoding failed: {exc!r}') from exc
        mode = modes.pop() if len(modes) == 1 else 'mixed'
        try:
            best = cat_predictions(parts)
            if order != sorted(order):
                inv = torch.tensor(np.argsort(order), device=self.device)
                best = Prediction(*(t.index_select(0, inv) for t in (
                    best.low_res_logits, best.iou, best.object_score)))
            masks, cols = self._masks(best, h, w)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory; the image stays set
            raise StepError(f'image mask upsampling failed: {exc!r}') from exc
        return ImageResult(h, w, masks, cols[:, 7], cols[:, 8], cols[:, :7],
                           best.low_res_logits.float(), mode,
                           (time.perf_counter() - t0) * 1e3)

    @staticmethod
    def _masks(best: Prediction, h: int, w: int) -> Tuple[np.ndarray, np.ndarray]:
        """Masks [N, H, W] bool and columns [N, 9] (box, area, centroid, IoU, object score)
        on the host, upsampled ``MASK_CHUNK_PIXELS`` output pixels at a time: many prompts
        on a large image stay within device memory. Rows are independent: chunks change
        nothing."""
        step = max(1, MASK_CHUNK_PIXELS // (h * w))
        masks, cols = [], []
        for i in range(0, best.low_res_logits.shape[0], step):
            m, stats = masks_out.on_device(best.low_res_logits[i:i + step], h, w)
            masks.append(m.cpu().numpy())
            cols.append(torch.cat([stats, best.iou[i:i + step].double(),
                                   best.object_score[i:i + step].double()], 1).cpu().numpy())
        return np.concatenate(masks), np.concatenate(cols)

    # ---- internals -------------------------------------------------------------------
    def _encode(self, frame: frame_in.Frame, hw: Tuple[int, int]) -> None:
        self.features = None            # a failure leaves no half-written image set
        try:
            x = preprocess(frame_in.to_device(frame, self.device), self.size)
            with autocast(self.cfg):
                feats = self.graphs.encode(x) if self.graphs is not None else None
                self.encoded_by = 'eager' if feats is None else 'graph'
                if feats is None:
                    feats = encode(self.model, x)
        except Exception as exc:  # noqa: BLE001 - any failure: this image fails
            raise StepError(f'image encoder failed: {exc!r}; no image is set') from exc
        self.features, self.hw = feats, hw
        self.stats['images'] += 1

    def _decode(self, batch: PromptBatch, multimask: bool) -> Tuple[Prediction, str]:
        """(outputs, 'graph' or 'eager'): a graph replay where one fits, else eager."""
        self.stats['decoder_calls'] += 1
        if self.graphs is not None:
            out = self.graphs.decode(self.features, batch, multimask)
            if out is not None:
                return out, 'graph'
        return decode(self.model, self.features, batch, multimask), 'eager'

    def _count_fallback(self, reason: str) -> None:
        self.stats['fallbacks'] += 1
        self.fallback_reasons[reason] += 1
        if self.on_fallback is not None:
            self.on_fallback(reason)
        else:
            log.warning('image mode CUDA graph fallback to eager: %s', reason)


def frame_result(res: ImageResult, prompts: Sequence[Prompt]) -> FrameResult:
    """An ``ImageResult`` as the tracker's ``FrameResult``: frame_index 0, one ``ObjectResult``
    per prompt in order (ids may repeat: a result per prompt, not per object; score: the
    object score logit; state TRACKING when > 0). Ids are ints as the prompts give them;
    PromptError for one out of 1..255, ValueError for prompts not of ``res``'s count."""
    if len(prompts) != len(res.masks):     # a mask under another prompt's id: refused
        raise ValueError(f'{len(prompts)} prompts for a result of {len(res.masks)} masks')
    out = FrameResult(0, res.height, res.width, mode=res.mode, engine_ms=res.engine_ms)
    for i, p in enumerate(prompts):
        area, box, cen = masks_out.unpack(res.stats[i])
        score = float(res.object_score[i])
        # the id as a plain int, as tracking keeps it: a numpy id (valid in a prompt) broke
        # label_mask() (np.int64 into uint8 is no 'same_kind' cast); one out of 1..255 raises
        out.objects.append(ObjectResult(check_obj_id(p.obj_id), res.masks[i], score,
                                        TRACKING if score > 0 else OCCLUDED, box, area, cen, 0,
                                        res.low_res_logits[i, 0]))
    return out


def make_graphs(model: SAM2Base, cfg: TrackerConfig,
                on_fallback: Callable[[str], None]) -> Optional[ImageGraphs]:
    """The image graphs when enabled and on CUDA, else None (eager; the graph module is
    imported only then)."""
    if not (cfg.use_cuda_graphs and cfg.image_graphs and torch.device(cfg.device).type == 'cuda'):
        return None
    from sam2_ros.engine.cuda.image_graphs import ImageGraphs
    return ImageGraphs(cfg, lambda x: encode(model, x),
                       lambda f, b, m: decode(model, f, b, m), on_fallback)
