"""tools.bench.gc_watch: the garbage collections of a benchmark's frames."""

from __future__ import annotations

import gc

from tools.bench import gc_watch


def test_watch_records_each_collection_with_its_generation_until_taken():
    with gc_watch.GcWatch() as watch:
        gc.collect(0)
        gc.collect(2)
        got = watch.take()
        assert [g for g, _ in got] == [0, 2] and all(ms >= 0 for _, ms in got)
        assert watch.take() == []                 # taken once
    n = len(gc.callbacks)
    gc.collect()
    assert watch.take() == [] and len(gc.callbacks) == n     # removed on exit


def test_summary_counts_per_generation_and_the_frame_ms():
    frames = [[(0, 0.5)], [], [(1, 1.0), (2, 4.0)]]
    assert gc_watch.summary(frames) == {'collections': [1, 1, 1], 'max_ms': 4.0,
                                        'total_ms': 5.5}
    assert gc_watch.frame_ms(frames[2]) == 5.0 and gc_watch.frame_ms([]) == 0.0
