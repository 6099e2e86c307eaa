"""``python -m tools.dds_probe``: camera-sized frames between two processes, with the
default transports and with the shipped Fast DDS profile for large frames
(``config/fastdds_large_frames.xml``, which must parse: a broken profile makes Fast DDS fall
back or fail, and then no frame arrives). 720p rgb8 frames: with the profile they go through
shared memory (the subscriber maps the publisher's 32 MiB segment), without it through UDP
(Fast DDS's default 512 KiB segments cannot hold a 2.7 MB frame); a small message is
acknowledged within 1 s only with the profile (its 100 ms writer heartbeat), else at Fast
DDS's 3 s heartbeat. The frames topic's depth covers every frame: a reliable KEEP_LAST writer
replaces unacknowledged samples beyond its depth, and on a loaded CI machine UDP frames are
acknowledged ~1 s late (10 in flight at 10 Hz), which once lost 2 of 12 at depth 10."""

import json
import subprocess

import pytest

from ros_helpers import PYTHON, ROOT, require_messages

FRAMES = 12


@pytest.mark.parametrize('profile', [None, 'config/fastdds_large_frames.xml'])
def test_dds_probe_delivers_every_frame(tmp_path, profile):
    require_messages()
    out = tmp_path / 'probe.json'
    argv = [PYTHON, '-m', 'tools.dds_probe', '--width', '1280', '--height', '720',
            '--frames', str(FRAMES), '--rate', '10', '--depth', str(FRAMES),
            '--out', str(out)]
    if profile:
        argv += ['--profile', profile]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f'{p.stdout}\n{p.stderr}'
    r = json.loads(out.read_text())
    assert r['sent'] == r['received'] == FRAMES and r['depth'] == FRAMES
    assert len(r['latency_ms']) == FRAMES and all(0 < x < 5000 for x in r['latency_ms'])
    assert r['p50_ms'] <= r['p99_ms'] <= r['max_ms']
    assert (r['FASTDDS_DEFAULT_PROFILES_FILE'] or '').endswith(profile or '') and \
        (r['FASTDDS_DEFAULT_PROFILES_FILE'] is None) == (profile is None)
    # frame-sized segments mapped by the subscriber: its own and the publisher's (SHM used)
    assert r['shm_frame_segments'] == (2 if profile else 0), r['shm_segments_mapped']
    if profile:
        assert 'Error' not in p.stderr and 'error' not in p.stderr.lower(), p.stderr


@pytest.mark.parametrize('profile', [None, 'config/fastdds_large_frames.xml'])
def test_a_lone_small_message_is_acknowledged_at_the_next_heartbeat(tmp_path, profile):
    """What a node waits at cleanup for its last state to be acknowledged: a reader answers
    only a writer's heartbeat, every 3 s by Fast DDS's default, every 0.1 s with the profile.
    ``--frames 0``: no frames, only one small image from a new writer, timed until acked."""
    require_messages()
    out = tmp_path / 'ack.json'
    argv = [PYTHON, '-m', 'tools.dds_probe', '--frames', '0', '--width', '64',
            '--height', '48', '--out', str(out)] + (['--profile', profile] if profile else [])
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    r = json.loads(out.read_text())
    assert r['small_ack_ms'] is not None, f'{p.stdout}\n{p.stderr}'
    if profile:     # the profile's 0.1 s heartbeat, with room for a loaded machine; the
        assert r['small_ack_ms'] < 2500, r      # default's 3 s period stays apart
    else:
        assert r['small_ack_ms'] > 1000, r


def test_make_executor_gives_single_or_events_and_refuses_others(lease):
    """dds_probe's --executor: rclpy's single-threaded executor or its events executor (where
    this rclpy has one; otherwise a clear error), nothing else."""
    rclpy = pytest.importorskip('rclpy')
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    from sam2_ros.ros.executor import EXECUTORS, make_executor
    ctx = Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id)
    try:
        assert isinstance(make_executor('single', ctx), SingleThreadedExecutor)
        try:
            ex = make_executor('events', ctx)
        except ValueError as exc:
            assert 'EventsExecutor' in str(exc)
        else:
            assert type(ex).__name__ == 'EventsExecutor'
            ex.shutdown()
        with pytest.raises(ValueError, match='unknown executor'):
            make_executor('multi', ctx)
        assert EXECUTORS == ('single', 'events')
    finally:
        ctx.try_shutdown()


def test_dds_probe_subscriber_on_the_events_executor(tmp_path):
    """The probe's subscriber spun by the events executor receives every frame."""
    require_messages()
    pytest.importorskip('rclpy.experimental', reason='no EventsExecutor in this rclpy')
    out = tmp_path / 'probe.json'
    argv = [PYTHON, '-m', 'tools.dds_probe', '--width', '64', '--height', '48',
            '--frames', '4', '--rate', '10', '--executor', 'events', '--out', str(out)]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f'{p.stdout}\n{p.stderr}'
    r = json.loads(out.read_text())
    assert r['executor'] == 'events' and r['sent'] == r['received'] == 4, r


def test_serialized_frames_arrive_and_the_run_is_a_row_of_the_results_file(tmp_path):
    """``--publish serialized``: each frame's CDR bytes are built before it is due and stamped
    with its due time (the node benchmark's camera); the subscriber taking serialized
    messages reads every frame. ``--results``: the run is one ``kind: dds_probe`` row with
    the provenance of every benchmark row; the same settings again replace it."""
    require_messages()
    results = tmp_path / 'h200_node_latency.json'
    results.write_text(json.dumps([{'kind': 'node', 'model': 'tiny', 'res': 512,
                                    'objects': 1, 'variant': 'kept'}]))
    argv = [PYTHON, '-m', 'tools.dds_probe', '--width', '64', '--height', '48', '--frames', '4',
            '--rate', '10', '--publish', 'serialized', '--raw', '--results', str(results)]
    for run in ('first', 'second'):
        p = subprocess.run(argv + ['--run-id', run], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, f'{p.stdout}\n{p.stderr}'
    rows = json.loads(results.read_text())
    probes = [r for r in rows if r.get('kind') == 'dds_probe']
    assert [r['variant'] for r in rows if r.get('kind') != 'dds_probe'] == ['kept']
    assert len(probes) == 1, probes
    r = probes[0]
    assert r['run'] == 'second' and r['sent'] == r['received'] == 4
    assert r['publish'] == 'serialized' and r['raw'] is True
    assert r['name'] == 'default, 10 Hz, serialized in, serialized out', r['name']
    assert 0 < r['p50_ms'] <= r['p99_ms'] <= r['max_ms']
    assert r['date'] and r['gpu'] and '--publish serialized' in r['command']
