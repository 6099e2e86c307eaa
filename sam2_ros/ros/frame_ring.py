"""Received messages handed from a receiving process to the node through shared memory.

Why: in the node's process every 720p frame's receipt holds Python's GIL (rclpy's take and its
executor), and the tracking worker, the publishers and, on a rig, the other camera's receipt
wait for it (``tools/dds_probe.py --gil-probe``). A receiving process of its own
(:mod:`~sam2_ros.ros.receiver_process`) takes the serialized message there and writes it into
a slot of a ring in shared memory; the node reads it in place.

The protocol, over one ``AF_UNIX``/``SOCK_SEQPACKET`` socket pair (message boundaries kept,
Linux):

* receiver -> node, one fixed record each (``RECORD``): ``READY`` (subscribed), ``RING`` (a new
  ring of ``slots`` x ``slot_bytes``, its memfd passed along with the record: the first frame,
  a frame larger than the slots, or slots at least twice what the last ``shrink_after``
  frames needed), ``FRAME`` (ring ``gen``, ``slot``, ``nbytes`` written, ``t`` =
  time.monotonic() at receipt, ``sec`` = the writes so far that waited for a free slot),
  ``TOO_LARGE`` (a message over ``max_bytes``: not handed over; its header's stamp in
  ``sec``, ``nanosec``, so the node reports that frame);
* node -> receiver: ``RELEASE`` (``gen``, ``slot``): the node holds no view of that slot any
  more. A slot is released when the last numpy view of it dies (``weakref.finalize``), so a
  frame the worker, the FIFO or the overlay still reads is never overwritten; with every slot
  in use the receiver waits (as a full FIFO makes the subscription wait).

Memory: memfds, no names in /dev/shm, so nothing leaks when either process dies. A ring is
sized by the frames it holds: after a resolution drop (a 4K camera switched to 720p, one
oversized frame) the next ring is smaller, and the larger one is unmapped by the receiver at
once and by the node when its last view dies (its memory then goes back). Nothing here
imports ROS; :mod:`~sam2_ros.ros.receiver` (the node's side) and the receiving process use it.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from sam2_ros.ros.image_cdr import header_stamp

READY, RING, FRAME, TOO_LARGE, RELEASE = 1, 2, 3, 4, 5
# kind, gen, slot (or slots), nbytes (or slot_bytes), t, a TOO_LARGE message's stamp (sec,
# nanosec) or a FRAME's count of the writer's waits for a slot (sec)
RECORD = struct.Struct('<IIIQdiI')
HEADROOM = 1.25                        # a ring's slots: the first frame's size plus 25%
# A ring shrinks when a block of this many frames all fit in a slot 1/SHRINK_RATIO its size:
# every slot of a ring once filled by a large frame keeps its pages (the shared memory of
# slots x the largest frame) until the ring goes. The block is the hysteresis: sizes that
# alternate keep the larger ring (one large frame per block is enough), and a smaller ring is
# made at most once a block, so its cost (a memfd, page faults on its first writes) is
# amortized over SHRINK_AFTER frames (2 s at 60 Hz).
SHRINK_AFTER = 120
SHRINK_RATIO = 2


@dataclass
class Record:
    kind: int
    gen: int = 0
    slot: int = 0
    nbytes: int = 0
    t: float = 0.0
    sec: int = 0
    nanosec: int = 0

    def pack(self) -> bytes:
        return RECORD.pack(self.kind, self.gen, self.slot, self.nbytes, self.t, self.sec,
                           self.nanosec)


def unpack(data: bytes) -> Record:
    if len(data) != RECORD.size:
        raise ValueError(f'bad frame ring record of {len(data)} bytes')
    return Record(*RECORD.unpack(data))


def page_round(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


def socket_pair() -> Tuple[socket.socket, socket.socket]:
    """(node's end, receiver's end); the receiver's is inheritable (passed to the child)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.set_inheritable(True)
    return a, b


def close(sock: socket.socket) -> None:
    """Shut ``sock`` down, then close it: a thread blocked reading it returns and the peer
    sees the end (a plain close does neither while another thread is in recv)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class RingWriter:
    """The receiving process's side: rings of slots in memfds, a free list fed by the node's
    RELEASE records (``serve_releases``, a thread), ``write`` per message."""

    def __init__(self, sock: socket.socket, slots: int, max_bytes: int,
                 shrink_after: int = SHRINK_AFTER) -> None:
        if slots < 2:
            raise ValueError(f'a frame ring needs >= 2 slots, got {slots}')
        if shrink_after < 1:
            raise ValueError(f'shrink_after must be >= 1, got {shrink_after}')
        self.sock, self.slots, self.max_bytes = sock, int(slots), int(max_bytes)
        self.shrink_after = int(shrink_after)
        self.gen = 0
        self.slot_bytes = 0
        self.mem: Optional[mmap.mmap] = None
        self.free: List[int] = []
        self.cond = threading.Condition()
        self.closed = False              # the node's end is gone: stop
        self.waits = 0                   # writes that waited for a free slot (node behind)
        self.block_frames = 0            # frames written in the current block (shrink_after)
        self.block_max = 0               # ... and the largest of them

    def send(self, rec: Record, fds: Tuple[int, ...] = ()) -> None:
        if fds:
            socket.send_fds(self.sock, [rec.pack()], list(fds))
        else:
            self.sock.send(rec.pack())

    def write(self, data: bytes, t: float) -> bool:
        """Hand ``data`` (one serialized message) over; False if it was not (too large, or
        the node is gone). Waits while every slot is held by the node."""
        n = len(data)
        if n > self.max_bytes:
            sec, nanosec = header_stamp(data) or (0, 0)
            self.send(Record(TOO_LARGE, self.gen, 0, n, t, sec, nanosec))
            return False
        if n > self.slot_bytes:
            self._new_ring(n)
        else:
            self._shrink_if_oversized(n)
        with self.cond:
            if not self.free and not self.closed:
                self.waits += 1
            while not self.free and not self.closed:
                self.cond.wait()
            if self.closed:
                return False
            slot = self.free.pop()
        off = slot * self.slot_bytes
        self.mem[off:off + n] = data
        self.send(Record(FRAME, self.gen, slot, n, t, min(self.waits, 2 ** 31 - 1)))
        return True

    def ring_size(self, n: int) -> int:
        """The slot size of a ring made for a message of ``n`` bytes (>= n)."""
        return min(page_round(int(n * HEADROOM)), page_round(self.max_bytes))

    def _shrink_if_oversized(self, n: int) -> None:
        """Count ``n`` (fits the slots) in the current block; at the block's end, a new ring
        sized for its largest frame if the slots are SHRINK_RATIO times that or more. The
        node's views of the old ring stay valid (it stays mapped there while they live); its
        slots' releases name the old ``gen`` and are ignored here."""
        self.block_frames += 1
        self.block_max = max(self.block_max, n)
        if self.block_frames < self.shrink_after:
            return
        largest = self.block_max
        self.block_frames = self.block_max = 0
        if self.ring_size(largest) * SHRINK_RATIO <= self.slot_bytes:
            self._new_ring(largest)

    def _new_ring(self, n: int) -> None:
        size = self.ring_size(n)
        self.block_frames = self.block_max = 0
        fd = os.memfd_create(f'sam2_ros_frames_{self.gen + 1}', os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size * self.slots)
            mem = mmap.mmap(fd, size * self.slots)
            with self.cond:
                self.gen += 1
                old, self.slot_bytes, self.mem = self.mem, size, mem
                self.free = list(range(self.slots))[::-1]
            if old is not None:
                old.close()  # unmapped here now; the node's mapping lives while its views do
            self.send(Record(RING, self.gen, self.slots, size), (fd,))
        finally:
            os.close(fd)     # the mapping and the node's copy of the fd keep the memory

    def close(self) -> None:
        """Stop handing frames over: a waiting ``write`` returns False (SIGTERM)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def serve_releases(self) -> None:
        """The thread that returns released slots of the current ring to the free list until
        the node's end closes (then ``closed`` and every waiting ``write`` returns)."""
        while True:
            try:
                data = self.sock.recv(RECORD.size)
            except OSError:
                data = b''
            if not data:
                break
            rec = unpack(data)
            with self.cond:
                if rec.kind == RELEASE and rec.gen == self.gen:
                    self.free.append(rec.slot)
                    self.cond.notify()
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class RingReader:
    """The node's side: ``receive`` reads the receiver's next record; a FRAME comes back as a
    read-only numpy view of its slot ([nbytes] uint8), released to the receiver when the
    last view of it dies."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rings: Dict[int, Tuple[mmap.mmap, int]] = {}      # gen -> (mapping, slot_bytes)
        self.lock = threading.Lock()
        self.held = 0                                          # slots not yet released
        self.ring_bytes = 0             # the current ring's size (slots x slot_bytes)
        self.writer_waits = 0           # the receiver's writes that waited for a free slot

    def receive(self) -> Tuple[Record, Optional[np.ndarray]]:
        """The next record (and a FRAME's bytes); a Record of kind 0 when the receiver is
        gone (end of stream)."""
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, RECORD.size, 4)
        except OSError:
            return Record(0), None
        if not data:
            return Record(0), None
        rec = unpack(data)
        if rec.kind == RING:
            self._attach(rec, fds)
            return rec, None
        for fd in fds:
            os.close(fd)
        if rec.kind != FRAME:
            return rec, None
        self.writer_waits = rec.sec
        return rec, self._view(rec)

    def _attach(self, rec: Record, fds: List[int]) -> None:
        if len(fds) != 1:
            raise ValueError(f'frame ring {rec.gen} announced without its memory')
        try:
            mem = mmap.mmap(fds[0], rec.slot * rec.nbytes, prot=mmap.PROT_READ)
        finally:
            os.close(fds[0])
        # older rings stay mapped while views of them live (each view holds its mapping),
        # then are unmapped: a smaller ring gives the larger one's memory back
        self.rings = {rec.gen: (mem, rec.nbytes)}
        self.ring_bytes = rec.slot * rec.nbytes

    def _view(self, rec: Record) -> np.ndarray:
        if rec.gen not in self.rings:
            raise ValueError(f'frame in unknown ring {rec.gen}')
        mem, slot_bytes = self.rings[rec.gen]
        if rec.nbytes > slot_bytes:
            raise ValueError(f'frame of {rec.nbytes} bytes in slots of {slot_bytes}')
        view = np.frombuffer(mem, np.uint8, rec.nbytes, rec.slot * slot_bytes)
        with self.lock:
            self.held += 1
        weakref.finalize(view, self.release, rec.gen, rec.slot)
        return view

    def release(self, gen: int, slot: int) -> None:
        """Slot ``slot`` of ring ``gen`` is the receiver's again (called when its last view
        dies, from whichever thread that is)."""
        with self.lock:
            self.held -= 1
        try:
            self.sock.send(Record(RELEASE, gen, slot).pack())
        except OSError:
            pass                      # the receiver is gone: nothing to give back


def serve(reader: RingReader, on_frame: Callable[[Record, np.ndarray], None],
          on_record: Callable[[Record], None]) -> None:
    """Read records until the receiver is gone: frames to ``on_frame``, the rest (READY,
    TOO_LARGE, RING) to ``on_record``; returns at the end of the stream."""
    while True:
        rec, view = reader.receive()
        if rec.kind == 0:
            return
        if view is not None:
            on_frame(rec, view)
        else:
            on_record(rec)
        del view
