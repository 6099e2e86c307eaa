"""The performance doc's tables are what the committed results files give: the generator runs
on benchmarks/results/*.json in CI, so a results file that changes without the doc (or a
hand-edited table) fails here instead of publishing numbers nobody measured."""

import json
import shutil

import pytest

from tools.bench import report


def test_doc_tables_match_committed_results():
    assert report.main(['--check']) == 0, 'run: python -m tools.bench.report'


def test_every_section_renders_and_is_marked():
    docs = ''.join(open(d).read() for d in report.DOCS)
    for name, fn in report.SECTIONS.items():
        assert docs.count(f'<!-- report:{name}:begin -->') == 1, name   # in exactly one doc
        lines = fn(report.RESULTS)
        assert any(line.startswith('|---') for line in lines), name


def test_render_rewrites_a_stale_section(tmp_path):
    """A changed row reaches the doc; a begin marker without its end is refused."""
    res = tmp_path / 'results'
    shutil.copytree(report.RESULTS, res)
    rows = json.loads((res / 'h200_interaction.json').read_text())
    rows[0]['ms_p50'] = 123.456
    (res / 'h200_interaction.json').write_text(json.dumps(rows))
    doc = open(report.DOC).read()
    new = report.render(doc, str(res))
    assert '123.46' in new and '123.46' not in doc
    assert report.render(new, str(res)) == new
    with pytest.raises(ValueError):
        report.render('<!-- report:soak:begin -->\n', str(res))


def test_node_latency_rows_and_targets(tmp_path):
    """Node latency rows (a list merged by save_json) reach the doc, with the issues' targets
    judged per camera: p99 within the target of the input, object count and camera count AND
    zero deadline misses; two nodes for two cameras are a comparison without a target."""
    res = tmp_path / 'results'
    shutil.copytree(report.RESULTS, res)
    rows = json.loads((res / 'h200_node_latency.json').read_text())
    base = dict(rows[0], camera_hz=60, width=1280, height=720, deadline_misses=0,
                date='2099-01-01', run='r1', commit='abc1234', cameras=1, input='raw')
    new = [dict(base, objects=1, e2e_mask_p99=7.9, variant='a'),
           dict(base, objects=8, e2e_mask_p99=11.0, deadline_misses=2, variant='b'),
           dict(base, objects=2, e2e_mask_p99=9.0, variant='c'),
           dict(base, objects=1, e2e_mask_p99=7.2, input='jpeg', variant='d'),
           dict(base, objects=3, e2e_mask_p99=9.9, variant='e'),
           dict(base, objects=3, e2e_mask_p99=11.9, cameras=2, node_per_camera=False,
                variant='f'),
           dict(base, objects=3, e2e_mask_p99=9.0, cameras=2, node_per_camera=True,
                variant='g')]
    (res / 'h200_node_latency.json').write_text(json.dumps(rows + new))
    lines = report.node_latency(str(res))
    body = [line for line in lines if '2099-01-01' in line and line.startswith('|')]
    assert len(body) == 7                                   # newest first
    assert 'met (p99 <= 8' in body[0] and '/ 7.9 |' in body[0]
    assert 'missed (p99 <= 12' in body[1]                   # misses fail it
    assert '| - |' in body[2]                               # no target for 2 objects
    assert 'missed (p99 <= 7' in body[3]                    # jpeg's own target
    assert 'met (p99 <= 10' in body[4]
    assert 'met (p99 <= 12' in body[5]                      # one node serving two cameras
    assert '| - |' in body[6]                               # two nodes: the comparison
    old = [r for r in rows if r.get('kind') != 'dds_probe' and r['camera_hz'] != 60]
    # no target below 60 Hz; the DDS probe rows render in a table of their own
    assert any(r.get('kind') == 'dds_probe' for r in rows)
    assert 'the `dds_probe` rows of the same file' in '\n'.join(lines)
    assert old and [report.node_target(r) for r in old] == ['-'] * len(old)
    # the targets are the H200 host's: a row of another card is not judged against them
    assert report.node_target(dict(new[0], gpu='NVIDIA H100 80GB HBM3')) == '- (H100)'
    assert report.node_target(dict(new[0], gpu='NVIDIA H200')).startswith('met')


def test_report_gives_one_row_per_model_res_and_one_line_per_provenance(tmp_path):
    """The engine matrix is one row per model@res with `batched / official` cells per object
    count (its provenance one line per date, commit and command without the --only list);
    the resize-alone rows are a section of their own; node rows from before run ids share one
    provenance line."""
    res = tmp_path / 'results'
    shutil.copytree(report.RESULTS, res)
    rows = json.loads((res / 'h200.json').read_text())
    base = dict(rows[0], model='tiny', res=768, date='2099-01-01 00:00 UTC', commit='abc1234',
                run='r9', command='python -m tools.bench.cli --only a;b --frames 30')
    rows += [dict(base, objects=1, variant='ours_graph_batched', ms_p50=1.234),
             dict(base, objects=1, variant='official_eager', ms_p50=9.876),
             dict(base, objects=3, variant='ours_eager', ms_p50=5.0)]      # not shown
    (res / 'h200.json').write_text(json.dumps(rows))
    lines = report.engine_matrix(str(res))
    assert '| tiny@768 | 1.23 / 9.88 | - | - | abc1234 |' in lines
    assert ('- 2099-01-01, commit abc1234, NVIDIA H200 (2 results): '
            '`python -m tools.bench.cli --only <rows> --frames 30`') in lines
    pre = report.preprocess(report.RESULTS)
    assert pre[2].startswith('| source -> S | exact_eager |')
    assert any(s.startswith('| 1280x720 -> 512 | ') for s in pre)
    assert not any('-> 512 |' in s for s in report.image_mode(report.RESULTS))
    node = report.node_latency(report.RESULTS)
    assert sum('rows from before runs had ids' in s for s in node) == 1


def test_node_latency_precompile_and_other_settings_column(tmp_path):
    """A node row with precompiled parts says which in its own column, with the settings its
    variant names that no other column shows (opencv_threads, merge_step_buckets off); a row
    with none shows '-'."""
    res = tmp_path / 'results'
    shutil.copytree(report.RESULTS, res)
    rows = json.loads((res / 'h200_node_latency.json').read_text())
    base = dict(rows[0], camera_hz=60, width=1280, height=720, date='2099-01-01', run='r2',
                commit='abc1234', precompile=None, variant='x')
    new = [dict(base, objects=1, precompile='encoder,heads'),
           dict(base, objects=2, precompile='encoder'),
           dict(base, objects=3),
           dict(base, objects=4, variant='60hz_shm_rxproc_separatebuckets_cv1_onenode')]
    (res / 'h200_node_latency.json').write_text(json.dumps(rows + new))
    lines = report.node_latency(str(res))
    header = next(line for line in lines if line.startswith('| camera |'))
    col = header.split(' | ').index('precompile, other')
    cells = {line.split(' | ')[2]: line.split(' | ')[col] for line in lines
             if '2099-01-01' in line and line.startswith('|')}
    assert cells == {'1': 'encoder,heads', '2': 'encoder', '3': '-',
                     '4': 'separatebuckets, cv1'}
