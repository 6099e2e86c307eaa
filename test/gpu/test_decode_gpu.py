"""nvJPEG (sam2_ros/engine/decode.py's GPU path) against the host decoder (cv2.imdecode) on the
GPU machine (marked gpu; needs torchvision there: scripts/gpu/gpu_node_latency.sh input
installs the carried wheel).

The two decoders do not give the same pixels. A JPEG stores luma and chroma as 8x8 DCT blocks,
chroma at half resolution both ways by default (4:2:0). libjpeg-turbo (cv2) upsamples chroma
with its "fancy" triangular filter, uses its integer IDCT and rounds its YCbCr -> RGB in fixed
point; nvJPEG upsamples and converts its own way. On the GPU machine (torchvision's nvJPEG
against OpenCV's libjpeg-turbo, 720p at quality 90) the two give the same pixels exactly at
4:4:4, so IDCT and colour conversion agree and the whole difference is the chroma upsampling
of 4:2:0: larger on a textured frame (where chroma changes within two pixels) than on a smooth
one, and neither is consistently nearer the source. Neither library exposes its upsampling
(cv2.imdecode's IMREAD_* flags choose colour/gray/reduced size/EXIF only; torchvision's
decode_jpeg takes ``mode`` and, on the CPU only, ``apply_exif_orientation``): what makes them
agree is on the encoder's side, no chroma subsampling (4:4:4). The measured numbers go to
$OUT/gpu_decode.json; the bounds below hold them with a margin.
"""

import time

import cv2
import numpy as np
import pytest
import torch

from conftest import smooth_image, write_out
from sam2_ros.engine import decode
from sam2_ros.engine.cuda.buckets import FrameInKey
from sam2_ros.synthetic import SyntheticCamera

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]

SAMPLING = {'420': cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
            '444': cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444}


def encode(rgb, sampling, quality=90):
    ok, buf = cv2.imencode('.jpg', np.ascontiguousarray(rgb[..., ::-1]), [
        cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, SAMPLING[sampling]])
    assert ok
    return buf.tobytes()


def stats(a, b):
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return {'max': int(d.max()), 'mean': round(float(d.mean()), 3),
            'p99': float(np.percentile(d, 99)), 'p999': float(np.percentile(d, 99.9)),
            'share_over_2': round(float((d > 2).mean()), 4)}


@pytest.fixture(scope='module')
def decoder():
    dec = decode.FrameDecoder('cuda')
    assert dec.on_gpu, f'nvJPEG path off: {dec.gpu_off}'
    return dec


def measure(decoder, rgb, sampling):
    data = encode(rgb, sampling)
    head = decode.check_compressed(data, 'jpeg')
    gpu = decoder.decode(data, 'jpeg')
    assert isinstance(gpu, torch.Tensor) and gpu.is_cuda and tuple(gpu.shape) == rgb.shape
    cpu = decode.decode_cpu(data, head)
    g = gpu.cpu().numpy()
    return {'bytes': len(data), 'gpu_vs_cpu': stats(g, cpu), 'cpu_vs_source': stats(cpu, rgb),
            'gpu_vs_source': stats(g, rgb)}, data


def test_nvjpeg_against_cv2(decoder):
    textured = SyntheticCamera(1280, 720, objects=2, seed=0).frame(0)
    smooth = smooth_image(720, 1280)
    res = {}
    for name, rgb in (('textured', textured), ('smooth', smooth)):
        for sampling in SAMPLING:
            res[f'{name}_{sampling}'], data = measure(decoder, rgb, sampling)
    # decode time of the textured 4:2:0 frame, for the record (not asserted)
    data = encode(textured, '420')
    head = decode.check_compressed(data, 'jpeg')
    for _ in range(5):
        decoder.decode(data, 'jpeg')
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        decoder.decode(data, 'jpeg')
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    for _ in range(10):
        decode.decode_cpu(data, head)
    t2 = time.perf_counter()
    res['decode_ms_720p_q90'] = {'gpu': round((t1 - t0) / 50 * 1e3, 3),
                                 'cpu': round((t2 - t1) / 10 * 1e3, 3)}
    res['gpu'] = torch.cuda.get_device_name()
    write_out('gpu_decode.json', res)
    print(res)
    t420, t444 = res['textured_420'], res['textured_444']
    # 4:4:4: the same pixels; 4:2:0 (cameras' default): only the chroma upsampling differs
    assert t444['gpu_vs_cpu']['max'] == 0 and res['smooth_444']['gpu_vs_cpu']['max'] == 0
    assert t420['gpu_vs_cpu']['mean'] <= 10.5, t420
    assert res['smooth_420']['gpu_vs_cpu']['mean'] <= 6.5, res['smooth_420']
    for k in ('textured_420', 'textured_444', 'smooth_420', 'smooth_444'):
        r = res[k]     # neither decoder is off: each within 10.5 levels (mean) of the source
        assert max(r['gpu_vs_source']['mean'], r['cpu_vs_source']['mean']) <= 10.5, (k, r)


def test_jpeg_with_filler_after_its_end_is_decoded_on_the_gpu(decoder):
    """A driver publishing its whole MJPEG buffer: accepted by the checks, and nvJPEG
    decodes it as the JPEG alone (no fall back to the host)."""
    data = encode(smooth_image(48, 64), '420')
    before = (decoder.counts.gpu, decoder.counts.gpu_failures)
    padded = decoder.decode(data + bytes(4096), 'jpeg')
    assert (decoder.counts.gpu, decoder.counts.gpu_failures) == (before[0] + 1, before[1]), \
        decoder.last_gpu_error
    assert torch.equal(padded, decoder.decode(data, 'jpeg'))


def test_tracker_takes_the_cuda_frame(decoder):
    """The decoded CUDA frame through the engine's frame-in graph (device-to-device copy): the
    same results as the same pixels handed over as a host array."""
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.model import build_model
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt

    cam = SyntheticCamera(640, 480, objects=2, seed=1)
    cfg = TrackerConfig(model_size='tiny', image_size=256, device='cuda', random_weights=True,
                        io_resolution=(640, 480))
    model = build_model(cfg)
    a, b = StreamingTracker(cfg, model=model), StreamingTracker(cfg, model=model)
    for i in range(4):
        gpu = decoder.decode(encode(cam.frame(i), '420'), 'jpeg')
        ra, rb = a.track(gpu), b.track(gpu.cpu().numpy())
        if i == 0:
            box = tuple(float(v) for v in cam.boxes(0)[0])
            ra, rb = a.add_prompt(Prompt(1, box=box)), b.add_prompt(Prompt(1, box=box))
        for oa, ob in zip(ra.objects, rb.objects, strict=True):
            assert torch.equal(oa.low_res_logits, ob.low_res_logits)
            assert (oa.mask == ob.mask).all()
    assert FrameInKey(480, 640) in a.runner.io   # the frame-in graph staged both kinds


def test_the_nodes_decoder_and_the_overlays_host_copy(decoder):
    """The node's decoder (node_host.frame_decoder) decodes a JPEG on the GPU; decode.to_host,
    the overlay's one host copy, gives the pixels of the CUDA frame."""
    from types import SimpleNamespace

    from sam2_ros.ros.node_host import frame_decoder
    from sam2_ros.ros.options import NodeOptions

    dec = frame_decoder(SimpleNamespace(device='cuda'), NodeOptions(input_type='compressed'))
    assert dec.on_gpu, dec.gpu_off
    frame = dec.decode(encode(SyntheticCamera(640, 480, seed=2).frame(0), '420'), 'jpeg')
    assert frame.is_cuda and frame.shape == (480, 640, 3)
    host = decode.to_host(frame)
    assert isinstance(host, np.ndarray) and host.flags.c_contiguous
    np.testing.assert_array_equal(host, frame.cpu().numpy())
