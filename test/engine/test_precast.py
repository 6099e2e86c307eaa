"""``precast_weights`` (bf16: Linear/Conv weights cast once, not by autocast on every call).

The fast path must be bit-identical to the reference path (the official per-call casts,
``precast_weights=False``) and must leave the caller's model untouched. On the CPU, autocast's
bf16 list also holds linear and the convolutions, so the same identity holds here; the GPU run
of ``test_graphs_gpu.py`` checks it with CUDA graphs against the official predictor.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import LEAN, make_tracker, shared_model
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.model import build_model, precast

pytestmark = pytest.mark.usefixtures('one_thread')

# 18 frames: every object's memory ring (7 spatial memories) has wrapped by the end, and two
# frames follow the removal at 15
H, W, N = 48, 64, 18


def _run(precast: bool):
    """Logits of every object on every frame, and the bank, over a stream with adds (click,
    box, mask), a correction and a removal."""
    tr = make_tracker(image_size=64, precision='bf16', precast_weights=precast, max_objects=3,
                      extra_hydra_overrides=list(LEAN))  # every Linear/Conv type, fewer
    events = schedule(H, W, add2=3, add3=6, fix=10, remove=15)
    logits = []
    for f, fr in enumerate(synthetic_frames(N, H, W)):
        res = tr.track(fr)
        for kind, arg in events.get(f, []):
            if kind == 'add':
                res = tr.add_prompt(arg)
            else:
                tr.remove_object(arg)
        logits.append({o.obj_id: o.low_res_logits.clone() for o in res.objects})
    return tr, logits


@pytest.fixture(scope='module')
def runs():
    """The stream of ``_run`` once per path for the module (bf16 on the CPU is slow, so the two
    tests below share it): {precast: (tracker, logits, bank at the end)}."""
    out = {}
    for flag in (False, True):
        tr, logits = _run(precast=flag)
        bank = {name: getattr(tr.bank, name).clone() for name in BANK}
        out[flag] = (tr, logits, bank)
    return out


BANK = ('feats', 'ptrs', 'logits', 'scores')


def test_precast_bitwise_equal_to_per_call_casts(runs):
    (_, ref_logits, ref_bank), (_, fast_logits, fast_bank) = runs[False], runs[True]
    assert len(ref_logits) == N
    for f, (a, b) in enumerate(zip(ref_logits, fast_logits)):
        assert a.keys() == b.keys(), f
        for obj_id in a:
            assert torch.equal(a[obj_id], b[obj_id]), (f, obj_id)
    for name in BANK:
        assert torch.equal(ref_bank[name], fast_bank[name]), name


def test_precast_leaves_the_callers_model_alone_and_shares_the_rest():
    model = shared_model(64)
    before = {k: (v.dtype, v.data_ptr()) for k, v in model.state_dict().items()}
    twin = precast(model)
    assert {k: (v.dtype, v.data_ptr()) for k, v in model.state_dict().items()} == before
    lin = [m for m in twin.modules() if isinstance(m, torch.nn.Linear)]
    convs = [m for m in twin.modules() if isinstance(m, torch.nn.Conv2d)]
    assert lin and convs
    assert all(m.weight.dtype == torch.bfloat16 for m in lin + convs)
    own, theirs = twin.state_dict(), model.state_dict()
    kept = [k for k in own if own[k].dtype == torch.float32]
    assert kept                    # embeddings, norms, positional tables stay fp32 and shared
    assert all(own[k].data_ptr() == theirs[k].data_ptr() for k in kept)


def test_precast_in_place_for_a_model_the_tracker_builds():
    """Our own model is cast in place: no second copy of the weights at start-up."""
    from conftest import small_cfg
    from sam2_ros.engine.tracker import StreamingTracker
    cfg = small_cfg(image_size=64, precision='bf16')
    model = build_model(cfg)
    ptrs = {id(m): m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)}
    same = precast(model, copy=False)
    assert same is model and all(m.weight.dtype == torch.bfloat16 for m in model.modules()
                                 if isinstance(m, torch.nn.Linear))
    assert all(m.weight is not ptrs[id(m)] for m in model.modules()
               if isinstance(m, torch.nn.Linear))
    tr = StreamingTracker(cfg)
    assert all(m.weight.dtype == torch.bfloat16 for m in tr.model.modules()
               if isinstance(m, torch.nn.Linear))


class _Casts(TorchDispatchMode):
    """Counts the casts that copy (``to``/``_to_copy`` calls returning a new tensor). Cheaper
    than the profiler (slow on bf16 CPU frames) and blind to no-op
    casts, which launch no kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.to, torch.ops.aten._to_copy) \
                and out is not args[0]:
            self.n += 1
        return out


def _casts_per_frame(tr) -> int:
    """Cast kernels of one more frame on a tracker that ran ``_run``'s stream."""
    fr = synthetic_frames(N + 1, H, W)[-1]
    with _Casts() as casts:
        tr.track(fr)
    return casts.n


def test_precast_removes_the_weight_casts(runs):
    """The point of the fast path: fewer cast kernels per frame (2 objects tracked)."""
    assert [len(runs[p][0].object_ids) for p in (False, True)] == [2, 2]
    ref, fast = _casts_per_frame(runs[False][0]), _casts_per_frame(runs[True][0])
    assert fast < ref * 0.6, (fast, ref)


def test_fp32_is_not_precast():
    tr = make_tracker(image_size=64, precision='fp32', precast_weights=True)
    assert tr.model is shared_model(64)
