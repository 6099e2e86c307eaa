"""``track_offline --image-mode`` on a folder: each image segmented alone (random weights, CPU).

The label masks and states must be exactly what ``ImageSegmenter.segment`` gives each image
with its frame's add events (the same random model: same seed), an image without events has
no objects, and events with no meaning per image are one-line errors with exit status 2.
"""

import json

import cv2
import numpy as np
import pytest

from sam2_ros.cli import track_offline
from sam2_ros.cli.sources import open_source
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.image import ImageSegmenter, frame_result
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')
H, W = 60, 80
ARGS = ['--random-weights', '--image-size', '64', '--device', 'cpu', '--no-progress',
        '--no-video', '--image-mode']
PROMPTS = """\
- {frame: 0, object_id: 1, points: [[30, 20]], labels: [1]}
- {frame: 0, object_id: 2, box: [40, 10, 75, 50]}
- {frame: 2, object_id: 1, mask: m.png}
- {frame: 2, object_id: 9, box: [5, 5, 30, 30]}
"""


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp('images')
    (d / 'in').mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        img = np.full((H, W, 3), 30 + 40 * i, np.uint8)
        cv2.circle(img, (25 + 5 * i, 25), 12, tuple(int(v) for v in rng.integers(0, 255, 3)), -1)
        cv2.imwrite(str(d / 'in' / f'{i}.png'), img)
    mask = np.zeros((H, W), np.uint8)
    mask[30:55, 10:50] = 255
    cv2.imwrite(str(d / 'm.png'), mask)
    (d / 'p.yaml').write_text(PROMPTS)
    return d


def test_each_image_alone_equals_the_segmenter(folder):
    out = folder / 'out'
    assert track_offline.main([str(folder / 'in'), '--prompts', str(folder / 'p.yaml'),
                               '--out', str(out), *ARGS]) == 0
    states = [json.loads(line) for line in (out / 'states.jsonl').read_text().splitlines()]
    assert [[o['object_id'] for o in s['objects']] for s in states] == [[1, 2], [], [1, 9]]
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['image_mode'] and summary['frames'] == 3 and summary['events_applied'] == 4
    seg = ImageSegmenter(TrackerConfig(image_size=64, device='cpu', precision='fp32',
                                       random_weights=True))
    mask = cv2.imread(str(folder / 'm.png'), cv2.IMREAD_GRAYSCALE) > 0
    prompts = {0: [Prompt(1, points=np.array([[30.0, 20.0]]), labels=np.array([1])),
                   Prompt(2, box=(40, 10, 75, 50))],
               1: [], 2: [Prompt(1, mask=mask), Prompt(9, box=(5, 5, 30, 30))]}
    source = open_source(str(folder / 'in'))
    for k, _, rgb in source:
        want = frame_result(seg.segment(rgb, prompts[k]), prompts[k])
        got = cv2.imread(str(out / 'masks' / f'{k:06d}.png'), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(got, want.label_mask())
        assert [o['area'] for o in states[k]['objects']] == [o.area for o in want.objects]
    source.close()


@pytest.mark.parametrize('event, text', [
    ('- {frame: 0, object_id: 1, action: remove}', "'remove' has no meaning"),
    ('- {frame: 0, action: reset}', "'reset' has no meaning"),
    ('- {frame: 1, object_id: 3, box: [1, 1, 9, 9]}\n'
     '- {frame: 1, object_id: 3, box: [2, 2, 9, 9]}', 'prompted twice on frame 1')])
def test_events_without_meaning_per_image_are_errors(folder, tmp_path, capsys, event, text):
    p = tmp_path / 'p.yaml'
    p.write_text('- {frame: 0, object_id: 1, box: [1, 1, 9, 9]}\n' + event + '\n')
    assert track_offline.main([str(folder / 'in'), '--prompts', str(p), '--out',
                               str(tmp_path / 'out'), *ARGS]) == 2
    err = capsys.readouterr().err.strip()
    assert text in err and len(err.splitlines()) == 1


def test_states_list_objects_in_ascending_ids(folder, tmp_path):
    """As in tracking mode, whatever order the image's events come in."""
    (tmp_path / 'p.yaml').write_text('- {frame: 0, object_id: 5, box: [40, 10, 75, 50]}\n'
                                     '- {frame: 0, object_id: 2, points: [[30, 20]], '
                                     'labels: [1]}\n')
    out = tmp_path / 'out'
    assert track_offline.main([str(folder / 'in'), '--prompts', str(tmp_path / 'p.yaml'),
                               '--out', str(out), *ARGS]) == 0
    first = json.loads((out / 'states.jsonl').read_text().splitlines()[0])
    assert [o['object_id'] for o in first['objects']] == [2, 5]
