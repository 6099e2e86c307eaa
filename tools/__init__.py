"""Lab tools of sam2_ros: benchmarks, the node-latency harness, probes and the report.

Run from the repository root (``python -m tools.bench.cli ...``). Nothing here is installed
with the package (``setup.py`` and ``CMakeLists.txt`` install ``sam2_ros/`` only): a robot runs
the node, not these.
"""
