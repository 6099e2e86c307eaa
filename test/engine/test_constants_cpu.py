"""The fused model copy's 'constants' group (sam2_ros/engine/cuda/kernels/constants.py) on the
CPU: every value it computes once equals, bitwise, what sam2's module (or step.py without the
group) computes on each call, in fp32 and under bf16 autocast as the graph path runs them;
a track step, the image encoder and a graph runner's stream (the CPU graph stand-in) with the
group equal them without it, bitwise; and the ops it removes are gone from a step.
"""

import collections

import pytest
import torch
from sam2.modeling.sam2_utils import get_1d_sine_pe

from conftest import LEAN, shared_model, top_level_ops, tracker_on_shared_model
from graph_standin import graphs_on_cpu
from scenarios import schedule, synthetic_frames
from sam2_ros.engine import encoder, holes, step
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.cuda import runner
from sam2_ros.engine.cuda.kernels import constants, fused

pytestmark = pytest.mark.usefixtures('one_thread')
AUTOCAST = [False, True]


def _ctx(autocast: bool):
    return torch.autocast('cpu', torch.bfloat16, enabled=autocast)


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _same(out, ref):
    """Bitwise equal tensors (or nested tuples / lists / dicts of them)."""
    if isinstance(ref, dict):
        assert out.keys() == ref.keys()
        for k in ref:
            _same(out[k], ref[k])
    elif isinstance(ref, (tuple, list)):
        assert len(out) == len(ref)
        for o, r in zip(out, ref):
            _same(o, r)
    else:
        assert out.dtype == ref.dtype and out.shape == ref.shape, (out.dtype, ref.dtype)
        assert torch.equal(out, ref), float((out.float() - ref.float()).abs().max())


@pytest.mark.parametrize('autocast', AUTOCAST)
def test_constant_modules_equal_sam2s(autocast):
    model = shared_model(64)
    twin = fused.fused_model(model, ('constants',))
    with torch.inference_mode(), _ctx(autocast):
        for _ in range(2):             # the first call stores, the second reads the store
            for dtype, batch in ((torch.float32, 1), (torch.bfloat16, 3)):
                x = _rand(batch, 256, 8, 8, seed=1, dtype=dtype)
                for part in ('image_encoder.neck', 'memory_encoder'):
                    ours = twin.get_submodule(part).position_encoding
                    sam2s = model.get_submodule(part).position_encoding
                    assert isinstance(ours, constants.ConstantSinePE)
                    _same(ours(x), sam2s(x).to(x.dtype))
            pe, pe2 = twin.sam_prompt_encoder, model.sam_prompt_encoder
            _same(pe.get_dense_pe(), pe2.get_dense_pe())
            trunk = twin.image_encoder.trunk
            _same(trunk._get_pos_embed((16, 16)), model.image_encoder.trunk._get_pos_embed(
                (16, 16)))
            for batch in (1, 2):       # as _forward_sam_heads builds it for point_inputs=None
                pts = (torch.zeros(batch, 1, 2), -torch.ones(batch, 1, dtype=torch.int32))
                held = pe.no_points(batch, 'cpu')
                _same(held, {'point_coords': pts[0], 'point_labels': pts[1]})
                assert pe.no_points(batch, 'cpu')['point_coords'] is held['point_coords']
                mine = (held['point_coords'], held['point_labels'])
                _same(pe(mine, None, None), pe2(pts, None, None))
                masks = _rand(batch, 1, 64, 64, seed=2)
                _same(pe(mine, None, masks), pe2(pts, None, masks))
                # a real prompt (other tensors, even of the same values) is embedded anew
                click = (_rand(batch, 2, 2, seed=3) * 60, torch.ones(batch, 2, dtype=torch.int32))
                _same(pe(click, None, None), pe2(click, None, None))
                _same(pe(pts, None, masks), pe2(pts, None, masks))
    assert len(pe.store.values) == 1 + 2 + 2     # dense pe, no-points and no-prompt per batch


@pytest.mark.parametrize('autocast', AUTOCAST)
def test_sine_pe_equals_sam2(autocast):
    """StepConstants.sine_pe (frequencies once) = sam2's get_1d_sine_pe, for the temporal
    distances / 15 the object pointers take: small, negative, far conditioning frames."""
    consts = constants.StepConstants()
    dist = torch.cat([torch.arange(-40, 41), torch.tensor([1000, 123457, 10 ** 7])]).float()
    pos = (dist / 15).view(-1, 3)                       # [n_p, B]
    with torch.inference_mode(), _ctx(autocast):
        for dim in (64, 256):
            for _ in range(2):
                _same(consts.sine_pe(pos, dim=dim), get_1d_sine_pe(pos, dim=dim))


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_spatial_pos_table_equals_the_add(dtype):
    model = shared_model(64)
    consts = constants.StepConstants()
    maskmem_pos = _rand(1, 64, 4, 4, seed=4, dtype=dtype)
    tpos_idx = torch.tensor([[6, 6], [5, 0], [4, 3], [0, 6]])
    with torch.inference_mode():
        tpos = model.maskmem_tpos_enc.flatten(1)[tpos_idx]
        ref = maskmem_pos.flatten(2).permute(2, 0, 1).unsqueeze(0) + tpos.unsqueeze(1)
        for _ in range(2):
            _same(consts.spatial_pos(model, maskmem_pos, tpos_idx), ref)
        other = maskmem_pos.clone() + 1               # another tensor: another table
        _same(consts.spatial_pos(model, other, tpos_idx),
              other.flatten(2).permute(2, 0, 1).unsqueeze(0) + tpos.unsqueeze(1))


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_spatial_gather_writes_memory_pos_rows_itself(dtype):
    """``gather_spatial`` writes the table's rows into memory_pos's strided spatial rows (the
    batch-major layout of a batched step) with the gather alone: the values of
    ``spatial_pos`` and no copy after the gather; of another dtype it casts in a copy."""
    from torch.profiler import profile
    model = shared_model(64)
    consts = constants.StepConstants()
    maskmem_pos = _rand(1, 64, 4, 4, seed=4, dtype=dtype)
    tpos_idx = torch.tensor([[6, 6], [5, 0], [4, 3]])
    with torch.inference_mode():
        ref = consts.spatial_pos(model, maskmem_pos, tpos_idx)         # [3, 16, 2, 64]
        table = consts.spatial_table(model, maskmem_pos)
        for out_dtype in (table.dtype, torch.float64):
            memory_pos = torch.full((2, 3 * 16 + 8, 64), float('nan'), dtype=out_dtype)
            out = memory_pos.transpose(0, 1)[:3 * 16].view(3, 16, 2, 64)
            with profile() as prof:
                constants.StepConstants.gather_spatial(table, tpos_idx, out)
            names = [e.name for e in prof.events()]
            _same(out, ref.to(out_dtype))
            assert memory_pos[:, 3 * 16:].isnan().all()         # the pointer rows untouched
            copies = names.count('aten::copy_')
            assert copies == (0 if out_dtype == table.dtype else 1), names


def test_hole_tables_fill_as_without():
    logits = _rand(3, 1, 16, 16, seed=5)
    logits[1] = logits[1].abs()                  # foreground only: nothing to fill
    consts = constants.StepConstants()
    for area in (1, 8, 40):
        tables = consts.hole_tables(3, 16, 16, 'cpu')
        out = holes.fill_holes(logits, area, tables)
        _same(out, holes.fill_holes(logits, area))
        assert (area == 1) or bool((out != logits).any())   # something was filled
    assert consts.hole_tables(3, 16, 16, 'cpu')[0] is tables[0]


def _memory(batch, hw, n_s=7, n_p=16, padded=False, seed=6):
    g = torch.Generator().manual_seed(seed)
    valid = (lambda n: torch.rand(n, batch, generator=g) > 0.3) if padded else (lambda n: None)
    fv, pv = valid(n_s), valid(n_p)
    if padded:
        fv[0], pv[0] = True, True
    return step.Memory(torch.randn(n_s, batch, 64, *hw, generator=g).bfloat16(),
                       torch.randint(0, 7, (n_s, batch), generator=g),
                       torch.randn(n_p, batch, 256, generator=g),
                       torch.randint(-20, 400, (n_p, batch), generator=g).float(), fv, pv)


@pytest.mark.parametrize('autocast', AUTOCAST)
def test_encoder_and_track_step_with_constants_equal_without(autocast):
    model = shared_model(64)
    twin = fused.fused_model(model, ('constants',))
    img = _rand(2, 3, 64, 64, seed=7)
    with torch.inference_mode(), _ctx(autocast):
        ref_f = encoder.encode_image(model, img)
        for _ in range(2):
            f = encoder.encode_image(twin, img)
            _same(f.vision_feats + f.vision_pos, ref_f.vision_feats + ref_f.vision_pos)
        maskmem_pos = step.maskmem_pos_enc(model, ref_f)
        frame = encoder.Features([x[:, :1] for x in ref_f.vision_feats],
                                 [x[:, :1] for x in ref_f.vision_pos], ref_f.feat_sizes)
        for batch, padded, major in ((1, False, False), (2, False, True), (2, True, False)):
            feats = encoder.expand(frame, batch)
            mem = _memory(batch, ref_f.feat_sizes[-1], padded=padded)
            for _ in range(2):
                outs = [step.track_step(m, feats, mem, maskmem_pos, fill_hole_area=8,
                                        batch_major=major) for m in (model, twin)]
                _same([getattr(outs[1], k) for k in vars(outs[0])],
                      [getattr(outs[0], k) for k in vars(outs[0])])
    assert twin.constants.store.values and twin.constants.spatial


def _top_level_ops(fn) -> collections.Counter:
    """How often ``fn`` calls each aten op that no other aten op called (views included)."""
    return collections.Counter(e.name for e in top_level_ops(fn)
                               if e.name.startswith('aten::'))


def test_constants_remove_the_ops_they_replace():
    """A steady step: the dense positional encoding (ones, two cumsums, matmul, sin, cos),
    the no-prompt embedding (its encoding's matmul, sin, cos, five label masks, the padding
    point's ones), the sine frequencies and the hole grid are not computed any more: 60 ops
    fewer (85 with views; 64 of them launch a kernel)."""
    model = shared_model(64)
    twin = fused.fused_model(model, ('constants',))
    with torch.inference_mode():
        feats = encoder.encode_image(model, _rand(1, 3, 64, 64, seed=8))
        maskmem_pos = step.maskmem_pos_enc(model, feats)
        mem = _memory(1, feats.feat_sizes[-1])
        ops = {}
        for name, m in (('sam2', model), ('constants', twin)):
            def run():
                step.track_step(m, feats, mem, maskmem_pos, fill_hole_area=8)
            run()                                            # fills the store
            ops[name] = _top_level_ops(run)
    fewer = ops['sam2'] - ops['constants']
    assert not ops['constants'] - ops['sam2']        # nothing new, beyond a table lookup
    assert fewer['aten::cumsum'] == 2 and ops['constants']['aten::ones'] == 0, fewer
    assert fewer['aten::matmul'] == fewer['aten::sin'] == fewer['aten::cos'] == 2, fewer
    assert fewer['aten::eq'] == 5 and fewer['aten::floor_divide'] == 1, fewer
    assert sum(fewer.values()) >= 60, fewer


def test_constants_group_switches_and_shares_weights(monkeypatch):
    model = shared_model(64)
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', random_weights=True)
    assert fused.enabled_groups(cfg) == ()                       # no graphs on the CPU
    monkeypatch.setattr(fused, 'triton_importable', lambda: False)
    assert fused.enabled_groups(cfg, 'cuda') == ('constants',)   # needs no triton
    assert fused.enabled_groups(cfg.replace(fused_kernels=('hiera',)), 'cuda') == ()
    assert fused.enabled_groups(cfg.replace(compile_mode='default'), 'cuda') == ()
    assert fused.enabled_groups(cfg.replace(fused_kernels=False), 'cuda') == ()
    twin = fused.fused_model(model, ('constants',))
    assert twin is not model and not hasattr(model, 'constants')
    assert type(model.sam_prompt_encoder).__name__ == 'PromptEncoder'      # left unchanged
    assert type(model.image_encoder.neck.position_encoding).__name__ == 'PositionEmbeddingSine'
    shared = {id(p) for p in model.parameters()}
    assert {id(p) for p in twin.parameters()} == shared          # the same weights, no copies


def test_nothing_is_stored_while_a_graph_is_captured(monkeypatch):
    """A value first asked for during a capture is computed into the graph, not stored (the
    warm-up before each capture stores them)."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'is_current_stream_capturing', lambda: True)
    consts = constants.StepConstants()
    model = shared_model(64)
    consts.sine_pe(torch.ones(2, 1), dim=64)
    consts.spatial_pos(model, torch.zeros(1, 64, 4, 4), torch.zeros(2, 1, dtype=torch.long))
    assert not consts.store.values and not consts.spatial


@pytest.mark.parametrize('steady', ['sam2', 'split'])
def test_graph_runner_with_constants_equals_without(steady, monkeypatch):
    """A tracker stream (click, box, mask, correction, removal) through the graph runner
    (CPU stand-in) capturing the constants copy = capturing sam2's modules, bitwise, with
    every tracking step a replay."""
    graphs_on_cpu(monkeypatch)
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, graph_mode='batched',
                        batch_buckets=(1, 2), max_cond_frames=2, steady_attention=steady,
                        extra_hydra_overrides=list(LEAN))
    events = schedule(48, 64, add2=3, add3=5, fix=22, remove=30)
    runs = []
    for groups in ((), ('constants',)):
        monkeypatch.setattr(runner, 'fused_copy',
                            lambda model, cfg, g=groups: fused.fused_model(model, g))
        tr = tracker_on_shared_model(cfg)
        tr.runner = runner.GraphRunner(tr.model, cfg, lambda reason: None)
        with torch.inference_mode():
            tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
        assert hasattr(tr.runner.graphs.model, 'constants') == bool(groups)
        logits = []
        for f, fr in enumerate(synthetic_frames(36, h=48, w=64)):
            res = tr.track(fr)
            logits.append({o.obj_id: o.low_res_logits.clone() for o in res.objects})
            for kind, p in events.get(f, []):
                tr.remove_object(p) if kind == 'remove' else tr.add_prompt(p)
        assert tr.stats['graph_steps'] >= 50 and tr.stats['eager_steps'] == 0, dict(tr.stats)
        # the prompts (click, box, correction) replay graphs of the same model copy
        assert tr.runner.graphs.prompts.model is tr.runner.graphs.model
        assert tr.stats['prompt_graph_steps'] >= 3, dict(tr.stats)
        runs.append(logits)
    for ref, out in zip(*runs):
        assert ref.keys() == out.keys()
        _same([out[k] for k in ref], [ref[k] for k in ref])


def test_a_failing_fused_prompt_capture_keeps_the_fused_steps(monkeypatch):
    """Prompt graphs on the fused copy whose capture fails: the prompts are captured on
    sam2's modules instead (one report), the step graphs keep the fused copy, and a prompted
    stream still replays graphs for every prompt."""
    from sam2_ros.engine.cuda import prompt_graphs
    graphs_on_cpu(monkeypatch)
    monkeypatch.setattr(runner, 'fused_copy',
                        lambda model, cfg: fused.fused_model(model, ('constants',)))
    real = prompt_graphs.PromptGraphs.capture

    def capture_unless_fused(self):
        if hasattr(self.model, 'constants'):
            raise RuntimeError('fused prompt capture failed (test)')
        return real(self)
    monkeypatch.setattr(prompt_graphs.PromptGraphs, 'capture', capture_unless_fused)
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, graph_mode='batched',
                        batch_buckets=(1, 2), max_cond_frames=2, steady_attention='sam2',
                        extra_hydra_overrides=list(LEAN))
    tr = tracker_on_shared_model(cfg)
    reports = []
    tr.runner = runner.GraphRunner(tr.model, cfg, reports.append)
    with torch.inference_mode():
        tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
    assert len(reports) == 1 and 'for the prompts instead' in reports[0], reports
    assert hasattr(tr.runner.graphs.model, 'constants')           # the steps: still fused
    assert tr.runner.graphs.prompts.model is tr.model              # the prompts: sam2's
    events = schedule(48, 64, add2=3, add3=5, fix=8, remove=30)
    for f, fr in enumerate(synthetic_frames(10, h=48, w=64)):
        tr.track(fr)
        for kind, p in events.get(f, []):
            tr.remove_object(p) if kind == 'remove' else tr.add_prompt(p)
    assert tr.stats['prompt_graph_steps'] >= 3 and tr.stats['eager_steps'] == 0, \
        dict(tr.stats)
