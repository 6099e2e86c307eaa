"""The example scripts (examples/) run as a user runs them, offline with random weights, on a
few frames each, so they do not rot: offline video (core API, from a video file and from the
synthetic camera), live camera (node + click + ~/state), bag replay (synthetic bag -> CSV)."""

from __future__ import annotations

import csv
import importlib.util
import re
import subprocess

import pytest

from ros_helpers import PYTHON, ROOT, DomainLease, require_messages

EXAMPLES = ROOT / 'examples'


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f'{name}.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_offline_video_from_file_and_synthetic(tmp_path, capsys, one_thread):
    import cv2

    from sam2_ros.synthetic import SyntheticCamera

    cam = SyntheticCamera(96, 64, objects=2)
    video = tmp_path / 'in.avi'
    w = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*'MJPG'), 10.0, (96, 64))
    for i in range(3):
        w.write(cv2.cvtColor(cam.frame(i), cv2.COLOR_RGB2BGR))
    w.release()
    ex = load('offline_video')
    out = tmp_path / 'overlay.mp4'
    assert ex.main([str(video), '--click', '30,20', '--random-weights', '--image-size', '64',
                    '--out', str(out)]) == 0
    lines = re.findall(r'^frame (\d+): object 1 (tracking|occluded|lost) area=\d+',
                       capsys.readouterr().out, re.M)
    assert [int(f) for f, _ in lines] == [0, 1, 2]
    assert out.stat().st_size > 0
    assert ex.main(['--random-weights', '--frames', '2', '--image-size', '64']) == 0
    assert len(re.findall(r'^frame \d+: object 1 ', capsys.readouterr().out, re.M)) == 2
    with pytest.raises(SystemExit):             # neither a checkpoint nor --random-weights
        ex.parse_args(['video.mp4', '--click', '1,1'])


def run_example(name: str, *args: str, timeout: float = 300, log: bool = False) -> str:
    """The example's standard output (``log``: and its standard error, where the node it
    starts logs)."""
    require_messages()
    lease = DomainLease()
    try:
        p = subprocess.run([PYTHON, str(EXAMPLES / f'{name}.py'), *args], env=lease.env(),
                           cwd='/', capture_output=True, text=True, timeout=timeout)
    finally:
        lease.release()
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    # the example and the node it starts end cleanly, SIGINT included: no traceback anywhere
    assert 'Traceback' not in out, out[-4000:]
    return out if log else p.stdout


@pytest.mark.slow
def test_live_camera_example_clicks_and_reads_state():
    out = run_example('live_camera', '--random-weights', '--states', '2', '--image-size', '64',
                      log=True)
    # the click is stamped as a click on a live image (zero: the next frame), not with a frame
    # the node has tracked past by the time it arrives
    assert 'older than the latest frame' not in out, out[-4000:]
    assert 'sam2_tracker' in out, out[-4000:]      # the node's log is in the output
    assert re.search(r'^click \(\d+, \d+\) on frame \d+$', out, re.M), out
    states = re.findall(r'^frame \d+ \[\w+\]: (.*)$', out, re.M)
    # states of frames tracked before the click arrived may come first (no objects); from the
    # first that shows object 1 on, two states, each with object 1
    first = next(i for i, st in enumerate(states) if st.startswith('object 1 '))
    assert all(st == 'no objects' for st in states[:first]), out
    assert len(states) - first == 2, out
    assert all(re.match(r'object 1 (tracking|occluded|lost) area=\d+', st)
               for st in states[first:]), out


def test_live_camera_example_click_is_for_the_next_frame():
    """Stamped with the first state's frame, the click reached a node that had tracked newer
    frames: `... is older than the latest frame: applied to the latest frame` on a normal run.
    Stamp zero is a click on the live image (the next frame), as docs/ros.md Prompts says."""
    require_messages()
    msg = load('live_camera').click_msg(12, 34.5, 'camera')
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (0, 0)
    assert (msg.header.frame_id, msg.point.x, msg.point.y) == ('camera', 12.0, 34.5)


@pytest.mark.slow
def test_bag_replay_example_writes_a_row_per_frame(tmp_path):
    states = tmp_path / 'states.csv'
    # --max-ahead 1: each frame waits for the state of the one before (flow control)
    out = run_example('bag_replay', '--random-weights', '--frames', '3', '--image-size', '64',
                      '--out', str(states), '--max-ahead', '1')
    assert 'played 4 messages' in out, out               # 3 images + 1 prompt
    assert 'flow control: at most 1 frames ahead' in out, out
    rows = list(csv.DictReader(states.open()))
    assert [(r['frame'], r['object_id']) for r in rows] == [('0', '1'), ('1', '1'), ('2', '1')]


def test_bag_replay_example_keeps_the_last_state_per_stamp():
    """A frame's state published twice (without, then with the object of a prompt that came
    just after the frame) is one set of rows in the CSV: the last."""
    from types import SimpleNamespace as NS

    mod = load('bag_replay')

    def state(sec, tag):
        return NS(header=NS(stamp=NS(sec=sec, nanosec=0)), tag=tag)

    got = mod.last_per_stamp([state(1, 'a'), state(1, 'b'), state(2, 'c'), state(3, 'd'),
                              state(2, 'e')])
    assert [s.tag for s in got] == ['b', 'e', 'd']
