"""The tracker core, the offline tool and the benchmarks import no ROS: they can be used and
tested on a machine without rclpy (cv_bridge and camera_calibration keep the same split).

test_architecture's ROS check parses every import statement of these modules (the folders
sam2_ros/engine, sam2_ros/cli, sam2_ros/*.py and tools/bench/cli.py) and of the project modules
they reach. This test imports all of them in a fresh interpreter, which sees what parsing
cannot: ROS pulled in by a third-party package, by an import whose name is computed, or by code
that runs at import time. The modules come from the same folder walk, so a new one is covered.
"""

import subprocess
import sys

import architecture_rules as rules


def test_ros_free_modules_import_no_ros():
    modules = [rules.module_name(rules.ROOT, p) for p in rules.ros_free_files(rules.ROOT)]
    assert 'sam2_ros.engine.cuda.kernels.fpn' in modules and 'tools.bench.cli' in modules
    code = ('import sys\n'
            f'for m in {modules!r}: __import__(m)\n'
            'print("\\n".join(sorted(sys.modules)))\n')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=120, cwd=rules.ROOT)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.split()
    assert 'sam2_ros.engine.tracker' in loaded
    assert not [m for m in loaded if rules.is_ros(m)]
