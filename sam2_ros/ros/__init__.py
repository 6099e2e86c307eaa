"""The ROS 2 side of sam2_ros: lifecycle node, message conversions, bag replay and demo.

Importing this package imports nothing heavy; rclpy, cv_bridge and torch are imported by the
modules that need them (``node``, ``replay``, ``demo``), so ``params`` and ``worker`` can be
used and tested without a ROS installation.
"""
