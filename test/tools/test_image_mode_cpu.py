"""CPU smoke test of the image-mode benchmark (``tools.bench.image_mode``) at a tiny size:
rows, their fields, the memory-module counts, the table and the report section.

Only the ``ours`` variant runs here. sam2's ``SAM2ImagePredictor`` and SAM's ``SamPredictor``
import torchvision, and no torchvision build for this CPU-only torch can be installed from the
registries CI reaches (PyPI's wheels need the CUDA torch: importing one fails with
'operator torchvision::nms does not exist'); those two variants run only on the GPU machine
(``scripts/gpu/gpu_image_mode.sh``), where a torchvision wheel matching its torch travels.
"""

import json

import numpy as np
import pytest

from tools.bench import image_mode, report

pytestmark = pytest.mark.usefixtures('one_thread')


def test_ours_rows_counts_and_table(tmp_path):
    out = tmp_path / 'h200_image.json'
    argv = ['--device', 'cpu', '--variants', 'ours', '--sam2-models', 'tiny', '--res', '64',
            '--source', '96x64', '--prompts', '1,3', '--precision', 'fp32', '--images', '1',
            '--warmup', '0', '--profile-images', '0', '--out', str(out)]
    assert image_mode.main(argv) == 0
    rows = json.loads(out.read_text())
    assert [(r['variant'], r['model'], r['prompts']) for r in rows] == \
        [('ours', 'tiny', 1), ('ours', 'tiny', 3)]
    for r in rows:
        assert 'error' not in r
        assert r['ms_p50'] > 0 and r['ms_p99'] >= r['ms_p50'] and r['encoder_ms_p50'] > 0
        assert r['encoder_ms_p50'] + r['decoder_ms_p50'] == pytest.approx(r['ms_p50'], abs=2e-3)
        assert r['gpu_kernel_ms'] is None and r['peak_mib'] is None         # CPU run
        assert r['held_mib'] > 0                 # the model's tensors, counted (held.py)
        assert r['gpu'] == 'cpu' and r['run'] == rows[0]['run'] and r['command'].endswith(
            ' '.join(argv))
        # image mode runs no memory module (sam2's image-predictor computation)
        assert r['memory_attention_calls'] == 0 and r['memory_encoder_calls'] == 0
    lines = image_mode.table(rows)
    assert lines[1].startswith('|---') and len(lines) == 2 + len(rows)
    assert '| fp32 | 3 | ours | tiny |' in lines[3] and '| 0 / 0 |' in lines[3]
    # the doc section renders this file: one row per variant and model (p50 / p99 per
    # precision and prompt count), then the ratio table (no SAM rows: '-')
    section = report.image_mode(str(tmp_path))
    assert any(s.startswith('| ours | tiny |') and '| 0 / 0; 0 / 0 |' in s for s in section)
    assert '| fp32 | 1 | - | - | - | - |' in section


def test_ratios_pair_sizes_within_one_run(tmp_path):
    """The ratio table divides each SAM 2.1 size by its SAM counterpart of the same
    precision and prompt count of the same run: an older run's rows that no later run
    measured again stand in a table of their own, never in another run's ratios."""
    def row(variant, model, ms, run='b', prompts=1):
        return dict(variant=variant, model=model, res=1024, prompts=prompts, precision='bf16',
                    ms_p50=ms, ms_p99=ms, encoder_ms_p50=ms / 2, decoder_ms_p50=ms / 2,
                    gpu_kernel_ms=None, peak_mib=None, memory_attention_calls=0,
                    memory_encoder_calls=0, run=run, date='2099-01-01 00:00 UTC',
                    commit='abc', gpu='H200', command='x')
    rows = [row('sam2_predictor', 'tiny', 5.0), row('sam', 'vit_b', 10.0),
            row('sam2_predictor', 'large', 30.0), row('sam', 'vit_h', 20.0),
            row('sam', 'vit_b', 1.0, run='a')]                      # older run: ignored
    rows[-1]['date'] = '2098-01-01 00:00 UTC'
    (tmp_path / 'h200_image.json').write_text(json.dumps(rows))
    lines = report.image_mode(str(tmp_path))
    assert '| bf16 | 1 | 0.50 / - | - | - | 1.50 / - |' in lines    # sam2_predictor / ours
    # the older run's SAM row (1.0 ms) stands in its own block with its own ratios
    assert sum('| vit_b |' in s for s in lines) == 2
    assert sum(s.startswith('- 2098-01-01') for s in lines) == 1
    assert not any('0.05' in s or '5.00' in s or '30.00 /' in s for s in lines
                   if s.startswith('| bf16 | 1 |'))


def test_preprocess_rows_time_both_resize_methods_without_kernel_time():
    """The resize-alone rows (eager only on the CPU): both methods, a time, no kernel time."""
    rows = []
    a = image_mode.parse(['--device', 'cpu'])
    image_mode.preprocess_rows(a, rows.append, sizes=[(80, 60, 64)])
    assert [r['variant'] for r in rows] == ['preprocess_exact_eager',
                                            'preprocess_interpolate_eager']
    for r in rows:
        assert (r['model'], r['res'], r['prompts']) == ('80x60', 64, 0)
        assert r['ms_p50'] > 0 and r['gpu_kernel_ms'] is None
    lines = image_mode.preprocess_table(rows)
    assert lines[1] == '|---|---|---|---|' and '| 80x60 -> 64 | exact_eager |' in lines[2]


def test_image_mode_inputs_are_distinct_images_and_boxes_in_the_frame():
    """images() gives distinct uint8 [h, w, 3] frames; boxes() gives distinct boxes with x0 < x1
    and y0 < y1, inside the frame."""
    imgs = image_mode.images(3, 40, 30, seed=1)
    assert len(imgs) == 3 and imgs[0].shape == (30, 40, 3) and imgs[0].dtype == np.uint8
    assert not np.array_equal(imgs[0], imgs[1])
    b = image_mode.boxes(8, 400, 200)
    assert b.shape == (8, 4) and (b[:, 0] < b[:, 2]).all() and (b[:, 1] < b[:, 3]).all()
    assert b.min() >= 0 and b[:, 2].max() <= 400 and b[:, 3].max() <= 200
    assert len({tuple(x) for x in b}) == 8                                  # distinct cells


def test_predictor_variant_times_the_decode_after_set_image():
    """The skeleton the official predictors (sam2's, SAM's) share: set_image is the encoder,
    a run sets the image, then times decode and returns its masks."""
    import argparse

    from tools.bench.image_variants import predictor_variant
    calls = []
    pred = type('P', (), {'set_image': lambda self, img: calls.append('set')})()
    v = predictor_variant(pred, argparse.Namespace(device='cpu'), 'fp32',
                          lambda img, bx: calls.append('decode') or np.ones((len(bx), 2, 2), bool))
    masks, seconds = v.run(np.zeros((2, 2, 3), np.uint8), [(0, 0, 1, 1)] * 3)
    assert masks.shape == (3, 2, 2) and seconds >= 0 and calls == ['set', 'decode']
    v.encode(np.zeros((2, 2, 3), np.uint8))
    assert calls == ['set', 'decode', 'set'] and v.counted is v.run
