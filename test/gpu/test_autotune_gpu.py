"""compile_mode='max-autotune-no-cudagraphs' inside our CUDA graphs, against eager (GPU only).

A file of its own because a cold compile takes longer than one device command (10 minutes):
scripts/gpu/gpu_vos_bg.sh runs it in the background after the benchmark row
``tiny@512:1:ours_graph_autotuned``, whose configuration it shares, so that it compiles from
the same TORCHINDUCTOR_CACHE_DIR. Run alone:
``python -m pytest -m gpu test/gpu/test_autotune_gpu.py``.

Autotuned kernels are not eager's kernels, so the comparison is not bitwise: bf16 (the
benchmark's precision) within the bf16 equivalence tolerance of test_graphs_gpu (0.5 on logits
that reach |10|+, where one bf16 step is ~0.06), with the measured worst value recorded.
"""

import pytest
import torch

from test_graphs_gpu import TOLS, _record, _run, _worst
from tools.bench.variants import SRC_H, SRC_W
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.types import Prompt
from sam2_ros.synthetic import SyntheticCamera

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
FRAMES = 100


def _cfg(**kw) -> TrackerConfig:
    """The benchmark row's configuration (same model, sizes and buckets, so the same compiled
    graphs and inductor cache entries)."""
    return TrackerConfig(model_size='tiny', image_size=512, random_weights=True, seed=0,
                         device='cuda', precision='bf16', max_objects=8, **kw)


def test_autotuned_graphs_close_to_eager():
    # the benchmark's stream: one object boxed on frame 0
    stream = SyntheticCamera(SRC_W, SRC_H, objects=2, seed=0)
    frames = [stream.frame(t) for t in range(FRAMES)]
    events = {0: [('add', Prompt(1, box=stream.boxes(0, 1)[0]))]}
    tuned, stats = _run(_cfg(use_cuda_graphs=True, graph_mode='swap', graph_cond_buckets=(1,),
                             compile_mode='max-autotune-no-cudagraphs'), frames, events)
    ref, _ = _run(_cfg(use_cuda_graphs=False), frames, events)
    worst = _worst(tuned, ref)
    _record('autotuned_swap_vs_eager_bf16', {'worst_logits': worst, 'stats': stats})
    print('autotuned', worst, stats)
    assert all(d.keys() == {1} for d in tuned[1:]) and len(tuned) == FRAMES
    # frame 0 is the prompt step; frames 1-15 run eagerly by policy while the object-pointer
    # window (max_obj_ptrs_in_encoder = 16, with the prompt frame's) fills: no steady shape yet
    assert stats.get('graph_steps', 0) == FRAMES - 16 and stats.get('fallbacks', 0) == 0, stats
    assert worst <= TOLS['bf16'], worst
