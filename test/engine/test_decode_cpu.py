"""Compressed frames in (sam2_ros/engine/decode.py) on the CPU: the host decoder's pixels (those
of cv2.imdecode, as the node always decoded), every check made from the header before decoding
(a decoder that must not be called proves "before"), and the choice between nvJPEG and the host
with a stand-in for torchvision (CI has neither a GPU nor torchvision): which images go to the
GPU path, its output as the engine takes it, a failing GPU decode falling back to the host, and
the GPU path switched off. The nvJPEG pixels themselves: test/gpu/test_decode_gpu.py."""

import struct
import sys
import zlib

import cv2
import numpy as np
import pytest
import torch

import nvjpeg_stand_in
from conftest import LEAN, textured_frame, tracker_on_shared_model
from sam2_ros.engine import decode
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.errors import FrameError
from sam2_ros.engine.types import Prompt


def jpeg(img, quality=90, **flags):
    params = [cv2.IMWRITE_JPEG_QUALITY, quality]
    for k, v in flags.items():
        params += [getattr(cv2, k), v]
    ok, buf = cv2.imencode('.jpg', img[..., ::-1] if img.ndim == 3 else img, params)
    assert ok
    return buf.tobytes()


def png(img):
    ok, buf = cv2.imencode('.png', img)
    assert ok
    return buf.tobytes()


def chunk(kind, body):
    return struct.pack('>I', len(body)) + kind + body + \
        struct.pack('>I', zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_declaring(w, h):
    """A valid, tiny PNG whose IHDR declares w x h (its data is one empty row)."""
    return (decode.PNG_SIGNATURE + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 0, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(b'\x00')) + chunk(b'IEND', b''))


@pytest.fixture(scope='module')
def rgb():
    return textured_frame(48, 64, seed=3)


reference = nvjpeg_stand_in.reference   # what the node decoded before: cv2.imdecode, to RGB


def test_host_decode_is_cv2s_and_png_is_lossless(rgb):
    import array

    gray = rgb[..., 1].copy()
    rgba = np.dstack([rgb[..., ::-1], np.full(rgb.shape[:2], 7, np.uint8)])
    cases = {'jpeg': jpeg(rgb), 'jpeg_gray': jpeg(gray),
             'jpeg_progressive': jpeg(rgb, IMWRITE_JPEG_PROGRESSIVE=1),
             'png': png(rgb[..., ::-1]), 'png_gray': png(gray), 'png_bgra': png(rgba)}
    for name, data in cases.items():
        for buf in (data, array.array('B', data), np.frombuffer(data, np.uint8)):
            out = decode.decode_cpu(buf, decode.check_compressed(buf, name.split('_')[0]))
            assert out.dtype == np.uint8 and out.shape == (48, 64, 3), name
            np.testing.assert_array_equal(out, reference(data), err_msg=name)
    np.testing.assert_array_equal(decode.decode_cpu(cases['png'], decode.parse_header(
        cases['png'])), rgb)
    np.testing.assert_array_equal(reference(cases['png_gray']), np.dstack([gray] * 3))
    # q90 of a textured frame: close to the source, not equal (JPEG is lossy)
    assert np.abs(reference(cases['jpeg']).astype(int) - rgb).mean() < 12


def test_parse_header_reads_jpeg_and_png_fields_and_none_for_others(rgb):
    h = decode.parse_header(jpeg(rgb))
    assert (h.kind, h.width, h.height, h.bits, h.components, h.sof, h.complete) == \
        ('jpeg', 64, 48, 8, 3, 0xC0, True)
    assert decode.parse_header(jpeg(rgb, IMWRITE_JPEG_PROGRESSIVE=1)).sof == 0xC2
    assert decode.parse_header(jpeg(rgb[..., 0].copy())).components == 1
    p = decode.parse_header(png(rgb))
    assert (p.kind, p.width, p.height, p.bits, p.complete) == ('png', 64, 48, 8, True)
    assert decode.compressed_header(png(rgb)) == ('png', 64, 48, 8)
    assert decode.parse_header(b'GIF89a' + bytes(40)) is None


def truncated_jpeg(data):
    return data[:len(data) // 2]


BAD = [
    ('tiff', lambda rgb: png(rgb), 'unsupported compressed format'),
    ('png', lambda rgb: b'', 'no data'),
    ('png', lambda rgb: b'not a png at all', 'no PNG or JPEG header'),
    ('png', lambda rgb: png_declaring(20000, 20000), r'20000x20000 = 400000000 pixels'),
    ('png', lambda rgb: png_declaring(0, 5), 'zero size'),
    ('png', lambda rgb: png(rgb.astype(np.uint16) * 200), '16 bits per sample'),
    ('jpeg', lambda rgb: truncated_jpeg(jpeg(rgb)), 'truncated'),
    ('jpeg', lambda rgb: jpeg(rgb)[:300], 'truncated'),      # cut inside the header
    ('png', lambda rgb: png(rgb)[:-30], r'truncated \(no IEND chunk\)'),
    # the end's bytes inside a segment or chunk after the data, the end itself cut off
    ('jpeg', lambda rgb: jpeg(rgb)[:-2] + b'\xff\xfe\x00\x06\xff\xd9\x00\x00', 'truncated'),
    ('png', lambda rgb: png(rgb)[:-12] + chunk(b'tEXt', b'note\x00IEND'), r'no IEND chunk'),
]


@pytest.mark.parametrize('fmt, make, text', BAD)
def test_bad_data_is_refused_before_decoding(rgb, monkeypatch, fmt, make, text):
    data = make(rgb)

    def no_decoding(*a, **k):
        raise AssertionError('decoded before the checks')
    monkeypatch.setattr(cv2, 'imdecode', no_decoding)
    with pytest.raises(FrameError, match=text):
        decode.check_compressed(data, fmt)
    with pytest.raises(FrameError, match=text):
        decode.FrameDecoder('cpu').decode(data, fmt)


@pytest.mark.parametrize('filler', [bytes(4096), bytes(range(256)) * 8])
def test_filler_after_the_end_is_accepted(rgb, filler):
    """A driver publishing its whole buffer: a complete image, then any bytes (the decoders
    stop at the end marker); a progressive JPEG's end is found past its later tables."""
    for fmt, data in (('jpeg', jpeg(rgb)), ('jpeg', jpeg(rgb, IMWRITE_JPEG_PROGRESSIVE=1)),
                      ('png', png(rgb))):
        out = decode.FrameDecoder('cpu').decode(data + filler, fmt)
        np.testing.assert_array_equal(out, reference(data))


def test_nvjpeg_is_given_the_jpeg_without_the_filler_after_it(fake_gpu, rgb):
    dec = decode.FrameDecoder('cuda:0')
    data = jpeg(rgb)
    out = dec.decode(data + bytes(4096), 'jpeg')
    assert fake_gpu.calls[-1] == ('RGB', 'cuda:0', len(data)) and dec.counts.gpu == 1
    np.testing.assert_array_equal(out.numpy(), reference(data))


def test_pixel_limit_is_the_callers(rgb):
    data = png(rgb)
    with pytest.raises(FrameError, match='64x48 = 3072 pixels, more than max_image_pixels 3000'):
        decode.FrameDecoder('cpu', max_pixels=3000).decode(data, 'png')
    assert decode.FrameDecoder('cpu', max_pixels=3072).decode(data, 'png').shape == (48, 64, 3)


def test_corrupt_scan_data_is_a_frame_error(rgb):
    """Header and end marker intact, no image in between: cv2 finds nothing to decode."""
    head = png(rgb)
    data = head[:33] + bytes(len(head) - 45) + head[-12:]   # IHDR kept, IDAT zeroed
    with pytest.raises(FrameError, match='could not decode png'):
        decode.FrameDecoder('cpu').decode(data, 'png')


def test_gpu_off_says_why(monkeypatch):
    assert decode.FrameDecoder('cpu').gpu_off == 'device cpu is not CUDA'
    assert decode.FrameDecoder('cuda', gpu=False).gpu_off == 'switched off'
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert decode.FrameDecoder('cuda').gpu_off == 'CUDA is not available'
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setitem(sys.modules, 'torchvision', None)          # not installed
    monkeypatch.setitem(sys.modules, 'torchvision.io', None)
    why = decode.FrameDecoder('cuda').gpu_off
    assert why.startswith('torchvision is not importable') and not decode.FrameDecoder(
        'cuda').on_gpu


@pytest.fixture
def fake_gpu(monkeypatch):
    return nvjpeg_stand_in.install(monkeypatch)


def test_jpeg_goes_to_nvjpeg_as_a_channels_last_view(fake_gpu, rgb):
    dec = decode.FrameDecoder('cuda:0')
    assert dec.on_gpu and len(fake_gpu.calls) == 1          # the probe at construction
    data = jpeg(rgb)
    out = dec.decode(data, 'rgb8; jpeg compressed bgr8')
    assert isinstance(out, torch.Tensor) and out.shape == (48, 64, 3) and out.dtype == torch.uint8
    assert not out.is_contiguous()                          # [3, H, W] seen as [H, W, 3]
    np.testing.assert_array_equal(out.numpy(), reference(data))
    assert fake_gpu.calls[-1] == ('RGB', 'cuda:0', len(data))
    dec.decode(jpeg(rgb, IMWRITE_JPEG_PROGRESSIVE=1), 'jpeg')
    dec.decode(jpeg(rgb[..., 0].copy()), 'jpeg')            # gray: nvJPEG gives RGB
    assert dec.counts.gpu == 3 and dec.counts.cpu == 0
    # PNG is decoded on the host; bad data never reaches nvJPEG
    assert isinstance(dec.decode(png(rgb), 'png'), np.ndarray) and dec.counts.cpu == 1
    n = len(fake_gpu.calls)
    with pytest.raises(FrameError, match='truncated'):
        dec.decode(truncated_jpeg(data), 'jpeg')
    assert len(fake_gpu.calls) == n


def test_nvjpeg_failure_falls_back_to_the_host(fake_gpu, rgb):
    dec = decode.FrameDecoder('cuda')
    fake_gpu.fail = True
    data = jpeg(rgb)
    out = dec.decode(data, 'jpeg')
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, reference(data))
    assert (dec.counts.gpu, dec.counts.cpu, dec.counts.gpu_failures) == (0, 1, 1)
    assert 'nvjpeg status 7' in dec.last_gpu_error
    # a build without nvJPEG fails the probe: the GPU path is off from the start
    dec = decode.FrameDecoder('cuda')
    assert dec.gpu_off.startswith('nvJPEG probe failed (RuntimeError')
    assert isinstance(dec.decode(data, 'jpeg'), np.ndarray)


def test_tracker_takes_the_decoders_tensor_frame(fake_gpu, monkeypatch):
    """The engine's frame validation and device copy take the [H, W, 3] view nvJPEG's output
    is handed on as (here on the CPU): the same results as the numpy frame."""
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False,
                        extra_hydra_overrides=list(LEAN))
    data = [jpeg(textured_frame(48, 64, seed=s)) for s in range(3)]
    frames = [decode.FrameDecoder('cuda').decode(d, 'jpeg') for d in data]
    assert all(isinstance(f, torch.Tensor) and not f.is_contiguous() for f in frames)
    monkeypatch.undo()          # CUDA 'available' no longer: the model builds on the CPU
    a, b = tracker_on_shared_model(cfg), tracker_on_shared_model(cfg)
    for k, (f, d) in enumerate(zip(frames, data)):
        ra, rb = a.track(f), b.track(reference(d))
        if k == 0:
            ra = a.add_prompt(Prompt(1, box=(5, 5, 40, 30)))
            rb = b.add_prompt(Prompt(1, box=(5, 5, 40, 30)))
        for oa, ob in zip(ra.objects, rb.objects, strict=True):
            assert torch.equal(oa.low_res_logits, ob.low_res_logits)
            assert (oa.mask == ob.mask).all()
