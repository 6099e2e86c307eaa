"""The CUDA-graph layer of the engine: capture, shape buckets, replay and fallback.

The tensor stages (``frame_in``, ``encoder``, ``step``, ``attention``, ``holes``,
``masks_out``, ``prompts``) live one folder up and run the same eagerly or captured; this
folder holds only the machinery that captures and replays them, each part given only what it
uses (no part reaches into the runner):

* ``capture.py``        a captured graph, and the capturer: warm-up, capture, one memory pool
* ``buckets.py``        which shapes get a graph: typed keys, from config and capacity alone
* ``step_graphs.py``    track-step graphs: exact, padded, the steady-state attention choice
* ``io_graphs.py``      frame-in and masks-out graphs with pinned staging
* ``prompt_graphs.py``  prompted steps (clicks, boxes, masks) as graphs
* ``precompiled.py``    inductor-compiled parts loaded from a cache
* ``image_graphs.py``   the image path's encoder and batched-decoder graphs
* ``kernels/``          Triton kernels of our own and the fused model copy the graphs capture
* ``runner.py``         the graph runner: captures the parts, replays them per frame, and
  falls back to the eager runner it holds
"""
