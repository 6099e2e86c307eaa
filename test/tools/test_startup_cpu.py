"""The start-up benchmark (tools.bench.startup) on the CPU: one start in this process from a
checkpoint file written in sam2's format, and the merge of its rows into the results file."""

import json
import time

from tools.bench import startup


def test_one_start_from_a_checkpoint_file(tmp_path):
    ckpt = str(tmp_path / 'random_tiny.pt')
    startup.save_random_checkpoint('tiny', 64, ckpt)
    r = startup.child({'model': 'tiny', 'res': 64, 'device': 'cpu', 'checkpoint': ckpt,
                       'graph_mode': None, 't0': time.time()})
    assert set(r) == {'import_s', 'configure_s', 'capture_s', 'first_frame_s', 'total_s',
                      'graphs', 'capture_phases_s'}
    assert r['capture_s'] == 0.0 and r['capture_phases_s'] == {}     # the CPU captures nothing
    assert r['configure_s'] > 0 and r['first_frame_s'] > 0
    assert abs(r['total_s'] - (r['import_s'] + r['configure_s'] + r['first_frame_s'])) < 1e-6


def test_rows_merge_into_the_startup_section(tmp_path):
    path = str(tmp_path / 'extra.json')
    json.dump({'rows': {'x': 1}}, open(path, 'w'))
    row = dict(model='tiny', res=512, graph_mode='default', start=1, total_s=9.0)
    startup.save_section(path, [row, dict(row, start=2, total_s=5.0)])
    startup.save_section(path, [dict(row, total_s=7.0)])      # a newer first start
    data = json.load(open(path))
    assert data['rows'] == {'x': 1}                             # other sections kept
    assert sorted((r['start'], r['total_s']) for r in data['startup']) == [(1, 7.0), (2, 5.0)]


def test_rows_name_their_configuration(tmp_path):
    """Rows of TrackerConfig's defaults say `config: default`; others name what changed."""
    path = str(tmp_path / 'extra.json')
    assert startup.main(['--model', 'tiny', '--res', '64', '--device', 'cpu', '--starts', '1',
                         '--out', path]) == 0
    assert startup.main(['--model', 'tiny', '--res', '64', '--device', 'cpu', '--starts', '1',
                         '--graph-mode', 'swap', '--out', path]) == 0
    rows = json.load(open(path))['startup']
    assert sorted(r['config'] for r in rows) == ['default', 'graph_mode=swap']
