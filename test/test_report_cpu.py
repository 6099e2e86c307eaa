"""The performance doc's tables are what the committed results files give: the generator runs
on benchmarks/results/*.json in CI, so a results file that changes without the doc (or a
hand-edited table) fails here instead of publishing numbers nobody measured."""

import json
import shutil

import pytest

from sam2_ros.bench import report


def test_doc_tables_match_committed_results():
    assert report.main(['--check']) == 0, 'run: python -m sam2_ros.bench.report'


def test_every_section_renders_and_is_marked():
    doc = open(report.DOC).read()
    for name, fn in report.SECTIONS.items():
        assert f'<!-- report:{name}:begin -->' in doc, name
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
