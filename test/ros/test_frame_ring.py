"""The frame ring between a receiving process and the node (sam2_ros/ros/frame_ring.py),
ROS-free: frames arrive in order and byte-exact as views of shared memory, a slot is the
receiver's again only when the node's last view of it dies, the receiver waits while the node
holds every slot, a larger frame gets a new ring without disturbing views of the old one, and
a message over the limit is reported, with its stamp, instead of handed over; after a block of
smaller frames the ring shrinks (its memory given back on both sides once no view holds it),
but not for sizes that alternate; the receiver's waits for a slot reach the node."""

import gc
import queue
import struct
import threading
import weakref

import numpy as np
import pytest

from sam2_ros.ros import frame_ring as fr


class Pair:
    """A writer and a reader over one socket pair; the reader's records in a queue."""

    def __init__(self, slots=3, max_bytes=1 << 20, **writer_args):
        a, b = fr.socket_pair()
        self.writer = fr.RingWriter(b, slots, max_bytes, **writer_args)
        self.reader = fr.RingReader(a)
        self.got = queue.Queue()
        threading.Thread(target=self.writer.serve_releases, daemon=True).start()
        threading.Thread(target=fr.serve, daemon=True, args=(
            self.reader, lambda rec, view: self.got.put((rec, view)),
            lambda rec: rec.kind != fr.RING and self.got.put((rec, None)))).start()

    def next(self):
        return self.got.get(timeout=30)

    def close(self):
        fr.close(self.reader.sock)
        fr.close(self.writer.sock)


def test_frames_arrive_in_order_byte_exact_as_read_only_views():
    p = Pair(slots=4)
    try:
        sent = [bytes((np.arange(1000 + i) * (i + 1) % 251).astype(np.uint8)) for i in range(4)]
        for i, data in enumerate(sent):
            assert p.writer.write(data, float(i))
        views = []
        for i, data in enumerate(sent):
            rec, view = p.next()
            assert rec.kind == fr.FRAME and rec.t == float(i) and bytes(view) == data
            assert not view.flags.writeable
            views.append(view)
        del view
        assert p.reader.held == 4
        del views
        gc.collect()
        assert p.reader.held == 0
    finally:
        p.close()


def test_the_receiver_waits_until_the_last_view_of_a_slot_dies():
    p = Pair(slots=2)
    try:
        p.writer.write(b'a' * 100, 0.0)
        p.writer.write(b'b' * 100, 0.0)
        first, second = p.next()[1], p.next()[1]
        derived = memoryview(first)[10:20]           # a view of a view keeps the slot
        del first
        gc.collect()
        done = threading.Event()
        threading.Thread(target=lambda: (p.writer.write(b'c' * 100, 1.0), done.set()),
                         daemon=True).start()
        assert not done.wait(0.3)                    # both slots still held
        assert bytes(derived) == b'a' * 10
        del derived
        gc.collect()
        assert done.wait(30)
        rec, third = p.next()
        assert bytes(third) == b'c' * 100 and bytes(second) == b'b' * 100   # 'b' untouched
    finally:
        p.close()


def test_a_larger_frame_gets_a_new_ring_and_old_views_stay_valid():
    p = Pair(slots=2)
    try:
        p.writer.write(b'x' * 1000, 0.0)
        rec, small = p.next()
        big = bytes(range(256)) * 100                # larger than the first ring's slots
        p.writer.write(big, 1.0)
        rec2, large = p.next()
        assert rec2.gen == rec.gen + 1 and bytes(large) == big
        assert bytes(small) == b'x' * 1000
    finally:
        p.close()


def test_a_message_over_the_limit_is_reported_with_its_stamp_not_handed_over():
    p = Pair(max_bytes=4096)
    try:
        assert not p.writer.write(b'z' * 5000, 2.0)
        rec, view = p.next()
        assert rec.kind == fr.TOO_LARGE and rec.nbytes == 5000 and view is None
        assert (rec.sec, rec.nanosec) == (0, 0)                  # no CDR header: no stamp
        header = b'\x00\x01\x00\x00' + struct.pack('<iI', 12, 34)  # CDR, LE; the stamp
        assert not p.writer.write(header + b'z' * 5000, 2.5)
        rec, view = p.next()
        assert (rec.kind, rec.sec, rec.nanosec, rec.t) == (fr.TOO_LARGE, 12, 34, 2.5)
        assert p.writer.write(b'ok', 3.0)
        assert bytes(p.next()[1]) == b'ok'
    finally:
        p.close()


def test_a_waiting_receiver_returns_when_the_node_end_closes():
    p = Pair(slots=2)
    p.writer.write(b'1', 0.0)
    p.writer.write(b'2', 0.0)
    views = [p.next()[1], p.next()[1]]
    result = []
    t = threading.Thread(target=lambda: result.append(p.writer.write(b'3', 0.0)), daemon=True)
    t.start()
    fr.close(p.reader.sock)                          # the node stopped
    t.join(30)
    assert result == [False] and p.writer.closed
    del views
    p.writer.sock.close()


def send_and_drop(p, data):
    """Write ``data``, read it back, drop the view (refcounting frees its slot at once: no
    gc.collect, slow with torch imported); its record."""
    assert p.writer.write(data, 0.0)
    rec, view = p.next()
    assert bytes(view) == data
    del view
    return rec


def test_the_ring_shrinks_after_a_block_of_smaller_frames_and_old_views_stay_valid():
    """A resolution drop (one large frame, then small ones): after ``shrink_after`` small
    frames the receiver makes a ring sized for them and unmaps the large one; the node's view
    of a large frame stays intact, and its mapping goes when that view dies."""
    block = getattr(fr, 'SHRINK_AFTER', 120)        # the default block (named by the fix)
    p = Pair(slots=2)
    try:
        big, small = bytes(range(256)) * 256, b's' * 1000          # 64 KiB, 1000 bytes
        assert p.writer.write(big, 0.0)
        rec, big_view = p.next()
        large_slot = p.writer.slot_bytes
        assert large_slot == fr.page_round(int(len(big) * fr.HEADROOM))
        writer_old = weakref.ref(p.writer.mem)
        reader_old = weakref.ref(p.reader.rings[rec.gen][0])
        gens = [send_and_drop(p, small).gen for _ in range(block)]
        # the block's last frame went into the new ring, those before it into the large one
        assert gens == [rec.gen] * (block - 1) + [rec.gen + 1]
        assert p.writer.slot_bytes == fr.page_round(int(len(small) * fr.HEADROOM)) < large_slot
        assert len(p.writer.mem) == 2 * p.writer.slot_bytes
        assert p.reader.ring_bytes == 2 * p.writer.slot_bytes
        assert writer_old() is None                  # the receiver unmapped the large ring
        assert bytes(big_view) == big                # ... the node's view of it is intact
        assert reader_old() is not None
        del big_view
        gc.collect()
        assert reader_old() is None                  # last view gone: the node unmapped it
        assert list(p.reader.rings) == [rec.gen + 1]
        assert send_and_drop(p, big).gen == rec.gen + 2     # a large frame again: it grows
    finally:
        p.close()


def test_alternating_sizes_keep_one_ring_and_an_oversized_frame_delays_the_shrink():
    """Hysteresis: a large frame in every block keeps the large ring (no ring per frame);
    one oversized frame among small ones only delays the shrink to the next block."""
    p = Pair(slots=2, shrink_after=4)
    try:
        big, small = b'B' * 50000, b's' * 1000
        first = send_and_drop(p, big).gen
        # frames needing more than half the slots: the ring is kept
        assert [send_and_drop(p, b'm' * 30000).gen for _ in range(8)] == [first] * 8
        gens = [send_and_drop(p, data).gen for data in [small, big] * 10]
        assert set(gens) == {first}
        gens = [send_and_drop(p, data).gen for data in [small, small, big, small]]
        assert set(gens) == {first}                  # a block with a large frame: kept
        gens = [send_and_drop(p, small).gen for _ in range(4)]
        assert gens == [first] * 3 + [first + 1]     # a block of small frames: shrunk
    finally:
        p.close()


def test_the_receivers_waits_for_a_slot_reach_the_node():
    p = Pair(slots=2)
    try:
        p.writer.write(b'1', 0.0)
        p.writer.write(b'2', 0.0)
        views = [p.next()[1], p.next()[1]]
        assert p.reader.writer_waits == 0
        t = threading.Thread(target=p.writer.write, args=(b'3', 0.0), daemon=True)
        t.start()
        for _ in range(6000):                        # until the writer found no free slot
            if p.writer.waits:
                break
            t.join(0.01)
        assert p.writer.waits == 1 and t.is_alive()
        del views
        gc.collect()
        rec, view = p.next()
        assert bytes(view) == b'3' and rec.sec == 1 and p.reader.writer_waits == 1
    finally:
        p.close()


def test_records_are_checked():
    with pytest.raises(ValueError, match='bad frame ring record'):
        fr.unpack(b'\x00' * 5)
    with pytest.raises(ValueError, match='>= 2 slots'):
        fr.RingWriter(fr.socket_pair()[1], 1, 100)
    with pytest.raises(ValueError, match='shrink_after'):
        fr.RingWriter(fr.socket_pair()[1], 2, 100, shrink_after=0)
