"""The project's architecture rules, checked by parsing the tree (architecture_rules.py): the
tests import neither torch nor ROS.

Each rule has a test on the real tree, which fails naming ``file:line: rule``, and a test that
plants a violation in a small tree under tmp_path, to show the checker reports it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List, Set

import architecture_rules as rules

ROOT = rules.ROOT
TEXT_FOLDERS = ('sam2_ros', 'tools', 'launch', 'examples', 'test')
SIZE_FOLDERS = ('sam2_ros', 'tools')


def plant(root: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def report(violations: List[rules.Violation]) -> str:
    return '\n' + '\n'.join(map(str, violations))


def places(violations: List[rules.Violation]) -> Set[str]:
    return {f'{v.path}:{v.line}' for v in violations}


def test_lines_fit_in_99_characters():
    found = rules.long_lines(ROOT, TEXT_FOLDERS)
    assert not found, report(found)


def test_line_check_reports_a_100_character_line(tmp_path):
    plant(tmp_path, {'tools/a.py': 'x = 1\n' + '#' * 99 + '\n' + '#' * 100 + '\n'})
    found = rules.long_lines(tmp_path, ['tools'])
    assert places(found) == {'tools/a.py:3'}
    assert 'line over 99 characters' in str(found[0])


def test_files_stay_under_400_lines():
    found = rules.long_files(ROOT, SIZE_FOLDERS)
    assert not found, report(found)


def test_file_check_counts_400_lines_as_too_many(tmp_path):
    plant(tmp_path, {'sam2_ros/ok.py': 'x = 1\n' * 399, 'sam2_ros/big.py': 'x = 1\n' * 400})
    found = rules.long_files(tmp_path, ['sam2_ros'])
    assert [str(v) for v in found] == [
        'sam2_ros/big.py:400: file of 400 lines or more: 400 lines: split it by concern']


def test_ros_free_parts_import_no_ros():
    """sam2_ros/engine/**, sam2_ros/cli/**, sam2_ros/*.py and tools/bench/cli.py import no ROS
    package, nor sam2_ros.ros, anywhere in their text (functions and TYPE_CHECKING included),
    nor through any project module they import. test_core_without_ros imports them too."""
    covered = {rules.rel(ROOT, p) for p in rules.ros_free_files(ROOT)}
    assert {'sam2_ros/__init__.py', 'sam2_ros/synthetic.py', 'sam2_ros/cli/records.py',
            'sam2_ros/engine/cuda/kernels/fpn.py', 'tools/bench/cli.py'} <= covered
    assert not any(p.startswith('sam2_ros/ros/') for p in covered)
    found = rules.ros_imports(ROOT)
    assert not found, report(found)


def test_ros_check_sees_function_relative_and_indirect_imports(tmp_path):
    plant(tmp_path, {
        'sam2_ros/__init__.py': '',
        'sam2_ros/lens.py': 'def f():\n    import rclpy\n',
        'sam2_ros/engine/__init__.py': '',
        'sam2_ros/engine/a.py': 'from typing import TYPE_CHECKING\n'
                                'if TYPE_CHECKING:\n    from ..ros import node\n',
        'sam2_ros/engine/b.py': 'from sam2_ros import msg\nimport importlib\n'
                                'importlib.import_module("launch_ros.actions")\n',
        'sam2_ros/engine/cuda/kernels/c.py': 'from .launch import Kernel\nimport numpy\n',
        'sam2_ros/engine/cuda/kernels/launch.py': 'Kernel = None\n',
        'sam2_ros/ros/__init__.py': '',
        'sam2_ros/ros/node.py': 'import rclpy\n',           # the ROS side: allowed
        'tools/__init__.py': '',
        'tools/bench/__init__.py': '',
        'tools/bench/cli.py': 'def main():\n    from tools.bench import rows\n',
        'tools/bench/rows.py': 'from std_msgs.msg import Header\n',
        'tools/dds_probe.py': 'import rclpy\n',              # not imported by cli.py
    })
    found = rules.ros_imports(tmp_path)
    assert places(found) == {'sam2_ros/lens.py:2', 'sam2_ros/engine/a.py:3',
                             'sam2_ros/engine/b.py:1', 'sam2_ros/engine/b.py:3',
                             'tools/bench/cli.py:2'}
    assert 'tools/bench/cli.py:2: ROS import in the ROS-free parts: imports tools.bench.rows, ' \
        'which reaches ROS: tools/bench/rows.py:1 imports std_msgs.msg.Header' in report(found)


def test_no_module_uses_another_modules_private_name():
    """In every folder, the tests included: no ``from m import _x`` from a project module, no
    ``obj._x`` where only other project modules define ``_x``. torch's and sam2's own private
    names (read from their installed source) are allowed."""
    upstream = rules.upstream_private_names()
    assert {'_modules', '_forward_sam_heads'} <= upstream, 'torch or sam2 source not found'
    found = rules.private_uses(ROOT, TEXT_FOLDERS, upstream)
    assert not found, report(found)


def test_private_check_reports_imports_and_foreign_attributes(tmp_path):
    plant(tmp_path, {
        'sam2_ros/__init__.py': '',
        'sam2_ros/tracker.py': '''\
            _LIMIT = 3
            class Tracker:
                def __init__(self):
                    self._objects = {}
                    self._modules = {}
                    object.__setattr__(self, '_frozen', True)
            ''',
        'sam2_ros/user.py': '''\
            from sam2_ros.tracker import Tracker, _LIMIT
            from . import _helpers
            import torch
            def peek(t: Tracker, other):
                t._objects.clear()
                n = getattr(t, '_objects')
                t._modules.clear()                 # torch's: upstream
                torch._dynamo.reset()              # defined by no project module
                other._cache = 1                   # defined here too
                return hasattr(t, '_frozen')
            class Own:
                def __init__(self):
                    self._cache = 0
            ''',
    })
    found = rules.private_uses(tmp_path, ['sam2_ros'], upstream={'_modules'})
    assert places(found) == {'sam2_ros/user.py:1', 'sam2_ros/user.py:2', 'sam2_ros/user.py:5',
                             'sam2_ros/user.py:6', 'sam2_ros/user.py:10'}
    assert "another module's private name: t._objects (defined in sam2_ros.tracker)" in \
        report(found)


def test_attributes_are_first_assigned_in_init():
    found = rules.late_attributes(ROOT, SIZE_FOLDERS)
    assert not found, report(found)


def test_attribute_check_reports_stores_outside_init(tmp_path):
    plant(tmp_path, {'sam2_ros/a.py': '''\
        from dataclasses import dataclass, field
        class Base:
            def __init__(self):
                self.inherited = 0
        class Worker(Base):
            limit = 3
            def __init__(self):
                self.ready = False
            @property
            def size(self):
                return 1
            @size.setter
            def size(self, value):
                self._size = value
            def start(self):
                self.ready = True
                self.inherited = 1
                self.limit = 4
                self.late = 1
                setattr(self, 'later', 2)
                self.late = 2
        @dataclass
        class Config:
            a: int = 0
            b: list = field(default_factory=list)
            def __post_init__(self):
                self.a = 1
                self.derived = 2
        '''})
    found = rules.late_attributes(tmp_path, ['sam2_ros'])
    assert places(found) == {'sam2_ros/a.py:14', 'sam2_ros/a.py:19', 'sam2_ros/a.py:20',
                             'sam2_ros/a.py:28'}
    assert 'Worker.late first assigned in start(): assign it in __init__' in report(found)
    assert 'Config.derived first assigned in __post_init__(): make it a field' in report(found)


def test_cuda_graph_api_stays_in_engine_cuda():
    found = rules.cuda_graph_uses(ROOT)
    assert not found, report(found)


def test_cuda_graph_check_follows_aliases(tmp_path):
    use = '''\
        import torch
        import torch as th
        from torch import cuda
        from torch.cuda import graph_pool_handle
        g = torch.cuda.CUDAGraph()
        with th.cuda.graph(g):
            pass
        torch.cuda.CUDAGraph.replay
        cuda.synchronize()
        torch.cuda.is_available()
        '''
    plant(tmp_path, {'sam2_ros/engine/step.py': use, 'sam2_ros/engine/cuda/capture.py': use,
                     'tools/probe.py': use})
    found = rules.cuda_graph_uses(tmp_path)
    assert places(found) == {'sam2_ros/engine/step.py:4', 'sam2_ros/engine/step.py:5',
                             'sam2_ros/engine/step.py:6', 'sam2_ros/engine/step.py:8'}
    assert 'CUDA graph API outside sam2_ros/engine/cuda/: uses torch.cuda.graph' in report(found)
