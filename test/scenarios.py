"""Synthetic streams and prompt schedules shared by the CPU and GPU equivalence tests."""

import numpy as np

from sam2_ros.engine.types import Prompt
from sam2_ros.synthetic import SyntheticCamera


def synthetic_frames(n, h=96, w=128, seed=0):
    """``n`` frames of the synthetic camera (sam2_ros.synthetic): two discs moving over a
    textured background, so features change over time."""
    return SyntheticCamera(w, h, objects=2, seed=seed).frames(n)


def schedule(h, w, add2, add3, fix, remove):
    """Object 1 by a click on frame 0, object 2 by a box at add2, object 3 by a mask at add3,
    a correction (positive + negative click) on object 1 at fix, removal of object 2."""
    p1 = Prompt(1, points=np.array([[w * 0.15, h * 0.4]]), labels=np.array([1]))
    p2 = Prompt(2, box=(w * 0.6, h * 0.15, w * 0.9, h * 0.45))
    mask = np.zeros((h, w), bool)
    mask[int(h * 0.6):int(h * 0.85), int(w * 0.3):int(w * 0.55)] = True
    p3 = Prompt(3, mask=mask)
    corr = Prompt(1, points=np.array([[w * 0.3, h * 0.4], [w * 0.5, h * 0.8]]),
                  labels=np.array([1, 0]))
    return {0: [('add', p1)], add2: [('add', p2)], add3: [('add', p3)], fix: [('add', corr)],
            remove: [('remove', 2)]}


def stream_logits(tracker, frames, events, after_prompts=True):
    """Per frame {obj_id: low-res logits (a copy)} of ``tracker`` over ``frames``, with
    ``events`` (``schedule``) applied after each frame's track. after_prompts: a frame's
    logits are those of its last prompt's result (else its track's)."""
    out = []
    for f, frame in enumerate(frames):
        res = tracker.track(frame)
        for kind, arg in events.get(f, []):
            got = tracker.add_prompt(arg) if kind == 'add' else tracker.remove_object(arg)
            res = got if after_prompts and got is not None else res
        out.append({o.obj_id: o.low_res_logits.clone() for o in res.objects})
    return out


def padded_buffers(bank, n_s, n_p, batch=1):
    """Static memory buffers of a padded bucket (n_s spatial memories, n_p pointers) for
    ``batch`` objects, with validity flags, as a padded graph holds them."""
    import torch                        # lazily: the ROS tests that import this need no torch
    from sam2_ros.engine import step
    return step.Memory(bank.feats.new_zeros(n_s, batch, *bank.feats.shape[2:]),
                       torch.zeros(n_s, batch, dtype=torch.long),
                       bank.ptrs.new_zeros(n_p, batch, bank.ptrs.shape[-1]),
                       torch.ones(n_p, batch), torch.ones(n_s, batch, dtype=torch.bool),
                       torch.ones(n_p, batch, dtype=torch.bool))


def readable_rows(tracker):
    """{(camera, obj_id): (feature rows, pointer rows)} of every live object of a
    ``MultiStreamTracker``: the flat bank rows a later step can read, i.e. what
    ``MemoryBank.select`` returns for the camera's latest frame (a correction re-running it)
    and for its next one: every occupied conditioning row, the ring entries of the last
    num_maskmem frames, the pointers of the last max_ptrs frames. Rows whose bookkeeping
    says EMPTY or that hold an expired frame are never read: two runs may leave anything
    there (nothing yet, or an entry dropped when its frame became conditioning)."""
    out = {}
    for s in tracker.streams:
        for o in s.objects.values():
            sels = [tracker.bank.select(o.slot, f) for f in (s.frame, s.frame + 1)]
            out[(s.index, o.obj_id)] = (sorted({r for x in sels for r in x.feat_rows}),
                                        sorted({r for x in sels for r in x.ptr_rows}))
    return out


def readable_memory_diff(a, b):
    """(worst pointer difference, worst memory-feature difference beyond one bf16 ulp) of two
    ``MultiStreamTracker``s over the rows ``readable_rows`` gives, the same rows in both.
    Memory features are stored in bf16 (as sam2 stores them): a last-bit difference before
    the rounding can flip one bf16 ulp (2^-8 to 2^-7 relative: more than an fp32 tolerance of
    1e-3 from |x| = 0.25 on), which is allowed on top, as test/reference.py's comparison with
    the official predictor allows it."""
    from reference import bf16_excess   # lazily: torch (the ROS tests need none)
    rows = readable_rows(a)
    assert rows == readable_rows(b), 'the runs read different memories'
    ptr, feat = 0.0, 0.0
    flat = [(x.bank.feats.flatten(0, 1), x.bank.ptrs.flatten(0, 1)) for x in (a, b)]
    for f_rows, p_rows in rows.values():
        ptr = max(ptr, float((flat[0][1][p_rows].float() - flat[1][1][p_rows].float())
                             .abs().max()))
        feat = max(feat, bf16_excess(flat[0][0][f_rows], flat[1][0][f_rows], 0.0))
    return ptr, feat
