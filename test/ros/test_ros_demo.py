"""The demo end to end at test size (the default 640x480 / 60 frames / 512 px run is the same
code with bigger numbers): node subprocess + synthetic camera + prompt script, video and
summary written, random weights announced loudly."""

import json
import subprocess

import pytest

from ros_helpers import PYTHON, ROOT, DomainLease, require_messages

pytestmark = pytest.mark.slow


def test_demo_at_test_size_tracks_all_frames_and_flags_random_weights(tmp_path):
    """Every frame gets a state and an overlay frame, the prompt script's adds and remove show in
    the areas, and the random weights are announced in the output and the summary."""
    require_messages()
    import cv2

    lease = DomainLease()
    out = tmp_path / 'demo'
    try:
        p = subprocess.run([PYTHON, '-m', 'sam2_ros.ros.demo', '--frames', '8', '--image-size',
                            '256', '--width', '160', '--height', '120', '--device', 'cpu',
                            '--fps', '30', '--out', str(out), '--timeout', '120'],
                           cwd=ROOT, env=lease.env(), capture_output=True, text=True, timeout=300)
    finally:
        lease.release()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count('RANDOM WEIGHTS') == 2 and 'MEANINGLESS' in p.stdout
    s = json.loads((out / 'summary.json').read_text())
    assert s['random_weights'] is True and 'MEANINGLESS' in s['warning']
    assert s['frames'] == 8 and s['results_received'] == 8 and s['errors'] == []
    script = s['script_frames']
    a1, a2 = s['per_object_area']['1'], s['per_object_area']['2']
    assert a1[0] is not None and a1[script['remove_object_1']] is None   # added, removed
    assert a2[script['points_object_2'] - 1] is None and a2[-1] is not None  # added mid-stream
    # the final areas list the objects still tracked: 2, not the removed 1 (issue 32, 7)
    final = next(ln for ln in p.stdout.splitlines() if 'final areas' in ln)
    assert f"{{'2': {a2[-1]}}}" in final, final
    assert s['engine_modes'] == {'eager': 8} and s['dropped_frames'] == 0
    assert s['latency_ms']['p50'] > 0 and s['latency_ms']['p99'] >= s['latency_ms']['p50']
    cap = cv2.VideoCapture(str(out / 'overlay.mp4'))
    n = 0
    while cap.read()[0]:
        n += 1
    assert n == 8
