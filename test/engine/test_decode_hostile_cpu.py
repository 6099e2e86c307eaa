"""Compressed frames built to hurt (decode.py): a JPEG of a thousand scans (minutes of
decoding), a second frame header (a decoder sizing its output by the other one), a corrupt
scan closed by an end marker (libjpeg fills it with gray and only warns), a decoder that
returns another size than declared; and the 1-, 2- and 4-bit PNGs a camera may send."""

from __future__ import annotations

import struct

import cv2
import numpy as np
import pytest

import nvjpeg_stand_in
from conftest import textured_frame
from sam2_ros.engine import decode
from sam2_ros.engine.errors import FrameError
from sam2_ros.ros import native_stderr


def jpeg(img, **flags):
    params = [cv2.IMWRITE_JPEG_QUALITY, 90]
    for k, v in flags.items():
        params += [getattr(cv2, k), v]
    ok, buf = cv2.imencode('.jpg', img, params)
    assert ok
    return buf.tobytes()


@pytest.fixture(scope='module')
def rgb():
    return textured_frame(48, 64, seed=3)


def no_decoding(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError('decoded before the checks')
    monkeypatch.setattr(cv2, 'imdecode', refuse)


def test_a_jpeg_of_too_many_scans_is_refused_before_decoding(rgb, monkeypatch):
    data = jpeg(rgb, IMWRITE_JPEG_PROGRESSIVE=1)
    assert 1 < decode.parse_header(data).scans < 20           # a normal progressive file
    last = data.rindex(b'\xff\xda')
    many = data[:-2] + data[last:-2] * (decode.MAX_JPEG_SCANS + 1) + b'\xff\xd9'
    assert decode.parse_header(many).scans > decode.MAX_JPEG_SCANS
    no_decoding(monkeypatch)
    with pytest.raises(FrameError, match=f'scans, more than {decode.MAX_JPEG_SCANS}'):
        decode.FrameDecoder('cpu').decode(many, 'jpeg')


def test_a_second_frame_header_is_refused(rgb, monkeypatch):
    data = jpeg(rgb)
    sof = data.index(b'\xff\xc0')
    length = struct.unpack_from('>H', data, sof + 2)[0]
    segment = bytearray(data[sof:sof + 2 + length])
    struct.pack_into('>HH', segment, 5, 65535, 65535)           # height, width
    two = data[:sof] + bytes(segment) + data[sof:]             # a huge one first
    head = decode.parse_header(two)
    assert head.frames == 2 and (head.width, head.height) == (65535, 65535)
    no_decoding(monkeypatch)
    with pytest.raises(FrameError, match='2 frame headers'):
        decode.check_compressed(two, 'jpeg', max_pixels=2 ** 40)


def test_a_corrupt_scan_closed_by_an_end_marker_is_a_frame_error(rgb):
    """A USB camera's MJPEG glitch: half the scan, then FF D9. libjpeg decodes the rest as
    gray and warns 'premature end of data segment': refused, not tracked."""
    data = jpeg(textured_frame(240, 320, seed=4))
    cut = data[:len(data) // 2] + b'\xff\xd9'
    dec = decode.FrameDecoder('cpu', host_capture=native_stderr.captured)
    with pytest.raises(FrameError, match='(?i)premature end'):
        dec.decode(cut, 'jpeg')
    assert dec.decode(data, 'jpeg').shape == (240, 320, 3)      # the whole frame is fine


def test_a_gpu_decode_of_another_size_than_declared_goes_to_the_host(monkeypatch, rgb):
    """nvJPEG returning another size than the header's is not used: the host decodes it
    (and checks the size itself)."""
    fake = nvjpeg_stand_in.install(monkeypatch)
    real = decode.decode_jpeg_gpu
    monkeypatch.setattr(decode, 'decode_jpeg_gpu', lambda data, dev: real(data, dev)[:10])
    dec = decode.FrameDecoder('cuda:0')
    out = dec.decode(jpeg(rgb), 'jpeg')
    assert isinstance(out, np.ndarray) and out.shape == (48, 64, 3)
    assert dec.counts.gpu_failures == 1 and 'declares 64x48' in dec.last_gpu_error
    assert fake.calls                                   # nvJPEG was asked first


@pytest.mark.parametrize('bits', [1, 2, 4])
def test_low_bit_depth_pngs_are_decoded(bits):
    """A palette or bit-mask PNG of 1, 2 or 4 bits decodes to 8 bits; only 16 is refused."""
    import io

    from PIL import Image as pil

    img = pil.new('P' if bits > 1 else '1', (40, 30))
    if bits > 1:
        img.putpalette([v for i in range(2 ** bits) for v in (i * 16, 255 - i * 16, 7)])
    img.putpixel((3, 4), 1)
    buf = io.BytesIO()
    img.save(buf, 'PNG', bits=bits)
    data = buf.getvalue()
    assert decode.parse_header(data).bits == bits
    out = decode.FrameDecoder('cpu').decode(data, 'png')
    assert out.shape == (30, 40, 3) and out.dtype == np.uint8
