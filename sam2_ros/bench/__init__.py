"""Benchmarks of the streaming tracker against the official SAM 2 video predictor.

``python -m sam2_ros.bench.cli`` runs the variants of ``variants.py`` side by side in one
process; ``python -m sam2_ros.bench.drift`` runs the frozen-frame-index drift experiment.
Results of the H200 runs are in ``benchmarks/results/``; ``python -m sam2_ros.bench.report``
renders them into docs/performance.md.
"""
