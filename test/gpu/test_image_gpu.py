"""Image mode (engine/image.py) against the real ``SAM2ImagePredictor`` on the GPU machine,
where torchvision is installed (scripts/gpu/gpu_image_mode.sh installs its wheel).

* The CPU path against the real predictor with the real torchvision: bitwise (what
  test/engine/test_image_segmenter.py shows in CI with a stand-in for the three transforms;
  here the stand-in itself is compared with the real transforms too).
* The GPU path against the real predictor on the GPU, tiny@1024 as sam2 ships it (its
  predictor hard-codes 1024's feature sizes), 1024x1024 and 1280x720 sources, 1, 3 and 8
  boxes, clicks, box + click, a mask, multimask on and off; eager and CUDA graphs, fp32 and
  bf16. Not bitwise: ours resizes on the GPU (the predictor on the host) and scales prompt
  coordinates on the host (the predictor on the GPU, where dividing by a scalar multiplies by
  its reciprocal); graphs pad prompts to a bucket (GEMMs of another batch size). Tolerances
  (the repo's, test_fidelity_gpu.py): fp32 low-res logits 1e-3, IoU 1e-3, mask pixels of
  another sign <= 0.1%; bf16 logits 0.5, IoU 0.05, mask pixels <= 1%. Measured maxima go to
  $OUT/gpu_image.json.
* Peak memory of ours (tiny@1024 bf16, 1 and 8 boxes, graphs) <= 1.1x the predictor's,
  measured by the benchmark's own rows (issue 30's target, as the docs report it).
* A running tracker with CUDA graphs is not disturbed by segment_image: its next frame equals
  that of a twin that never segmented an image, bitwise.
"""

import json
import os

import numpy as np
import pytest
import torch

from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.image import ImageSegmenter, preprocess
from sam2_ros.engine.image_prompts import mask_logits
from sam2_ros.engine.model import autocast, build_model
from sam2_ros.engine.prompts import prompt_mask
from sam2_ros.engine.tracker import StreamingTracker
from sam2_ros.engine.types import Prompt

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
OUT = os.environ.get('OUT', 'out')
TOL = {'fp32': dict(logits=1e-3, iou=1e-3, pixels=1e-3),
       'bf16': dict(logits=0.5, iou=0.05, pixels=1e-2)}


def _record(key, value):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, 'gpu_image.json')
    data = json.load(open(path)) if os.path.exists(path) else {}
    data[key] = value
    json.dump(data, open(path, 'w'), indent=1)


def image(h, w, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    ch = [127 + 120 * np.sin(xx / rng.uniform(8, 40) + c) * np.cos(yy / rng.uniform(8, 40))
          for c in range(3)]
    return np.stack(ch, -1).round().astype(np.uint8)


def grid_boxes(n, w, h):
    cells = [(c, r) for r in range(2) for c in range(4)][:n]
    cw, rh = w / 4, h / 2
    return np.array([(c * cw + 0.15 * cw, r * rh + 0.15 * rh, (c + 1) * cw - 0.15 * cw,
                      (r + 1) * rh - 0.15 * rh) for c, r in cells], np.float32)


def real_predictor(model):
    import torchvision
    assert not getattr(torchvision, 'STANDIN', False), 'the stand-in, not torchvision'
    from sam2.sam2_image_predictor import SAM2ImagePredictor
    return SAM2ImagePredictor(model)


@pytest.fixture(scope='module')
def cpu_model():
    return build_model(TrackerConfig(image_size=128, device='cpu', precision='fp32',
                                     random_weights=True))


def test_standin_equals_torchvision_and_cpu_path_bitwise(cpu_model):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'engine'))
    import torchvision.transforms as tv

    import torchvision_standin as st
    for hw in ((90, 120), (128, 128), (300, 200)):
        img = image(*hw, seed=1)
        a, b = tv.ToTensor()(img), st.ToTensor()(img)
        assert torch.equal(a, b)
        assert torch.equal(tv.Resize((128, 128))(a), st.Resize((128, 128))(b))
        n = tv.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        assert torch.equal(n(a), st.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])(b))
        pred = real_predictor(cpu_model)
        assert torch.equal(preprocess(torch.from_numpy(img), 128), pred._transforms(img)[None])
    pred._bb_feat_sizes = [(32, 32), (16, 16), (8, 8)]      # hard-coded for 1024 in sam2
    seg = ImageSegmenter(TrackerConfig(image_size=128, device='cpu', precision='fp32',
                                       random_weights=True), model=cpu_model)
    img = image(90, 120, seed=2)
    boxes = np.array([[10, 10, 60, 50], [50, 30, 110, 85]], np.float32)
    with torch.inference_mode():
        pred.set_image(img)
        masks, iou, low = pred.predict(box=boxes, multimask_output=False)
    res = seg.segment(img, [Prompt(i + 1, box=tuple(b)) for i, b in enumerate(boxes)])
    assert np.array_equal(masks[:, 0], res.masks) and np.array_equal(iou[:, 0], res.iou)
    assert torch.equal(torch.as_tensor(low[:, 0]), res.low_res_logits[:, 0].clamp(-32, 32))


@pytest.fixture(scope='module')
def gpu_model():
    return build_model(TrackerConfig(image_size=1024, device='cuda', precision='fp32',
                                     random_weights=True))


CASES = ('1 box', '3 boxes', '8 boxes', 'clicks', 'box + click', 'mask')


def case_prompts(case, w, h):
    if case.endswith('boxes') or case == '1 box':
        return [Prompt(i + 1, box=tuple(map(float, b)))
                for i, b in enumerate(grid_boxes(int(case[0]), w, h))]
    if case == 'clicks':
        return [Prompt(i + 1, points=[[w * (0.2 + 0.3 * i), h * 0.4]], labels=[1])
                for i in range(3)]
    if case == 'box + click':
        b = grid_boxes(2, w, h)
        return [Prompt(i + 1, box=tuple(map(float, b[i])),
                       points=[[(b[i, 0] + b[i, 2]) / 2, (b[i, 1] + b[i, 3]) / 2]], labels=[0])
                for i in range(2)]
    mask = np.zeros((h, w), bool)
    mask[h // 4:h // 2, w // 3:w // 2] = True
    return [Prompt(1, mask=mask)]


def predictor_args(prompts, h, w):
    p = prompts[0]
    if p.mask is not None:
        return dict(mask_input=mask_logits(prompt_mask(p, h, w, 1024, torch.device('cuda'))))
    args = {}
    if p.box is not None:
        args['box'] = np.array([q.box for q in prompts], np.float32)
    if p.points is not None:
        args['point_coords'] = np.array([q.points for q in prompts], np.float32)
        args['point_labels'] = np.array([q.labels for q in prompts])
    return args


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
@pytest.mark.parametrize('graphs', [False, True])
@pytest.mark.parametrize('source', [(1024, 1024), (1280, 720)])
def test_gpu_path_within_tolerance_of_real_predictor(gpu_model, precision, graphs, source):
    w, h = source
    cfg = TrackerConfig(image_size=1024, device='cuda', precision=precision,
                        random_weights=True, use_cuda_graphs=graphs)
    seg = ImageSegmenter(cfg, model=gpu_model)
    pred = real_predictor(gpu_model)
    tol, worst = TOL[precision], {'logits': 0.0, 'iou': 0.0, 'pixels': 0.0}
    for seed in range(2):                         # the second image replays the graphs
        img = image(h, w, seed=seed)
        with torch.inference_mode(), autocast(cfg):
            pred.set_image(img)
        for case in CASES:
            prompts = case_prompts(case, w, h)
            for multimask in (False, True):
                with torch.inference_mode(), autocast(cfg):
                    masks, iou, low = pred.predict(multimask_output=multimask,
                                                   **predictor_args(prompts, h, w))
                n = len(prompts)
                iou = torch.as_tensor(iou).reshape(n, -1)
                k = iou.argmax(1)
                want_low = torch.as_tensor(low).reshape(n, iou.shape[1], 256, 256)[
                    torch.arange(n), k]
                want_masks = np.asarray(masks).reshape(n, iou.shape[1], h, w)
                want_masks = want_masks[np.arange(n), k.numpy()]
                res = seg.segment(img, prompts, multimask_output=multimask)
                ours = res.low_res_logits[:, 0].clamp(-32, 32).cpu()
                worst['logits'] = max(worst['logits'], float((ours - want_low).abs().max()))
                worst['iou'] = max(worst['iou'], float(np.abs(res.iou - iou[
                    torch.arange(n), k].numpy()).max()))
                worst['pixels'] = max(worst['pixels'], float((res.masks != want_masks).mean()))
        if graphs and seed == 1:
            assert seg.graphs.n_graphs() > 1 and not seg.fallback_reasons
            assert res.mode == 'graph'
    _record(f'{precision}_{"graphs" if graphs else "eager"}_{w}x{h}', worst)
    for key, bound in tol.items():
        assert worst[key] <= bound, (key, worst)


def test_peak_memory_within_10_percent_of_predictor(tmp_path):
    """Issue 30's memory target, measured by the benchmark itself (tools/bench/image_mode.py:
    the same rows, the same peak definition: max allocated since the model was built, model
    included, both prompt counts of a row set), with fewer images. Per row: ours' peak <=
    1.1x the predictor's, and ours holds no more than one model's tensors and its graphs."""
    from tools.bench import image_mode
    out = tmp_path / 'image_memory.json'
    assert image_mode.main(['--res', '1024', '--prompts', '1,8', '--variants',
                            'sam2_predictor,ours', '--sam2-models', 'tiny', '--precision',
                            'bf16', '--images', '5', '--warmup', '2', '--profile-images', '1',
                            '--out', str(out)]) == 0
    rows = {(r['variant'], r['prompts']): r for r in json.loads(out.read_text())}
    _record('peak_mib_tiny_1024_bf16', {f'{v}_{n}': (r['peak_mib'], r['held_mib'])
                                        for (v, n), r in rows.items()})
    for n in (1, 8):
        ours, theirs = rows['ours', n], rows['sam2_predictor', n]
        assert ours['peak_mib'] <= 1.1 * theirs['peak_mib'], (n, ours, theirs)
        assert ours['held_mib'] <= theirs['held_mib'], (n, ours, theirs)   # bf16 weights


def test_tracker_with_graphs_undisturbed_by_segment_image(gpu_model):
    # sam2's attention call: 'auto' times kernels at capture, and two trackers may choose
    # differently
    cfg = TrackerConfig(image_size=1024, device='cuda', precision='bf16', random_weights=True,
                        max_objects=2, steady_attention='sam2')
    busy, twin = StreamingTracker(cfg, model=gpu_model), StreamingTracker(cfg, model=gpu_model)
    frames = [image(720, 1280, seed=s) for s in range(4)]
    for tr in (busy, twin):
        tr.track(frames[0])
        tr.add_prompt(Prompt(1, box=(100.0, 100.0, 400.0, 400.0)))
        tr.add_prompt(Prompt(2, points=[[800.0, 300.0]], labels=[1]))
        tr.track(frames[1])
    still = image(600, 800, seed=9)
    res = busy.segment_image(still, [Prompt(5, box=(10.0, 10.0, 300.0, 300.0))])
    assert res.mode == 'graph' and res.objects[0].mask.shape == (600, 800)
    # a correction on the latest frame reads that frame's features: still the tracker's
    pairs = [tuple(tr.add_prompt(Prompt(1, points=[[200.0, 200.0]], labels=[1]))
                   for tr in (busy, twin))]
    pairs += [(busy.track(f), twin.track(f)) for f in frames[2:]]
    for a, b in pairs:
        assert [o.obj_id for o in a.objects] == [o.obj_id for o in b.objects] == [1, 2]
        for x, y in zip(a.objects, b.objects):
            assert torch.equal(x.low_res_logits, y.low_res_logits) and x.score == y.score
