"""One precision rule everywhere (issue 32, defect 5): fp32 on the CPU, bf16 on CUDA, unless
precision is set explicitly; the node (its default '' is the device's), the launch files (which
no longer decide it), the offline CLI and the demo take it from config.default_precision."""

from __future__ import annotations

import pytest

from ros_helpers import ROOT, TEST_PARAMS, DomainLease, NodeProcess

from sam2_ros.engine.config import default_precision
from sam2_ros.ros import params


def test_default_precision_follows_the_device():
    assert default_precision('cpu') == 'fp32'
    assert default_precision('cuda') == default_precision('cuda:1') == 'bf16'


@pytest.mark.parametrize('given, device, expected', [
    ({}, 'cpu', 'fp32'), ({}, 'cuda', 'bf16'), ({'precision': ''}, 'cpu', 'fp32'),
    ({'precision': ''}, 'cuda:1', 'bf16'),
    ({'precision': 'bf16'}, 'cpu', 'bf16'), ({'precision': 'fp32'}, 'cuda', 'fp32')])
def test_node_parameters_apply_the_rule(given, device, expected):
    cfg, _ = params.build({'random_weights': True, 'device': device, **given})
    assert cfg.precision == expected
    spec = next(s for s in params.PARAMS if s.name == 'precision')
    assert params.default_value(spec) == ''


def test_offline_cli_applies_the_rule():
    from sam2_ros.cli import track_offline

    args = track_offline.build_parser().parse_args(['video.mp4', '--prompts', 'p.yaml',
                                                    '--out', 'out', '--device', 'cpu',
                                                    '--random-weights'])
    assert track_offline.config_from_args(args).precision == 'fp32'
    args.precision = 'bf16'
    assert track_offline.config_from_args(args).precision == 'bf16'


def test_launch_files_leave_precision_to_the_node():
    # ROS 2's launch is not on PyPI (scripts/setup.sh installs it from ../shared/ros_cli when
    # present); the repository's launch/ folder imports as an empty namespace package without it
    pytest.importorskip('launch_ros', reason='ROS 2 launch is not installed')
    from launch import LaunchContext

    from sam2_ros.ros import launch_common

    ctx = LaunchContext()
    ctx.launch_configurations.update(device='cpu')
    assert 'precision' not in launch_common.overrides(ctx)
    ctx.launch_configurations.update(precision='bf16')
    assert launch_common.overrides(ctx)['precision'] == 'bf16'
    multi = (ROOT / 'launch' / 'multi_camera.launch.py').read_text()
    assert "'fp32'" not in multi


def test_plain_node_on_the_cpu_runs_fp32(tmp_path):
    """`sam2-ros-node -p device:=cpu` without precision (bf16 before)."""
    lease = DomainLease()
    values = {k: v for k, v in TEST_PARAMS.items() if k != 'precision'}
    proc = NodeProcess(values, tmp_path / 'p.yaml', tmp_path / 'p.log', env=lease.env(),
                       cwd=ROOT)
    try:
        proc.wait_log(r'tracker ready in .* cpu (fp32|bf16)', 180)
        assert 'cpu fp32' in proc.log() and 'cpu bf16' not in proc.log(), proc.log()[-2000:]
    finally:
        proc.stop()
        lease.release()
