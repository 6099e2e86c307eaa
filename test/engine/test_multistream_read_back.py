"""The results of a step of several cameras (sam2_ros/engine/multistream.py ``_results``,
sam2_ros/engine/stream_results.py): every camera's read-back is issued before the first is
waited for (one wait per step, not one per camera), the results stay those of the reference
tracker bitwise, and a camera whose read-back fails gets a StepError while the others' results
stand; a step of one camera raises the failure as it always did."""

from __future__ import annotations

import pytest
import torch

from sam2_ros.engine.errors import StepError
from sam2_ros.engine.types import Prompt
from test_multistream import cfg_of, frame, multi

pytestmark = pytest.mark.usefixtures('one_thread')


def started(cameras=2):
    m = multi(cfg_of(), cameras=cameras)
    for c in range(cameras):
        m.stream(c).queue_prompt(Prompt(1, box=(5 + 4 * c, 5, 30, 30)))
    m.track([frame(c, 0) for c in range(cameras)])
    return m


def wrap_read_back(m, monkeypatch, fail=None):
    """Log the read-backs of each step as ('issue'|'read', k) (k: the k-th issued); ``fail``
    ('issue' or 'read', k): that one raises."""
    log, real = [], m.runner.read_back

    def read_back(*args):
        k = sum(1 for e in log if e[0] == 'issue')
        log.append(('issue', k))
        if fail == ('issue', k):
            raise RuntimeError('injected')
        read = real(*args)

        def wait():
            log.append(('read', k))
            if fail == ('read', k):
                raise RuntimeError('injected')
            return read()
        return wait
    monkeypatch.setattr(m.runner, 'read_back', read_back)
    return log


def same(a, b):
    assert (a.frame_index, [o.obj_id for o in a.objects]) == (b.frame_index,
                                                               [o.obj_id for o in b.objects])
    for x, y in zip(a.objects, b.objects):
        assert torch.equal(x.low_res_logits, y.low_res_logits) and x.score == y.score
        assert (x.mask == y.mask).all() and x.box == y.box and x.area == y.area


def test_every_read_back_is_issued_before_the_first_wait(monkeypatch):
    m, ref = started(), started()
    log = wrap_read_back(m, monkeypatch)
    out = m.track([frame(0, 1), frame(1, 1)])
    assert log == [('issue', 0), ('issue', 1), ('read', 0), ('read', 1)]
    want = ref.track([frame(0, 1), frame(1, 1)])
    for c in (0, 1):
        same(out.results[c], want.results[c])
    assert out.results[0].label_mask().tolist() == want.results[0].label_mask().tolist()


@pytest.mark.parametrize('phase', ['issue', 'read'])
@pytest.mark.parametrize('bad', [0, 1])
def test_a_failed_read_back_fails_its_camera_only(monkeypatch, phase, bad):
    m, ref = started(), started()
    wrap_read_back(m, monkeypatch, fail=(phase, bad))
    out = m.track([frame(0, 1), frame(1, 1)])
    want = ref.track([frame(0, 1), frame(1, 1)])
    good = 1 - bad
    assert isinstance(out.errors[bad], StepError) and out.results[bad] is None
    assert 'injected' in str(out.errors[bad].__cause__) and out.errors[good] is None
    same(out.results[good], want.results[good])
    assert m.stats['failed_frames'] == 1 and m.stats['frames'] == ref.stats['frames']
    monkeypatch.undo()
    # the frame was tracked (its memory written): the next step continues from it
    out, want = m.track([frame(0, 2), frame(1, 2)]), ref.track([frame(0, 2), frame(1, 2)])
    assert not any(out.errors)
    for c in (0, 1):
        same(out.results[c], want.results[c])


@pytest.mark.parametrize('phase', ['issue', 'read'])
def test_a_step_of_one_camera_raises_the_failure(monkeypatch, phase):
    m = started(cameras=1)
    wrap_read_back(m, monkeypatch, fail=(phase, 0))
    with pytest.raises(RuntimeError, match='injected'):
        m.track([frame(0, 1)])
