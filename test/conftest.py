"""Shared fixtures of the CPU core tests: one small random model per configuration for the whole
session (building one takes seconds), fresh trackers on it (cheap), synthetic frames, and a
snapshot of a tracker's whole state to prove that a rejected input changed nothing.

torch and sam2 are imported lazily, so the ROS/message tests that share this directory do not
pay for them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

# Under pytest-xdist (scripts/test.sh runs three workers on CI's two cores) each worker computes
# on one intra-op thread: two OpenMP teams of two threads spinning against each other on two
# cores run several times slower per frame. Set before any test imports torch; node
# subprocesses get their own value (ros_helpers.DomainLease.env).
if os.environ.get('PYTEST_XDIST_WORKER'):
    os.environ.setdefault('OMP_NUM_THREADS', '1')

# Small and fast on a 2-core CPU; 64 is the smallest image size sam2 builds at (a multiple of
# 32 with 4x4 memory maps), 128 keeps masks meaningful enough for the API tests.
SMALL = dict(model_size='tiny', image_size=128, device='cpu', precision='fp32',
             random_weights=True, use_cuda_graphs=False)
_MODELS = {}

# Examples run per hypothesis test, filled by test_properties and written at session end.
HYPOTHESIS_COUNTS: dict = {}

# Hypothesis example budgets. Each property test states the examples it was designed with;
# the 'ci' profile (default) runs a quarter of them, sized for CI's 2 cores, where the ROS and
# core boundary tests together ran 2,290 examples; HYPOTHESIS_PROFILE=thorough runs them all
# (before a release, or after changing a boundary). No deadline in either: the machine is shared.
HYPOTHESIS_PROFILE = os.environ.get('HYPOTHESIS_PROFILE', 'ci')
_EXAMPLE_SCALE = {'ci': 0.25, 'thorough': 1.0}
if HYPOTHESIS_PROFILE not in _EXAMPLE_SCALE:
    raise ValueError(f'HYPOTHESIS_PROFILE={HYPOTHESIS_PROFILE!r}: use one of '
                     f'{sorted(_EXAMPLE_SCALE)}')


def examples(designed: int) -> int:
    """max_examples for a property test designed for ``designed`` examples, under the
    active profile (at least 20, so every strategy branch still gets drawn)."""
    return max(20, round(designed * _EXAMPLE_SCALE[HYPOTHESIS_PROFILE]))


def _register_hypothesis_profiles():
    try:
        from hypothesis import settings
    except ImportError:       # the ROS-only environments of some tests lack it
        return
    for name in _EXAMPLE_SCALE:
        # 'ci' draws the same examples every run, so a CI result does not depend on luck;
        # 'thorough' explores new ones
        settings.register_profile(name, deadline=None, derandomize=name == 'ci')
    settings.load_profile(HYPOTHESIS_PROFILE)


_register_hypothesis_profiles()


def small_cfg(**changes):
    from sam2_ros.engine.config import TrackerConfig
    return TrackerConfig(**{**SMALL, **changes})


# A shallower random tiny model for the tests of the tracker's own bookkeeping over long
# streams (graph runner, memory bank, soak): one Hiera block per stage and none with global
# attention, one memory-attention layer. Every sam2 module type and call the tracker makes is
# still there, at a fraction of the cost of a frame (4 of Hiera's 12 blocks, none global; 1 of
# 4 memory-attention layers). Comparisons with the official predictor keep the real tiny
# configuration.
LEAN = ('++model.image_encoder.trunk.stages=[1,1,1,1]',
        '++model.image_encoder.trunk.global_att_blocks=[]',
        '++model.memory_attention.num_layers=1')


def shared_model(image_size=128, corrections_as_cond=True, overrides=()):
    """One random tiny model per (image size, corrections_as_cond, hydra overrides) for the
    session. The model holds no tracking state, so trackers (and the official predictor) may
    share it."""
    key = (image_size, corrections_as_cond, tuple(overrides))
    if key not in _MODELS:
        from sam2_ros.engine.model import build_model
        _MODELS[key] = build_model(small_cfg(image_size=image_size,
                                             corrections_as_cond=corrections_as_cond,
                                             extra_hydra_overrides=list(overrides)))
    return _MODELS[key]


def make_tracker(**changes):
    """A fresh StreamingTracker (own bank and object table) on the shared model."""
    return tracker_on_shared_model(small_cfg(**changes))


def tracker_on_shared_model(cfg):
    """A fresh StreamingTracker of ``cfg`` on the session's model for cfg's image size,
    corrections_as_cond and hydra overrides (read only, so trackers may share it)."""
    from sam2_ros.engine.tracker import StreamingTracker
    return StreamingTracker(cfg, model=shared_model(cfg.image_size, cfg.corrections_as_cond,
                                                    cfg.extra_hydra_overrides))


def reuse_encoder(tracker) -> list:
    """Make the tracker's image encoder compute each distinct frame once: the caller sets
    ``key[0]`` (the returned one-element list) to a frame's identity before ``track``; a key
    seen before returns the stored outputs. The encoder keeps no state between frames, so a
    long CPU stream of repeating frames runs every stateful part (prompts, memory attention,
    the bank, results) on each frame at about half the cost; the encoder's own long-run
    behaviour is the GPU soak's."""
    real_encode, cache, key = tracker.runner.encode, {}, [0]

    def encode(image):
        if key[0] not in cache:
            cache[key[0]] = real_encode(image)
        return cache[key[0]]
    tracker.runner.encode = encode
    return key


def assert_close_rel(out, ref, rel: float) -> float:
    """max |out - ref| <= rel x max(1, max |ref|) (same shape, compared in float32), the bound
    of the fused kernels' CPU tests; returns the error."""
    out, ref = out.float(), ref.float()
    assert out.shape == ref.shape
    err = (out - ref).abs().max().item()
    assert err <= rel * max(1.0, ref.abs().max().item()), (err, ref.abs().max().item())
    return err


def perturb_norms(module, generator) -> None:
    """Random LayerNorm affines in ``module``, in place (weights ~ N(1, 0.2), biases
    ~ N(0, 0.2) from ``generator``): sam2's init (1, 0) would hide a wrong affine."""
    import torch
    with torch.no_grad():
        for mod in module.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.normal_(1.0, 0.2, generator=generator)
                mod.bias.normal_(0.0, 0.2, generator=generator)


@pytest.fixture
def triton_ranges(monkeypatch):
    """From here on in the test, each launch of our Triton kernels (``launch.jit``) runs in a
    profiler range named 'triton_kernel', so ``top_level_ops`` counts a launch as one op (not
    the aten ops Triton's interpreter runs to emulate it)."""
    from torch.profiler import record_function

    from sam2_ros.engine.cuda.kernels import launch
    original = launch.Kernel.__getitem__

    def ranged(self, grid):
        run = original(self, grid)

        def in_range(*args, **kwargs):
            with record_function('triton_kernel'):
                return run(*args, **kwargs)
        return in_range
    monkeypatch.setattr(launch.Kernel, '__getitem__', ranged)


def top_level_ops(fn) -> list:
    """The profiler events of the aten ops and Triton launches (``triton_ranges``) that ``fn``
    runs and no other of them called, in order."""
    from torch.profiler import ProfilerActivity, profile

    def counted(e):
        return e.name.startswith('aten::') or e.name == 'triton_kernel'
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    top = []
    for e in prof.events():
        up = e.cpu_parent
        while up is not None and not counted(up):
            up = up.cpu_parent
        if counted(e) and up is None:
            top.append(e)
    return top


@pytest.fixture
def kernel_launches(monkeypatch):
    """The names of our Triton kernels (``launch.jit``) launched from here on in the test, in
    launch order (interpreted or compiled alike)."""
    from sam2_ros.engine.cuda.kernels import launch
    names = []
    original = launch.Kernel.__getitem__

    def counted(self, grid):
        names.append(self.fn.__name__)
        return original(self, grid)
    monkeypatch.setattr(launch.Kernel, '__getitem__', counted)
    return names


@pytest.fixture(scope='session')
def tracker_factory():
    return make_tracker


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """Each test leaves torch's intra-op thread count as it found it. The in-process reference
    trackers of the ROS tests compute on two threads (as the nodes do); left at two, every
    later test of that worker would run with two OpenMP threads on a shared core each, several
    times slower (the reason ``one_thread`` exists)."""
    import sys
    torch = sys.modules.get('torch')
    before = torch.get_num_threads() if torch is not None else None
    yield
    if before is not None and torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(scope='module')
def one_thread():
    """Run a module's small-model tests on one intra-op thread (restored afterwards): at these
    sizes the ops are tiny, and on a loaded 2-core machine two OpenMP threads spin against
    other processes, several times slower per frame than one."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def textured_frame(h=96, w=128, seed=0):
    """A still of the synthetic camera (sam2_ros.synthetic): [h, w, 3] uint8, a textured
    background and two discs; each seed is another image."""
    from sam2_ros.synthetic import SyntheticCamera
    return SyntheticCamera(w, h, objects=2, seed=seed).frame(0)


def smooth_image(h, w, seed=0):
    """A smooth (band-limited) colour image: sines of a few pixels' period."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    ch = [127 + 120 * np.sin(xx / rng.uniform(4, 9) + c) * np.cos(yy / rng.uniform(4, 9))
          for c in range(3)]
    return np.stack(ch, -1).round().astype(np.uint8)


# ---- whole-state snapshots ----------------------------------------------------------------
def snapshot(tracker):
    """Everything a rejected call must leave as it was: every tensor and array of the bank
    (values and storage), the object table, queued prompts, frame counter and size."""
    import torch
    b = tracker.bank
    tensors = {k: v for k, v in vars(b).items() if isinstance(v, torch.Tensor)}
    objs = {i: (o.slot, o.created_frame, o.last_prompt_frame, o.score, o.hidden_run)
            for i, o in tracker.objects.items()}
    return {
        'tensors': {k: v.clone() for k, v in tensors.items()},
        'arrays': {k: v.copy() for k, v in vars(b).items() if isinstance(v, np.ndarray)},
        'ptrs_data': {k: v.data_ptr() for k, v in tensors.items()},
        'objects': objs,
        'queued': tracker.queued_ids,
        'frame': tracker.frame_index,
        'hw': tracker.frame_hw,
    }


def assert_unchanged(tracker, snap, slots=None):
    """The tracker's state equals ``snap``; with ``slots``, only those object slots of the
    bank's per-object tensors and arrays are compared."""
    now = snapshot(tracker)
    if slots is None:
        for k in ('objects', 'queued', 'frame', 'hw', 'ptrs_data'):
            assert now[k] == snap[k], f'{k} changed: {snap[k]} -> {now[k]}'
    sel = slice(None) if slots is None else list(slots)
    for k, t in snap['tensors'].items():
        assert now['tensors'][k].shape == t.shape
        assert now['tensors'][k][sel].equal(t[sel]), f'bank.{k} changed'
    for k, a in snap['arrays'].items():
        assert np.array_equal(now['arrays'][k][sel], a[sel]), f'bank.{k} changed'


# Modules that take the longest (seconds of a module's tests with three workers and the ros2
# tests alongside on a 2-core VM, measured with --durations=0), run first: under xdist --dist
# loadscope a module is a unit of work, and pytest-xdist by default queues the modules with the
# most tests first, which can leave a long one-test module for last, alone on one worker while
# the others idle. Heaviest first balances the workers. Only the order changes; every test still
# runs.
HEAVY_MODULES = ('test_graph_logic_cpu.py', 'test_equivalence.py', 'test_node_latency_cpu.py',
                 'test_dds_probe_cpu.py', 'test_bank.py', 'test_precast.py', 'test_soak_cpu.py',
                 'test_ros_lifecycle.py', 'test_ros_lifecycle_orders.py', 'test_ros_node.py',
                 'test_ros_replay.py', 'test_cli_offline.py', 'test_ros_pipeline_node.py',
                 'test_examples.py', 'test_batch_major.py', 'test_ros_demo.py')


def pytest_configure(config):
    if hasattr(config.option, 'loadscopereorder'):   # pytest-xdist: keep the order below
        config.option.loadscopereorder = False


# Runs last, its `colcon build` started in the background when the session begins (see
# test_ros_colcon.EarlyBuild): the build overlaps the other `ros2` tests instead of adding to them.
LAST_MODULES = ('test_ros_colcon.py',)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(HEAVY_MODULES)}
    rank.update({name: len(rank) + 1 + i for i, name in enumerate(LAST_MODULES)})
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_MODULES)))   # stable


def pytest_collection_finish(session):
    """Start the colcon build of test_ros_colcon now when that test is selected, in one process
    (scripts/test.sh runs it in the ros_cli pytest process, -n 0). Under xdist the test builds
    by itself: every worker collects it, one runs it."""
    if os.environ.get('PYTEST_XDIST_WORKER') or session.config.getoption('collectonly'):
        return
    if any(item.path.name == 'test_ros_colcon.py' for item in session.items):
        import test_ros_colcon
        test_ros_colcon.EarlyBuild.start_if_possible(session.config)


def pytest_sessionfinish(session, exitstatus):
    """Record how many examples each hypothesis test ran (out/hypothesis_counts.json); stop
    an early colcon build whose test did not run."""
    import sys
    colcon = sys.modules.get('test_ros_colcon')
    if colcon is not None:
        colcon.EarlyBuild.cancel()
    if not HYPOTHESIS_COUNTS:
        return
    write_out('hypothesis_counts.json', HYPOTHESIS_COUNTS)


def write_out(name: str, data) -> None:
    """Best effort: ``data`` as JSON into $OUT (default: the repo's out/); a read-only
    checkout loses the record, never the test."""
    out = Path(os.environ.get('OUT', Path(__file__).resolve().parent.parent / 'out'))
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(data, indent=1))
    except OSError:
        pass


@pytest.fixture
def lease():
    """A ROS domain of its own for one test (ROS tests start nodes in subprocesses)."""
    from ros_helpers import DomainLease

    d = DomainLease()
    yield d
    d.release()
