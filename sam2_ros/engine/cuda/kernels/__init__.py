"""Triton kernels of our own for the captured graphs' fused model copy (``fused.py``).

Each kernel replaces a chain of small sam2/PyTorch kernels (a residual add, a float32 layer
norm, the bf16 cast autocast inserts before the next Linear, a window (un)partition copy, a
rotary encoding's casts and complex products) and computes the same function in the same
precision. ``TrackerConfig.fused_kernels`` turns them on per group; the eager runner always
keeps sam2's own modules. The 'constants' group (``constants.py``) launches no kernel of its
own: it stores what depends on the weights alone, so the graphs stop recomputing it.
"""
