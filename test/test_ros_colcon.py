"""The colcon path of a ROS user: `colcon build` of this package in a scratch workspace, then
`ros2 launch sam2_ros tracker.launch.py rviz:=false` from its install space (after
`source install/setup.bash`), on the CPU with random weights by launch arguments alone.

One build and one launched node serve every check: the node runs the install space's
executable and message libraries (not the venv's), its state comes out on
`ros2 topic echo --once`, and SIGINT ends the launch with status 0 and no process left.
Needs colcon (scripts/setup.sh installs colcon-common-extensions) and the ROS 2 CLI; where
neither the CLI bundle nor a ROS 2 install is present it skips and says why, as
test_ros_launch_run.py does.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ros_helpers import ROOT, frames
from test_ros_launch_run import (CPU_ARGS, echo_state_once, launched, node_pids, ros2,
                                 sigint_and_check_clean)

pytestmark = [pytest.mark.slow, pytest.mark.ros_cli]
VENV = Path(sys.prefix)
# What CMakeLists.txt installs: the messages, the Python package, launch/ and config/.
PACKAGE = ('package.xml', 'CMakeLists.txt', 'msg', 'launch', 'config', 'sam2_ros')


def colcon() -> str:
    exe = VENV / 'bin' / 'colcon'
    found = str(exe) if exe.exists() else shutil.which('colcon')
    if not found:
        pytest.fail(f'colcon is not installed ({exe}): run scripts/setup.sh, which installs '
                    f'colcon-common-extensions', pytrace=False)
    return found


def build_workspace(ws: Path) -> Path:
    """A copy of the package in ``ws/src``, built by `colcon build`; the install space."""
    src = ws / 'src' / 'sam2_ros'
    src.mkdir(parents=True)
    for name in PACKAGE:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name,
                            ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
        else:
            shutil.copy2(path, src / name)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(PATH=f'{VENV / "bin"}:{env["PATH"]}', AMENT_PREFIX_PATH=str(VENV),
               CMAKE_PREFIX_PATH=str(VENV))
    p = subprocess.run([colcon(), 'build', '--event-handlers', 'console_cohesion-',
                        '--cmake-args', '-G', 'Ninja', '-DBUILD_TESTING=OFF', '-Wno-dev',
                        f'-DPython3_EXECUTABLE={sys.executable}'],
                       cwd=ws, env=env, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f'colcon build failed ({p.returncode}):\n{out[-4000:]}'
    install = ws / 'install'
    assert (install / 'sam2_ros' / 'share' / 'sam2_ros' / 'launch' / 'tracker.launch.py').is_file()
    assert (install / 'sam2_ros' / 'lib' / 'sam2_ros' / 'tracker_node').is_file()
    return install


def test_colcon_build_then_ros2_launch_from_install_space(tmp_path):
    ros2()
    install = build_workspace(tmp_path / 'ws')
    line = ' '.join(shlex.quote(a) for a in (
        ros2(), 'launch', 'sam2_ros', 'tracker.launch.py', 'rviz:=false', 'dds_profile:=none',
        *CPU_ARGS))
    cmd = ['bash', '-c', f'source {shlex.quote(str(install / "setup.bash"))} && exec {line}']
    with launched(tmp_path, 'colcon_launch', cmd=cmd) as run:
        run.proc.wait_log(r'\]: active:', 180)
        pids = node_pids(run.proc)
        assert len(pids) == 1, pids
        node_cmd = Path(f'/proc/{pids[0]}/cmdline').read_bytes().decode().replace('\0', ' ')
        assert str(install / 'sam2_ros' / 'lib' / 'sam2_ros' / 'tracker_node') in node_cmd
        # the install space's message libraries, not the venv's
        maps = Path(f'/proc/{pids[0]}/maps').read_text()
        assert f'{install}/sam2_ros/' in maps and 'sam2_ros_s__rosidl_typesupport' in maps

        c = run.client()
        c.wait_connected(60)
        echo_state_once(run.env, c, frames(1)[0])
        run.close_clients()
        log = sigint_and_check_clean(run.proc, pids)
        assert 'Traceback' not in log, log[-3000:]
