"""The colcon path of a ROS user: `colcon build` of this package in a scratch workspace, then
`ros2 launch sam2_ros tracker.launch.py rviz:=false` from its install space (after
`source install/setup.bash`), on the CPU with random weights by launch arguments alone.

One build and one launched node serve every check: the node runs the install space's
executable and message libraries (not the venv's), its state comes out on
`ros2 topic echo --once`, and SIGINT ends the launch with status 0 and no process left. The
build starts when the session does and the test runs last (``EarlyBuild``), so the build
overlaps the session's other tests.
Needs colcon (scripts/setup.sh installs colcon-common-extensions) and the ROS 2 CLI; where
neither the CLI bundle nor a ROS 2 install is present it skips and says why, as
test_ros_launch_run.py does.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

import pytest

from ros_helpers import ROOT, frames
from test_ros_launch_run import (CPU_ARGS, echo_state_once, launched, node_pids, ros2,
                                 sigint_and_check_clean)

pytestmark = [pytest.mark.slow, pytest.mark.ros_cli]
VENV = Path(sys.prefix)
# What CMakeLists.txt installs: the interfaces, the Python package, launch/ and config/.
# what a checkout holds that the build sees; tools/ is there as in a clone, and must not install
PACKAGE = ('package.xml', 'CMakeLists.txt', 'msg', 'srv', 'launch', 'config', 'sam2_ros',
           'tools', 'setup.py')


def colcon() -> str:
    exe = VENV / 'bin' / 'colcon'
    found = str(exe) if exe.exists() else shutil.which('colcon')
    if not found:
        pytest.fail(f'colcon is not installed ({exe}): run scripts/setup.sh, which installs '
                    f'colcon-common-extensions', pytrace=False)
    return found


def build_workspace(ws: Path, started=lambda proc: None) -> Path:
    """A copy of the package in ``ws/src``, built by `colcon build`; the install space.
    ``started`` gets the build's Popen (its own process group), to be stopped from outside."""
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
    p = subprocess.Popen([colcon(), 'build', '--event-handlers', 'console_cohesion-',
                          '--cmake-args', '-G', 'Ninja', '-DBUILD_TESTING=OFF', '-Wno-dev',
                          f'-DPython3_EXECUTABLE={sys.executable}'],
                         cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    started(p)
    try:
        out, _ = p.communicate(timeout=900)
    finally:
        stop_group(p)
    assert p.returncode == 0, f'colcon build failed ({p.returncode}):\n{out[-4000:]}'
    install = ws / 'install'
    assert (install / 'sam2_ros' / 'share' / 'sam2_ros' / 'launch' / 'tracker.launch.py').is_file()
    assert (install / 'sam2_ros' / 'lib' / 'sam2_ros' / 'tracker_node').is_file()
    # the robot's install holds the package, no benchmark, harness or probe of tools/
    lab = [p for p in install.rglob('*') if {'tools', 'bench', 'probes'} & set(p.parts)
           or p.name in ('dds_probe.py', 'node_latency.py', 'node_harness.py')]
    assert not lab, lab[:5]
    return install


def stop_group(p: subprocess.Popen) -> None:
    """Kill what is left of the build's process group (a timeout, or the session ending)."""
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)


class EarlyBuild:
    """`build_workspace` in a thread, started when the session's tests are known
    (conftest.pytest_collection_finish) while the test itself runs last: the build is mostly
    compiler and cmake time, and the `ros2 launch` tests that run meanwhile mostly wait on
    discovery and process starts, so on CI's two cores the two overlap instead of adding up.
    The test gets the build's install space, or its failure, as if it had built it itself."""

    _started: Optional['EarlyBuild'] = None

    def __init__(self, ws: Path) -> None:
        self.ws, self.install, self.error, self.proc = ws, None, None, None
        self.cancelled = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.install = build_workspace(self.ws, started=self._started_proc)
        except BaseException as exc:   # noqa: B902 - re-raised in the test
            self.error = exc

    def _started_proc(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        if self.cancelled:
            stop_group(proc)

    @classmethod
    def cancel(cls) -> None:
        """At the session's end: a build the test never collected (it did not run: -x, a
        keyboard interrupt) is stopped, not left running after pytest."""
        early, cls._started = cls._started, None
        if early is not None:
            early.cancelled = True
            if early.proc is not None:
                stop_group(early.proc)

    @classmethod
    def start_if_possible(cls, config) -> None:
        """From a pytest hook: where colcon is installed, start the build in a directory of
        the session's temporary tree (without colcon the test fails itself, saying why)."""
        exe = VENV / 'bin' / 'colcon'
        if cls._started is None and (exe.exists() or shutil.which('colcon')):
            cls._started = cls(config._tmp_path_factory.mktemp('colcon') / 'ws')

    @classmethod
    def result(cls, ws: Path) -> Path:
        """The early build's install space (waited for), else a build into ``ws`` now."""
        early, cls._started = cls._started, None
        if early is None:
            return build_workspace(ws)
        early.thread.join(900)
        assert not early.thread.is_alive(), 'colcon build still runs after 900 s'
        if early.error is not None:
            raise early.error
        return early.install


def test_colcon_build_then_ros2_launch_from_install_space(tmp_path):
    ros2()
    install = EarlyBuild.result(tmp_path / 'ws')
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
