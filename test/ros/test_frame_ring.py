"""The frame ring between a receiving process and the node (sam2_ros/ros/frame_ring.py),
ROS-free: frames arrive in order and byte-exact as views of shared memory, a slot is the
receiver's again only when the node's last view of it dies, the receiver waits while the node
holds every slot, a larger frame gets a new ring without disturbing views of the old one, and
a message over the limit is reported, with its stamp, instead of handed over."""

import gc
import queue
import struct
import threading

import numpy as np
import pytest

from sam2_ros.ros import frame_ring as fr


class Pair:
    """A writer and a reader over one socket pair; the reader's records in a queue."""

    def __init__(self, slots=3, max_bytes=1 << 20):
        a, b = fr.socket_pair()
        self.writer = fr.RingWriter(b, slots, max_bytes)
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


def test_records_are_checked():
    with pytest.raises(ValueError, match='bad frame ring record'):
        fr.unpack(b'\x00' * 5)
    with pytest.raises(ValueError, match='>= 2 slots'):
        fr.RingWriter(fr.socket_pair()[1], 1, 100)
