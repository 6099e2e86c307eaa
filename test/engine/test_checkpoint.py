"""Checkpoint loading: a valid file gives the saved weights and identical outputs; every broken
or mismatched file is a CheckpointError that says what is wrong, raised before anything is
half-loaded. All files are written by the tests into tmp_path (nothing is downloaded): the
"valid" checkpoint is ``{'model': state_dict}`` of a random tiny model with perturbed weights,
the "other size" one is the state dict of a random ``small`` model.
"""

import copy
import os

import numpy as np
import pytest
import torch

from conftest import shared_model, small_cfg, textured_frame
from sam2_ros.engine.errors import CheckpointError, TrackerError
from sam2_ros.engine.model import SAM21_ONLY, build_model, load_state, read_checkpoint
from sam2_ros.engine.tracker import StreamingTracker
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')

SIZE = 64          # weights do not depend on the image size; 64 keeps the model runs short


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """(path, state) of a valid tiny checkpoint whose weights differ from any random init."""
    gen = torch.Generator().manual_seed(123)
    state = {k: (v + 1e-3 * torch.randn(v.shape, generator=gen)) if v.is_floating_point()
             else v.clone() for k, v in shared_model(SIZE).state_dict().items()}
    path = tmp_path_factory.mktemp('ckpt') / 'sam2.1_hiera_tiny.pt'
    torch.save({'model': state}, path)
    return path, state


@pytest.fixture(scope='module')
def spare_model():
    """A private copy of the shared random model that tests may load weights into."""
    return copy.deepcopy(shared_model(SIZE))


def ckpt_cfg(path, **kw):
    return small_cfg(image_size=SIZE, checkpoint=str(path), random_weights=False, seed=5, **kw)


def run_once(model):
    """Logits, score and object pointer of one prompt and one tracked frame."""
    tr = StreamingTracker(small_cfg(image_size=SIZE), model=model)
    frame = textured_frame(48, 64)
    tr.track(frame)
    a = tr.add_prompt(Prompt(1, points=np.array([[20.0, 20.0]]), labels=np.array([1])))
    b = tr.track(textured_frame(48, 64, seed=1))
    slot = tr.objects[1].slot
    return [a.objects[0].low_res_logits.clone(), torch.tensor(a.objects[0].score),
            b.objects[0].low_res_logits.clone(), torch.tensor(b.objects[0].score),
            tr.bank.ptrs[slot].clone(), tr.bank.feats[slot].float().clone()]


def test_valid_checkpoint_loads_and_gives_identical_outputs(saved, spare_model):
    path, state = saved
    loaded = build_model(ckpt_cfg(path))
    got = loaded.state_dict()
    assert set(got) == set(state)
    assert all(torch.equal(got[k], state[k]) for k in state)
    # the same weights put into a copy of the random model by hand: outputs bit-identical
    ref = spare_model
    ref.load_state_dict(state, strict=True)
    outs_loaded, outs_ref = run_once(loaded), run_once(ref)
    for x, y in zip(outs_loaded, outs_ref):
        assert torch.equal(x, y)
    # ... and they really come from the file: the unperturbed random model differs
    outs_random = run_once(shared_model(SIZE))
    assert not torch.equal(outs_loaded[0], outs_random[0])


def test_a_missing_checkpoint_or_a_folder_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match='not found'):
        build_model(ckpt_cfg(tmp_path / 'nope.pt'))
    with pytest.raises(CheckpointError, match='is a folder, not a .pt file'):
        build_model(ckpt_cfg(tmp_path))


def test_a_file_holding_code_names_the_reason_not_torchs_advice(tmp_path):
    """torch.load(weights_only=True) refuses a file that imports a global with a page of
    advice that starts generically (to load it unsafely); the reason kept is its line naming
    what is unsupported."""
    path = tmp_path / 'evil.pt'
    torch.save({'model': {'w': os.system}}, path)
    with pytest.raises(CheckpointError, match='(?i)unsupported GLOBAL posix.system') as err:
        build_model(ckpt_cfg(path))
    assert 'In PyTorch 2.6' not in str(err.value)


@pytest.mark.parametrize('kind', ['truncated', 'empty', 'text', 'random_bytes'])
def test_an_unreadable_checkpoint_is_refused_naming_its_path(saved, tmp_path, kind):
    if kind == 'truncated':
        data = saved[0].read_bytes()
        content = data[:len(data) // 2]
    else:
        content = {'empty': b'',
                   'text': b'model: sam2.1_hiera_tiny\n',
                   'random_bytes': np.random.default_rng(0).bytes(4096)}[kind]
    path = tmp_path / f'{kind}.pt'
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match='is not a valid checkpoint') as err:
        StreamingTracker(ckpt_cfg(path))
    assert str(path) in str(err.value)


def test_corrupt_file_is_named_not_a_bare_number(tmp_path, monkeypatch):
    """torch.load's error can be a bare key of a corrupt pickle (issue 32: '...: 174812789'):
    the message names the file, says it is no valid checkpoint and the error's type."""
    path = tmp_path / 'corrupt.pt'
    path.write_bytes(b'\x80\x02corrupt')

    def load(*args, **kwargs):
        raise KeyError(174812789)
    monkeypatch.setattr(torch, 'load', load)
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(str(path))
    assert str(err.value) == (f"{str(path)!r} is not a valid checkpoint (truncated, corrupt or "
                              f"not a PyTorch file; torch.load raised KeyError: 174812789)")


class NotATensor:
    pass


@pytest.mark.parametrize('blob, match', [
    ({'state_dict': {'a': torch.zeros(1)}}, 'no "model" state dict'),     # a dict without 'model'
    ({'model': [torch.zeros(1)]}, 'no "model" state dict'),
    ([torch.zeros(1)], 'no "model" state dict'),
    ({'model': {'image_encoder.trunk.pos_embed': 5}}, 'other than a tensor'),
    ({'model': {'a': torch.zeros(1), 3: torch.zeros(1)}}, 'other than a tensor'),
    ({'model': NotATensor()}, 'is not a valid checkpoint'),  # refused by weights_only
])
def test_not_a_sam2_checkpoint(tmp_path, blob, match):
    path = tmp_path / 'other.pt'
    torch.save(blob, path)
    with pytest.raises(CheckpointError, match=match):
        read_checkpoint(str(path))
    with pytest.raises(CheckpointError, match=match):
        build_model(ckpt_cfg(path))


def test_checkpoint_of_another_size(tmp_path):
    """A real random ``small`` state dict loaded as ``tiny``: Hiera-S has more blocks of the
    same width, so there are missing, unexpected and reshaped keys, all named."""
    small = build_model(small_cfg(image_size=SIZE, model_size='small')).state_dict()
    path = tmp_path / 'sam2.1_hiera_small.pt'
    torch.save({'model': small}, path)
    with pytest.raises(CheckpointError) as err:
        StreamingTracker(ckpt_cfg(path))
    msg = str(err.value)
    assert "model_size='tiny'" in msg and str(path) in msg
    assert 'missing keys' in msg and 'unexpected keys' in msg and 'shape mismatches' in msg
    assert 'image_encoder.trunk.blocks.12' in msg           # an unexpected key, by name
    assert 'tiny or small' in msg                           # width 96 says which sizes fit


@pytest.mark.parametrize('edit, words', [
    ('base_plus_width', ['shape mismatches', 'image_encoder.trunk.pos_embed',
                         '(1, 112, 7, 7)', 'base_plus']),
    ('prefixed', ['missing keys', 'unexpected keys', 'module.']),
    ('dropped', ['missing keys', 'memory_encoder']),
    ('extra', ['unexpected keys', 'extra_head.weight']),
])
def test_mismatch_named_and_nothing_loaded(saved, spare_model, edit, words):
    """Simulated mismatches through load_state: the error names them, and the model keeps its
    weights (the check runs before load_state_dict)."""
    _, state = saved
    state = dict(state)
    if edit == 'base_plus_width':
        state['image_encoder.trunk.pos_embed'] = torch.zeros(1, 112, 7, 7)
    elif edit == 'prefixed':
        state = {f'module.{k}': v for k, v in state.items()}
    elif edit == 'dropped':
        state = {k: v for k, v in state.items() if not k.startswith('memory_encoder')}
    else:
        state['extra_head.weight'] = torch.zeros(3)
    model = spare_model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as err:
        load_state(model, state, ckpt_cfg('x.pt'))
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_sam2_0_checkpoint_is_named_as_such_not_blamed_on_the_size(tmp_path):
    """A SAM 2.0 tiny state dict (sam2's own SAM 2.0 config, random weights) given for
    model_size tiny: the error says it is SAM 2.0 and which file to use, not a size mismatch."""
    from sam2.build_sam import build_sam2_video_predictor
    old = build_sam2_video_predictor('configs/sam2/sam2_hiera_t.yaml', ckpt_path=None,
                                     device='cpu',
                                     hydra_overrides_extra=[f'++model.image_size={SIZE}'])
    path = tmp_path / 'sam2_hiera_tiny.pt'
    torch.save({'model': old.state_dict()}, path)
    with pytest.raises(CheckpointError) as err:
        build_model(ckpt_cfg(path))
    assert str(err.value) == (
        f"checkpoint {str(path)!r} is a SAM 2.0 checkpoint (it has none of SAM 2.1's "
        f'no_obj_embed_spatial, obj_ptr_tpos_proj.weight, obj_ptr_tpos_proj.bias); only SAM '
        f'2.1 is supported: use sam2.1_hiera_tiny.pt')


def test_sam2_0_checkpoint_of_another_size_says_both(saved, spare_model):
    _, state = saved
    state = {k: v for k, v in state.items() if k not in SAM21_ONLY}
    state['image_encoder.trunk.pos_embed'] = torch.zeros(1, 144, 7, 7)      # large's width
    with pytest.raises(CheckpointError) as err:
        load_state(spare_model, state, ckpt_cfg('x.pt'))
    msg = str(err.value)
    assert 'is a SAM 2.0 checkpoint' in msg and "does not match model_size='tiny'" in msg
    assert 'looks like large' in msg and 'missing keys' not in msg      # 2.1's keys not listed


def test_no_checkpoint_without_random_weights():
    cfg = small_cfg(checkpoint=None, random_weights=False)
    with pytest.raises(ValueError, match='no checkpoint') as err:
        cfg.validate()
    # how each front end's user spells random weights: Python, the node (-p), a launch file
    for spelling in ('random_weights=True in Python', '-p random_weights:=true',
                     'random_weights:=true for a launch file'):
        assert spelling in str(err.value)
    with pytest.raises(ValueError, match='no checkpoint'):
        StreamingTracker(cfg)


def test_checkpoint_error_is_a_tracker_error():
    assert issubclass(CheckpointError, TrackerError) and issubclass(CheckpointError, ValueError)


@pytest.mark.parametrize('field, value, match', [
    ('max_objects', 2.5, 'max_objects must be an int in 1..256'),
    ('max_objects', '3', 'max_objects must be an int in 1..256'),
    ('max_objects', True, 'max_objects must be an int in 1..256'),
    ('max_cond_frames', '2', 'max_cond_frames must be an int in 1..64'),
    ('lost_after_frames', float('inf'), 'lost_after_frames must be an int >= 1'),
    ('prompt_point_buckets', 5, 'prompt_point_buckets must be point counts'),
    ('image_prompt_buckets', (), 'image_prompt_buckets must be prompt counts'),
    ('device', 'bogus', 'device must be a torch device'),
])
def test_validate_names_a_bad_field_with_a_value_error(field, value, match):
    """Wrong types and values are a ValueError naming the field at validate, never a
    TypeError or OverflowError there or later in the tracker's construction."""
    with pytest.raises(ValueError, match=match):
        small_cfg(**{field: value}).validate()
