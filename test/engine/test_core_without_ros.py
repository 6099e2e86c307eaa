"""The tracker core, the offline tool and the benchmarks import no ROS: they can be used and
tested on a machine without rclpy (cv_bridge and camera_calibration keep the same split)."""

import subprocess
import sys

CORE = ['sam2_ros.engine', 'sam2_ros.engine.config', 'sam2_ros.engine.types',
        'sam2_ros.engine.errors', 'sam2_ros.engine.model', 'sam2_ros.engine.frame_in',
        'sam2_ros.engine.prompts', 'sam2_ros.engine.encoder', 'sam2_ros.engine.memory',
        'sam2_ros.engine.step', 'sam2_ros.engine.masks_out', 'sam2_ros.engine.staging',
        'sam2_ros.engine.eager', 'sam2_ros.engine.cuda.runner', 'sam2_ros.engine.cuda.io_graphs',
        'sam2_ros.engine.cuda.capture', 'sam2_ros.engine.cuda.buckets',
        'sam2_ros.engine.cuda.step_graphs', 'sam2_ros.engine.cuda.prompt_graphs',
        'sam2_ros.engine.tracker', 'sam2_ros.engine.camera', 'sam2_ros.engine.streams',
        'sam2_ros.engine.stream',
        'sam2_ros.engine.multistream', 'sam2_ros.engine.runners', 'sam2_ros.engine.decode',
        'sam2_ros.overlay', 'sam2_ros.stereo', 'sam2_ros.cli.track_offline', 'tools.bench.cli']
ROS = ('rclpy', 'sensor_msgs', 'std_msgs', 'geometry_msgs', 'cv_bridge', 'sam2_ros.msg',
       'builtin_interfaces', 'diagnostic_msgs')


def test_core_modules_import_no_ros():
    code = ('import sys\n'
            f'for m in {CORE!r}: __import__(m)\n'
            f'print(sorted(m for m in sys.modules if m.split(".")[0] in {ROS!r} '
            f'or m == "sam2_ros.msg"))\n')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '[]', out.stdout
