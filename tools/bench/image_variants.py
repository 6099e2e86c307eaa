"""The models under test of the image-mode benchmark (``image_mode.py``): ours
(``ImageSegmenter.segment``, what ``StreamingTracker.segment_image`` runs), sam2's
``SAM2ImagePredictor`` and SAM's ``SamPredictor``, each built once per model size and precision
with random weights."""

from __future__ import annotations

import argparse
import time
from typing import Callable, Optional

from tools.bench.profiling import sync


# ---- variants: each returns (one image -> masks on host, encoder alone, eager twin) ---------
class Variant:
    """One model under test: ``run(img, boxes)`` segments an image (masks on the host),
    ``encode(img)`` runs its image encoder alone, ``counted(img, boxes)`` runs one image where
    module calls can be counted (eager); ``holds``: the objects it keeps alive (what
    ``held.held_bytes`` counts: models, caches, graphs)."""

    def __init__(self, run: Callable, encode: Optional[Callable] = None,
                 counted: Optional[Callable] = None, holds: tuple = ()):
        self.run, self.encode, self.counted = run, encode, counted or run
        self.holds = holds


def _autocast(device: str, precision: str):
    import torch
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16,
                          enabled=precision == 'bf16')


def ours(model_size: str, a: argparse.Namespace, precision: str, cache: dict) -> Variant:
    """``ImageSegmenter.segment`` (engine/image.py), built once per precision on a model of its
    own (bf16 precasts its weights in place, as a standalone segmenter does), and an eager twin
    on that segmenter's model where module calls are counted: its model copy shares every
    tensor (``precast`` finds nothing left to cast), so the twin holds only the features of the
    image it counted; ``held_mib`` in the rows shows it."""
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.image import ImageSegmenter
    from sam2_ros.engine.types import Prompt
    cfg = TrackerConfig(model_size=model_size, image_size=a.res, random_weights=True,
                        seed=a.seed, device=a.device, precision=precision)
    if ('ours', precision) not in cache:         # graphs captured once per precision
        cache['ours', precision] = ImageSegmenter(cfg)
        cache['eager', precision] = ImageSegmenter(cfg.replace(use_cuda_graphs=False),
                                                   model=cache['ours', precision].model)
    seg, twin = cache['ours', precision], cache['eager', precision]

    def prompts(bx):
        return [Prompt(i + 1, box=tuple(float(v) for v in b)) for i, b in enumerate(bx)]

    def encode(img):
        seg.set_image(img)
        sync(a.device)
    return Variant(lambda img, bx: seg.segment(img, prompts(bx)).masks, encode,
                   lambda img, bx: twin.segment(img, prompts(bx)), holds=(seg, twin))


def sam2_predictor(model_size: str, a: argparse.Namespace, precision: str,
                   cache: dict) -> Variant:
    import torch
    from sam2.build_sam import build_sam2
    from sam2.sam2_image_predictor import SAM2ImagePredictor

    from sam2_ros.engine.config import MODEL_CONFIGS
    if 'image_model' not in cache:
        torch.manual_seed(a.seed)
        over = [f'++model.image_size={a.res}'] if a.res != 1024 else []
        cache['image_model'] = build_sam2(MODEL_CONFIGS[model_size], ckpt_path=None,
                                          device=a.device, hydra_overrides_extra=over)
    pred = SAM2ImagePredictor(cache['image_model'])
    return predictor_variant(pred, a, precision,
                             lambda img, bx: pred.predict(box=bx, multimask_output=False)[0])


def sam(model_size: str, a: argparse.Namespace, precision: str, cache: dict) -> Variant:
    import torch
    from segment_anything import SamPredictor, sam_model_registry
    if 'sam' not in cache:
        torch.manual_seed(a.seed)
        cache['sam'] = sam_model_registry[model_size](checkpoint=None).to(a.device).eval()
    pred = SamPredictor(cache['sam'])

    def decode(img, bx):
        b = pred.transform.apply_boxes_torch(torch.as_tensor(bx, device=a.device),
                                             img.shape[:2])
        return pred.predict_torch(None, None, b, multimask_output=False)[0].cpu().numpy()
    return predictor_variant(pred, a, precision, decode)


def predictor_variant(pred, a: argparse.Namespace, precision: str, decode: Callable) -> Variant:
    """A ``set_image`` / predict predictor (sam2's or SAM's): the encoder is ``set_image``;
    a run times ``decode(img, boxes)`` (prompts, decoder, masks to the host) after it."""
    import torch

    def encode(img):
        with torch.inference_mode(), _autocast(a.device, precision):
            pred.set_image(img)
        sync(a.device)

    def run(img, bx):
        with torch.inference_mode(), _autocast(a.device, precision):
            pred.set_image(img)
            sync(a.device)
            t = time.perf_counter()
            masks = decode(img, bx)
        return masks, time.perf_counter() - t
    return Variant(run, encode, holds=(pred,))


BUILDERS = {'ours': ours, 'sam2_predictor': sam2_predictor, 'sam': sam}
