"""The offline tool (sam2_ros.cli.track_offline) end to end on CPU with random weights.

Random weights make the masks meaningless, so the tests check the plumbing, not quality:
output counts and shapes, label masks consistent with states.jsonl, event semantics (applied
after their frame; remove; reset then add on one frame), and that every user error is one
line on stderr with exit status 2. Tracking runs are shared per module (the CPU is slow).
"""

import json
import os
import subprocess
import sys

import cv2
import numpy as np
import pytest

import sam2_ros.engine.tracker
from sam2_ros.cli import outputs, track_offline
from sam2_ros.overlay import id_color, render_overlay
from sam2_ros.engine.types import FrameResult, ObjectResult

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H, W, N = 96, 128, 8
FAST = ['--random-weights', '--image-size', '256', '--device', 'cpu', '--no-progress']

PROMPTS = """\
- {frame: 0, object_id: 1, points: [[30, 40]], labels: [1]}
- {frame: 0, object_id: 2, box: [78, 28, 112, 62]}
- {frame: 0, object_id: 3, mask: m.png}
- {frame: 2, object_id: 1, points: [[36, 40], [5, 5]], labels: [1, 0]}
- {frame: 3, object_id: 2, action: remove}
- {frame: 5, action: reset}
- {frame: 5, object_id: 4, points: [[50, 40]]}
- {frame: 50, object_id: 4, action: remove}
"""
# Ids alive after each frame's events, as PROMPTS says.
ALIVE = {0: {1, 2, 3}, 1: {1, 2, 3}, 2: {1, 2, 3}, 3: {1, 3}, 4: {1, 3}, 5: {4}, 6: {4}, 7: {4}}


def frame(i):
    img = np.full((H, W, 3), 40, np.uint8)
    cv2.circle(img, (30 + 3 * i, 40), 15, (0, 0, 255), -1)
    cv2.rectangle(img, (80, 30 + 2 * i), (110, 60 + 2 * i), (0, 255, 0), -1)
    return img  # BGR


@pytest.fixture(scope='module', autouse=True)
def one_model_build():
    """Build the random model once per module: on a loaded 2-core CPU a build costs seconds
    and every run here would otherwise pay it. The tool still builds its tracker through
    StreamingTracker(cfg); only the model object is reused (it holds no per-video state)."""
    real, cache = sam2_ros.engine.tracker.StreamingTracker, {}

    def cached(cfg):
        key = (cfg.model_size, cfg.image_size, cfg.device, cfg.checkpoint, cfg.random_weights)
        tracker = real(cfg, model=cache.get(key))
        cache[key] = tracker.model
        return tracker

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sam2_ros.engine.tracker, 'StreamingTracker', cached)
        yield


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp('offline')
    (d / 'frames').mkdir()
    video = cv2.VideoWriter(str(d / 'in.mp4'), cv2.VideoWriter_fourcc(*'mp4v'), 10, (W, H))
    for i in range(N):
        cv2.imwrite(str(d / 'frames' / f'f{i}.png'), frame(i))
        video.write(frame(i))
    video.release()
    mask = np.zeros((H, W), np.uint8)
    mask[70:90, 10:40] = 255
    cv2.imwrite(str(d / 'm.png'), mask)
    (d / 'p.yaml').write_text(PROMPTS)
    (d / 'p.json').write_text(json.dumps([{'frame': 1, 'object_id': 7, 'points': [[64, 48]]}]))
    return d


def run(*argv):
    return track_offline.main([str(a) for a in argv])


def read_states(out):
    with open(out / 'states.jsonl') as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope='module')
def folder_run(data):
    out = data / 'out_folder'
    assert run(data / 'frames', '--prompts', data / 'p.yaml', '--out', out, *FAST) == 0
    return out


def test_folder_run_writes_a_mask_per_frame_an_overlay_and_a_summary(folder_run):
    """A folder run writes a label PNG and an overlay frame per input frame, and a summary with
    the objects, the events past the input and the effective config."""
    out = folder_run
    masks = sorted(os.listdir(out / 'masks'))
    assert masks == [f'{i:06d}.png' for i in range(N)]
    m = cv2.imread(str(out / 'masks' / masks[0]), cv2.IMREAD_UNCHANGED)
    assert m.dtype == np.uint8 and m.shape == (H, W)
    cap = cv2.VideoCapture(str(out / 'overlay.mp4'))
    shapes = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        shapes.append(img.shape)
    assert shapes == [(H, W, 3)] * N
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['status'] == 'ok' and summary['frames'] == N
    assert summary['input_kind'] == 'folder' and (summary['width'], summary['height']) == (W, H)
    assert summary['object_ids'] == [1, 2, 3, 4]
    assert summary['events_not_applied'] == [7]   # frame 50 is past the input
    assert summary['config']['precision'] == 'fp32'
    assert summary['config']['use_cuda_graphs'] is False   # the effective value on the CPU


def test_states_follow_events(folder_run):
    states = read_states(folder_run)
    assert [s['frame'] for s in states] == list(range(N))
    for s in states:
        assert {o['object_id'] for o in s['objects']} == ALIVE[s['frame']], s['frame']
        assert s['mode'] == 'eager' and s['engine_ms'] > 0
        for o in s['objects']:
            assert set(o) == {'object_id', 'state', 'score', 'box', 'area', 'centroid',
                              'frames_since_prompt'}
            assert o['state'] in ('tracking', 'occluded', 'lost')
            assert (o['box'] is None) == (o['area'] == 0)
    assert states[0]['events'] == [0, 1, 2] and states[5]['events'] == [5, 6]
    fsp = {s['frame']: {o['object_id']: o['frames_since_prompt'] for o in s['objects']}
           for s in states}
    # Events apply after their frame: a prompted frame has frames_since_prompt 0.
    assert fsp[0] == {1: 0, 2: 0, 3: 0}
    assert fsp[2][1] == 0 and fsp[4] == {1: 2, 3: 4}
    assert fsp[5] == {4: 0} and fsp[7] == {4: 2}


def test_label_masks_match_states(folder_run):
    for s in read_states(folder_run):
        png = cv2.imread(str(folder_run / 'masks' / f'{s["frame"]:06d}.png'),
                         cv2.IMREAD_UNCHANGED)
        area = {o['object_id']: o['area'] for o in s['objects']}
        values = set(np.unique(png).tolist()) - {0}
        assert values <= {i for i, a in area.items() if a > 0}, s['frame']
        for i, a in area.items():   # overlaps: the higher id wins the pixel
            assert (png == i).sum() <= a
        top = max((i for i, a in area.items() if a > 0), default=None)
        if top is not None:
            assert (png == top).sum() == area[top]


def test_video_input_json_prompts_overwrite(data):
    out = data / 'out_video'
    (out / 'masks').mkdir(parents=True)
    cv2.imwrite(str(out / 'masks' / '000009.png'), np.zeros((4, 4), np.uint8))
    argv = [data / 'in.mp4', '--prompts', data / 'p.json', '--out', out, '--max-frames', '3',
            '--no-video', *FAST]
    assert run(*argv) == 2      # results already there
    assert run(*argv, '--overwrite') == 0
    assert sorted(os.listdir(out / 'masks')) == [f'{i:06d}.png' for i in range(3)]
    assert not (out / 'overlay.mp4').exists()
    states = read_states(out)
    assert [[o['object_id'] for o in s['objects']] for s in states] == [[], [7], [7]]
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['input_kind'] == 'video' and summary['frames'] == 3


BAD_PROMPTS = [
    ('- {frame: 0, object_id: 1, points: [[1, 2]], colour: red}', 'event[0]', "'colour'"),
    ('- {frame: 0, object_id: 1, points: "1,2"}', 'event[0]', "'points'"),
    ('- {frame: 0, object_id: 1, points: [[1, 2]]}\n- {frame: -1, action: reset}',
     'event[1]', "'frame'"),
    ('- {frame: 0, object_id: 1, points: [[1, 2], [3, 4]], labels: [1]}', 'event[0]',
     "'labels'"),
    ('- {frame: 0, object_id: 1, mask: nothere.png}', 'event[0]', 'nothere.png'),
    ('- {frame: 0, object_id: 1, action: delete}', 'event[0]', "'action'"),
    ('- {frame: 0, object_id: 300, points: [[1, 2]]}', 'event[0]', "'object_id'"),
    ('- {frame: 0, object_id: 1, box: [10, 10, 5, 20]}', 'event[0]', "'box'"),
    ('- {frame: 2, object_id: 5, action: remove}', 'event[0]', 'not tracked'),
    ('- {frame: 0, object_id: 1, points: [[500, 2]]}', 'event[0]', 'outside'),
    ('- {frame: 0, object_id: 1, mask: small.png}', 'event[0]', '4x4'),
    ('frame: 0', 'p.yaml', 'list of events'),
    ('- {frame: 0, object_id: 1, points: [[1, 2]]', 'p.yaml', 'cannot parse'),
]


@pytest.mark.parametrize('text,where,what', BAD_PROMPTS)
def test_bad_prompt_file(data, tmp_path, capsys, text, where, what):
    (tmp_path / 'p.yaml').write_text(text + '\n')
    cv2.imwrite(str(tmp_path / 'small.png'), np.full((4, 4), 255, np.uint8))
    rc = run(data / 'frames', '--prompts', tmp_path / 'p.yaml', '--out', tmp_path / 'o', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and where in err and what in err, err
    assert not (tmp_path / 'o').exists()    # validated before anything is written


def test_too_many_objects(data, tmp_path, capsys):
    events = [{'frame': 0, 'object_id': i, 'points': [[5, 5]]} for i in (1, 2, 3)]
    (tmp_path / 'p.json').write_text(json.dumps(events))
    rc = run(data / 'frames', '--prompts', tmp_path / 'p.json', '--out', tmp_path / 'o',
             '--max-objects', '2', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and 'event[2]' in err and 'max_objects=2' in err, err


def test_an_unusable_input_or_precompile_list_exits_2_naming_the_problem(data, tmp_path, capsys):
    """A missing path, an empty folder, an undecodable video (these without a traceback) and a
    bad --precompile list each end the run with exit status 2 and a message saying why."""
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'text.mp4').write_text('not a video')
    for path, what in ((tmp_path / 'missing', 'not found'), (tmp_path / 'empty', 'no *.png'),
                       (tmp_path / 'text.mp4', 'cannot decode')):
        rc = run(path, '--prompts', data / 'p.json', '--out', tmp_path / 'o', *FAST)
        err = capsys.readouterr().err
        assert rc == 2 and what in err and 'Traceback' not in err, (path, err)
    rc = run(data / 'frames', '--prompts', data / 'p.json', '--out', tmp_path / 'o',
             '--precompile', 'encoder,decoder', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and "precompile takes distinct parts of ('encoder', 'heads')" in err, err


def test_corrupt_image_mid_folder(data, tmp_path, capsys):
    (tmp_path / 'f').mkdir()
    cv2.imwrite(str(tmp_path / 'f' / '000.png'), frame(0))
    (tmp_path / 'f' / '001.png').write_bytes(b'\x89PNG garbage')
    rc = run(tmp_path / 'f', '--prompts', data / 'p.json', '--out', tmp_path / 'o', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and '001.png' in err and 'corrupt' in err, err
    summary = json.loads((tmp_path / 'o' / 'summary.json').read_text())
    assert summary['status'] == 'error' and summary['frames'] == 1


def test_missing_conflicting_or_no_checkpoint_option_exits_2(data, tmp_path, capsys):
    """A missing checkpoint file, --checkpoint with --random-weights, and neither of them (run
    as a module) each exit with status 2; the module run says so without a traceback."""
    base = [data / 'frames', '--prompts', data / 'p.json', '--out', tmp_path / 'o',
            '--image-size', '256', '--device', 'cpu']
    assert run(*base, '--checkpoint', tmp_path / 'nope.pt') == 2
    assert 'checkpoint not found' in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:   # argparse: mutually exclusive options
        run(*base, '--checkpoint', tmp_path / 'nope.pt', '--random-weights')
    assert exc.value.code == 2
    capsys.readouterr()
    # As a module, in a fresh process: one line, status 2, no traceback.
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.run([sys.executable, '-m', 'sam2_ros.cli.track_offline',
                           *map(str, base)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert 'no checkpoint' in proc.stderr and 'Traceback' not in proc.stderr


def test_overlay_colors_and_rendering():
    assert id_color(3) == id_color(3)
    assert len({id_color(i) for i in range(1, 33)}) == 32
    rgb = np.full((H, W, 3), 100, np.uint8)
    mask = np.zeros((H, W), bool)
    mask[10:40, 10:40] = True
    res = FrameResult(0, H, W, [ObjectResult(5, mask, 1.0, 'tracking', (10, 10, 39, 39), 900,
                                             (24.5, 24.5), 0)])
    out = render_overlay(rgb, res)
    assert out.shape == rgb.shape and out.dtype == np.uint8
    assert (rgb == 100).all()                      # input untouched
    assert (out[15, 35] != 100).any()              # tinted inside the mask
    assert (out[80, 120] == 100).all()             # untouched far outside
    assert (render_overlay(rgb, FrameResult(0, H, W)) == rgb).all()
    # outline: the mask's border pixels in the object's full color, the inside blended
    color = np.array(id_color(5), np.uint8)
    assert (out[10, 20] == color).all() and (out[39, 20] == color).all()
    assert np.abs(out[15, 35].astype(int) - (100 + color.astype(int)) / 2).max() <= 1
    assert (out[9, 20] == 100).all()               # the outline stays inside the mask
    plain = render_overlay(rgb, res, contours=False, labels=False)
    assert not (plain[10, 20] == color).all() and (plain[10, 20] == plain[15, 35]).all()
    # a label mask carried by the result (the tracker's, built on the device) is the one
    # drawn from, and gives the same image
    res.set_label(res.label_mask().copy(), [5])
    assert (render_overlay(rgb, res) == out).all()
    res.set_label(np.full((H, W), 5, np.uint8), [5])
    assert (render_overlay(rgb, res, contours=False, labels=False)[80, 120] != 100).any()


def test_fill_hole_area_option_maps_onto_config(data, tmp_path):
    """--fill-hole-area reaches TrackerConfig (default sam2's 8, 0 off); a negative value is
    a one-line CliError, not a traceback from inside the tracker."""
    base = [str(data / 'frames'), '--prompts', str(data / 'p.json'), '--out', str(tmp_path),
            '--random-weights', '--device', 'cpu']
    parse = track_offline.build_parser().parse_args
    assert track_offline.config_from_args(parse(base)).fill_hole_area == 8
    assert track_offline.config_from_args(parse(base + ['--fill-hole-area', '0'])) \
        .fill_hole_area == 0
    with pytest.raises(track_offline.CliError, match='fill_hole_area'):
        track_offline.config_from_args(parse(base + ['--fill-hole-area', '-1']))


def test_a_failing_output_write_is_one_error_line_and_an_error_summary(data, tmp_path, capsys,
                                                                        monkeypatch):
    """A mask that cannot be written on frame 2 (a full disk: imwrite may even report
    success for an empty file) ends the run with exit 2, one line, and a summary that says
    so; the frames before it are complete."""
    real = cv2.imwrite

    def full_disk(path, img, *a):
        if path.endswith('000002.png'):
            open(path, 'wb').close()
            return True
        return real(path, img, *a)
    monkeypatch.setattr(outputs.cv2, 'imwrite', full_disk)
    out = tmp_path / 'o'
    rc = run(data / 'frames', '--prompts', data / 'p.json', '--out', out, *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and 'cannot write the outputs of frame 2' in err and \
        'Traceback' not in err, err
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['status'] == 'error' and summary['frames'] == 2
    assert len(read_states(out)) == 2


def test_an_unwritable_out_folder_is_one_error_line(data, tmp_path, capsys, monkeypatch):
    """Checked before the model is built (the permission check stands in for a read-only
    folder: CI runs as root, whom permissions do not stop)."""
    monkeypatch.setattr(track_offline.os, 'access', lambda path, mode: False)
    rc = run(data / 'frames', '--prompts', data / 'p.json', '--out', tmp_path / 'ro', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and 'cannot write into --out' in err and 'Traceback' not in err, err
    assert not (tmp_path / 'ro' / 'states.jsonl').exists()


def test_overwrite_keeps_the_old_results_until_the_run_can_start(data, tmp_path, capsys):
    """--overwrite with a run that fails before tracking (a bad --fps, a missing checkpoint)
    leaves the earlier results as they were; --fps 0 is an error, not 'the video's'."""
    out = tmp_path / 'o'
    base = [data / 'in.mp4', '--prompts', data / 'p.json', '--out', out, '--max-frames', '2']
    assert run(*base, *FAST) == 0
    before = sorted(os.listdir(out)), sorted(os.listdir(out / 'masks'))
    for bad in (['--fps', '0', *FAST], ['--fps', '-1', *FAST],
                ['--checkpoint', tmp_path / 'nope.pt', '--image-size', '256', '--device',
                 'cpu']):
        assert run(*base, '--overwrite', *bad) == 2
        assert (sorted(os.listdir(out)), sorted(os.listdir(out / 'masks'))) == before, bad
    err = capsys.readouterr().err
    assert '--fps must be > 0, got 0.0' in err and 'checkpoint not found' in err, err


def test_a_frame_is_written_whole_when_ctrl_c_comes_in_the_middle():
    """Ctrl-C inside ``interrupts_deferred`` takes effect when the block ends."""
    import signal

    from sam2_ros.cli import interrupts_deferred
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):       # the handler runs between bytecodes: not a race
                pass
            done.append('rest of the frame')
    assert done == ['rest of the frame']
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize('text,what', [
    ('- {frame: 0, frame: 3, object_id: 1, points: [[1, 2]], labels: [1]}',
     "key 'frame' given twice"),
    ('- frame: 0\n  object_id: [1', 'line 3, column 1'),
])
def test_duplicate_keys_and_syntax_errors_are_one_line(data, tmp_path, capsys, text, what):
    (tmp_path / 'p.yaml').write_text(text + '\n')
    rc = run(data / 'frames', '--prompts', tmp_path / 'p.yaml', '--out', tmp_path / 'o', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and what in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / 'p.json').write_text('[{"frame": 0, "object_id": 1, "object_id": 2, '
                                     '"points": [[1, 2]], "labels": [1]}]')
    assert run(data / 'frames', '--prompts', tmp_path / 'p.json', '--out', tmp_path / 'o',
               *FAST) == 2
    assert "key 'object_id' given twice" in capsys.readouterr().err


def test_a_video_shorter_than_declared_is_tracked_with_a_warning(data, tmp_path, capsys):
    """An AVI cut short: its header still declares every frame; the frames that decode are
    tracked, the summary says how many were declared, and a warning names the gap."""
    path = tmp_path / 'cut.avi'
    video = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), 10, (W, H))
    for i in range(N):
        video.write(frame(i))
    video.release()
    blob = path.read_bytes()
    path.write_bytes(blob[:int(len(blob) * 0.6)])
    out = tmp_path / 'o'
    assert run(path, '--prompts', data / 'p.json', '--out', out, '--no-video', *FAST) == 0
    summary = json.loads((out / 'summary.json').read_text())
    assert 0 < summary['frames'] < N        # the venv's pinned OpenCV stops at the cut
    assert summary['frames_declared'] == N and summary['status'] == 'ok'
    assert f'declares {N} frames but only {summary["frames"]}' in capsys.readouterr().err
