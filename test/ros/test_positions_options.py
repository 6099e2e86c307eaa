"""positions_node's parameters (sam2_ros/ros/positions_options.py): converted as the tracker's
are (an integer is a float parameter's value), every value the node could not run with
refused with one message naming it, declared with their descriptions, and the docs table
written from the knobs. The node itself: test_positions_node.py."""

import math
import subprocess
import sys

import pytest

from ros_helpers import ROOT, DomainLease, require_messages

from sam2_ros.ros.positions_options import (PositionsOptions, ParameterError, SPECS, build,
                                            ms_to_ns)


def test_defaults_are_valid_and_every_option_is_a_parameter():
    assert build({}) == PositionsOptions()
    assert [s.name for s in SPECS] == ['left', 'right', 'tracker', 'left_camera_info',
                                       'right_camera_info', 'rectified',
                                       'pair_tolerance_ms', 'pair_wait_ms', 'pair_depth',
                                       'diagnostics_period_s', 'min_disparity_px',
                                       'max_row_error_px', 'max_reprojection_px', 'min_depth',
                                       'max_depth', 'allow_clipped']
    assert all(s.description for s in SPECS)


def test_validity_bounds_are_the_limits_of_the_positions():
    from sam2_ros import stereo

    assert build({}).limits == stereo.Limits()
    assert build({'min_disparity_px': 0, 'max_row_error_px': 1.5,
                  'max_reprojection_px': 2}).limits == stereo.Limits(0.0, 1.5, 2.0)


def test_the_scene_depth_range_is_part_of_the_limits():
    """min_depth, max_depth (off by default): one id on two objects at one height passes the
    row check and only the depth range refuses it."""
    from sam2_ros import stereo

    o = build({'min_depth': 0.02, 'max_depth': 1})
    assert o.limits == stereo.Limits(min_depth=0.02, max_depth=1.0)


def test_camera_info_topics_default_beside_the_namespaces_or_as_given():
    o = build({'left': 'stereo/l', 'right': 'r'})
    assert [o.camera_info_topic(side) for side in (0, 1)] == ['/stereo/l/camera_info',
                                                              '/r/camera_info']
    o = build({'left_camera_info': '/stereo/left/camera_info', 'right_camera_info': 'calib_r'})
    assert [o.camera_info_topic(side) for side in (0, 1)] == ['/stereo/left/camera_info',
                                                              'calib_r']


def test_clipped_masks_are_refused_unless_allowed():
    """allow_clipped (as the tracker's positions_allow_clipped): false by default."""
    assert not build({}).allow_clipped and build({'allow_clipped': True}).allow_clipped


def test_integers_are_taken_for_float_parameters():
    """`-p pair_wait_ms:=300` gives an integer: rclpy refused it against the float default
    (InvalidParameterTypeException); the tracker node takes it, so does this one."""
    o = build({'pair_wait_ms': 300, 'pair_tolerance_ms': 2, 'diagnostics_period_s': 5,
               'pair_depth': 4.0})
    assert (o.pair_wait_ms, o.pair_tolerance_ms, o.diagnostics_period_s, o.pair_depth) == \
        (300.0, 2.0, 5.0, 4)
    assert isinstance(o.pair_wait_ms, float) and isinstance(o.pair_depth, int)
    assert (o.wait_ns, o.tolerance_ns) == (ms_to_ns(300), 2_000_000)


# the audit's values (each crashed the node with a traceback, or spun a core), and neighbours
BAD = [
    ({'pair_wait_ms': 'abc'}, 'parameter pair_wait_ms must be a finite number'),
    ({'pair_wait_ms': math.nan}, 'parameter pair_wait_ms must be a finite number'),
    ({'rectified': 'yes'}, 'parameter rectified must be a bool'),
    ({'allow_clipped': 1}, 'parameter allow_clipped must be a bool'),
    ({'pair_depth': 0}, 'pair_depth must be >= 1, got 0'),
    ({'pair_depth': 2.5}, 'parameter pair_depth must be an integer'),
    ({'pair_tolerance_ms': 500.0}, r'pair_tolerance_ms must be in 0..pair_wait_ms/2 \(100\)'),
    ({'pair_tolerance_ms': -1}, 'pair_tolerance_ms must be in 0..pair_wait_ms/2'),
    ({'pair_wait_ms': -5.0}, 'pair_wait_ms must be > 0, got -5.0'),
    ({'pair_wait_ms': 1e-9}, 'pair_wait_ms must be > 0'),         # 0 ns: the pairer's refusal
    ({'left': ''}, r"/<left>/<tracker>/state \(parameters left, tracker\) must be a valid ROS "
                   r"topic name, got '//sam2_tracker/state'"),
    ({'tracker': 'a b'}, r'/<left>/<tracker>/state .* must be a valid ROS topic name'),
    ({'left': ['a']}, 'parameter left must be a string'),
    ({'left': 'right'}, "left and right must be different cameras, both are 'right'"),
    ({'diagnostics_period_s': 0.0}, r'diagnostics_period_s must be in 0.001..86400, got 0.0'),
    ({'diagnostics_period_s': 1e300}, 'diagnostics_period_s must be in'),   # timer overflow
    ({'pair_wiat_ms': 3}, r"unknown parameters: \['pair_wiat_ms'\]"),
    ({'min_disparity_px': -0.5}, 'min_disparity_px must be finite and >= 0, got -0.5'),
    ({'max_reprojection_px': math.inf}, 'parameter max_reprojection_px must be a finite number'),
    ({'max_row_error_px': 0}, 'max_row_error_px must be finite and > 0, got 0.0'),
    ({'min_depth': -0.1}, 'min_depth must be finite and >= 0, got -0.1'),
    ({'min_depth': 0.5, 'max_depth': 0.3}, r'max_depth must be 0 \(no bound\) or above min_depth'),
    ({'left_camera_info': 'a b'}, r"left_camera_info must be a valid ROS topic name, got 'a b'"),
    ({'right_camera_info': '/left/camera_info'},
     r"left_camera_info and right_camera_info must be different topics \(one CameraInfo per "
     r"camera\), both are '/left/camera_info'"),
    ({'left_camera_info': 3}, 'parameter left_camera_info must be a string'),
]


@pytest.mark.parametrize('values, message', BAD, ids=[str(v) for v, _ in BAD])
def test_a_value_the_node_cannot_run_with_is_refused_naming_it(values, message):
    with pytest.raises(ParameterError, match=message):
        build(values)


def test_docs_table_is_written_from_the_knobs():
    """docs/ros.md's positions_node table is `python -m tools.knobs`'s (run it after changing
    a knob of PositionsOptions)."""
    from tools import knobs

    docs = (ROOT / 'docs' / 'ros.md').read_text()
    table = knobs.render_positions_table()
    assert table in docs
    assert all(f'| `{s.name}` |' in table for s in SPECS)


@pytest.fixture
def ros_context():
    require_messages()
    import rclpy
    import vision_msgs.msg  # noqa: F401 - setup installs it; positions_node publishes it

    lease = DomainLease()
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id)
    try:
        yield ctx
    finally:
        rclpy.try_shutdown(context=ctx)
        lease.release()


def test_node_declares_described_parameters_and_takes_an_integer_for_a_float(ros_context):
    """`ros2 param describe` showed no descriptions; an integer override crashed the node."""
    from rclpy.parameter import Parameter

    from sam2_ros.ros.positions_node import make_node

    node = make_node(context=ros_context,
                     parameter_overrides=[Parameter('pair_wait_ms', value=300)])
    try:
        assert node.options.pair_wait_ms == 300.0
        for spec in SPECS:
            desc = node.describe_parameter(spec.name)
            assert desc.description == f'[{spec.kind}] {spec.description}'
            assert desc.dynamic_typing
    finally:
        node.destroy_node()


def test_node_with_a_bad_value_raises_the_parameter_error(ros_context):
    from rclpy.parameter import Parameter

    from sam2_ros.ros.positions_node import make_node

    with pytest.raises(ParameterError, match='pair_depth must be >= 1'):
        make_node(context=ros_context, parameter_overrides=[Parameter('pair_depth', value=0)])


@pytest.mark.parametrize('given, message', [
    (['-p', 'diagnostics_period_s:=0.0'], 'diagnostics_period_s must be in 0.001..86400'),
    (['--params-file'], "got '//sam2_tracker/state'")], ids=['-p', 'params-file'])
def test_positions_node_with_a_bad_parameter_exits_with_one_error_line(tmp_path, given,
                                                                       message):
    """As the tracker node on bad parameters: one line saying what to fix, exit status 1, no
    traceback (an empty left was rclpy's InvalidTopicNameException; a period of 0 was
    accepted and spun a core)."""
    require_messages()
    if given == ['--params-file']:
        path = tmp_path / 'bad.yaml'
        path.write_text("/**:\n  ros__parameters:\n    left: ''\n")
        given = given + [str(path)]
    lease = DomainLease()
    try:
        p = subprocess.run([sys.executable, '-m', 'sam2_ros.ros.positions_node', '--ros-args',
                            *given], env=lease.env(), cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    finally:
        lease.release()
    out = (p.stdout + p.stderr).strip()
    assert p.returncode == 1, out
    assert len(out.splitlines()) == 1 and 'Traceback' not in out, out
    assert '[FATAL]' in out and '[sam2_positions]' in out and out.endswith('; exiting'), out
    assert message in out, out
