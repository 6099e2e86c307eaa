"""What C libraries print to stderr while they decode an image, kept off the terminal.

libpng (through OpenCV) writes ``libpng error: IDAT: CRC error`` and warnings straight to file
descriptor 2 before the decode fails, beside the node's own clear error for the same frame.
:func:`captured` points fd 2 at a temporary file around the call and gives back what was
written there; lines of other threads written meanwhile (the node's log) are passed on to the
real stderr afterwards, so nothing else is lost.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from typing import Iterator, List

_LOCK = threading.Lock()
# line prefixes of the decoders' own messages, turned into the frame's error instead
DECODER_PREFIXES = ('libpng error', 'libpng warning', 'Corrupt JPEG data',
                    'Premature end of JPEG file')


@contextlib.contextmanager
def captured() -> Iterator[List[str]]:
    """Inside, fd 2 writes go to a temporary file; on the way out the list given holds the
    decoders' lines (DECODER_PREFIXES), and every other line is written to the real stderr."""
    found: List[str] = []
    with _LOCK, tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield found
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            other = []
            for line in tmp.read().decode(errors='replace').splitlines(keepends=True):
                (found if line.startswith(DECODER_PREFIXES) else other).append(line)
            found[:] = [ln.strip() for ln in found]
            if other:
                os.write(2, ''.join(other).encode())
