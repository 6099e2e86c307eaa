"""pip install of the Python package (editable in the venv made by scripts/setup.sh, or a wheel).

The message module sam2_ros.msg is not built here: CMake/rosidl generates it (see CMakeLists.txt).
In a colcon workspace this file is not used; the package builds as ament_cmake.
"""

from setuptools import find_namespace_packages, setup

setup(
    name='sam2_ros',
    version='0.1.0',
    description='Track prompted objects in a ROS 2 camera stream with SAM 2',
    license='Apache-2.0',
    python_requires='>=3.10',
    # namespace-aware, so a subfolder that lacks __init__.py is not silently left out of a wheel
    packages=find_namespace_packages(include=['sam2_ros', 'sam2_ros.*'],
                                     exclude=['*.__pycache__']),
    package_data={'': ['*.yaml']},
    install_requires=['numpy', 'PyYAML'],
    entry_points={
        'console_scripts': [
            'sam2-ros-node=sam2_ros.ros.node:main',
            'sam2-ros-demo=sam2_ros.ros.demo:main',
            'sam2-ros-replay=sam2_ros.ros.replay:main',
            'sam2-ros-track=sam2_ros.cli.track_offline:main',
            'sam2-ros-positions=sam2_ros.ros.positions_node:main',
            'sam2-ros-synthetic-camera=sam2_ros.ros.synthetic_camera:main',
        ],
    },
)
