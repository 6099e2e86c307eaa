"""The real ROS tools in the loop: `ros2 launch` of our launch files from the venv, and the
`ros2` CLI (lifecycle, param, topic) against the running node, as a user types them.

The tools come from a ROS 2 install or from the offline bundle ../shared/ros_cli, which
scripts/setup.sh installs into the venv when it exists. Without either, these tests skip and say
so; with the bundle present but not installed they fail (run scripts/setup.sh).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

from ros_helpers import (ROOT, Client, DomainLease, Proc, frames, image_msg, stamp,
                         states_of_a_pair, wait_until, write_params)

pytestmark = [pytest.mark.slow, pytest.mark.ros_cli]
BUNDLE = ROOT.parent / 'shared' / 'ros_cli'
VENV_BIN = Path(sys.executable).parent
# image_size 64, the smallest sam2 builds at: the checks are of the launch plumbing (each
# argument reaches the node: 64 is not the launch default, 1024), not of the model, and a
# frame at 256 costs several times the CPU of one at 64 (the colcon build runs alongside)
CPU_ARGS = ['device:=cpu', 'random_weights:=true', 'image_size:=64',
            'use_cuda_graphs:=false']


def ros2() -> str:
    """The ros2 executable: the venv's (bundle or colcon) or a ROS install's on PATH."""
    exe = VENV_BIN / 'ros2'
    if exe.exists():
        return str(exe)
    found = shutil.which('ros2')
    if found:
        return found
    if BUNDLE.is_dir():
        pytest.fail(f'{BUNDLE} exists but {exe} does not: run scripts/setup.sh, which installs '
                    f'the ROS 2 CLI bundle into the venv', pytrace=False)
    pytest.skip(f'no ROS 2 CLI: neither a ROS 2 install (ros2 on PATH) nor the offline bundle '
                f'{BUNDLE} is present')


def cli_env(lease: DomainLease, path_without_venv: bool = False) -> Dict[str, str]:
    env = lease.env()
    env.pop('PYTHONPATH', None)   # what a user has: the installed package only
    if path_without_venv:
        env['PATH'] = os.pathsep.join(p for p in env['PATH'].split(os.pathsep)
                                      if Path(p).resolve() != VENV_BIN.resolve())
    return env


def service_wait(args) -> List[str]:
    """``args`` with ``--timeout 30`` for `ros2 param`: its 1 s default for finding the node's
    parameter services is too short on a loaded machine ('Wait for service timed out')."""
    args = list(args)
    return args + ['--timeout', '30'] if args[:1] == ['param'] else args


def run_cli(env: Dict[str, str], *args: str, timeout: float = 60.0) -> str:
    """One `ros2` command; its output (stdout + stderr); fails the test on a non-zero exit."""
    p = subprocess.run([ros2(), *service_wait(args)], env=env, cwd='/', capture_output=True,
                       text=True, timeout=timeout)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f'ros2 {" ".join(args)} -> {p.returncode}:\n{out}'
    return out


def cli_until(env: Dict[str, str], args: List[str], pattern: str, timeout: float) -> str:
    """Repeat a `ros2` query until its output matches (discovery takes a moment)."""
    last = ''

    def ok():
        nonlocal last
        p = subprocess.run([ros2(), *service_wait(args)], env=env, cwd='/',
                           capture_output=True, text=True, timeout=60)
        last = p.stdout + p.stderr
        return re.search(pattern, last)
    try:
        wait_until(ok, timeout, f'ros2 {" ".join(args)} ~ {pattern!r}', poll=0.5)
    except AssertionError as exc:
        raise AssertionError(f'{exc}; last output:\n{last}') from None
    return last


def launch(env: Dict[str, str], tmp: Path, tag: str, *args: str) -> Proc:
    return Proc([ros2(), 'launch', 'sam2_ros', *args], env, tmp / f'{tag}.log')


class Launched:
    """One `ros2 launch` in a ROS domain of its own, with the test's clients on that domain."""

    def __init__(self, lease: DomainLease, env: Dict[str, str], proc: Proc) -> None:
        self.lease, self.env, self.proc = lease, env, proc
        self.clients: List[Client] = []

    def client(self, **kwargs) -> Client:
        c = Client(self.lease, **kwargs)
        self.clients.append(c)
        return c

    def wait_state(self, client: Client, stamp_ns: int, timeout: float) -> object:
        """``client.wait_state``, failing at once when the launch ends or one of its processes
        dies (a node that crashed would otherwise cost the whole timeout)."""
        def state():
            if not self.proc.alive() or 'process has died' in self.proc.log():
                raise AssertionError(f'ros2 launch ended ({self.proc.p.poll()}) or one of its '
                                     f'processes died before the state for stamp {stamp_ns}')
            found = client.states_for(stamp_ns)
            return found[0] if found else None
        return wait_until(state, timeout, f'TrackingState for stamp {stamp_ns}', poll=0.05)

    def close_clients(self) -> None:
        while self.clients:
            self.clients.pop().close()


@contextlib.contextmanager
def launched(tmp: Path, tag: str, *args: str, cmd: Optional[List[str]] = None,
             path_without_venv: bool = False, daemon: bool = True,
             source_tree: bool = False) -> Iterator[Launched]:
    """`ros2 launch sam2_ros <args>` (or ``cmd``) in a fresh domain; on the way out, whatever
    happened: its clients closed, the launch stopped (SIGKILL of its group if SIGINT does not
    end it), the domain's `ros2` daemon stopped (``daemon``: a CLI call may have started it),
    the domain released. ``source_tree``: the node imports this checkout's package (a
    launch file given by path, before it is installed)."""
    lease = DomainLease()
    env = cli_env(lease, path_without_venv)
    if source_tree:
        env['PYTHONPATH'] = str(ROOT)
    run = None
    try:
        proc = (Proc(cmd, env, tmp / f'{tag}.log') if cmd is not None
                else launch(env, tmp, tag, *args))
        run = Launched(lease, env, proc)
        try:
            yield run
        except AssertionError as exc:   # what the launch printed, for a failure seen only in CI
            if '--- log ---' in str(exc):
                raise
            raise AssertionError(f'{exc}\n--- log of ros2 launch (tail) ---\n'
                                 f'{run.proc.log()[-4000:]}') from None
    finally:
        if run is not None:
            run.close_clients()
            run.proc.stop()
        if daemon:
            stop_daemon(env)
        lease.release()


def echo_state_once(env: Dict[str, str], c: Client, frame, tries: int = 20) -> str:
    """`ros2 topic echo --once /sam2_tracker/state` while ``frame`` is published (again every
    3 s until the echo has its message: the echo's subscription matches after a moment)."""
    # the type given: without it the echo exits at once when it runs before the topic is seen
    echo = subprocess.Popen([ros2(), 'topic', 'echo', '--once', '/sam2_tracker/state',
                             'sam2_ros/msg/TrackingState'],
                            env=env, cwd='/', stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for i in range(tries):
        c.pub_image.publish(image_msg(frame, stamp(i)))
        try:
            out, _ = echo.communicate(timeout=3)
            break
        except subprocess.TimeoutExpired:
            continue
    else:
        echo.kill()
        echo.wait(5)
        raise AssertionError('ros2 topic echo --once /sam2_tracker/state got nothing')
    assert 'frame_index:' in out and 'engine_mode:' in out, out
    return out


def descendants(pid: int) -> List[int]:
    out = subprocess.run(['ps', '-e', '-o', 'pid=,ppid='], capture_output=True,
                         text=True).stdout.split()
    children: Dict[int, List[int]] = {}
    for c, p in zip(out[::2], out[1::2]):
        children.setdefault(int(p), []).append(int(c))
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def alive(pids: List[int]) -> List[int]:
    return [p for p in pids if Path(f'/proc/{p}').exists()
            and 'zombie' not in Path(f'/proc/{p}/status').read_text().lower()]


def node_pids(launch_proc: Proc) -> List[int]:
    return [p for p in descendants(launch_proc.p.pid)
            if b'tracker_node' in Path(f'/proc/{p}/cmdline').read_bytes()]


def proc_env(pid: int) -> Dict[str, str]:
    raw = Path(f'/proc/{pid}/environ').read_bytes().split(b'\0')
    return dict(kv.decode(errors='replace').split('=', 1) for kv in raw if b'=' in kv)


def stop_daemon(env: Dict[str, str]) -> None:
    subprocess.run([ros2(), 'daemon', 'stop'], env=env, cwd='/', capture_output=True,
                   timeout=30)


def exit_of(proc: Proc, seconds: float, what: str) -> Tuple[int, str]:
    """(exit status, log) of a `ros2 launch` expected to end by itself; ``seconds`` bounds a
    hang (not a timing), ``what`` says what should have ended it."""
    try:
        rc = proc.p.wait(seconds)
    except subprocess.TimeoutExpired:
        raise AssertionError(f'ros2 launch still runs {seconds:.0f} s after {what}') from None
    return rc, proc.log()


def sigint_and_check_clean(proc: Proc, pids: List[int]) -> str:
    """SIGINT to `ros2 launch` (as Ctrl-C): exit 0 and no process of it left."""
    proc.p.send_signal(signal.SIGINT)
    try:
        rc = proc.p.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f'ros2 launch still runs 60 s after SIGINT:\n'
                             f'{proc.log()[-3000:]}') from None
    log = proc.log()
    assert rc == 0, f'ros2 launch exited {rc} after SIGINT:\n{log[-3000:]}'
    wait_until(lambda: not alive(pids), 10, f'processes {pids} to exit')
    return log


def test_tracker_launch_lifecycle_param_topic_and_ctrl_c(tmp_path):
    """Defects 1 (share/lib installed), 2 (no rviz2: the launch goes on), 3 (dds_profile:=none),
    5 (no deprecation warnings), 6 (CPU by launch arguments alone), 12 (deactivate flush),
    plus the CLI round trip a user does."""
    ros2()
    with launched(tmp_path, 'tracker', 'tracker.launch.py', *CPU_ARGS,
                  'dds_profile:=none') as run:
        env, proc = run.env, run.proc
        proc.wait_log(r'\]: active:', 180)
        log = proc.log()
        assert 'rviz2 is not installed: starting without RViz' in log
        assert 'deprecated' not in log.lower(), log
        assert re.search(r'tiny@64 cpu fp32 graphs=False', log), log
        pids = node_pids(proc)
        assert len(pids) == 1, descendants(proc.p.pid)
        assert 'FASTDDS_DEFAULT_PROFILES_FILE' not in proc_env(pids[0])

        assert re.search(r'^active \[3\]', cli_until(env, ['lifecycle', 'get', '/sam2_tracker'],
                                                     r'active', 60), re.M)
        assert 'String value is: cpu' in run_cli(env, 'param', 'get', '/sam2_tracker', 'device')
        c = run.client()
        c.wait_connected(60)
        echo_state_once(env, c, frames(1)[0])    # a state while `ros2 topic echo` listens

        assert 'Set parameter successful' in run_cli(env, 'param', 'set', '/sam2_tracker',
                                                     'click_mode', 'new')
        assert 'String value is: new' in run_cli(env, 'param', 'get', '/sam2_tracker',
                                                 'click_mode')
        bad = subprocess.run([ros2(), *service_wait(['param', 'set', '/sam2_tracker',
                                                     'click_mode', 'nope'])],
                             env=env, cwd='/', capture_output=True, text=True, timeout=60)
        assert 'Setting parameter failed' in bad.stdout + bad.stderr, bad

        assert 'Transitioning successful' in run_cli(env, 'lifecycle', 'set', '/sam2_tracker',
                                                     'deactivate')
        assert re.search(r'^inactive', run_cli(env, 'lifecycle', 'get', '/sam2_tracker'), re.M)
        assert 'did not acknowledge' not in proc.log()
        run.close_clients()
        log = sigint_and_check_clean(proc, pids)
        assert 'did not acknowledge' not in log
        assert 'Traceback' not in log, log[-3000:]


def test_rviz_true_without_rviz2_starts_nothing(tmp_path):
    """Defect 2: a required RViz that is missing stops the launch before the tracker starts."""
    ros2()
    with launched(tmp_path, 'rviz_true', 'tracker.launch.py', *CPU_ARGS, 'rviz:=true',
                  daemon=False) as run:
        rc = run.proc.p.wait(60)
        log = run.proc.log()
        assert rc != 0, log
        assert 'rviz2 is not installed' in log and 'tracker_node' not in log, log


def test_multi_camera_launch_tracks_two_cameras(tmp_path):
    """One tracker per camera namespace, each on its own topics and device; positions:=true
    adds positions_node reading both trackers' states."""
    ros2()
    params = write_params(tmp_path / 'multi.yaml', autostart=False)
    with launched(tmp_path, 'multi', 'multi_camera.launch.py', 'cameras:=cam0,cam1',
                  'positions:=true',
                  'devices:=cpu', 'random_weights:=true', 'image_size:=64',
                  'use_cuda_graphs:=false', f'params_file:={params}') as run:
        proc = run.proc
        proc.wait_log(r'cam0\.sam2_tracker\]: active:', 240)
        proc.wait_log(r'cam1\.sam2_tracker\]: active:', 240)
        pids = node_pids(proc)
        assert len(pids) == 2
        for pid in pids:   # the default profile reaches every node
            assert proc_env(pid)['FASTDDS_DEFAULT_PROFILES_FILE'].endswith(
                'share/sam2_ros/config/fastdds_large_frames.xml')
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image

        f = frames(2)
        clients = []
        for cam in ('cam0', 'cam1'):
            c = run.client(node_name=f'{cam}/sam2_tracker')
            c.pub_image = c.node.create_publisher(
                Image, f'/{cam}/image_raw', QoSProfile(depth=10,
                                                       reliability=ReliabilityPolicy.RELIABLE))
            clients.append(c)
        for c in clients:
            c.wait_connected(60)
        # each camera's frames with stamps of its own (from 10 s and from 40 s)
        sent = [states_of_a_pair(run.wait_state, [c], [f[k]], 10 + 30 * k)[0]
                for k, c in enumerate(clients)]
        for k, c in enumerate(clients):
            other = [stamp(10 + 30 * (1 - k) + t) for t in range(sent[1 - k])]
            assert not any(c.states_for(ns) for ns in other), \
                'a camera got the other one\'s frame'
        # the first CLI call starts the daemon, which may not have discovered the node yet
        cli_until(run.env, ['param', 'get', '/cam1/sam2_tracker', 'image_topic'],
                  r'String value is: /cam1/image_raw', 60)
        proc.wait_log(r'3D positions of /cam0 and /cam1 \(sam2_tracker\) on '
                      r'/sam2_positions/positions', 60)
        cli_until(run.env, ['topic', 'info', '/cam1/sam2_tracker/state'],
                  r'Subscription count: [1-9]', 60)
        run.close_clients()
        sigint_and_check_clean(proc, pids)


def test_stereo_launch_one_node_two_cameras(tmp_path):
    """stereo.launch.py: one node <namespace>/sam2_tracker reading left/ and right/ of the
    stereo namespace, a pair of frames tracked in one step, each camera's state on its own
    topic. The params file's camera options reach the node (the launch's defaults overrode
    them: camera_period_ms was 16.7 whatever the file said), an argument given overrides the
    file's, and the cameras are left,right where the file names none."""
    ros2()
    params = write_params(tmp_path / 'stereo.yaml', autostart=False, camera_period_ms=60000.0,
                          pair_tolerance_ms=5.0, camera_image='image_mono')
    cmd = [ros2(), 'launch', str(ROOT / 'launch' / 'stereo.launch.py'), 'namespace:=rig',
           'device:=cpu', 'random_weights:=true', 'image_size:=64', 'use_cuda_graphs:=false',
           'camera_image:=image_raw', f'params_file:={params}']
    with launched(tmp_path, 'stereo', cmd=cmd, source_tree=True) as run:
        run.proc.wait_log(r'rig\.sam2_tracker\]: active: 2 cameras \(left: /rig/left/image_raw, '
                          r'right: /rig/right/image_raw\), raw images paired by stamp '
                          r'\(tolerance 5\.0 ms, a lone frame waits at most 60000\.0 ms\)', 240)
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image

        f = frames(2)
        clients = []
        for cam in ('left', 'right'):
            c = run.client(node_name=f'rig/sam2_tracker/{cam}')
            c.pub_image = c.node.create_publisher(
                Image, f'/rig/{cam}/image_raw',
                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
            clients.append(c)
        for c in clients:
            wait_until(lambda: c.pub_image.get_subscription_count() > 0
                       and c.link.sub_state.get_publisher_count() > 0, 60,
                       'the stereo node to subscribe and publish')
        tries, states = states_of_a_pair(run.wait_state, clients, f, 20)
        for st in states:       # every pair sent was tracked, or lost before discovery ended
            assert 1 <= st.processed_frames <= tries
        cli_until(run.env, ['param', 'get', '/rig/sam2_tracker', 'cameras'],
                  r"String values are: \['left', 'right'\]", 60)
        run.close_clients()
        sigint_and_check_clean(run.proc, node_pids(run.proc))


def test_a_tracker_that_cannot_start_ends_the_launch_with_status_1(tmp_path):
    """The node's autostart fails (a checkpoint that does not exist): `ros2 launch` of
    tracker.launch.py exits 1, not 0 once RViz is closed, so a script or systemd unit sees it."""
    ros2()
    with launched(tmp_path, 'nockpt', 'tracker.launch.py', 'device:=cpu', 'image_size:=64',
                  f'checkpoint:={tmp_path / "missing.pt"}', 'rviz:=false',
                  daemon=False) as run:
        rc, log = exit_of(run.proc, 120, 'the tracker failed')
        assert 'checkpoint not found' in log, log[-3000:]
        assert rc == 1, f'ros2 launch exited {rc}:\n{log[-3000:]}'
