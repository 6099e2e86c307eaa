"""The offline tool's inputs and signals, checked before any model is built: numbers in a
YAML prompt file only as plain decimals, 16-bit images refused, events past an image folder's
end said up front, SIGTERM ending a run as Ctrl-C does, and mask names past frame 999,999."""

import os
import signal

import cv2
import numpy as np
import pytest

from sam2_ros.cli import interrupts_deferred, terminate_as_interrupt, track_offline
from sam2_ros.cli.outputs import MASK_NAME

FAST = ['--random-weights', '--image-size', '256', '--device', 'cpu', '--no-progress']


def folder(tmp_path, n=3, dtype=np.uint8):
    d = tmp_path / 'frames'
    d.mkdir()
    for i in range(n):
        img = np.full((48, 64, 3), 40, dtype)
        cv2.imwrite(str(d / f'{i:03d}.png'), img * (257 if dtype == np.uint16 else 1))
    return d


def run(*argv):
    return track_offline.main([str(a) for a in argv])


@pytest.mark.parametrize('text, what', [
    ('- {frame: 000120, object_id: 1, box: [1, 2, 30, 40]}', "got '000120'"),   # not octal 80
    ('- {frame: 1:30, object_id: 1, box: [1, 2, 30, 40]}', "got '1:30'"),       # not 90
    ('- {frame: 0, object_id: 010, box: [1, 2, 30, 40]}', "got '010'"),         # not 8
])
def test_numbers_with_leading_zeros_or_colons_are_refused_not_misread(tmp_path, capsys, text,
                                                                      what):
    (tmp_path / 'p.yaml').write_text(text + '\n')
    rc = run(folder(tmp_path), '--prompts', tmp_path / 'p.yaml', '--out', tmp_path / 'o', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and what in err and 'plain decimals' in err, err


def test_sixteen_bit_images_are_refused_not_cut_to_eight(tmp_path, capsys):
    (tmp_path / 'p.yaml').write_text('- {frame: 0, object_id: 1, box: [1, 2, 30, 40]}\n')
    rc = run(folder(tmp_path, dtype=np.uint16), '--prompts', tmp_path / 'p.yaml', '--out',
             tmp_path / 'o', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and 'uint16 samples: only 8-bit images' in err, err


def test_events_past_the_folder_are_said_before_the_model_is_built(tmp_path, capsys,
                                                                   monkeypatch):
    from sam2_ros.engine import tracker

    (tmp_path / 'p.yaml').write_text('- {frame: 0, object_id: 1, box: [1, 2, 30, 40]}\n'
                                     '- {frame: 7, object_id: 1, action: remove}\n')

    def no_model(*a, **k):
        raise track_offline.CliError('stop before the model')
    monkeypatch.setattr(tracker, 'StreamingTracker', no_model)
    rc = run(folder(tmp_path), '--prompts', tmp_path / 'p.yaml', '--out', tmp_path / 'o', *FAST)
    err = capsys.readouterr().err
    assert rc == 2 and 'events [1] are for frames past the last image (2)' in err, err
    assert err.index('past the last image') < err.index('stop before the model')


def test_sigterm_ends_a_run_as_ctrl_c_and_is_deferred_inside_a_frame():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with terminate_as_interrupt():
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):       # the handler runs between bytecodes
                    pass
                done.append('rest of the frame')
    assert done == ['rest of the frame']
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_masks_past_frame_999999_are_results_too():
    assert MASK_NAME.match('000000.png') and MASK_NAME.match('1000000.png')
    assert not MASK_NAME.match('00001.png') and not MASK_NAME.match('000001.png.tmp')
