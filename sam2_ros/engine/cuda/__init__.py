"""The CUDA-graph layer of the engine: capture, shape buckets, replay and fallback.

The tensor stages (``frame_in``, ``encoder``, ``step``, ``attention``, ``holes``,
``masks_out``, ``prompts``) live one folder up and run the same eagerly or captured; this
folder holds only the machinery that captures and replays them:

* ``runner.py``         the graph runner: encoder and track-step graphs, replay, fallback
* ``io_graphs.py``      frame-in and masks-out graphs with pinned staging
* ``prompt_graphs.py``  prompted steps (clicks, boxes, masks) as graphs
* ``precompiled.py``    inductor-compiled parts loaded from a cache
"""
