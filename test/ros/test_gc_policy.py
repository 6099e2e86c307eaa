"""gc_policy: the node's freeze of configure's heap and its full-collection monitor."""

import gc

from sam2_ros.ros import gc_policy


def test_freeze_exempts_live_objects_until_unfrozen():
    keep = [[i] for i in range(10000)]          # long-lived containers, as a model's
    try:
        n = gc_policy.freeze()
        assert n >= len(keep) and gc.get_freeze_count() == n
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(o) in tracked for o in keep[:100])   # skipped by collections
    finally:
        gc_policy.unfreeze()
    assert gc.get_freeze_count() == 0
    tracked = {id(o) for o in gc.get_objects()}
    assert all(id(o) in tracked for o in keep[:100])


def test_pause_monitor_counts_full_collections_only():
    m = gc_policy.PauseMonitor()
    try:
        gc.collect(0)
        gc.collect(1)
        assert m.full_collections == 0
        gc.collect()
        gc.collect(2)
        assert m.full_collections == 2 and m.max_pause_ms > 0
    finally:
        m.close()
    gc.collect()
    assert m.full_collections == 2
    assert all(getattr(cb, '__self__', None) is not m for cb in gc.callbacks)   # removed


def test_pause_monitor_keeps_long_pauses_for_the_log(monkeypatch):
    m = gc_policy.PauseMonitor()
    try:
        monkeypatch.setattr(gc_policy, 'LONG_PAUSE_MS', 0.0)     # every full collection
        gc.collect()
        gc.collect(1)                                           # not a full one
        long = m.take_long_pauses()
        assert len(long) == 1 and long[0][1] > 0 and m.take_long_pauses() == []
        monkeypatch.setattr(gc_policy, 'LONG_PAUSE_MS', 1e9)     # none is this long
        gc.collect()
        assert m.take_long_pauses() == [] and m.full_collections == 2
    finally:
        m.close()


def test_the_freezes_own_collection_is_not_a_pause(monkeypatch):
    """The node freezes under ``ignoring``: that full collection (configure's, no frame in
    flight) is neither counted nor logged; those after it are."""
    m = gc_policy.PauseMonitor()
    try:
        monkeypatch.setattr(gc_policy, 'LONG_PAUSE_MS', 0.0)
        with m.ignoring():
            gc_policy.freeze()
        assert m.full_collections == 0 and m.take_long_pauses() == []
        gc.collect()
        assert m.full_collections == 1 and len(m.take_long_pauses()) == 1
    finally:
        gc_policy.unfreeze()
        m.close()
