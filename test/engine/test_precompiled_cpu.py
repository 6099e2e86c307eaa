"""The precompiled parts' bookkeeping on the CPU (no compile: that runs on the GPU machine,
test_precompiled_gpu.py): what the file name depends on, and that every failure means
sam2's kernels (None), never an error."""

from pathlib import Path

import pytest
import torch

from sam2_ros.engine.cuda import precompiled
from sam2_ros.engine.config import TrackerConfig


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.image_size = 64


def _store(tmp_path, **kw):
    kw = {'precompile': ('heads',), **kw}
    cfg = TrackerConfig(random_weights=True, device='cpu', precompile_dir=str(tmp_path), **kw)
    return precompiled.Store(_Model(), cfg.validate())


def test_file_key_follows_shapes_strides_and_constants(tmp_path):
    s = _store(tmp_path)
    x = torch.zeros(2, 3)
    k = s.key('heads_b2', (x,), (8, True))
    assert k == s.key('heads_b2', (torch.ones(2, 3),), (8, True))     # values do not count
    assert k != s.key('heads_b2', (torch.zeros(3, 3),), (8, True))
    assert k != s.key('heads_b2', (torch.zeros(3, 2).t(),), (8, True))  # another stride
    assert k != s.key('heads_b2', (x,), (0, True))                   # fill_hole_area
    assert k != s.key('heads_b2', (x.double(),), (8, True))
    assert k != s.key('encoder', (x,), (8, True))


def test_file_key_follows_the_models_resolved_config_not_its_weights(tmp_path):
    """A plain attribute of any module (hydra's resolved config, a constant of the compiled
    code) or a parameter's dtype or shape gives another file; weight values (inputs of the
    compiled function) and the caches sam2 fills as it runs do not."""
    s = _store(tmp_path)
    s.model.lin.cache, s.model.lin.table = {}, torch.zeros(5)     # as sam2's modules hold
    x = torch.zeros(2, 3)

    def key():
        return s.key('heads_b2', (x,), (8, True))
    k = key()
    with torch.no_grad():
        s.model.lin.weight.add_(1.0)
    s.model.lin.cache[(64, 64)] = torch.ones(3)   # a positional encoding cached as it runs
    s.model.lin.table = torch.zeros(7)            # a RoPE table resized as it runs
    assert key() == k
    s.model.lin.scale = 5.0                       # e.g. sigmoid_scale_for_mem_enc
    k2 = key()
    assert k2 != k
    s.model.lin.scale = 20.0
    assert key() != k2
    s.model.lin.to(torch.float64)
    assert key() not in (k, k2)


def test_file_key_follows_the_hydra_overrides_sam2_and_the_whole_engine(tmp_path,
                                                                         monkeypatch):
    import importlib.metadata
    import sam2

    x = torch.zeros(1, 4)
    k = _store(tmp_path).key('heads_b1', (x,), (8, True))
    over = _store(tmp_path, extra_hydra_overrides=('++model.sigmoid_scale_for_mem_enc=5.0',))
    assert over.key('heads_b1', (x,), (8, True)) != k
    facts = _store(tmp_path).key_facts('heads_b1', (x,), (8, True))
    assert facts['sam2'] == importlib.metadata.version('sam2') != ''
    assert facts['sam2_src'] == precompiled.tree_digest(Path(sam2.__file__).parent,
                                                        ('.py', '.yaml'))
    monkeypatch.setattr(precompiled, 'version', lambda dist: f'{dist}-other')
    assert _store(tmp_path).key('heads_b1', (x,), (8, True)) != k
    monkeypatch.undo()
    # the engine's source: every module, also those reached only through others
    engine = tmp_path / 'engine'
    (engine / 'cuda').mkdir(parents=True)
    for name in ('glue.py', 'attention.py', 'cuda/runner.py'):
        (engine / name).write_text('x = 1\n')
    monkeypatch.setattr(precompiled, 'ENGINE', engine)
    keys = {_store(tmp_path).key('heads_b1', (x,), (8, True))}
    for name in ('glue.py', 'attention.py', 'cuda/runner.py'):
        (engine / name).write_text('x = 2\n')
        keys.add(_store(tmp_path).key('heads_b1', (x,), (8, True)))
    assert len(keys) == 4
    (engine / 'notes.txt').write_text('not code')
    assert _store(tmp_path).key('heads_b1', (x,), (8, True)) in keys


def test_compile_failure_means_sam2_kernels(tmp_path, monkeypatch):
    s = _store(tmp_path)

    def boom(*a, **k):
        raise RuntimeError('no aot_compile in this torch')
    monkeypatch.setattr(s, 'compile', boom)
    x = torch.zeros(1, 4)
    assert s.load_or_compile('heads_b1', precompiled.heads_fn, (x,), (8, True)) is None
    assert s.events == [{'part': 'heads_b1', 'how': 'failed',
                         'error': "RuntimeError('no aot_compile in this torch')"}]


def test_corrupt_file_is_not_loaded(tmp_path):
    path = tmp_path / 'x.bin'
    path.write_bytes(b'not a compiled function')
    assert _store(tmp_path).load(path) is None


def test_model_built_in_inference_mode_is_refused_clearly(tmp_path):
    with torch.inference_mode():
        s = precompiled.Store(_Model(), TrackerConfig(random_weights=True, device='cpu'))
    with pytest.raises(RuntimeError, match='inference mode'):
        s.compile(precompiled.heads_fn, (torch.zeros(1),), (), tmp_path / 'y.bin')


def test_bound_function_checks_its_inputs():
    calls = []
    b = precompiled.Bound(lambda *a: calls.append(a) or 'out', 'model',
                           (torch.zeros(2, 3),), (8,))
    assert b.fits(torch.ones(2, 3)) and not b.fits(torch.ones(2, 3).double())
    assert b(torch.ones(2, 3)) == 'out' and calls[0][0] == 'model' and calls[0][2] == 8
    with pytest.raises(ValueError, match='compiled for'):
        b(torch.ones(3, 3))


@pytest.mark.parametrize('kw', [dict(precompile=('decoder',)),
                                dict(precompile=('heads', 'heads')),
                                dict(precompile=('encoder',), compile_mode='default')])
def test_config_rejects_bad_precompile(kw):
    with pytest.raises(ValueError, match='precompile'):
        TrackerConfig(random_weights=True, **kw).validate()


def test_loaded_file_that_fails_its_first_call_is_compiled_again(tmp_path, monkeypatch):
    s = _store(tmp_path)
    x = torch.zeros(1, 4)
    (tmp_path / f"heads_b1-{s.key('heads_b1', (x,), (8, True))}.bin").write_bytes(b'old')

    def stale(model, *a):
        raise RuntimeError('built for another torch')
    monkeypatch.setattr(s, 'load', lambda path: stale)
    monkeypatch.setattr(s, 'compile', lambda *a: (lambda model, t, *c: t + 1))
    bound = s.load_or_compile('heads_b1', precompiled.heads_fn, (x,), (8, True))
    assert bound is not None and float(bound(x).sum()) == 4.0
    assert [e['how'] for e in s.events] == ['compiled']
    # a compiled function that fails its first call too: sam2's kernels, said why
    monkeypatch.setattr(s, 'compile', lambda *a: stale)
    assert s.load_or_compile('heads_b1', precompiled.heads_fn, (x,), (8, True)) is None
    assert s.events[-1]['how'] == 'failed' and 'another torch' in s.events[-1]['error']


def test_feat_sizes_are_the_encoders():
    """The precompiled functions rebuild Features with encoder.feat_sizes: it must equal what
    the image encoder reports."""
    from conftest import shared_model
    from sam2_ros.engine import encoder
    model = shared_model(64)
    with torch.inference_mode():
        f = encoder.encode_image(model, torch.zeros(1, 3, 64, 64))
    assert encoder.feat_sizes(64) == [tuple(s) for s in f.feat_sizes]


def test_heads_are_per_batch_once_and_only_where_they_fit(tmp_path, monkeypatch):
    """What the graph runner asks the store for each captured step: precompiled heads of the
    batch size (got once, then cached), None where heads are not a precompiled part or the
    input's layout is not the compiled one (the runner then runs sam2's modules)."""
    from sam2_ros.engine import encoder
    feats = encoder.Features([torch.zeros(16, 1, 4)] * 3, [], encoder.feat_sizes(64))
    pix = torch.zeros(2, 4, 4, 4)
    assert _store(tmp_path, precompile=('encoder',)).heads(pix, feats) is None
    s = _store(tmp_path)
    calls = []

    def fake_get(name, fn, args, consts):
        calls.append(name)
        return precompiled.Bound(lambda model, p, *rest: (p + 1, p, p, p), s.model, args,
                                  consts)
    monkeypatch.setattr(s, 'load_or_compile', fake_get)
    heads = s.heads(pix, feats)
    out = heads(pix, feats)
    assert float(out.low_res_logits.sum()) == pix.numel() and out.mem_feats is pix
    assert s.heads(pix, feats) is not None and calls == ['heads_b2']     # cached per batch
    assert s.heads(pix.transpose(2, 3), feats) is None                   # another layout
    assert s.heads(torch.zeros(1, 4, 4, 4), feats) is not None and calls[-1] == 'heads_b1'


def test_a_cache_that_cannot_be_written_keeps_the_compiled_part(tmp_path, monkeypatch):
    """A read-only or full disk (here: the cache folder under a plain file): the part just
    compiled is used all the same, with a warning; it used to be thrown away, and the
    compile paid again at every start for nothing."""
    from types import SimpleNamespace

    class Compiled:
        guarded = True

        def disable_guard_check(self):
            self.guarded = False

        def save_compiled_function(self, path):
            raise AssertionError('not reached: the folder cannot be made')
    compiled = Compiled()
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: SimpleNamespace(
        aot_compile=lambda args: compiled))
    (tmp_path / 'afile').write_text('a file, not a folder')
    s = _store(tmp_path / 'afile' / 'sub')
    out = s.compile(precompiled.heads_fn, (torch.zeros(1, 4),), (8, True),
                     tmp_path / 'afile' / 'sub' / 'heads_b1-x.bin')
    assert out is compiled and not compiled.guarded


def test_file_key_names_the_python_version(tmp_path):
    """torch refuses a file of another Python: two interpreters sharing the folder must not
    overwrite each other's file at every start (the device index is in it on CUDA)."""
    import platform

    facts = _store(tmp_path).key_facts('heads_b1', (torch.zeros(1, 4),), (8, True))
    assert facts['python'] == platform.python_version()
