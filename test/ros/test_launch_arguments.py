"""A launch argument the launch file does not declare is named with the closest declared one
(`ros2 launch sam2_ros tracker.launch.py image_sise:=256` ran at the default image size
without a word): each of our launch files, loaded as `ros2 launch` loads it, and the real
`ros2 launch` once."""

from __future__ import annotations

import importlib.util
import subprocess

import pytest

from ros_helpers import DomainLease
from test_ros_launch import LAUNCH, ROOT, require_launch


def check(monkeypatch, name: str, argv):
    """What launch file ``name``'s argument check logs for the command line ``argv``, run as
    `ros2 launch` runs it (in the locals of the launch file's include)."""
    import launch.logging
    from launch import LaunchContext

    from sam2_ros.ros import launch_common

    spec = importlib.util.spec_from_file_location(name.replace('.', '_'), ROOT / 'launch' / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    checks = [e for e in mod.generate_launch_description().entities
              if isinstance(e, launch_common.CheckingArgument)]
    assert len(checks) == 1, name
    ctx = LaunchContext(argv=list(argv))
    ctx.extend_locals({'current_launch_file_path': str(ROOT / 'launch' / name)})
    warned = []
    logger = type('Logger', (), {'warning': lambda self, text: warned.append(text)})()
    monkeypatch.setattr(launch.logging, 'get_logger', lambda name=None: logger)
    checks[0].execute(ctx)
    return warned


@pytest.mark.parametrize('name', sorted(LAUNCH))
def test_a_misspelt_launch_argument_is_named_with_the_declared_one(name, monkeypatch):
    require_launch()
    given = ['image_sise:=256', 'zzz:=1', 'model:=tiny', 'params_file:=x.yaml',
             'launch-prefix:=gdb -ex run']          # ros2 launch --launch-prefix: launch's own
    assert check(monkeypatch, name, given) == [
        f"launch argument 'image_sise' is not an argument of {name}: ignored by it (did you "
        f"mean 'image_size'? `ros2 launch sam2_ros {name} --show-args` lists them)",
        f"launch argument 'zzz' is not an argument of {name}: ignored by it (`ros2 launch "
        f"sam2_ros {name} --show-args` lists them)"]
    # every argument the file declares is known, its own ones included
    assert check(monkeypatch, name, [f'{a}:=1' for a in LAUNCH[name]]) == []


@pytest.mark.ros_cli
def test_ros2_launch_warns_of_a_misspelt_argument(tmp_path):
    """The real `ros2 launch`: the warning comes first; rviz:=bogus then stops the launch
    before anything starts (the choices check of the rviz argument)."""
    from test_ros_launch_run import cli_env, ros2

    exe = ros2()
    lease = DomainLease()
    try:
        p = subprocess.run([exe, 'launch', 'sam2_ros', 'tracker.launch.py', 'image_sise:=256',
                            'rviz:=bogus'], env=cli_env(lease), cwd=str(tmp_path),
                           capture_output=True, text=True, timeout=120)
    finally:
        lease.release()
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert ("launch argument 'image_sise' is not an argument of tracker.launch.py: ignored by "
            "it (did you mean 'image_size'?") in out, out
    assert out.index('image_sise') < out.index('bogus'), out
    assert 'process started' not in out, out
