"""Features of several camera streams in one batch (sam2_ros/engine/streams.py): the building
block of one tracker for N cameras. A track step over the objects of two independent trackers,
each object reading its own camera's features, equals each tracker's own steps up to the
rounding of a batched step (GEMMs of another batch size; the same tolerance as batching the
objects of one camera)."""

from __future__ import annotations

import torch

from conftest import LEAN, small_cfg, textured_frame, tracker_on_shared_model
from sam2_ros.engine import encoder, frame_in, step, streams
from sam2_ros.engine.types import Prompt


def two_trackers(frames: int):
    cfg = small_cfg(image_size=64, extra_hydra_overrides=list(LEAN))
    ta, tb = tracker_on_shared_model(cfg), tracker_on_shared_model(cfg)
    ta.queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    ta.queue_prompt(Prompt(2, box=(30, 10, 60, 40)))
    tb.queue_prompt(Prompt(1, box=(10, 8, 40, 44)))
    for i in range(frames):
        ta.track(textured_frame(48, 64, seed=i))
        tb.track(textured_frame(48, 64, seed=10 + i))
    return ta, tb


def test_stack_and_select_are_the_streams_features():
    ta, tb = two_trackers(0)
    with torch.inference_mode():
        feats = [t.runner.encode_frame(textured_frame(48, 64, seed=s))
                 for t, s in ((ta, 0), (tb, 1))]
        both = streams.stack(feats)
        picked = streams.select(both, torch.tensor([1, 0, 1]))
    for lvl in range(3):
        assert both.vision_feats[lvl].shape[1] == 2
        for b, cam in enumerate((1, 0, 1)):
            assert torch.equal(picked.vision_feats[lvl][:, b], feats[cam].vision_feats[lvl][:, 0])
            assert torch.equal(picked.vision_pos[lvl][:, b], feats[cam].vision_pos[lvl][:, 0])


def test_batched_encoder_equals_per_frame():
    """The image encoder over the paired frames as one batch: the stacked per-frame outputs
    (bitwise on this CPU; asserted within fp32 rounding, which other kernels may give)."""
    ta, _ = two_trackers(0)
    frames = [textured_frame(48, 64, seed=s) for s in (3, 4)]
    with torch.inference_mode():
        x = [frame_in.to_model_input(f, 64, torch.device('cpu')) for f in frames]
        single = streams.stack([encoder.encode_image(ta.model, xi) for xi in x])
        batched = encoder.encode_image(ta.model, torch.cat(x))
    for a, b in zip(single.vision_feats + single.vision_pos,
                    batched.vision_feats + batched.vision_pos):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_one_step_for_the_objects_of_two_cameras():
    ta, tb = two_trackers(5)
    f = 5
    with torch.inference_mode():
        feats = [ta.runner.encode_frame(textured_frame(48, 64, seed=5)),
                 tb.runner.encode_frame(textured_frame(48, 64, seed=15))]
        sels = [[t.bank.select(o.slot, f) for o in t.objects.values()] for t in (ta, tb)]
        assert len({s.key for group in sels for s in group}) == 1   # one bucket
        ref = [step.track_step(ta.model, feats[c], t.bank.gather([s]), t.maskmem_pos)
               for c, t in enumerate((ta, tb)) for s in sels[c]]
        mems = [t.bank.gather(s) for t, s in zip((ta, tb), sels)]
        mem = step.Memory(*(torch.cat([getattr(m, k) for m in mems], dim=1)
                            for k in ('feats', 'tpos_idx', 'ptrs', 'ptr_dist')))
        out = step.track_step(ta.model, streams.select(streams.stack(feats),
                                                       torch.tensor([0, 0, 1])),
                              mem, ta.maskmem_pos)
    for i, r in enumerate(ref):
        for name in ('low_res_logits', 'obj_ptr', 'score'):
            torch.testing.assert_close(getattr(out, name)[i], getattr(r, name)[0],
                                       rtol=1e-5, atol=1e-5)
        # bf16 memories: one unit in the last place of bf16
        torch.testing.assert_close(out.mem_feats[i].float(), r.mem_feats[0].float(),
                                   rtol=2 ** -7, atol=2 ** -9)
    # and not trivially: the two cameras' objects differ
    assert (out.low_res_logits[0] - out.low_res_logits[2]).abs().max() > 1e-2
