"""Probe: where a tiny@512 frame's GPU time goes, and whether precompiled (fused) components pay.

    python tools/probes/precompile_probe.py [--model tiny] [--res 512] [--out DIR]

Why: the CUDA graphs replay sam2's own kernels (``kernel_census.py`` counts them, most of
them small elementwise ones); fusing them needs inductor, whose compile at every start rules it
out unless its output loads from disk. ``torch.compile(...).aot_compile`` saves a compiled
function that loads in another process without tracing (AOTInductor packages are not used:
they did not load with the GPU machine's torch). This probe measures, on the GPU:

1. per captured graph of the default tracker (encoder, steady track step, frame-in, masks-out):
   ms per replay, so the frame's time is attributed before anything is optimized;
2. for the image encoder and the steady track step (1 object): compile and save time, then in
   a fresh process load time, replay time inside a CUDA graph against the eager graph, and the
   largest difference of the outputs.

Prints one JSON line per measurement and writes them to DIR/precompile_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch._dynamo

ROWS = []
WANT = ('encoder', 'step', 'heads')
DEV = os.environ.get('PROBE_DEVICE', 'cuda')   # cpu: a quick check of the compile part


def emit(**row) -> None:
    ROWS.append(row)
    print(json.dumps(row), flush=True)


def tracker_for(model: str, res: int):
    from sam2_ros.engine import Prompt, StreamingTracker, TrackerConfig
    from sam2_ros.synthetic import SyntheticCamera
    cfg = TrackerConfig(model_size=model, image_size=res, device=DEV, random_weights=True,
                        io_resolution=(1280, 720))
    trk = StreamingTracker(cfg)
    cam = SyntheticCamera(1280, 720, objects=1)
    trk.track(cam.frame(0))
    trk.add_prompt(Prompt(obj_id=1, box=tuple(cam.boxes(0)[0])))
    for i in range(1, 24):
        trk.track(cam.frame(i))
    return trk, cam


def replay_ms(fn, n: int = 50) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def graph_breakdown(model: str, res: int) -> None:
    trk, cam = tracker_for(model, res)
    r = trk.runner
    emit(what='graph', name='encoder', ms=replay_ms(r.graphs.encoder.graph.replay))
    for key, cap in sorted(r.steps.items()):
        if key.batch == 1:
            emit(what='graph', name=f'step b{key.batch} c{key.cond}',
                 ms=replay_ms(cap.graph.replay), choice=r.steady_choice.get(key))
    for key, cap in r.io.items():
        emit(what='graph', name=str(key), ms=replay_ms(cap.graph.replay))
    frames = cam.frames(40, start=30)
    times = []
    for f in frames:
        torch.cuda.synchronize()
        t = time.perf_counter()
        trk.track(f)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    emit(what='frame', ms_p50=times[len(times) // 2], stats=dict(trk.stats))


# ---- precompiled components ---------------------------------------------------------------
def components(model: str, res: int):
    """(model, inputs, fn) of the encoder and the steady 1-object step, as the tracker runs
    them (bf16 autocast, precast weights)."""
    from sam2_ros.engine import encoder, glue, holes, step
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.model import build_model, precast
    torch.manual_seed(0)
    cfg = TrackerConfig(model_size=model, image_size=res, device=DEV, random_weights=True)
    m = precast(build_model(cfg), copy=False)
    image = torch.randn(1, 3, res, res, device=DEV)

    def enc(mod, x):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            f = encoder.encode_image(mod, x)
        return (*f.vision_feats, *f.vision_pos)

    with torch.inference_mode(), torch.autocast(DEV, dtype=torch.bfloat16):
        feats = encoder.encode_image(m, image)
        pos = step.maskmem_pos_enc(m, feats)
    sizes = feats.feat_sizes
    n_s, n_p = m.num_maskmem, m.max_obj_ptrs_in_encoder
    h = res // 16
    mem = (torch.randn(n_s, 1, m.mem_dim, h, h, device=DEV).bfloat16(),
           torch.tensor([[i] for i in range(n_s)], device=DEV),
           torch.randn(n_p, 1, m.hidden_dim, device=DEV),
           torch.arange(1, n_p + 1, device=DEV, dtype=torch.float).view(n_p, 1))
    feats_t = tuple(x.clone() for x in (*feats.vision_feats, *feats.vision_pos))

    def stp(mod, vf0, vf1, vf2, vp0, vp1, vp2, mf, ti, pt, pd, mpos):
        f = encoder.Features([vf0, vf1, vf2], [vp0, vp1, vp2], sizes)
        with torch.autocast(DEV, dtype=torch.bfloat16):
            o = step.track_step(mod, f, step.Memory(mf, ti, pt, pd), mpos, fill_hole_area=8)
        return o.low_res_logits, o.obj_ptr, o.score, o.mem_feats

    def heads(mod, pix, vf0, vf1, vf2, vp0, vp1, vp2):
        # what follows the memory attention: SAM heads, hole filling, memory encoder
        f = encoder.Features([vf0, vf1, vf2], [vp0, vp1, vp2], sizes)
        with torch.autocast(DEV, dtype=torch.bfloat16):
            _, _, _, low, high, ptr, score = glue.sam_heads(mod)(
                backbone_features=pix, point_inputs=None, mask_inputs=None,
                high_res_features=encoder.high_res_features(f), multimask_output=False)
            low = holes.fill_holes(low, 8)
            mf = step.encode_memory(mod, f, None, high, score, from_points=False)
        return low, ptr, score, mf

    args = (*feats_t, *mem, pos.clone())
    with torch.no_grad(), torch.autocast(DEV, dtype=torch.bfloat16):
        stp(m, *args)      # sam2's RoPE tables take this feature size (a module attribute)
        pix = step.condition_on_memory(m, encoder.Features(list(feats_t[:3]), list(feats_t[3:]),
                                                           sizes),
                                       step.Memory(*mem), args[-1]).clone()
    return m, {'encoder': (enc, (image,)), 'step': (stp, args),
               'heads': (heads, (pix, *feats_t))}


def compile_and_save(model: str, res: int, out: str) -> None:
    if hasattr(torch._dynamo.config, 'enable_aot_compile'):   # off by default on torch 2.11
        torch._dynamo.config.enable_aot_compile = True
    m, comps = components(model, res)
    for name, (fn, args) in comps.items():
        if name not in WANT:
            continue
        path = os.path.join(out, f'{name}.bin')
        t = time.perf_counter()
        try:
            with torch.no_grad():   # its guards expect autograd keys (so: no_grad at calls)
                c = torch.compile(fn, fullgraph=True).aot_compile(((m, *args), {}))
            s = time.perf_counter() - t
            c.save_compiled_function(path)
            emit(what='compile', name=name, ok=True, compile_s=s,
                 save_s=time.perf_counter() - t - s, mb=os.path.getsize(path) / 2**20)
        except Exception as exc:  # noqa: BLE001 - a probe: report and go on
            emit(what='compile', name=name, ok=False, error=repr(exc)[:800],
                 s=time.perf_counter() - t)


def child_load(model: str, res: int, out: str) -> None:
    """In a fresh process: load each saved function, run it in a CUDA graph, compare."""
    t0 = time.perf_counter()
    m, comps = components(model, res)
    emit(what='child_setup', s=time.perf_counter() - t0)
    for name, (fn, args) in comps.items():
        path = os.path.join(out, f'{name}.bin')
        if not os.path.exists(path):
            continue
        try:
            t = time.perf_counter()
            with open(path, 'rb') as f:
                c = torch.compiler.load_compiled_function(f)
            load_s = time.perf_counter() - t
            with torch.no_grad():
                t = time.perf_counter()
                ref = fn(m, *args)
                try:
                    got = c(m, *args)
                    guards = 'checked'
                except RuntimeError:
                    c.disable_guard_check()
                    got = c(m, *args)
                    guards = 'disabled'
                if DEV == 'cuda':
                    torch.cuda.synchronize()
                first_s = time.perf_counter() - t
                diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(ref, got))
                graphs = {'eager': None, 'compiled': None}
                for kind, f in (('eager', fn), ('compiled', c)) if DEV == 'cuda' else ():
                    g = torch.cuda.CUDAGraph()
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        f(m, *args)
                    torch.cuda.current_stream().wait_stream(s)
                    with torch.cuda.graph(g):
                        f(m, *args)
                    graphs[kind] = replay_ms(g.replay)
            emit(what='load', name=name, ok=True, load_s=load_s, first_call_s=first_s,
                 guards=guards, max_diff=diff, ms_eager_graph=graphs['eager'],
                 ms_compiled_graph=graphs['compiled'])
        except Exception as exc:  # noqa: BLE001
            emit(what='load', name=name, ok=False, error=repr(exc)[:800])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', default='tiny')
    ap.add_argument('--res', type=int, default=512)
    ap.add_argument('--out', default=os.environ.get('OUT', '/tmp/out'))
    ap.add_argument('--part', default='all', choices=('all', 'graphs', 'compile', 'child'))
    ap.add_argument('--components', default='encoder,step,heads')
    a = ap.parse_args()
    global WANT
    WANT = tuple(a.components.split(','))
    os.makedirs(a.out, exist_ok=True)
    art = os.path.join(a.out, 'precompiled')
    os.makedirs(art, exist_ok=True)
    if a.part == 'child':
        child_load(a.model, a.res, art)
        return 0
    emit(what='env', model=a.model, res=a.res, torch=torch.__version__,
         gpu=torch.cuda.get_device_name() if DEV == 'cuda' else DEV)
    if a.part in ('all', 'graphs'):
        graph_breakdown(a.model, a.res)
    if a.part in ('all', 'compile'):
        compile_and_save(a.model, a.res, art)
        t = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, '--part', 'child', '--model', a.model,
                            '--res', str(a.res), '--out', a.out,
                            '--components', a.components], capture_output=True,
                           text=True, timeout=900)
        for line in p.stdout.splitlines():
            if line.startswith('{'):
                ROWS.append(json.loads(line))
                print(line, flush=True)
        emit(what='child', rc=p.returncode, s=time.perf_counter() - t,
             stderr_tail=p.stderr[-1500:] if p.returncode else '')
    with open(os.path.join(a.out, f'precompile_probe_{a.model}{a.res}.json'), 'w') as f:
        json.dump(ROWS, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
