"""The parameter table: complete (every TrackerConfig field has a parameter), defaults taken from
the dataclasses, config/tracker.yaml lists every parameter, and bad values fail with a message
(which the node turns into a failed configure transition)."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from sam2_ros import stereo
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.ros import params
from sam2_ros.ros.options import NodeOptions

ROOT = Path(__file__).resolve().parents[2]


def test_every_tracker_field_and_node_option_has_a_parameter():
    fields = {(s.target, s.field) for s in params.PARAMS}
    for f in dataclasses.fields(TrackerConfig):
        assert ('tracker', f.name) in fields, f'TrackerConfig.{f.name} has no ROS parameter'
    for f in dataclasses.fields(NodeOptions):
        assert ('node', f.name) in fields, f'NodeOptions.{f.name} has no ROS parameter'
    assert len(params.names()) == len(set(params.names()))
    assert all(s.description for s in params.PARAMS)


@pytest.mark.parametrize('name', ['tracker.yaml', 'demo.yaml'])
def test_yaml_files_hold_known_parameters(name):
    values = yaml.safe_load((ROOT / 'config' / name).read_text())['/**']['ros__parameters']
    assert set(values) <= set(params.names())
    if name == 'tracker.yaml':
        assert set(values) == set(params.names()), 'config/tracker.yaml must list them all'
        # an empty YAML list means "unset" to rcl's parser, i.e. the default
        values = {k: v for k, v in values.items() if v != []}
        with pytest.raises(ValueError, match='checkpoint'):  # the user must name a checkpoint
            params.build(values)
        values['checkpoint'] = '/path/to/sam2.1_hiera_tiny.pt'
    params.build(values)  # every other value valid


def test_tracker_yaml_defaults_match_code():
    """tracker.yaml restates the defaults; this keeps it from drifting from config.py."""
    values = yaml.safe_load((ROOT / 'config/tracker.yaml').read_text())['/**']['ros__parameters']
    for spec in params.PARAMS:
        default = params.default_value(spec)
        assert values[spec.name] == ([] if default is None else default), spec.name


def test_build_maps_and_converts():
    cfg, opts = params.build({'model_size': 'small', 'image_size': 512.0, 'checkpoint': '',
                              'random_weights': True, 'batch_buckets': [1, 2],
                              'graph_cond_buckets': [1, 2], 'input_type': 'compressed',
                              'process_every_frame': True, 'stale_timeout_s': 3,
                              'fused_opt_in': ['window_attention', 'gelu_epilogue']})
    assert (cfg.model_size, cfg.image_size, cfg.checkpoint) == ('small', 512, None)
    assert list(cfg.fused_opt_in) == ['window_attention', 'gelu_epilogue']
    assert cfg.batch_buckets == (1, 2) and cfg.graph_cond_buckets == (1, 2)
    assert opts.input_type == 'compressed' and opts.process_every_frame
    assert opts.stale_timeout_s == 3.0 and isinstance(opts.stale_timeout_s, float)
    cfg, _ = params.build({'checkpoint': '/x.pt'})
    assert cfg.checkpoint == '/x.pt' and cfg.graph_cond_buckets is None
    assert cfg.compile_mode is None and cfg.graph_io       # off / on by default
    assert cfg.precast_weights and cfg.io_resolution is None
    cfg, _ = params.build({'checkpoint': '/x.pt', 'io_resolution': [1280, 720]})
    assert cfg.io_resolution == (1280, 720)
    cfg, _ = params.build({'checkpoint': '/x.pt', 'io_resolution': []})
    assert cfg.io_resolution is None
    cfg, _ = params.build({'checkpoint': '/x.pt', 'precast_weights': False})
    assert not cfg.precast_weights
    cfg, _ = params.build({'checkpoint': '/x.pt', 'compile_mode': 'default', 'graph_io': False})
    assert cfg.compile_mode == 'default' and not cfg.graph_io
    # ~/positions' validity bounds: stereo.Limits' defaults, set by their parameters
    _, opts = params.build({'checkpoint': '/x.pt'})
    assert opts.positions_limits == stereo.Limits()
    _, opts = params.build({'checkpoint': '/x.pt', 'positions_min_disparity_px': 0,
                            'positions_max_row_error_px': 2, 'positions_max_reprojection_px': 8})
    assert opts.positions_limits == stereo.Limits(0.0, 2.0, 8.0)
    _, opts = params.build({'checkpoint': '/x.pt', 'positions_min_depth': 0.02,
                            'positions_max_depth': 1})
    assert opts.positions_limits == stereo.Limits(min_depth=0.02, max_depth=1.0)


def test_camera_info_topics_beside_the_cameras_or_as_given():
    """A driver publishing camera_info elsewhere than <ns>/camera_info: camera_info_topics, one
    per camera (an empty entry keeps <ns>/camera_info), as positions_node's
    left_camera_info / right_camera_info."""
    stereo_cams = {'checkpoint': '/x.pt', 'cameras': ['left', 'right']}
    _, opts = params.build(stereo_cams)
    assert [opts.camera_info_topic(c) for c in (0, 1)] == ['left/camera_info',
                                                          'right/camera_info']
    _, opts = params.build({**stereo_cams,
                            'camera_info_topics': ['/stereo/left/camera_info', '']})
    assert [opts.camera_info_topic(c) for c in (0, 1)] == ['/stereo/left/camera_info',
                                                          'right/camera_info']
    for topics, text in ((['/a'], r'one topic per camera of cameras \(2; '),
                         (['/a', 'b c'], "camera_info_topics must be a valid ROS topic name"),
                         (['right/camera_info', ''], 'a different topic for each camera')):
        with pytest.raises(ValueError, match=text):
            params.build({**stereo_cams, 'camera_info_topics': topics})


@pytest.mark.parametrize('values, text', [
    ({'random_weights': True, 'image_size': 500}, 'image_size'),
    ({'random_weights': True, 'image_size': 'big'}, 'integer'),
    ({'random_weights': True, 'image_size': True}, 'integer'),
    ({'random_weights': True, 'use_cuda_graphs': 'yes'}, 'bool'),
    ({'random_weights': True, 'model_size': 3}, 'string'),
    ({'random_weights': True, 'input_type': 'h264'}, 'input_type'),
    ({'random_weights': True, 'qos_reliability': 'sometimes'}, 'qos_reliability'),
    ({'random_weights': True, 'click_object_id': 0}, 'click_object_id'),
    ({'random_weights': True, 'fifo_size': 0}, 'fifo_size'),
    ({'random_weights': True, 'no_such_param': 1}, 'unknown'),
    ({'random_weights': True, 'compile_mode': 'fastest'}, 'compile_mode'),
    ({'random_weights': True, 'batch_buckets': [1.0, 2.0]}, 'batch_buckets'),
    ({'random_weights': True, 'batch_buckets': [0, 2]}, 'must be a list of positive'),
    ({'random_weights': True, 'batch_buckets': [2, 2]}, r'batch_buckets must be distinct'),
    ({'random_weights': True, 'batch_buckets': [10 ** 6]}, r'batch_buckets must be distinct'),
    ({'random_weights': True, 'max_cond_frames': 4, 'graph_cond_buckets': [1, 5]},
     r'graph_cond_buckets must be distinct conditioning-frame counts in 1\.\.4'),
    ({'random_weights': True, 'graph_cond_buckets': [2, 2]}, 'graph_cond_buckets'),
    ({'random_weights': True, 'qos_depth': 10 ** 9}, r'qos_depth must be in 1\.\.1000'),
    ({'random_weights': True, 'fused_opt_in': ['window']}, 'fused_opt_in takes distinct'),
    ({'random_weights': True, 'prompt_queue_size': 1001}, 'prompt_queue_size'),
    ({'random_weights': True, 'positions_min_disparity_px': -1.0},
     'positions_min_disparity_px must be finite and >= 0'),
    ({'random_weights': True, 'positions_max_row_error_px': float('inf')},
     'positions_max_row_error_px must be a finite number'),
    ({'random_weights': True, 'positions_min_depth': 1.0, 'positions_max_depth': 0.5},
     'positions_max_depth must be 0'),
    ({}, 'checkpoint'),
])
def test_bad_or_missing_parameter_values_raise_a_value_error_saying_why(values, text):
    with pytest.raises(ValueError, match=text):
        params.build(values)


def test_docs_list_every_parameter():
    text = (ROOT / 'docs/ros.md').read_text()
    missing = [n for n in params.names() if f'| `{n}` |' not in text]
    assert not missing, f'docs/ros.md lacks parameters {missing}'


def test_yaml_and_docs_tables_are_written_from_the_knobs():
    """config/tracker.yaml and docs/ros.md's parameter tables are what `python -m tools.knobs`
    writes from the dataclasses' knob metadata (run it after changing a knob)."""
    from tools import knobs

    assert (ROOT / 'config/tracker.yaml').read_text() == knobs.render_yaml()
    docs = (ROOT / 'docs/ros.md').read_text()
    assert docs == knobs.docs_with_tables(docs)
    assert knobs.main(['--check']) == 0


def test_graph_tuning_is_grouped_apart():
    """A user sets none of the graph and kernel choices: they are the tuning section."""
    tuning = {s.name for s in params.PARAMS if s.tuning}
    assert {'graph_mode', 'batch_buckets', 'batch_major_memory', 'padded_graphs',
            'steady_attention', 'prompt_graphs', 'prompt_point_buckets', 'graph_cond_buckets',
            'graph_io', 'compile_mode', 'precast_weights', 'precompile'} <= tuning
    assert not tuning & set(params.RUNTIME_PARAMS)
    assert set(params.RUNTIME_PARAMS) == {'click_mode', 'click_object_id', 'detection_min_score',
                                          'detection_class_ids', 'detection_match_iou',
                                          'detection_drift_iou', 'detection_max_age_frames'}
