"""Probe: the aten ops of one captured track step, per source function, on the CPU.

    python -m tools.probes.step_ops [--res 256] [--objects 1] [--cond 1]
        [--graph exact|padded|split] [--precision fp32|bf16] [--top 40] [--out FILE]

Why: a steady frame's step graph replays a few hundred kernels, and many of the ones that
are not GEMMs, convolutions or attention are glue (casts, zero fills, cats, gathers, masks)
around sam2's modules. A CUDA graph keeps no Python stack, and the device is scarce; here the
step function exactly as ``StepGraphs.capture_step`` captures it (the same static memory
buffers, features and model; ``--fused``: the fused model copy, its Triton kernels
interpreted) runs once, after one uncounted call (the capture's warm-up, which also fills the
'constants' group's store), under a ``TorchDispatchMode`` that attributes every aten op that
would launch a kernel to the innermost function of sam2/ or sam2_ros/ on the Python stack.

Counting: ops as they reach the dispatcher below autograd and autocast (so composite ops
arrive decomposed, linear as addmm, and autocast's casts as _to_copy), less views (an output
aliasing an input without writing it), allocations and metadata (``NO_KERNEL``), plus each
launch of one of our Triton kernels. On the GPU a few ops launch two kernels (SDPA) or none,
and CPU autocast differs from CUDA's in places: the count is a proxy, the same rule before and
after a change, not a kernel census (``kernel_census.py`` is, on the GPU).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from typing import Dict, List, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ops that launch no kernel on any device: allocation, metadata, host-side scalars (views
# are told by their schema: an output aliasing an input without writing it)
NO_KERNEL = frozenset(('empty', 'empty_strided', 'empty_like', 'new_empty',
                       'new_empty_strided', 'lift_fresh', 'detach', 'alias', 'set_',
                       'resize_', 'sym_size', 'sym_stride', 'sym_numel', 'dim', 'is_same_size',
                       'is_nonzero', 'result_type', '_nnpack_available', '_unsafe_view',
                       # a Python number wrapped for an op (a host scalar on the GPU too)
                       'scalar_tensor'))
ROOTS = ('sam2_ros' + os.sep, 'sam2' + os.sep)


def launches(func) -> bool:
    """Whether an aten overload launches a kernel: not a view, not allocation or metadata."""
    name = func.__name__.split('.')[0]
    if name in NO_KERNEL:
        return False
    returns = func._schema.returns
    if not any('Tensor' in str(ret.type) for ret in returns):
        return False                # dtype queries and host scalars
    for ret in returns:
        info = ret.alias_info
        if info is not None and not info.is_write:
            return False            # a view of an input
    return True


def source_of(frame) -> str:
    """'path:line function' of the innermost Python frame in sam2/ or sam2_ros/ (the probe's
    own frames skipped)."""
    while frame is not None:
        path = frame.f_code.co_filename
        for root in ROOTS:
            i = path.rfind(os.sep + root)
            if i >= 0 and 'probes' not in path:
                return f'{path[i + 1:]}:{frame.f_code.co_firstlineno} {frame.f_code.co_name}'
        frame = frame.f_back
    return '(outside sam2)'


class OpCounter(TorchDispatchMode):
    """Counts the aten ops that launch a kernel, by source function and op name. Runs below
    autograd and the composite decompositions (linear is t + addmm here, as on the GPU) and
    below autocast, so autocast's casts are counted (as _to_copy) where they happen."""

    def __init__(self):
        super().__init__()
        self.by_src: Dict[str, collections.Counter] = {}
        self.paused = False         # inside a Triton launch (the interpreter's own ops)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused and launches(func):
            src = source_of(sys._getframe(1))
            name = func.__name__.split('.')[0]
            self.by_src.setdefault(src, collections.Counter())[name] += 1
        return func(*args, **(kwargs or {}))


def step_function(res: int, objects: int, cond: int, graph: str, precision: str,
                  fused: bool = False):
    """(fn, inputs, context manager factory): the step function a graph of ``objects``
    objects and ``cond`` conditioning frames captures, on a random tiny model at ``res``;
    ``fused``: on the fused model copy the GPU captures (its Triton kernels interpreted)."""
    import contextlib

    from sam2_ros.engine import encoder, step
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.cuda.buckets import StepKey
    from sam2_ros.engine.cuda.capture import CapturedGraph
    from sam2_ros.engine.cuda.step_graphs import StepGraphs
    from sam2_ros.engine.memory import MemoryBank
    from sam2_ros.engine.model import autocast, build_model, precast
    cfg = TrackerConfig(model_size='tiny', image_size=res, device='cpu', precision=precision,
                        random_weights=True, use_cuda_graphs=False, max_cond_frames=cond)
    model = build_model(cfg)
    if precision == 'bf16':
        model = precast(model, copy=False)

    def ctx() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        # no_grad, not the graphs' inference_mode: the same kernels, and composite ops
        # (linear, dropout, layer_norm) reach the counter decomposed, as they launch
        stack.enter_context(torch.no_grad())
        stack.enter_context(autocast(cfg))
        return stack
    with ctx():
        feats = encoder.encode_image(model, torch.randn(1, 3, res, res))
        pts = {'point_coords': torch.tensor([[[res / 2, res / 2]]]),
               'point_labels': torch.ones(1, 1, dtype=torch.int32)}
        first = step.track_step(model, feats, None, None, points=pts)
        pos_dtype = torch.bfloat16 if precision == 'bf16' else torch.float32
        maskmem_pos = step.maskmem_pos_enc(model, feats).to(pos_dtype)
        bank = MemoryBank.allocate(cfg.max_objects, cond, model.num_maskmem,
                                   model.max_obj_ptrs_in_encoder, first.mem_feats[0],
                                   first.obj_ptr[0], first.low_res_logits[0])

    class Holder:       # a Capturer that keeps the function instead of capturing it
        @staticmethod
        def capture(fn, inputs):
            return CapturedGraph(fn, inputs, None)
    if fused:
        from sam2_ros.engine.config import FUSED_GROUPS
        from sam2_ros.engine.cuda.kernels.fused import fused_model
        model = fused_model(model, tuple(g for g in FUSED_GROUPS if g != 'hiera'))
    graphs = StepGraphs(Holder(), cfg, model, bank, maskmem_pos, feats, None)
    cap = graphs.capture_step(StepKey(objects, cond), padded=graph == 'padded',
                              split=graph == 'split')
    return cap.graph, cap.inputs, ctx


def count_step(fn, inputs, ctx) -> Tuple[int, Dict[str, collections.Counter]]:
    """(ops, {source function: Counter of op names}) of one call of fn(inputs), after one
    uncounted call (lazily built tables, as the graph capture's warm-up)."""
    from sam2_ros.engine.cuda.kernels import launch
    with ctx():
        fn(inputs)
        counter = OpCounter()
        original = launch.Kernel.__getitem__

        def counted(kernel, grid):          # our Triton kernels launch outside aten
            src = source_of(sys._getframe(1))
            counter.by_src.setdefault(src, collections.Counter())[
                f'triton {kernel.fn.__name__}'] += 1
            run = original(kernel, grid)

            def paused(*args, **kwargs):
                counter.paused = True
                try:
                    return run(*args, **kwargs)
                finally:
                    counter.paused = False
            return paused
        launch.Kernel.__getitem__ = counted
        try:
            with counter:
                fn(inputs)
        finally:
            launch.Kernel.__getitem__ = original
    return sum(sum(c.values()) for c in counter.by_src.values()), counter.by_src


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--res', type=int, default=256)
    p.add_argument('--objects', type=int, default=1)
    p.add_argument('--cond', type=int, default=1)
    p.add_argument('--graph', choices=('exact', 'padded', 'split'), default='exact')
    p.add_argument('--precision', choices=('fp32', 'bf16'), default='bf16')
    p.add_argument('--fused', action='store_true', help='the fused model copy (Triton)')
    p.add_argument('--top', type=int, default=40)
    p.add_argument('--out', default=None)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    fn, inputs, ctx = step_function(a.res, a.objects, a.cond, a.graph, a.precision,
                                     a.fused)
    total, by_src = count_step(fn, inputs, ctx)
    by_op = collections.Counter()
    for c in by_src.values():
        by_op.update(c)
    rows = sorted(by_src.items(), key=lambda kv: -sum(kv[1].values()))
    print(f'{total} kernel-launching aten ops in one step ({a.graph}, {a.objects} objects, '
          f'cond {a.cond}, {a.precision}, {a.res}px)')
    print('by op:', ', '.join(f'{k} {v}' for k, v in by_op.most_common()))
    for src, c in rows[:a.top]:
        ops = ', '.join(f'{k} {v}' for k, v in c.most_common())
        print(f'{sum(c.values()):4d}  {src}: {ops}')
    if a.out:
        with open(a.out, 'w') as f:
            json.dump({'total': total, 'by_op': dict(by_op),
                       'by_source': {s: dict(c) for s, c in rows}}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
