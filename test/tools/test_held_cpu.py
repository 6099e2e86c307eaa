"""What a variant of the image-mode benchmark holds (``tools/bench/held.py``), on the CPU.

The benchmark's ``ours`` keeps a graph segmenter and an eager twin on its model (the twin's
module calls are counted). The twin's model copy (``precast``'s ``module_copy``) must share
every tensor, also sam2's plain-attribute tensors (positional-encoding caches, RoPE tables)
that a ``deepcopy`` sharing only parameters and buffers duplicated on the device.
"""

import copy
import itertools

import numpy as np
import pytest
import torch

from conftest import small_cfg
from sam2_ros.engine.image import ImageSegmenter
from sam2_ros.engine.model import precast
from sam2_ros.engine.types import Prompt
from tools.bench.held import held_bytes, storages

pytestmark = pytest.mark.usefixtures('one_thread')
S = 64


@pytest.fixture(scope='module')
def pair():
    """A bf16 segmenter on a model of its own (cast in place) and the benchmark's eager twin
    on that model, each after one image (sam2's lazy caches filled)."""
    cfg = small_cfg(image_size=S, precision='bf16')
    seg = ImageSegmenter(cfg)
    twin = ImageSegmenter(cfg.replace(use_cuda_graphs=False), model=seg.model)
    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    prompts = [Prompt(1, box=(5.0, 5.0, 40.0, 30.0)), Prompt(2, box=(30.0, 10.0, 70.0, 40.0))]
    for s in (seg, twin):
        s.segment(img, prompts)
    return seg, twin


def _plain_tensors(model):
    """Tensors of the model that are neither parameters nor buffers (sam2's caches)."""
    own = {t.untyped_storage().data_ptr() for t in itertools.chain(model.parameters(),
                                                                   model.buffers())}
    return {k: v for k, v in storages(model).items() if k[1] not in own}


def test_the_twins_model_shares_every_tensor(pair):
    seg, twin = pair
    assert twin.model is not seg.model                    # modules of its own
    assert storages(seg.model, twin.model) == storages(seg.model)
    # what is shared includes sam2's plain-attribute tensors (the walk sees them)
    assert sum(_plain_tensors(seg.model).values()) > 0


def test_a_deepcopy_would_have_duplicated_the_caches(pair):
    """The accounting catches the old copy: deepcopy sharing parameters and buffers only."""
    seg, _ = pair
    m = seg.model
    memo = {id(t): t for t in itertools.chain(m.parameters(), m.buffers())}
    old = copy.deepcopy(m, memo=memo)
    extra = held_bytes(m, old) - held_bytes(m)
    assert extra == sum(_plain_tensors(m).values()) > 0


def test_precast_of_a_cast_model_adds_no_bytes(pair):
    seg, _ = pair
    assert held_bytes(seg.model, precast(seg.model)) == held_bytes(seg.model)


def test_weights_held_once_in_bf16(pair):
    """Our model holds its Linear/Conv weights in bf16 only (no fp32 originals kept)."""
    seg, twin = pair
    matmul = [p for mod in seg.model.modules()
              if isinstance(mod, (torch.nn.Linear, torch.nn.modules.conv._ConvNd))
              for p in (mod.weight, mod.bias) if p is not None]
    assert all(p.dtype == torch.bfloat16 for p in matmul)
    params = sum(p.untyped_storage().nbytes() for p in seg.model.parameters())
    plain = sum(_plain_tensors(seg.model).values())
    # the model: its parameters and caches, nothing else (buffers are a few bytes)
    assert held_bytes(seg.model) - params - plain < 4096
