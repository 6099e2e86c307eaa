"""The image path's CUDA-graph bookkeeping (engine/cuda/image_graphs.py), exercised on the CPU.

Capture is replaced by a stand-in whose replay re-runs the captured function on the static
inputs and writes the static outputs in place, the contract of a CUDA graph. Everything else
is the real code: bucket choice, padding and chunking of prompts, copy-in and copy-out, the
features the decoder graphs read, fallbacks. The graphs' numerics are test/gpu/test_image_gpu.py's.
"""

import numpy as np
import pytest
import torch

from conftest import shared_model, small_cfg, smooth_image
from sam2_ros.engine.cuda import image_graphs
from sam2_ros.engine.cuda.capture import CapturedGraph
from sam2_ros.engine.image_types import ImageFeatures, Prediction
from sam2_ros.engine.image import (ImageSegmenter, decode, encode,
                                   make_graphs)
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')
S = 64
H, W = 60, 80


class ReplayOnCpu:
    """Stands in for torch.cuda.CUDAGraph: replay() recomputes into the static outputs."""

    def __init__(self, fn, inputs, outputs, fail=False):
        self.fn, self.inputs, self.outputs, self.fail = fn, inputs, outputs, fail
        self.replays = 0

    def replay(self):
        if self.fail:
            raise RuntimeError('replay failed (test)')
        self.replays += 1
        new = self.fn(self.inputs)
        if isinstance(new, ImageFeatures):
            pairs = zip([self.outputs.image_embed, *self.outputs.high_res],
                        [new.image_embed, *new.high_res])
        else:
            pairs = zip(vars(self.outputs).values(), vars(new).values())
        for dst, src in pairs:
            dst.copy_(src)


def graphed(cfg=None, fail_capture=(), fail_replay=(), warm_ups=None):
    """A CPU segmenter whose graphs are the stand-in; returns (segmenter, captures, reasons).
    fail_capture / fail_replay: 'encoder' and/or decoder keys whose capture / replay raise;
    warm_ups: a list that gets each capture's (key, warm_up)."""
    cfg = cfg or small_cfg(image_size=S)
    seg = ImageSegmenter(cfg, model=shared_model(S))
    reasons, captures = [], []
    g = image_graphs.ImageGraphs(cfg, lambda x: encode(seg.model, x),
                                 lambda f, b, m: decode(seg.model, f, b, m), reasons.append)

    def capture(fn, inputs, warm_up=True):
        key = 'encoder' if isinstance(inputs, torch.Tensor) else \
            (inputs.n, inputs.points, inputs.mask_input is not None)
        captures.append(key)
        if warm_ups is not None:
            warm_ups.append((key, warm_up))
        if key in fail_capture:
            raise RuntimeError('capture failed (test)')
        out = fn(inputs)
        return CapturedGraph(ReplayOnCpu(fn, inputs, out, key in fail_replay),
                                     inputs, out)
    g.capture = capture
    seg.graphs = g
    return seg, captures, reasons


def boxes(n):
    return [Prompt(i + 1, box=(2.0 + i % 7, 3.0 + i % 5, 40.0 + i % 9, 50.0 + i % 4))
            for i in range(n)]


def eager():
    return ImageSegmenter(small_cfg(image_size=S), model=shared_model(S))


def close(a, b):
    """Rows of a padded decoder call equal the unpadded call's up to the CPU GEMMs' rounding at
    another batch size (exactly equal where the batch is unchanged)."""
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_buckets_padding_chunks_and_reuse():
    seg, captures, reasons = graphed()
    img = smooth_image(H, W, seed=1)
    ref = eager()
    for n in (1, 3, 20):                # bucket 1; 3 padded to 4; 20 as 16 + 4
        res = seg.segment(img, boxes(n))
        want = ref.segment(img, boxes(n))
        assert res.mode == 'graph' and seg.encoded_by == 'graph'
        (torch.equal if n == 1 else close)(res.low_res_logits, want.low_res_logits)
        np.testing.assert_allclose(res.iou, want.iou, rtol=0, atol=1e-5)
    assert captures == ['encoder', (1, 2, False), (4, 2, False), (16, 2, False)]
    assert seg.graphs.encoder.graph.replays == 3
    assert seg.graphs.decoders[(4, 2, False, False)].graph.replays == 2     # 3, and 20's rest
    # features from the encoder graph equal the eager encoder's (same computation and shapes)
    ref.set_image(img)
    assert torch.equal(seg.features.image_embed, ref.features.image_embed)
    assert not reasons


def test_only_the_first_captured_decoder_warms_up():
    """The eager warm-up of a large decoder bucket is the image path's memory peak: decoders
    after the first captured one skip it (the first initialised the modules they run); a
    failed first capture does not count as warmed."""
    warm = []
    seg, _, reasons = graphed(fail_capture=[(1, 2, False)], warm_ups=warm)
    img = smooth_image(H, W, seed=3)
    for n in (1, 3, 9):
        seg.segment(img, boxes(n))
    assert warm == [('encoder', True), ((1, 2, False), True), ((4, 2, False), True),
                    ((16, 2, False), False)]
    assert len(reasons) == 1 and 'capture failed' in reasons[0]


def test_shapes_without_graphs_and_masks():
    seg, captures, reasons = graphed()
    img = smooth_image(H, W, seed=2)
    five = [Prompt(1, points=np.array([[5, 5], [9, 9], [20, 30], [30, 20], [40, 40]]),
                   labels=np.ones(5))]
    res = seg.segment(img, five)                # 5 points: not in prompt_point_buckets
    assert res.mode == 'mixed' and captures == ['encoder']
    assert torch.equal(res.low_res_logits, eager().segment(img, five).low_res_logits)
    mask = np.zeros((H, W), bool)
    mask[10:40, 20:60] = True
    res = seg.segment(img, [Prompt(1, mask=mask), Prompt(2, mask=~mask)], multimask_output=True)
    assert res.mode == 'graph' and captures[-1] == (2, 0, True)
    close(res.low_res_logits, eager().segment(img, [Prompt(1, mask=mask), Prompt(2, mask=~mask)],
                                              multimask_output=True).low_res_logits)
    assert (2, 0, True, True) in seg.graphs.decoders and not reasons


def test_outputs_survive_later_replays():
    seg, _, _ = graphed()
    img = smooth_image(H, W, seed=3)
    seg.set_image(img)
    first = seg.predict(box=[[5, 5, 30, 30]], multimask_output=False)
    kept = first.low_res_logits.clone()
    seg.predict(box=[[20, 20, 70, 55]], multimask_output=False)
    assert torch.equal(first.low_res_logits, kept)
    assert isinstance(first, Prediction)


@pytest.mark.parametrize('where', ['capture', 'replay'])
def test_decoder_failure_falls_back_to_eager(where):
    key = (4, 2, False)
    seg, captures, reasons = graphed(**{f'fail_{where}': (key,)})
    img = smooth_image(H, W, seed=4)
    for _ in range(2):
        res = seg.segment(img, boxes(3))
        assert res.mode == 'mixed'
        assert torch.equal(res.low_res_logits, eager().segment(img, boxes(3)).low_res_logits)
    assert captures.count(key) == 1                         # a failed capture is not retried
    assert len(reasons) == (1 if where == 'capture' else 2)
    assert f'image decoder {where} failed' in reasons[0]
    assert seg.segment(img, boxes(1)).mode == 'graph'       # other shapes keep their graphs


def test_encoder_failure_means_eager():
    seg, captures, reasons = graphed(fail_capture=('encoder',))
    img = smooth_image(H, W, seed=5)
    for _ in range(2):
        res = seg.segment(img, boxes(2))
        assert res.mode == 'eager'
        assert torch.equal(res.low_res_logits, eager().segment(img, boxes(2)).low_res_logits)
    assert captures == ['encoder'] and len(reasons) == 1
    assert 'image encoder capture failed' in reasons[0]


def test_off_switch_and_buckets_config():
    cfg = small_cfg(image_size=S, device='cpu', use_cuda_graphs=True)
    assert ImageSegmenter(cfg, model=shared_model(S)).graphs is None      # not on CUDA
    cuda = cfg.replace(device='cuda')                       # make_graphs touches no device
    assert isinstance(make_graphs(None, cuda, print), image_graphs.ImageGraphs)
    assert make_graphs(None, cuda.replace(image_graphs=False), print) is None
    assert make_graphs(None, cuda.replace(use_cuda_graphs=False), print) is None
    with pytest.raises(ValueError, match='image_prompt_buckets'):
        small_cfg(image_prompt_buckets=(0, 4)).validate()
    seg, captures, _ = graphed(small_cfg(image_size=S, image_prompt_buckets=(2,)))
    seg.segment(smooth_image(H, W), boxes(5))             # chunks of 2: 2 + 2 + 1 (padded)
    assert captures == ['encoder', (2, 2, False)]
    assert seg.graphs.decoders[(2, 2, False, False)].graph.replays == 3
