"""The launch probe's bookkeeping (``tools/probes/launch_probe.py``), on the CPU: which
launches count as the same work, which storages a launch writes, which settings are tried;
and that ``launch.recording`` keeps compiled launches only (the probe re-times those on the
GPU; its GPU run is in benchmarks/results/h200_extra.json, probes ``launch_probe_*``)."""

from __future__ import annotations

import argparse

import pytest
import torch

triton = pytest.importorskip('triton')
tl = pytest.importorskip('triton.language')

from sam2_ros.engine.cuda.kernels import launch  # noqa: E402
from tools.probes import launch_probe  # noqa: E402


@launch.jit
def plain_kernel(x_ptr, y_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y_ptr + i, tl.load(x_ptr + i) * 2)


@launch.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr, UNROLL: tl.constexpr):
    i = tl.arange(0, N)
    a = tl.load(a_ptr + i[:, None] * N + i[None, :])
    b = tl.load(b_ptr + i[:, None] * N + i[None, :])
    tl.store(c_ptr + i[:, None] * N + i[None, :], tl.dot(a, b))


def args(**kw):
    base = dict(warps=[2, 4, 8], stages=[1, 2], unroll=[1, 4], flag=[])
    return argparse.Namespace(**{**base, **kw})


def test_settings_sweep_warps_stages_where_tiles_multiply_and_unroll_where_taken():
    plain = launch.Launch(plain_kernel, (1,), (torch.zeros(4), torch.zeros(4)), {'N': 4})
    assert launch_probe.settings(plain, args()) == [{'num_warps': w} for w in (2, 4, 8)]
    dot = launch.Launch(dot_kernel, (1,), (), {'N': 16, 'UNROLL': 1})
    got = launch_probe.settings(dot, args())
    assert {'num_warps': 8, 'UNROLL': 4} in got and {'num_stages': 2, 'UNROLL': 1} in got
    assert len(got) == (3 + 2) * 2


def test_flags_are_tried_alone_where_the_kernel_takes_them():
    dot = launch.Launch(dot_kernel, (1,), (), {'N': 16, 'UNROLL': 1})
    got = launch_probe.settings(dot, args(flag=[('UNROLL', [2, 8]), ('ABSENT', [0, 1])]))
    assert got[-2:] == [{'UNROLL': 2}, {'UNROLL': 8}]      # ABSENT: not a parameter, not tried
    assert not any('ABSENT' in kw for kw in got)


def test_signature_is_the_work_shapes_strides_dtypes_scalars_and_settings():
    x = torch.zeros(4, 6)

    def sig(*a, grid=(1,), **kw):
        return launch_probe.signature(launch.Launch(plain_kernel, grid, a, kw))
    assert sig(x, 3, N=4) == sig(torch.ones(4, 6), 3, N=4)          # values do not count
    assert sig(x, 3, N=4) != sig(x.t(), 3, N=4)                      # strides do
    assert sig(x, 3, N=4) != sig(x.double(), 3, N=4)
    assert sig(x, 3, N=4) != sig(x, 4, N=4) != sig(x, 4, N=8)
    assert sig(x, 3, N=4) != sig(x, 3, N=4, grid=(2,))


def test_tensors_of_gives_each_storage_once_whole_even_for_views_and_expanded_arguments():
    base = torch.arange(12, dtype=torch.float32)
    view, expanded = base[2:6], torch.zeros(3).expand(4, 3)
    rec = launch.Launch(plain_kernel, (1,), (base, view, expanded, 5), {})
    got = launch_probe.tensors_of(rec)
    assert [t.numel() for t in got] == [12 * 4, 3 * 4]              # bytes of each storage
    got[0].zero_()                                                    # it is the storage itself
    assert torch.equal(view, torch.zeros(4))


def test_recording_keeps_compiled_launches_only_and_ends_with_its_block():
    x, y = torch.arange(4, dtype=torch.float32), torch.zeros(4)
    with launch.recording() as rec:
        plain_kernel[(1,)](x, y, N=4)                 # CPU tensors: the interpreter
    assert torch.equal(y, x * 2) and rec == []
    plain_kernel[(1,)](x, y, N=4)
    assert rec == []
