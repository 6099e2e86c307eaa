"""Property-based tests (hypothesis) of the ROS node's input boundary, without DDS: whatever a
camera driver, a prompt publisher or a params file sends, the conversions either produce a valid
value or raise the documented error type, never another exception, and a rejected prompt leaves
every tracked object as it was.

Invariants, one test each (examples as designed in brackets, run by HYPOTHESIS_PROFILE=thorough;
the default 'ci' profile runs a quarter, at least 20; the counts actually run, with accepted /
rejected splits, are printed and written to out/hypothesis_ros_counts.json):
  test_any_image_decodes_pixel_exact_or_raises_frame_error
                               [400] sensor_msgs/Image -> [h, w, 3] uint8 RGB, pixel-exact
                                     against an independent reference, or FrameError
  test_any_compressed_image_decodes_to_rgb_or_raises_frame_error
                               [150] sensor_msgs/CompressedImage -> [h, w, 3] uint8, or FrameError
  test_any_prompt_message_converts_or_raises_prompt_error
                               [400] sam2_ros/Prompt -> (action, core Prompt) or PromptError
  test_any_param_values_build_valid_configs_or_a_named_value_error
                               [400] parameter values -> (TrackerConfig, NodeOptions) or a
                                     ValueError that names the parameter; accepted floats finite
  test_rejected_prompt_changes_nothing [120] converted prompt applied as the worker does; a
                                     rejection leaves the tracker unchanged, an acceptance leaves
                                     the other objects' bank rows unchanged
The generated messages are required: without them the tests FAIL (CI has them).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import (assert_unchanged, examples, make_tracker, snapshot, textured_frame,
                      write_out)
from ros_helpers import require_messages
from sam2_ros.engine.errors import FrameError, PromptError, TrackerError
from sam2_ros.ros import images, inputs
from sam2_ros.ros import params

pytestmark = pytest.mark.usefixtures('one_thread')
COUNTS: dict = {}
H, W = 48, 64  # frame size of the tracker tests
ENCODINGS = list(images.ENCODING_CHANNELS)
UNKNOWN_ENCODINGS = ['', 'RGB8', 'rgb16', 'mono16', '16UC1', '32FC1', '8UC3', 'yuv422',
                     'bayer_rggb8', 'rgb8 ', 'jpeg']


def count(test, outcome):
    c = COUNTS.setdefault(test, {'examples': 0})
    c['examples'] += 1
    c[outcome] = c.get(outcome, 0) + 1


@pytest.fixture(scope='module', autouse=True)
def counts_file():
    yield
    print('\nhypothesis examples run (ROS boundary):', json.dumps(COUNTS))
    write_out('hypothesis_ros_counts.json', COUNTS)


@pytest.fixture(scope='module')
def bridge():
    require_messages()  # FAIL, not skip: the node needs the generated messages and cv_bridge
    try:
        import cv_bridge
    except ImportError as exc:
        pytest.fail(f'cv_bridge is not importable ({exc})', pytrace=False)
    return cv_bridge.CvBridge()


# ---- images -------------------------------------------------------------------------------
@st.composite
def raw_images(draw):
    from sensor_msgs.msg import Image

    enc = draw(st.one_of(st.sampled_from(ENCODINGS), st.sampled_from(ENCODINGS),
                         st.sampled_from(UNKNOWN_ENCODINGS), st.text(max_size=6)))
    size = st.one_of(st.integers(1, 9), st.integers(1, 9), st.integers(0, 9))
    h, w = draw(size), draw(size)
    ch = images.ENCODING_CHANNELS.get(enc, 3)
    step = draw(st.one_of(st.just(w * ch), st.just(w * ch), st.integers(w * ch, w * ch + 8),
                          st.integers(0, w * ch + 8), st.integers(0, 2**32 - 1)))
    n = draw(st.one_of(st.just(h * step), st.just(h * step), st.integers(h * step, h * step + 9),
                       st.integers(max(0, h * step - 6), h * step + 9), st.integers(0, 400)))
    n = min(n, 4000)
    m = Image()
    m.height, m.width, m.encoding, m.step = h, w, enc, step
    m.is_bigendian = draw(st.sampled_from([0, 1]))
    m.data = draw(st.binary(min_size=n, max_size=n)) if n <= 64 else \
        np.random.default_rng(draw(st.integers(0, 99))).integers(0, 256, n, np.uint8).tobytes()
    return m


def reference_rgb(m):
    """Independent decode: rows of ``step`` bytes, the first width*channels of each."""
    ch = images.ENCODING_CHANNELS[m.encoding]
    buf = np.frombuffer(bytes(m.data), np.uint8, count=m.height * m.step)
    px = buf.reshape(m.height, m.step)[:, :m.width * ch].reshape(m.height, m.width, ch)
    return {'rgb8': lambda a: a, 'bgr8': lambda a: a[..., ::-1], 'rgba8': lambda a: a[..., :3],
            'bgra8': lambda a: a[..., 2::-1],
            'mono8': lambda a: np.repeat(a, 3, axis=2)}[m.encoding](px)


def _rgb8(height, width, step, data):
    from sensor_msgs.msg import Image
    return Image(height=height, width=width, encoding='rgb8', step=step, data=data)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck))
@given(raw_images())
@example(m=_rgb8(2, 1, 4, [0] * 8))  # padded rows: the rgb8 view is strided, not a copy
def test_any_image_decodes_pixel_exact_or_raises_frame_error(bridge, m):
    """FrameError only for an unknown encoding, a zero side, a short step or short data."""
    try:
        out = images.image_to_rgb(m, bridge)
    except FrameError:
        count('test_any_image_decodes_pixel_exact_or_raises_frame_error', 'rejected')
        # exactly the documented rejections
        ch = images.ENCODING_CHANNELS.get(m.encoding)
        assert (ch is None or m.height == 0 or m.width == 0 or m.step < m.width * ch
                or len(m.data) < m.height * m.step)
        return
    count('test_any_image_decodes_pixel_exact_or_raises_frame_error', 'accepted')
    assert m.encoding in images.ENCODING_CHANNELS
    assert out.dtype == np.uint8 and out.shape == (m.height, m.width, 3)
    # rgb8 is a view of the message's rows (strided where step pads them); the rest are copies
    assert out.strides[1:] == (3, 1)
    assert out.flags.c_contiguous or (m.encoding == 'rgb8' and m.step > m.width * 3)
    np.testing.assert_array_equal(out, reference_rgb(m))


@st.composite
def compressed_images(draw):
    import cv2
    from sensor_msgs.msg import CompressedImage

    fmt = draw(st.one_of(st.sampled_from(['png', 'jpeg', 'jpg', 'rgb8; jpeg compressed bgr8',
                                          'PNG', '16UC1; compressedDepth png', 'tiff', 'bmp',
                                          '']), st.text(max_size=8)))
    kind = draw(st.sampled_from(['png', 'jpg', 'png-gray', 'truncated', 'random', 'empty']))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    img = np.random.default_rng(draw(st.integers(0, 99))).integers(0, 256, (h, w, 3), np.uint8)
    if kind == 'random':
        data = draw(st.binary(max_size=64))
    elif kind == 'empty':
        data = b''
    else:
        ext = '.jpg' if kind == 'jpg' else '.png'
        src = img[..., 0] if kind == 'png-gray' else img
        data = cv2.imencode(ext, src)[1].tobytes()
        if kind == 'truncated':
            data = data[:draw(st.integers(0, max(0, len(data) - 1)))]
    m = CompressedImage()
    m.format, m.data = fmt, data
    return m


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(compressed_images())
def test_any_compressed_image_decodes_to_rgb_or_raises_frame_error(bridge, m):
    try:
        out = images.compressed_to_rgb(m)
    except FrameError:
        count('test_any_compressed_image_decodes_to_rgb_or_raises_frame_error', 'rejected')
        return
    count('test_any_compressed_image_decodes_to_rgb_or_raises_frame_error', 'accepted')
    assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3 and out.size > 0


# ---- prompts ------------------------------------------------------------------------------
f32 = st.one_of(st.floats(width=32), st.floats(-10, 80, width=32), st.floats(0, 47, width=32),
                st.sampled_from([0.0, -0.0, float('nan'), float('inf'), -float('inf'),
                                 3.4e38, -1.0, 1e-30]))
ACTIONS = st.one_of(st.sampled_from([0, 0, 0, 1, 2]), st.sampled_from([0, 0, 1]),
                    st.integers(3, 255))
IDS = st.one_of(st.integers(1, 255), st.sampled_from([1, 2, 3, 255]),
                st.sampled_from([0, 256, 65535]), st.integers(0, 65535))


@st.composite
def prompt_msgs(draw, ids=IDS, actions=ACTIONS):
    from geometry_msgs.msg import Point32
    from sensor_msgs.msg import Image

    m = require_messages().Prompt()
    m.object_id = draw(ids)
    m.action = draw(actions)
    n = draw(st.integers(0, 4))
    m.points = [Point32(x=draw(f32), y=draw(f32), z=draw(f32)) for _ in range(n)]
    nl = draw(st.sampled_from([n, n, 0, n + 1, max(0, n - 1)]))
    m.labels = draw(st.lists(st.sampled_from([1, 0, 1, -1, 2, 127, -128]), min_size=nl,
                             max_size=nl))
    m.has_box = draw(st.booleans())
    m.box = [draw(f32) for _ in range(4)]
    if draw(st.integers(0, 3)) == 0:
        mask = Image()
        mask.encoding = draw(st.sampled_from(['mono8', 'mono8', 'rgb8', 'mono16', '']))
        mask.height, mask.width = draw(st.integers(0, 48)), draw(st.integers(0, 64))
        mask.step = mask.width + draw(st.sampled_from([0, 0, 1, -1]) if mask.width else st.just(0))
        size = mask.height * mask.step - draw(st.sampled_from([0, 0, 0, 1]))
        mask.data = bytes(np.random.default_rng(abs(size)).integers(0, 2, max(0, size), np.uint8)
                          * 255)
        m.mask = mask
    return m


@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck))
@given(prompt_msgs())
def test_any_prompt_message_converts_or_raises_prompt_error(bridge, m):
    """Never refused: a reset, or a remove of an id in 1..255; accepted ids are in 1..255."""
    try:
        action, p = inputs.prompt_from_msg(m, bridge)
    except PromptError:
        count('test_any_prompt_message_converts_or_raises_prompt_error', 'rejected')
        assert (m.action not in (0, 1, 2) or m.action != 2 and not 1 <= m.object_id <= 255
                or m.action == 0)
        return
    count('test_any_prompt_message_converts_or_raises_prompt_error', f'accepted_action_{action}')
    assert action == m.action
    if action == inputs.ACTION_RESET:
        assert p is None
        return
    assert p.obj_id == m.object_id and 1 <= p.obj_id <= 255
    if action == inputs.ACTION_ADD:
        assert p.points is not None or p.box is not None or p.mask is not None
        if p.points is not None:
            assert p.points.shape == (len(m.points), 2) and len(p.labels) == len(p.points)
        if p.mask is not None:
            assert p.mask.dtype == bool and p.mask.shape == (m.mask.height, m.mask.width)


def test_mask_prompt_ignores_points_and_box(bridge):
    """msg/Prompt.msg: 'A mask prompt is used on its own (points and box are ignored)'. A
    publisher that leaves a click or a box in a mask prompt must get the mask applied."""
    from geometry_msgs.msg import Point32
    from sensor_msgs.msg import Image

    m = require_messages().Prompt()
    m.object_id, m.action = 1, inputs.ACTION_ADD
    m.points, m.labels = [Point32(x=5.0, y=5.0, z=0.0)], [1]
    m.has_box, m.box = True, [1.0, 1.0, 9.0, 9.0]
    mask = np.zeros((H, W), np.uint8)
    mask[10:20, 10:30] = 255
    m.mask = Image(height=H, width=W, encoding='mono8', step=W, data=mask.tobytes())
    _, p = inputs.prompt_from_msg(m, bridge)
    np.testing.assert_array_equal(p.mask, mask > 0)
    from sam2_ros.engine.prompts import prompt_mask
    import torch
    prompt_mask(p, H, W, 64, torch.device('cpu'))  # the core accepts it


# ---- parameters ---------------------------------------------------------------------------
ros_scalars = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1),
                        st.sampled_from([0, 1, -1, 64, 96, 255, 256, 1024]),
                        st.floats(), st.sampled_from([0.0, 0.5, 2.0, 64.0, float('nan'),
                                                      float('inf')]),
                        st.text(max_size=6), st.sampled_from(['tiny', 'cpu', 'fp32', 'bf16',
                                                              'swap', 'raw', 'reliable']))
ros_values = st.one_of(ros_scalars, st.lists(st.integers(-3, 300), max_size=4),
                       st.lists(st.floats(), max_size=3), st.lists(st.text(max_size=3),
                                                                   max_size=3),
                       st.lists(st.booleans(), max_size=3))
NAMES = st.one_of(st.sampled_from(params.names()), st.sampled_from(['no_such_param', '']))


ARRAY_ELEMENT = {'int_array': int, 'str_array': str}
SPECS = {s.name: s for s in params.PARAMS}


def plausible(values):
    """Each drawn value, or (half of the time) the parameter's default, so that a hostile
    value is often the only bad one in a set and accepted configurations are common too."""
    return st.fixed_dictionaries({
        k: st.one_of(st.just(v), st.just(params.default_value(SPECS[k])))
        if k in SPECS and params.default_value(SPECS[k]) is not None else st.just(v)
        for k, v in values.items()})


@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(NAMES, ros_values, min_size=1, max_size=3).flatmap(plausible))
# regressions found by this test (params.to_field_value), kept as fixed examples
@example({'image_size': float('inf')})          # OverflowError, not ValueError
@example({'image_size': float('nan')})          # ValueError without the parameter's name
@example({'batch_buckets': True})               # TypeError: 'bool' object is not iterable
@example({'extra_hydra_overrides': 1})          # TypeError: 'int' object is not iterable
@example({'stale_timeout_s': float('nan')})     # accepted: never stale
@example({'diagnostics_period_s': float('inf')})  # accepted: no diagnostics timer period
@example({'batch_buckets': '12'})               # accepted as (1, 2): a string split up
@example({'batch_buckets': [1.7, 2.2]})         # accepted as (1, 2): floats truncated
@example({'extra_hydra_overrides': 'abc'})      # accepted as ['a', 'b', 'c']
def test_any_param_values_build_valid_configs_or_a_named_value_error(values):
    """build() raises ValueError naming the parameter, or returns configs whose float fields
    are finite and whose array fields came from a list of the right element type."""
    values.setdefault('random_weights', True)
    try:
        cfg, opts = params.build(values)
    except ValueError as exc:
        count('test_any_param_values_build_valid_configs_or_a_named_value_error', 'rejected')
        text = str(exc)
        # a non-empty name ('' is in every text: the unknown-name case has its own words)
        assert any(n and n in text for n in values) or 'unknown parameters' in text or any(
            s.field in text for s in params.PARAMS if s.name in values), text
        return
    count('test_any_param_values_build_valid_configs_or_a_named_value_error', 'accepted')
    for obj in (cfg, opts):
        for k, v in vars(obj).items():
            if isinstance(v, float):
                assert math.isfinite(v), f'{k}={v} accepted'
    for spec in params.PARAMS:
        if spec.name in values and spec.kind in ARRAY_ELEMENT and values[spec.name]:
            value = values[spec.name]
            assert isinstance(value, (list, tuple)) and all(
                isinstance(v, ARRAY_ELEMENT[spec.kind]) and not isinstance(v, bool)
                for v in value), f'{spec.name}={value!r} accepted'


# ---- a converted prompt through the tracker (as the worker applies it) ----------------------


@pytest.fixture(scope='module')
def tracker():
    from sam2_ros.engine.types import Prompt

    tr = make_tracker(image_size=64, max_objects=4)
    frame = textured_frame(H, W)
    tr.track(frame)
    tr.add_prompt(Prompt(1, points=np.array([[20.0, 20.0]]), labels=np.array([1])))
    tr.add_prompt(Prompt(2, box=(30.0, 10.0, 60.0, 40.0)))
    for _ in range(2):
        tr.track(frame)
    return tr


@st.composite
def tracker_prompts(draw):
    """Half hostile messages, half plausible ones (in-frame clicks, boxes, masks) with at most
    one field corrupted, so both outcomes are exercised on the tracker."""
    from geometry_msgs.msg import Point32
    from sensor_msgs.msg import Image

    ids = st.sampled_from([1, 1, 2, 2, 3, 3, 3, 0, 256, 65535])
    if draw(st.booleans()):
        return draw(prompt_msgs(ids=ids, actions=st.sampled_from([0, 0, 0, 0, 1, 7])))
    m = require_messages().Prompt()
    m.object_id, m.action = draw(ids), inputs.ACTION_ADD
    kind = draw(st.sampled_from(['points', 'box', 'mask']))
    bad = st.sampled_from([float('nan'), float('inf'), -1.0, 1e6, W, H])

    def coord(hi):
        inside = st.floats(0, hi - 1, width=32)
        return draw(st.one_of(inside, inside, bad))
    if kind == 'points':
        n = draw(st.integers(1, 3))
        m.points = [Point32(x=coord(W), y=coord(H), z=0.0) for _ in range(n)]
        m.labels = draw(st.lists(st.sampled_from([1, 1, 0, 2]), min_size=n, max_size=n))
    elif kind == 'box':
        x0, y0 = coord(W // 2), coord(H // 2)
        m.has_box, m.box = True, [x0, y0, x0 + draw(st.floats(-5, 30, width=32)),
                                  y0 + draw(st.floats(-5, 20, width=32))]
    else:
        h, w = draw(st.sampled_from([(H, W), (H, W), (H, W), (W, H), (H, W + 1)]))
        mk = np.zeros((h, w), np.uint8)
        y, x = draw(st.integers(0, h - 1)), draw(st.integers(0, w - 1))
        mk[y:y + draw(st.integers(0, 20)), x:x + draw(st.integers(0, 20))] = 255
        m.mask = Image(height=h, width=w, encoding='mono8', step=w, data=mk.tobytes())
    return m


@settings(max_examples=examples(120), deadline=None, suppress_health_check=list(HealthCheck))
@given(tracker_prompts())
def test_rejected_prompt_changes_nothing(bridge, tracker, m):
    from sam2_ros.engine.types import Prompt

    tr = tracker
    snap = snapshot(tr)
    before = set(tr.object_ids)
    try:
        action, p = inputs.prompt_from_msg(m, bridge)
        if action == inputs.ACTION_REMOVE:
            tr.remove_object(p.obj_id)
        else:
            tr.add_prompt(p)
    except TrackerError:
        count('test_rejected_prompt_changes_nothing', 'rejected')
        assert_unchanged(tr, snap)
        return
    count('test_rejected_prompt_changes_nothing', f'accepted_action_{action}')
    others = [i for i in before if i != p.obj_id]
    assert_unchanged(tr, snap, slots=[snap['objects'][i][0] for i in others])
    # restore objects 1 and 2 only, for the next example
    if p.obj_id not in (1, 2) and p.obj_id in tr.object_ids:
        tr.remove_object(p.obj_id)
    for i in (1, 2):
        if i not in tr.object_ids:
            tr.add_prompt(Prompt(i, points=np.array([[10.0 + 30 * (i - 1), 20.0]]),
                                 labels=np.array([1])))
