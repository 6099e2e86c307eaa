"""Compressed camera frames (JPEG or PNG bytes) -> frames for the tracker, validated first.

JPEG on a CUDA device goes through nvJPEG (``torchvision.io.decode_jpeg`` with a CUDA
``device``) straight into a [H, W, 3] uint8 CUDA tensor, which the engine's frame-in stage
copies device to device: the pixels are never decoded on, or copied to, the host. Everything
else (PNG, JPEG kinds nvJPEG is not given, a machine without CUDA or torchvision, the GPU path
switched off) is decoded on the host by ``cv2.imdecode`` exactly as the ROS node always did.

Both paths run the same checks BEFORE decoding, from the header alone: the format is named and
sniffed, the declared size is held against a pixel limit (a 425 KB PNG can declare
20000x20000: 1.2 GB decoded, kept by the allocator), 16-bit images are refused rather than cut
to 8 bit, and truncated data (no JPEG end-of-image marker after the scan, no PNG IEND chunk) is
refused (both found by walking the file's segments or chunks, so filler after the end, as some
drivers publish their whole buffer, is accepted, as the decoders accept it); each defect is a
:class:`FrameError` saying what is wrong. The two decoders do not give the same pixels
(chroma upsampling, IDCT and colour conversion differ): ``test/gpu/test_decode_gpu.py`` bounds
the difference.

No ROS here: the node hands in the message's ``data`` (any buffer: bytes, array.array, numpy)
and ``format``.
"""

from __future__ import annotations

import contextlib
import re
import struct
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, List, Optional, Tuple

import cv2
import numpy as np
import torch

from sam2_ros.engine.errors import FrameError
from sam2_ros.engine.frame_in import Frame

# Format names accepted in a CompressedImage's ``format`` (image_transport writes e.g.
# 'rgb8; jpeg compressed bgr8' or 'png').
COMPRESSED_FORMATS = ('jpeg', 'jpg', 'png')
# Default pixel limit (the node's max_image_pixels): 8K UHD.
MAX_IMAGE_PIXELS = 7680 * 4320
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
# JPEG frame headers nvJPEG is given: baseline, extended sequential and progressive Huffman
# (the others, lossless, hierarchical and arithmetic-coded, are rare and go to the host).
GPU_SOF = (0xC0, 0xC1, 0xC2)
# scans of one JPEG: a progressive file has about ten; libjpeg-turbo suggests 500 as the limit
# for untrusted input (each scan is a pass over the image: thousands take minutes)
MAX_JPEG_SCANS = 500
# libjpeg's warnings of data it could not decode (it fills the rest with gray)
CORRUPT_WARNINGS = ('premature end', 'inconsistent progression')
# A marker after a JPEG scan's entropy-coded data: 0xFF followed by neither a stuffed 0x00,
# a restart marker (both part of the scan) nor another 0xFF (fill before a marker).
JPEG_MARKER = re.compile(rb'\xff[^\x00\xd0-\xd7\xff]')


@dataclass(frozen=True)
class ImageHeader:
    """What the header of a compressed image declares (nothing decoded)."""

    kind: str           # 'jpeg' | 'png'
    width: int
    height: int
    bits: int           # bits per sample
    components: int     # JPEG: colour components (1 gray, 3 YCbCr, 4 CMYK); PNG: 0
    sof: int            # JPEG: its frame header marker (0xC0 baseline, 0xC2 progressive); PNG: 0
    complete: bool      # JPEG: an end-of-image marker after the scan; PNG: an IEND chunk
    #                     (or a chunk list broken by corrupt data: the decoder's to refuse)
    end: int = 0        # JPEG: its bytes through the end-of-image marker (what nvJPEG is given:
    #                     filler after it is not the image's); PNG and incomplete: all
    frames: int = 1     # JPEG: frame headers (SOFn) before the scan; one image has one
    scans: int = 0      # JPEG: start-of-scan markers through the end (progressive: several)


def _buffer(data: Any) -> memoryview:
    return memoryview(data).cast('B')


def parse_header(data: Any) -> Optional[ImageHeader]:
    """The header of PNG or JPEG ``data`` (any buffer), read without decoding; None when
    neither header is found (or the JPEG's frame header is missing)."""
    mv = _buffer(data)
    n = len(mv)
    if bytes(mv[:8]) == PNG_SIGNATURE and n >= 26 and bytes(mv[12:16]) == b'IHDR':
        w, h = struct.unpack_from('>II', mv, 16)
        return ImageHeader('png', w, h, mv[24], 0, 0, png_complete(mv), n)
    if bytes(mv[:2]) != b'\xff\xd8':
        return None
    i, sof, frames = 2, None, 0
    while i + 3 < n:
        if mv[i] != 0xFF:
            return None
        marker = mv[i + 1]
        if marker == 0xFF:                                # fill byte
            i += 1
            continue
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:      # markers without a length
            i += 2
            continue
        if marker == 0xDA:                                # start of scan: the header is over
            break
        seg = struct.unpack_from('>H', mv, i + 2)[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and i + 9 < n:  # SOFn
            h, w = struct.unpack_from('>HH', mv, i + 5)
            sof = sof or (marker, w, h, mv[i + 4], mv[i + 9])     # the first one counts
            frames += 1
        i += 2 + seg
    if sof is None:
        return None
    end, scans = jpeg_end(mv, i) if i + 3 < n and mv[i + 1] == 0xDA else (None, 0)
    marker, w, h, bits, comps = sof
    return ImageHeader('jpeg', w, h, bits, comps, marker, end is not None,
                       n if end is None else end, frames, scans)


def jpeg_end(mv: memoryview, scan: int) -> Tuple[Optional[int], int]:
    """Where the JPEG ``mv`` ends (the offset after its end-of-image marker), from its first
    start of scan at ``scan``, and its scans (start-of-scan markers) on the way; None when the
    marker is missing (truncated). Walked, not
    searched for in the last bytes: the entropy-coded data up to the next marker, other
    segments (a progressive file's later tables and scans) by their length, so that filler
    after the marker (drivers publishing their whole MJPEG buffer) is accepted and the bytes
    FF D9 inside a segment's payload are not taken for the marker."""
    n, pos, scans = len(mv), scan, 0
    while True:
        found = JPEG_MARKER.search(mv, pos)
        if found is None:
            return None, scans
        at = found.start()
        marker = mv[at + 1]
        if marker == 0xD9:
            return at + 2, scans
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:       # markers without a length
            pos = at + 2
            continue
        if at + 4 > n:
            return None, scans
        scans += marker == 0xDA
        pos = at + 2 + struct.unpack_from('>H', mv, at + 2)[0]    # SOS: then its scan


def png_complete(mv: memoryview) -> bool:
    """Whether the PNG ``mv``'s chunk list, walked from the signature by each chunk's length,
    reaches a whole IEND chunk: filler after it is accepted, the bytes 'IEND' inside another
    chunk's data are not taken for it. A chunk list that runs past the data is truncated; one
    that meets a chunk type not of four ASCII letters is corrupt, not truncated: True, and the
    decoder refuses it with libpng's reason."""
    n, pos = len(mv), len(PNG_SIGNATURE)
    while pos + 12 <= n:
        length = struct.unpack_from('>I', mv, pos)[0]
        kind = bytes(mv[pos + 4:pos + 8])
        if not kind.isalpha():
            return True
        if kind == b'IEND':
            return pos + 12 + length <= n
        pos += 12 + length
    return False


def compressed_header(data: Any) -> Optional[Tuple[str, int, int, int]]:
    """(kind, width, height, bits per sample) of a PNG or JPEG header; None when neither is
    found."""
    head = parse_header(data)
    return None if head is None else (head.kind, head.width, head.height, head.bits)


def check_compressed(data: Any, fmt: Optional[str],
                     max_pixels: int = MAX_IMAGE_PIXELS) -> ImageHeader:
    """Validate compressed ``data`` before any decoding; return its header.

    ``fmt``: the message's format string, which must name jpeg or png (None: not checked, the
    bytes decide). Raises FrameError for another format, no data, no PNG/JPEG header, more
    than ``max_pixels`` declared, a zero size, not 8 bits per sample, or truncated data."""
    if fmt is not None:
        low = fmt.lower()
        if not any(f in low for f in COMPRESSED_FORMATS) or 'compresseddepth' in low:
            raise FrameError(f'unsupported compressed format {fmt!r}; accepted: jpeg, png')
    n = len(_buffer(data))
    if n == 0:
        raise FrameError('compressed image with no data')
    head = parse_header(data)
    if head is None:
        raise FrameError(f'cannot decode compressed image ({fmt!r}, {n} bytes): no PNG or '
                         f'JPEG header')
    kind, w, h = head.kind, head.width, head.height
    if w * h > max_pixels:
        raise FrameError(f'{kind} declares {w}x{h} = {w * h} pixels, more than '
                         f'max_image_pixels {max_pixels}: not decoded')
    if w == 0 or h == 0:
        raise FrameError(f'{kind} declares a zero size ({w}x{h})')
    # a PNG of 1, 2 or 4 bits (a palette, a mask) decodes to 8; 16 bits (depth) do not
    if head.bits != 8 and not (kind == 'png' and head.bits in (1, 2, 4)):
        raise FrameError(f'{kind} has {head.bits} bits per sample; only 8-bit images are '
                         f'tracked (convert it, e.g. depth, to 8-bit colour first)')
    if head.frames != 1:      # a decoder may size its output by either header
        raise FrameError(f'jpeg has {head.frames} frame headers: not one image')
    if head.scans > MAX_JPEG_SCANS:
        raise FrameError(f'jpeg has {head.scans} scans, more than {MAX_JPEG_SCANS}: not '
                         f'decoded (each scan is a pass over the whole image)')
    if not head.complete:
        what = 'no end-of-image marker after its scan' if kind == 'jpeg' else 'no IEND chunk'
        raise FrameError(f'{kind} of {n} bytes is truncated ({what}): not decoded')
    return head


def decode_cpu(data: Any, head: ImageHeader,
               capture: Optional[Callable[[], ContextManager[List[str]]]] = None) -> np.ndarray:
    """Checked ``data`` -> [H, W, 3] uint8 RGB on the host: ``cv2.imdecode`` with
    IMREAD_UNCHANGED (what cv_bridge's compressed_imgmsg_to_cv2 calls: no EXIF rotation, as
    nvJPEG), gray and alpha converted to RGB. ``capture()``: a context around the decode that
    yields the lines libpng / libjpeg print (the node's keeps them off stderr); they become
    the reason of a failed decode."""
    buf = np.frombuffer(_buffer(data), np.uint8)
    with (capture() if capture is not None else contextlib.nullcontext([])) as said:
        img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    # libjpeg fills what corrupt data lost with gray and only warns: not a frame to track
    # (its 'extraneous bytes' warning is not among these: many webcams' good frames have it)
    broken = [line for line in said if any(w in line.lower() for w in CORRUPT_WARNINGS)]
    if img is None or img.size == 0 or broken:
        why = f' ({"; ".join(broken or said)[:300]})' if said else ''
        raise FrameError(f'could not decode {head.kind} image ({buf.size} bytes){why}')
    if img.dtype != np.uint8:
        raise FrameError(f'decoded {head.kind} image is {img.dtype}, expected 8-bit')
    if img.shape[:2] != (head.height, head.width):
        raise FrameError(f'{head.kind} decoded to {img.shape[1]}x{img.shape[0]}, its header '
                         f'declares {head.width}x{head.height}')
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    if img.shape[2] == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def decode_jpeg_gpu(data: Any, device: torch.device) -> torch.Tensor:
    """Checked JPEG ``data`` -> [H, W, 3] uint8 RGB on the CUDA ``device`` by nvJPEG. The
    compressed bytes are the only host-to-device copy; the result is a channels-last view of
    torchvision's [3, H, W] output (the frame-in stage copies it into its own buffer). Ordered
    on the current stream (torchvision makes it wait for its decoder stream)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    src = np.frombuffer(_buffer(data), np.uint8)
    if not src.flags.writeable:    # bytes: torch warns on read-only memory; a small copy
        src = src.copy()           # (compressed bytes, not the decoded frame)
    img = decode_jpeg(torch.from_numpy(src), mode=ImageReadMode.RGB, device=device)
    return img.permute(1, 2, 0)


def to_host(frame: Frame) -> np.ndarray:
    """A decoded frame as [H, W, 3] uint8 numpy on the host: a CUDA frame (nvJPEG's) is made
    contiguous on the device and copied once; a host frame is returned as it is."""
    if isinstance(frame, np.ndarray):
        return frame
    return frame.contiguous().cpu().numpy()


def gpu_unavailable(device: Any) -> Optional[str]:
    """None when nvJPEG can decode on ``device``, else why not (a sentence for the log)."""
    dev = torch.device(device)
    if dev.type != 'cuda':
        return f'device {dev} is not CUDA'
    if not torch.cuda.is_available():
        return 'CUDA is not available'
    try:
        import torchvision.io  # noqa: F401
    except Exception as exc:  # ImportError, or an ABI mismatch with this torch
        return f'torchvision is not importable ({type(exc).__name__}: {exc})'
    return None


@dataclass
class DecodeCounts:
    gpu: int = 0              # frames decoded by nvJPEG
    cpu: int = 0              # frames decoded on the host
    gpu_failures: int = 0     # nvJPEG failed on a valid-looking JPEG; the host decoded it


class FrameDecoder:
    """Compressed bytes -> a frame for ``StreamingTracker.track``: a CUDA tensor where nvJPEG
    can decode (JPEG, ``gpu`` on, CUDA and torchvision present), a numpy array otherwise.

    ``gpu=False`` is the off switch (the host decoder, the reference). At construction one
    tiny JPEG is decoded on the device, so a torchvision without nvJPEG support turns the GPU
    path off once (``gpu_off``) instead of failing on every frame. A JPEG nvJPEG still refuses
    is decoded on the host (``counts.gpu_failures``, ``last_gpu_error``). ``host_capture``:
    see :func:`decode_cpu`."""

    def __init__(self, device: Any = 'cpu', gpu: bool = True,
                 max_pixels: int = MAX_IMAGE_PIXELS,
                 host_capture: Optional[Callable[[], ContextManager[List[str]]]] = None) -> None:
        self.device = torch.device(device)
        self.max_pixels = int(max_pixels)
        self.host_capture = host_capture      # decode_cpu's ``capture``
        self.counts = DecodeCounts()
        self.last_gpu_error: Optional[str] = None
        self.gpu_off: Optional[str] = 'switched off' if not gpu else \
            gpu_unavailable(self.device)
        if self.gpu_off is None:
            self.gpu_off = self._probe()

    @property
    def on_gpu(self) -> bool:
        return self.gpu_off is None

    def describe(self) -> str:
        """One line for a log: where compressed input is decoded, and why not on the GPU."""
        return ('compressed input: JPEG decoded on the GPU (nvJPEG)' if self.on_gpu else
                f'compressed input decoded on the host (GPU decode off: {self.gpu_off})')

    def _probe(self) -> Optional[str]:
        ok, buf = cv2.imencode('.jpg', np.full((16, 16, 3), 128, np.uint8))
        try:
            decode_jpeg_gpu(buf, self.device)
        except Exception as exc:  # RuntimeError: no nvJPEG in this build, a driver error
            return f'nvJPEG probe failed ({type(exc).__name__}: {exc})'
        return None

    def decode(self, data: Any, fmt: Optional[str] = None) -> Frame:
        """Validate (:func:`check_compressed`), then decode ``data``: [H, W, 3] uint8 RGB."""
        head = check_compressed(data, fmt, self.max_pixels)
        if self.on_gpu and head.kind == 'jpeg' and head.sof in GPU_SOF \
                and head.components in (1, 3):
            try:       # the JPEG alone: filler after its end is no part of it
                frame = decode_jpeg_gpu(_buffer(data)[:head.end], self.device)
                if tuple(frame.shape[:2]) != (head.height, head.width):
                    raise RuntimeError(f'nvJPEG decoded {frame.shape[1]}x{frame.shape[0]}, '
                                       f'the header declares {head.width}x{head.height}')
                self.counts.gpu += 1
                return frame
            except RuntimeError as exc:   # corrupt scan data: the host decoder says more
                self.counts.gpu_failures += 1
                self.last_gpu_error = f'{type(exc).__name__}: {exc}'
        frame = decode_cpu(data, head, self.host_capture)
        self.counts.cpu += 1
        return frame
