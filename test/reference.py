"""Drive the official SAM2VideoPredictor over the same frames and prompts as our tracker.

The predictor wants the whole video up front: frames are written to a JPEG folder only to
satisfy ``init_state``; its image tensor is then replaced by our preprocessed frames so both
sides see identical model inputs (preprocessing is compared in its own test).

Hole filling: the official predictor fills holes only where sam2's CUDA extension is built;
``official_fill_area`` says what the installed sam2 does, and ``emulate_sam2_C`` gives an
install without it a CPU stand-in for the extension's labelling (OpenCV), so that the
official predictor fills holes on the CPU too.
"""

from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Tuple

import numpy as np
import torch
from PIL import Image

from sam2_ros.engine import frame_in


def sam2_has_C() -> bool:
    """Whether sam2's CUDA extension (connected components, used by its hole filling) is
    built in this install."""
    try:
        from sam2 import _C  # noqa: F401
    except ImportError:
        return False
    return True


def official_fill_area(model) -> int:
    """The fill_hole_area the official predictor on ``model`` really applies: its setting
    where sam2._C is built, else 0 (sam2 warns and leaves masks unfilled)."""
    return int(model.fill_hole_area) if sam2_has_C() else 0


def connected_components_like_C(mask: torch.Tensor) -> List[torch.Tensor]:
    """What ``sam2._C.get_connected_componnets`` returns for mask [N, 1, H, W] uint8, computed
    on the host with OpenCV's 8-connected labelling: labels [N, 1, H, W] int32 (0 off the
    mask; on it, 1 + the smallest flat index of a 2x2 block's top-left pixel in the component,
    the union-find root of the kernel's block labelling) and counts [N, 1, H, W] int32 (the
    component's area on the mask, 0 off it). sam2's hole filling reads only labels > 0 and
    the counts."""
    import cv2
    m = mask.detach().cpu().numpy().astype(np.uint8)
    n, _, h, w = m.shape
    rr, cc = np.mgrid[0:h, 0:w]
    block = ((rr // 2 * 2) * w + cc // 2 * 2).ravel()
    labels = np.zeros(m.shape, np.int32)
    counts = np.zeros(m.shape, np.int32)
    for i in range(n):
        k, lab = cv2.connectedComponents(m[i, 0], connectivity=8, ltype=cv2.CV_32S)
        lab = lab.ravel()
        root = np.full(k, h * w, np.int64)
        np.minimum.at(root, lab, block)
        area = np.bincount(lab, minlength=k)
        on = lab > 0
        labels[i, 0].ravel()[on] = root[lab[on]] + 1
        counts[i, 0].ravel()[on] = area[lab[on]]
    return [torch.from_numpy(labels).to(mask.device), torch.from_numpy(counts).to(mask.device)]


def emulate_sam2_C(monkeypatch, calls: list = None) -> None:
    """Make sam2's hole filling run without its extension: ``get_connected_components`` is
    replaced by ``connected_components_like_C``. ``calls`` gets the number of pixels each
    call labels as holes (a component of at most 8 pixels), to prove holes were filled."""
    import sam2.utils.misc as misc

    def fake(mask):
        out = connected_components_like_C(mask.to(torch.uint8).contiguous())
        if calls is not None:
            calls.append(int(((out[0] > 0) & (out[1] <= 8)).sum()))
        return out
    monkeypatch.setattr(misc, 'get_connected_components', fake)


def init_reference(predictor, frames: List[np.ndarray]):
    """An inference_state over ``frames`` ([H, W, 3] uint8) with our preprocessing."""
    size = predictor.image_size
    with tempfile.TemporaryDirectory() as d:
        for i, fr in enumerate(frames):
            Image.fromarray(fr).save(os.path.join(d, f'{i:05d}.jpg'))
        state = predictor.init_state(d)
    dev = predictor.device
    state['images'] = torch.cat([frame_in.to_model_input(f, size, dev) for f in frames])
    state['cached_features'] = {}
    return state


def outputs(state, obj_idx: int, frame: int) -> Dict[str, torch.Tensor]:
    """The stored output of one object on one frame (conditioning or not)."""
    d = state['output_dict_per_obj'][obj_idx]
    out = d['cond_frame_outputs'].get(frame)
    if out is None:
        out = d['non_cond_frame_outputs'][frame]
    return out


def propagate(predictor, state, start: int, stop: int) -> List[int]:
    """Track frames start..stop inclusive."""
    done = []
    for f, _, _ in predictor.propagate_in_video(state, start_frame_idx=start,
                                                max_frame_num_to_track=stop - start):
        done.append(f)
    return done


def bf16_excess(a: torch.Tensor, b: torch.Tensor, tol: float) -> float:
    """Largest difference beyond one bf16 ulp of the reference value (0 if none)."""
    a, b = a.float().cpu(), b.float().cpu()
    return float(((a - b).abs() - b.abs() * 2.0 ** -7).clamp(min=0).max())


def compare(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float().cpu() - b.float().cpu()).abs().max())


class FillAwareCompare:
    """Compares logits where hole filling decided alike; counts the pixels where it did not.

    Why: filling is discontinuous. Where two runs differ by rounding (another kernel, bf16), a
    logit within that rounding of 0 may have another sign, which can join or split background
    components and so change whether up to max_area pixels next to it become 0.1. Such a
    pixel differs by its whole logit, not by rounding; it is counted (``mismatched`` of
    ``total``) instead of measured. A pixel counts as filled when its logit is 0.1 exactly,
    the fill value (a decoder logit hits that float32 value only by coincidence, and then
    it is counted rather than measured: the count errs high, never the measured worst)."""

    def __init__(self):
        self.mismatched = 0
        self.total = 0

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> float:
        a, b = a.float().cpu(), b.float().cpu()
        fa, fb = a == FILL, b == FILL
        agree = fa == fb
        self.mismatched += int((~agree).sum())
        self.total += a.numel()
        return float((a - b).abs()[agree].max()) if agree.any() else 0.0


FILL = torch.tensor(0.1, dtype=torch.float32)   # sam2's fill value, as a float32 logit


def ours(tracker, obj_id: int, frame: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(obj_ptr [C], maskmem_features [Cm, h, w]) our bank holds for ``frame``."""
    bank = tracker.bank
    slot = tracker.objects[obj_id].slot
    k = bank.max_cond
    for row in range(k):
        if bank.cond_frame[slot, row] == frame:
            return bank.ptrs[slot, row], bank.feats[slot, row]
    ring, pring = bank.ring_frame.shape[1], bank.ptr_frame.shape[1]
    assert bank.ring_frame[slot, frame % ring] == frame
    assert bank.ptr_frame[slot, frame % pring] == frame
    return bank.ptrs[slot, k + frame % pring], bank.feats[slot, k + frame % ring]


def drive(tracker, predictor, frames, events, tol, check_ref=True, cmp_logits=compare,
          worst=None):
    """Run our tracker and the official predictor over ``frames`` with ``events``
    ({frame: [('add', Prompt) | ('remove', id)]}, applied after that frame is tracked) and
    compare logits, scores, object pointers and memory features of every object on every
    frame. Returns the worst absolute difference of each quantity. ``cmp_logits`` compares
    low-res logits (``FillAwareCompare`` where hole filling may decide differently);
    ``worst``: a dict to fill in place, so a caller keeps what was measured up to a failure."""
    state = init_reference(predictor, frames)
    worst = {} if worst is None else worst
    ids = []
    ref_done = -1
    for f, frame in enumerate(frames):
        res = tracker.track(frame)
        if ids:
            got = propagate(predictor, state, ref_done + 1, f)
            assert got[-1] == f
            ref_done = f
            for i, oid in enumerate(ids):
                _check(tracker, state, res, oid, i, f, worst, tol, cmp_logits)
        for kind, p in events.get(f, []):
            if kind == 'remove':
                tracker.remove_object(p)
                predictor.remove_object(state, p)
                ids.remove(p)
                continue
            res = tracker.add_prompt(p)
            if p.mask is not None:
                predictor.add_new_mask(state, f, p.obj_id, p.mask)
            else:
                predictor.add_new_points_or_box(state, f, p.obj_id, points=p.points,
                                                labels=p.labels, box=p.box)
            if p.obj_id not in ids:
                ids.append(p.obj_id)
            ref_done = f
            temp = state['temp_output_dict_per_obj'][ids.index(p.obj_id)]
            key = 'cond_frame_outputs' if f in temp['cond_frame_outputs'] else \
                'non_cond_frame_outputs'
            d = cmp_logits(res.by_id(p.obj_id).low_res_logits,
                           temp[key][f]['pred_masks'][0, 0])
            worst['prompt_logits'] = max(worst.get('prompt_logits', 0.0), d)
            assert d <= tol, f'prompt on frame {f} object {p.obj_id}: logits differ by {d}'
    assert tracker.object_ids == sorted(ids)
    return worst, res


def _check(tracker, state, res, obj_id, obj_idx, frame, worst, tol, cmp_logits=compare):
    ref = outputs(state, obj_idx, frame)
    mine = res.by_id(obj_id)
    ptr, feats = ours(tracker, obj_id, frame)
    diffs = {
        'logits': cmp_logits(mine.low_res_logits, ref['pred_masks'][0, 0]),
        'score': abs(mine.score - float(ref['object_score_logits'].float()[0, 0])),
        'obj_ptr': compare(ptr, ref['obj_ptr'][0]),
        'mem_feats': compare(feats, ref['maskmem_features'][0]),
    }
    for k, v in diffs.items():
        worst[k] = max(worst.get(k, 0.0), v)
        if k == 'mem_feats' and v > tol:
            # memories are stored in bf16 (as sam2 stores them): a last-bit difference before
            # rounding can flip one bf16 ulp (2^-7 relative); allow exactly that much more.
            v = bf16_excess(feats, ref['maskmem_features'][0], tol)
        assert v <= tol, f'frame {frame} object {obj_id}: {k} differs by {v:.3g}'
