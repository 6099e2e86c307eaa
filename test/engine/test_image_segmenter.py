"""The lean image path (engine/image.py) against sam2's own ``SAM2ImagePredictor``, on the CPU.

The predictor runs end to end (``set_image``, ``predict``) on the same random tiny model
(128 px), with two test-only adjustments, both about what CI lacks, not about the computation:
  * its three torchvision transforms come from ``torchvision_standin.py`` where torchvision is
    not installed (CI: no build for the CPU torch); the GPU machine runs the real ones
    (test/gpu/test_image_gpu.py);
  * its ``_bb_feat_sizes`` hard-codes the feature sizes of a 1024 px model; set to the 128 px
    model's (``encoder.feat_sizes``), as they are what that model's backbone returns.
Equality is bitwise in fp32 eager: features, low-res logits (clamped to +-32 as the predictor
returns them), predicted IoUs and masks at source resolution, for points, boxes, box + points
and mask inputs, one and several prompts, multimask on and off, upscaled, downscaled and
unscaled images. bf16 autocast on the CPU is bitwise too (our weights precast, the
predictor's cast per call: the same rounding, test_precast.py).
"""

import sys

import numpy as np
import pytest
import torch

from conftest import shared_model, small_cfg, smooth_image
from sam2_ros.engine import encoder, image_prompts
from sam2_ros.engine.errors import FrameError, PromptError
from sam2_ros.engine.image import ImageSegmenter, frame_result, preprocess
from sam2_ros.engine.model import autocast
from sam2_ros.engine.prompts import prompt_mask
from sam2_ros.engine.types import Prompt
from torchvision_standin import install

pytestmark = pytest.mark.usefixtures('one_thread')
S = 128
H, W = 90, 120


@pytest.fixture(scope='module')
def predictor_cls():
    """sam2's SAM2ImagePredictor, importable (the stand-in torchvision where needed, removed
    again afterwards so that other modules see the environment as it is)."""
    standin = install()
    from sam2.sam2_image_predictor import SAM2ImagePredictor
    yield SAM2ImagePredictor
    if standin:
        for name in ('torchvision', 'torchvision.transforms', 'sam2.utils.transforms',
                     'sam2.sam2_image_predictor'):
            sys.modules.pop(name, None)


def make_pred(cls, model):
    pred = cls(model)
    pred._bb_feat_sizes = encoder.feat_sizes(model.image_size)
    return pred


@pytest.fixture(scope='module')
def pair(predictor_cls):
    model = shared_model(S)
    return make_pred(predictor_cls, model), ImageSegmenter(small_cfg(image_size=S), model=model)


def as_rows(x, n):
    """The predictor's outputs (squeezed for one prompt) as [N, M, ...]."""
    x = torch.as_tensor(np.asarray(x))
    return x.reshape(n, -1, *x.shape[-2:]) if x.ndim >= 3 else x.reshape(n, -1)


BOXES = np.array([[10, 10, 60, 50], [50, 30, 110, 85], [5, 40, 40, 88]], np.float32)
CLICKS = np.array([[[30, 30]], [[80, 60]], [[20, 70]]], np.float32)
CASES = {
    'one click': dict(point_coords=CLICKS[0], point_labels=np.array([1])),
    'three clicks, one negative': dict(point_coords=np.array([[30, 30], [80, 60], [20, 70]]),
                                      point_labels=np.array([1, 0, 1])),
    'clicks of three prompts': dict(point_coords=CLICKS, point_labels=np.ones((3, 1), int)),
    'one box': dict(box=BOXES[0]),
    'three boxes': dict(box=BOXES),
    'box and clicks': dict(box=BOXES[:2], point_coords=CLICKS[:2],
                           point_labels=np.array([[1], [0]])),
}


def previous_logits(pred, n):
    """Mask inputs as a user passes them: low-res logits of an earlier prediction."""
    _, _, low = pred.predict(box=BOXES[:n], multimask_output=False)
    return low.reshape(n, 1, S // 4, S // 4)


@pytest.mark.parametrize('multimask', [False, True])
@pytest.mark.parametrize('case', list(CASES) + ['mask input', 'mask inputs of two',
                                                'mask input and a click'])
def test_predict_bitwise_sam2_image_predictor(pair, case, multimask):
    pred, seg = pair
    img = smooth_image(H, W, seed=1)
    pred.set_image(img)
    seg.set_image(img)
    assert torch.equal(pred._features['image_embed'], seg.features.image_embed)
    assert all(torch.equal(a, b) for a, b in zip(pred._features['high_res_feats'],
                                                 seg.features.high_res))
    args = dict(CASES.get(case, {}))
    if case.startswith('mask input'):
        args['mask_input'] = previous_logits(pred, 2 if 'two' in case else 1)
    if case == 'mask input and a click':
        args.update(point_coords=CLICKS[0], point_labels=np.array([1]))
    ours = seg.predict(multimask_output=multimask, **args)
    n = ours.iou.shape[0]
    if case == 'mask inputs of two':    # sam2's predictor fails on several mask inputs alone
        outs = [pred.predict(multimask_output=multimask, mask_input=m) for m in
                args['mask_input']]
        masks, iou, low = (np.stack(x) for x in zip(*outs))
    else:
        masks, iou, low = pred.predict(multimask_output=multimask, **args)
    assert ours.iou.shape[1] == (3 if multimask else 1)
    assert torch.equal(as_rows(low, n), ours.low_res_logits.clamp(-32, 32))
    assert torch.equal(as_rows(iou, n), ours.iou)
    # the masks at source resolution, through segment(): each prompt's best mask
    if case.startswith('mask input'):
        return          # logits as input are predict()'s; Prompt.mask: the test below
    prompts = prompts_of(args, n)
    res = seg.segment(img, prompts, multimask_output=multimask)
    best = as_rows(iou, n).argmax(1)
    want = as_rows(masks, n)[torch.arange(n), best].numpy()
    assert np.array_equal(res.masks, want)
    assert np.array_equal(res.iou, as_rows(iou, n)[torch.arange(n), best].numpy())
    assert res.mode == 'eager'


def prompts_of(args, n):
    pts = args.get('point_coords')
    pts = None if pts is None else np.asarray(pts).reshape(n, -1, 2)
    lab = args.get('point_labels')
    lab = None if lab is None else np.asarray(lab).reshape(n, -1)
    box = args.get('box')
    box = None if box is None else np.asarray(box).reshape(n, 4)
    return [Prompt(i + 1, points=None if pts is None else pts[i],
                   labels=None if lab is None else lab[i],
                   box=None if box is None else tuple(box[i])) for i in range(n)]


@pytest.mark.parametrize('hw', [(H, W), (S, S), (200, 260)])
def test_preprocess_bitwise_sam2_transforms(pair, hw):
    """Upscaled, unscaled (no resize, as torchvision's Resize) and downscaled images."""
    pred, _ = pair
    img = smooth_image(*hw, seed=2)
    ref = pred._transforms(img)[None]
    assert torch.equal(preprocess(torch.from_numpy(img), S), ref)


def test_segment_groups_shapes_keeps_order_and_equals_predictor(pair):
    """Prompts of different shapes: one decoder call per shape, each equal to the predictor's
    call with that group (mask inputs: each alone, the predictor takes one at a time);
    results in the prompts' order. A Prompt.mask is the mask input sam2's mask-to-logits
    mapping gives (image_prompts.mask_logits)."""
    pred, seg = pair
    img = smooth_image(200, 260, seed=3)
    mask = np.zeros((200, 260), bool)
    mask[50:150, 40:200] = True
    prompts = [Prompt(1, box=(20, 20, 120, 100)), Prompt(2, points=[[60, 60]], labels=[1]),
               Prompt(3, mask=mask), Prompt(4, box=(100, 60, 250, 190)),
               Prompt(5, box=(10, 90, 90, 190), points=[[50, 150]], labels=[1]),
               Prompt(6, points=[[200, 40]], labels=[0]), Prompt(7, mask=~mask)]
    calls = seg.stats['decoder_calls']
    res = seg.segment(img, prompts)
    assert seg.stats['decoder_calls'] - calls == 4          # boxes, clicks, masks, box + click
    pred.set_image(img)

    def m_in(i):
        return image_prompts.mask_logits(prompt_mask(prompts[i], 200, 260, S,
                                                     torch.device('cpu')))
    groups = {(0, 3): dict(box=np.array([p.box for p in (prompts[0], prompts[3])])),
              (1, 5): dict(point_coords=np.array([[[60, 60]], [[200, 40]]]),
                           point_labels=np.array([[1], [0]])),
              (2,): dict(mask_input=m_in(2)), (6,): dict(mask_input=m_in(6)),
              (4,): dict(box=np.array(prompts[4].box), point_coords=np.array([[50, 150]]),
                         point_labels=np.array([1]))}
    for idx, args in groups.items():
        masks, iou, _ = pred.predict(multimask_output=False, **args)
        masks = as_rows(masks, len(idx))
        for j, i in enumerate(idx):
            assert np.array_equal(res.masks[i], masks[j, 0].numpy()), i
            assert res.iou[i] == as_rows(iou, len(idx))[j, 0]
    assert res.masks.shape == (7, 200, 260) and res.stats.shape == (7, 7)
    assert np.array_equal(res.stats[:, 0], res.masks.sum((1, 2)))           # areas


def test_bf16_autocast_bitwise_too(predictor_cls):
    model = shared_model(S)
    cfg = small_cfg(image_size=S, precision='bf16')
    seg, pred = ImageSegmenter(cfg, model=model), make_pred(predictor_cls, model)
    img = smooth_image(H, W, seed=4)
    with torch.inference_mode(), autocast(cfg):
        pred.set_image(img)
        masks, iou, low = pred.predict(box=BOXES, multimask_output=False)
    res = seg.segment(img, [Prompt(i + 1, box=tuple(b)) for i, b in enumerate(BOXES)])
    assert torch.equal(torch.as_tensor(low)[:, 0], res.low_res_logits[:, 0].clamp(-32, 32))
    assert np.array_equal(masks[:, 0], res.masks) and np.array_equal(iou[:, 0], res.iou)


def test_no_memory_modules_and_no_bank():
    """Image mode calls neither memory attention nor the memory encoder, and a standalone
    segmenter holds no memory bank."""
    seg = ImageSegmenter(small_cfg(image_size=S), model=shared_model(S))
    calls = []
    hook = torch.nn.modules.module.register_module_forward_hook(
        lambda m, a, o: calls.append(type(m).__name__))
    try:
        seg.segment(smooth_image(H, W), [Prompt(1, box=(5, 5, 50, 50))])
    finally:
        hook.remove()
    assert 'MaskDecoder' in calls and 'PromptEncoder' in calls
    assert not {'MemoryAttention', 'MemoryEncoder'} & set(calls)
    assert not any('bank' in k.lower() for k in vars(seg))


def test_bad_input_is_rejected_before_anything_changes(pair):
    _, seg = pair
    img = smooth_image(H, W, seed=5)
    seg.set_image(img)
    feats, hw = seg.features, seg.hw
    other = smooth_image(70, 80, seed=6)
    bad = [[Prompt(1, box=(5, 5, 50, 50)), Prompt(2, points=[[np.nan, 3]], labels=[1])],
           [Prompt(1, box=(50, 5, 10, 50))],                       # x1 < x0
           [Prompt(0, box=(5, 5, 50, 50))],                        # id 0
           [Prompt(1, points=[[500, 3]], labels=[1])],             # outside the image
           [Prompt(1, mask=np.zeros((70, 80), bool))],             # empty mask
           [Prompt(1, mask=np.ones((10, 10), bool))]]              # another size
    for prompts in bad:
        with pytest.raises(PromptError):
            seg.segment(other, prompts)
        assert seg.features is feats and seg.hw == hw
    with pytest.raises(FrameError):
        seg.segment(np.zeros((70, 80), np.uint8), [Prompt(1, box=(5, 5, 50, 50))])
    with pytest.raises(PromptError, match='prompt 1'):
        seg.segment(other, [Prompt(1, box=(5, 5, 50, 50)), Prompt(2, box=(1, 1, 1, 1))])
    for args, text in ((dict(), 'no points'), (dict(point_coords=[[1, 1]]), 'together'),
                       (dict(box=BOXES, point_coords=CLICKS[:2], point_labels=[[1], [1]]),
                        'differ'),
                       (dict(mask_input=np.zeros((1, 1, 8, 8))), 'mask_input'),
                       (dict(box=[1, 2, 3]), 'box')):
        with pytest.raises(PromptError, match=text):
            seg.predict(**args)
    assert seg.features is feats
    assert seg.segment(img, []).masks.shape == (0, H, W)
    fresh = ImageSegmenter(small_cfg(image_size=S), model=shared_model(S))
    with pytest.raises(PromptError, match='set_image'):
        fresh.predict(box=BOXES[0])


def test_a_box_and_two_clicks_are_two_shapes_each_equal_to_the_predictor(pair):
    """A box and a prompt of two clicks both have two points, but are not one shape: each
    runs its own decoder call and equals the predictor's call for it alone, logits bitwise."""
    pred, seg = pair
    img = smooth_image(200, 260, seed=5)
    prompts = [Prompt(9, box=(20, 20, 120, 100)),
               Prompt(3, points=[[60, 60], [200, 150]], labels=[1, 0])]
    calls = seg.stats['decoder_calls']
    res = seg.segment(img, prompts)
    assert seg.stats['decoder_calls'] - calls == 2
    pred.set_image(img)
    for i, args in enumerate((dict(box=np.array(prompts[0].box)),
                              dict(point_coords=np.array([[60, 60], [200, 150]]),
                                   point_labels=np.array([1, 0])))):
        _, _, low = pred.predict(multimask_output=False, **args)
        assert torch.equal(torch.as_tensor(low)[0], res.low_res_logits[i, 0].clamp(-32, 32))


def test_no_prompts_encode_nothing_and_the_set_image_stays(pair):
    """An image without prompts (most images of a folder in the CLI) is an empty result
    with no encoder run; the image set before stays set for predict()."""
    _, seg = pair
    img = smooth_image(H, W, seed=5)
    seg.set_image(img)
    feats, images = seg.features, seg.stats['images']
    res = seg.segment(smooth_image(70, 80, seed=6), [])
    assert res.masks.shape == (0, 70, 80) and res.low_res_logits.shape == (0, 1, S // 4, S // 4)
    assert seg.stats['images'] == images and seg.features is feats


def test_too_many_prompts_are_refused_before_anything_runs(pair):
    _, seg = pair
    n = image_prompts.MAX_PROMPTS + 1
    images = seg.stats['images']
    with pytest.raises(PromptError, match=f'at most {n - 1} prompts per image, got {n}'):
        seg.segment(smooth_image(H, W, seed=5), [Prompt(1, box=(5, 5, 50, 50))] * n)
    assert seg.stats['images'] == images
    seg.set_image(smooth_image(H, W, seed=5))
    with pytest.raises(PromptError, match='at most'):
        seg.predict(box=np.tile(np.array([[5, 5, 50, 50]]), (n, 1)))


def test_masks_upsampled_in_chunks_equal_all_at_once_and_failures_are_step_errors(
        pair, monkeypatch):
    """Many prompts on a large image are upsampled a few at a time (bounded memory), with
    the same masks and stats; a failure there (e.g. out of memory) is a StepError, not a raw
    exception."""
    from sam2_ros.engine import image as image_mod
    from sam2_ros.engine.errors import StepError

    _, seg = pair
    img = smooth_image(H, W, seed=5)
    prompts = [Prompt(i + 1, box=(5 + 3 * i, 5, 50 + 3 * i, 60)) for i in range(5)]
    whole = seg.segment(img, prompts)
    monkeypatch.setattr(image_mod, 'MASK_CHUNK_PIXELS', 2 * H * W)       # 2 masks a chunk
    chunked = seg.segment(img, prompts)
    np.testing.assert_array_equal(chunked.masks, whole.masks)
    np.testing.assert_array_equal(chunked.stats, whole.stats)
    np.testing.assert_array_equal(chunked.iou, whole.iou)

    def fail(*a, **k):
        raise RuntimeError('CUDA out of memory (simulated)')
    monkeypatch.setattr(image_mod.masks_out, 'on_device', fail)
    with pytest.raises(StepError, match='out of memory'):
        seg.segment(img, prompts)


def test_boxes_as_corner_pairs_are_the_predictors_boxes(pair):
    """SAM2ImagePredictor.predict reshapes boxes to (-1, 2, 2): [N, 2, 2] is [N, 4]."""
    _, seg = pair
    seg.set_image(smooth_image(H, W, seed=5))
    flat = seg.predict(box=np.array([[5, 5, 50, 60], [20, 10, 90, 80]]))
    pairs = seg.predict(box=np.array([[[5, 5], [50, 60]], [[20, 10], [90, 80]]]))
    listed = seg.predict(box=[[[5, 5], [50, 60]], [[20, 10], [90, 80]]])   # nested lists too
    for name in ('low_res_logits', 'iou', 'object_score'):
        assert torch.equal(getattr(flat, name), getattr(pairs, name)), name
        assert torch.equal(getattr(flat, name), getattr(listed, name)), name


def test_frame_result_ids_are_the_prompts_as_ints_and_the_label_mask_holds_them():
    """Ids given as numpy integers (np.arange, a label image's values) are valid prompts: the
    FrameResult carries them as ints, as tracking does, and label_mask() has each object's id
    on its pixels, 0 elsewhere (a np.int64 id made it raise). A prompt list that is not the
    result's, or an id no label mask can hold, is an error, not a mislabelled mask."""
    seg = ImageSegmenter(small_cfg(image_size=S), model=shared_model(S))
    prompts = [Prompt(np.int64(7), box=(5, 5, 50, 50)),
               Prompt(np.uint8(3), points=[[80, 60]], labels=[1])]
    res = seg.segment(smooth_image(H, W, seed=5), prompts)
    fr = frame_result(res, prompts)
    assert [(type(o.obj_id), o.obj_id) for o in fr.objects] == [(int, 7), (int, 3)]
    want = np.zeros((H, W), np.uint8)
    want[res.masks[1]] = 3
    want[res.masks[0]] = 7           # the higher id wins where masks overlap
    np.testing.assert_array_equal(fr.label_mask(), want)
    with pytest.raises(PromptError, match='1..255'):
        frame_result(res, [Prompt(-1, box=(5, 5, 50, 50)), prompts[1]])
    with pytest.raises(ValueError, match='1 prompts for a result of 2 masks'):
        frame_result(res, prompts[:1])
