"""Benchmarks of the streaming tracker against the official SAM 2 video predictor.

``python -m tools.bench.cli`` runs the variants of ``variants.py`` side by side in one
process.
Results of the H200 runs are in ``benchmarks/results/``; ``python -m tools.bench.report``
renders them into docs/performance.md.
"""
