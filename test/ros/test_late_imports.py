"""late_imports: the modules a streaming node imported are named once each."""

import sys

from sam2_ros.ros.late_imports import LateImports


def test_modules_imported_after_arm_are_named_once(tmp_path, monkeypatch):
    (tmp_path / 'late_probe_module.py').write_text('X = 1\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    li = LateImports()
    assert li.take() == []                      # not armed: nothing to report
    li.arm()
    assert li.take() == []
    import late_probe_module  # noqa: F401
    try:
        assert li.take() == ['late_probe_module'] and li.count == 1
        assert li.take() == []
    finally:
        sys.modules.pop('late_probe_module', None)
    text = LateImports.describe([f'm{i}' for i in range(15)])
    assert text.startswith('15 module(s) imported while streaming') and 'and 3 more' in text


def test_the_diagnostics_path_imports_nothing_on_first_use():
    """np.percentile imports numpy.ma on its first call; the mailbox imports it up front."""
    import subprocess

    code = ('import sys, time; import sam2_ros.ros.mailbox as m; w = m.LatencyWindow(); '
            'w.add(time.monotonic(), 1.0); before = set(sys.modules); '
            'w.summary(time.monotonic(), 10.0); print(sorted(set(sys.modules) - before))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == '[]', out
