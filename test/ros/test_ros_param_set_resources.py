"""`ros2 param set` refuses a device or checkpoint that the next configure would not find (a
valid value, missing on this machine), through the node's parameter callback: it used to print
"Set parameter successful", and the next configure failed with the reason only in the node's
log (docs/ros.md Parameters: "a value that would fail the next configure is refused")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from rclpy.parameter import Parameter

from sam2_ros.ros import params
from sam2_ros.ros.node import TrackerNode


def set_parameters(**changes):
    """The node's callback (TrackerNode.on_set_parameters) on the values of an unconfigured
    node (config/tracker.yaml's, random weights), as `ros2 param set` calls it; the
    SetParametersResult and the lines it logged."""
    values = {s.name: params.default_value(s) for s in params.PARAMS}
    values.update(random_weights=True, image_size=64, device='cpu', precision='fp32')
    logged = []
    node = SimpleNamespace(
        get_parameter=lambda name: SimpleNamespace(value=values[name]),
        get_logger=lambda: SimpleNamespace(info=logged.append))
    result = TrackerNode.on_set_parameters(
        node, [Parameter(n, value=v) for n, v in changes.items()])
    return result, logged


@pytest.fixture
def no_cuda(monkeypatch):
    """A machine without CUDA, whatever runs the test."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)


def test_cuda_device_on_a_machine_without_cuda_is_refused_with_what_to_set(no_cuda):
    result, logged = set_parameters(device='cuda')
    assert not result.successful
    assert "device 'cuda' but" in result.reason and 'device:=cpu' in result.reason
    assert logged == []                        # no "applies at the next configure"
    result, logged = set_parameters(device='cpu')
    assert result.successful, result.reason
    assert logged and logged[0].startswith("device set to 'cpu'")


def test_cuda_device_index_past_the_visible_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    result, _ = set_parameters(device='cuda:2')
    assert not result.successful
    assert "device 'cuda:2' but 2 CUDA GPU(s) are visible (cuda:0 to cuda:1" in result.reason
    for ok in ('cuda:1', 'cuda'):
        result, _ = set_parameters(device=ok)
        assert result.successful, result.reason


def test_checkpoint_that_is_not_a_file_is_refused(tmp_path):
    result, logged = set_parameters(checkpoint=str(tmp_path / 'nope.pt'))
    assert not result.successful and logged == []
    assert result.reason == f"checkpoint not found: {str(tmp_path / 'nope.pt')!r}"
    result, _ = set_parameters(checkpoint=str(tmp_path))
    assert not result.successful and 'is a folder, not a .pt file' in result.reason
    result, _ = set_parameters(checkpoint='nope.pt')      # relative: the node's directory
    assert not result.successful and 'relative to' in result.reason
    # an existing file is accepted: its contents are read at configure, not here
    (tmp_path / 'model.pt').write_bytes(b'not read here')
    result, logged = set_parameters(checkpoint=str(tmp_path / 'model.pt'))
    assert result.successful, result.reason
    assert logged[0].startswith('checkpoint set to')
    result, _ = set_parameters(checkpoint='')              # none: random weights
    assert result.successful, result.reason
