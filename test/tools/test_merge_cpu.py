"""tools.bench.merge: a device command's files land in their families' results files by key,
replacing rows of the same key and keeping the rest."""

import json

from tools.bench import merge


def _write(path, data):
    path.write_text(json.dumps(data))


def _row(variant, ms, **kw):
    return dict(model='tiny', res=512, objects=1, variant=variant, ms_p50=ms, **kw)


def test_device_files_replace_rows_of_their_key_and_keep_the_rest(tmp_path):
    dev, res = tmp_path / 'dev', tmp_path / 'res'
    dev.mkdir(), res.mkdir()
    _write(res / 'h200.json', [_row('a', 1.0), _row('b', 2.0)])
    _write(dev / 'h200.json', [_row('b', 3.0)])
    _write(res / 'h200_interaction.json', [_row('a', 1.0, corrections='deferred')])
    _write(dev / 'h200_interaction.json', [_row('a', 5.0, corrections='immediate')])
    _write(res / 'h200_extra.json', {'invocations': [{'commit': 'old'}], 'rows': {'x': 1}})
    _write(dev / 'h200_extra.json', {'env': {'commit': 'abc1234'}, 'rows': {'y': 2}})
    _write(res / 'h200_equivalence.json', {'kept': 1, 'replaced': 1})
    _write(dev / 'gpu_equivalence.json', {'replaced': 2})
    _write(dev / 'gpu_fused_kernels.json', {'q_pool': 0.0})
    _write(dev / 'overlay_probe.json', {'gpu': 'H200', 'rows': [{'overlay': 'gpu'}]})

    done = merge.merge(str(dev), str(res))

    assert set(done) == {'h200.json', 'h200_interaction.json', 'h200_extra.json',
                         'gpu_equivalence.json', 'gpu_fused_kernels.json', 'overlay_probe.json'}
    engine = json.loads((res / 'h200.json').read_text())
    assert [(r['variant'], r['ms_p50']) for r in engine] == [('a', 1.0), ('b', 3.0)]
    inter = json.loads((res / 'h200_interaction.json').read_text())
    assert sorted(r['corrections'] for r in inter) == ['deferred', 'immediate']
    extra = json.loads((res / 'h200_extra.json').read_text())
    assert extra['invocations'] == [{'commit': 'old'}, {'commit': 'abc1234'}]
    assert extra['rows'] == {'x': 1, 'y': 2}
    assert extra['probes'] == {'overlay_probe_abc1234': {'gpu': 'H200',
                                                         'rows': [{'overlay': 'gpu'}]}}
    eq = json.loads((res / 'h200_equivalence.json').read_text())
    assert eq == {'kept': 1, 'replaced': 2, 'fused_kernels_gpu_abc1234': {'q_pool': 0.0}}


def test_rows_of_another_gpu_sit_beside_the_h200s_and_tagged_entries_keep_its(tmp_path):
    """An H100 run (no H200 lent) replaces no H200 row, equivalence entry or probe."""
    dev, res = tmp_path / 'dev', tmp_path / 'res'
    dev.mkdir(), res.mkdir()
    _write(res / 'h200_interaction.json', [_row('a', 1.0, corrections='deferred',
                                                gpu='NVIDIA H200')])
    _write(dev / 'h200_interaction.json', [_row('a', 5.0, corrections='deferred',
                                                gpu='NVIDIA H100 80GB HBM3')])
    _write(res / 'h200_extra.json', {'rows': {}})
    _write(res / 'h200_equivalence.json', {'graph_vs_eager': 1})
    _write(dev / 'gpu_equivalence.json', {'graph_vs_eager': 2})
    _write(dev / 'interaction_frames.json', {'rows': []})
    _write(dev / 'interaction_frames_3obj.json', {'rows': []})     # gpu_quick's PROBE_RUNS
    merge.merge(str(dev), str(res), commit='abc1234', tag='h100')
    inter = json.loads((res / 'h200_interaction.json').read_text())
    assert [(r['gpu'], r['ms_p50']) for r in inter] == [('NVIDIA H200', 1.0),
                                                       ('NVIDIA H100 80GB HBM3', 5.0)]
    eq = json.loads((res / 'h200_equivalence.json').read_text())
    assert eq == {'graph_vs_eager': 1, 'graph_vs_eager@h100': 2}
    extra = json.loads((res / 'h200_extra.json').read_text())
    assert list(extra['probes']) == ['interaction_frames_abc1234@h100',
                                     'interaction_frames_3obj_abc1234@h100']


def test_startup_rows_are_appended_once(tmp_path):
    dev, res = tmp_path / 'dev', tmp_path / 'res'
    dev.mkdir(), res.mkdir()
    _write(res / 'h200_extra.json', {'startup': [{'start': 1, 'run': 'old'}]})
    _write(res / 'h200_equivalence.json', {})
    new = [{'start': 1, 'run': 'r'}, {'start': 2, 'run': 'r'}]
    _write(dev / 'h200_extra.json', {'env': {'commit': 'abc1234'}, 'startup': new})
    merge.merge(str(dev), str(res))
    merge.merge(str(dev), str(res))                        # a second merge adds nothing
    extra = json.loads((res / 'h200_extra.json').read_text())
    assert extra['startup'] == [{'start': 1, 'run': 'old'}] + new


def test_gpu_short_names():
    from tools.bench.results import gpu_short
    assert [gpu_short({'gpu': g}) for g in ('NVIDIA H200', 'NVIDIA H100 80GB HBM3',
                                            'NVIDIA A100-SXM4-80GB', 'cpu')] == \
        ['H200', 'H100', 'A100', 'cpu']
    assert gpu_short({}) == '-'


def test_two_device_calls_of_node_latency_rows_both_land(tmp_path):
    """Each call starts from the committed file: the second call's file lacks the first's
    rows, which must survive its merge."""
    res, first, second = tmp_path / 'res', tmp_path / 'd1', tmp_path / 'd2'
    for d in (res, first, second):
        d.mkdir()
    committed = [{'run': 'old', 'objects': 1}]
    _write(res / 'h200_node_latency.json', committed)
    _write(res / 'h200_equivalence.json', {})
    _write(first / 'h200_node_latency.json', committed + [{'run': 'one', 'objects': 1}])
    _write(second / 'h200_node_latency.json', committed + [{'run': 'two', 'objects': 1}])
    merge.merge(str(first), str(res), commit='abc1234')
    merge.merge(str(second), str(res), commit='abc1234')
    rows = json.loads((res / 'h200_node_latency.json').read_text())
    assert [r['run'] for r in rows] == ['old', 'one', 'two']
