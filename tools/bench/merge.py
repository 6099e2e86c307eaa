"""Merge what a device command brought back into benchmarks/results/.

    python -m tools.bench.merge /work/.device/1 [--results benchmarks/results]

Each file the GPU scripts write ($OUT) goes to its family's results file by that family's key:
  h200.json              engine rows, by (model, res, objects, variant)
  h200_interaction.json  interaction rows, by the engine key and the corrections mode
  h200_extra.json        the engine run's invocation (appended) and its per-row details
  h200_node_latency.json the scripts copy the committed file and add rows: the rows the
                         results lack are appended (two runs of one session both land)
  gpu_equivalence.json   GPU test comparisons: keys replace keys of h200_equivalence.json
  gpu_fused_kernels.json the fused kernels' GPU tests: one entry fused_kernels_gpu_<commit>
  PROBES (tools/probes, and the decode and image GPU tests' measurements)
                         h200_extra.json probes, one entry <name>_<commit>
The commit comes from the engine run's provenance (or --commit). ``--tag h100`` (a run on
another card than the H200) appends ``@h100`` to the equivalence, fused-kernel and probe keys,
so the H200's entries stay beside them; result rows carry their GPU in their key.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import List, Optional

from tools.bench import interaction, results


# the probes' outputs of the GPU scripts (tools/probes, results.save_probe)
# (gpu_decode and gpu_image: the decode and image GPU tests' measurements)
PROBES = ('overlay_probe.json', 'correction.json', 'multistream.json', 'interaction_frames.json',
          'hiera_attention_probe.json', 'sdpa_probe.json', 'gil_publish_probe.json',
          'value_attention_probe.json', 'gpu_decode.json', 'gpu_image.json',
          'launch_probe.json')


def _load(path: str):
    with open(path) as f:
        return json.load(f)


def _dump(path: str, data) -> None:
    with open(path, 'w') as f:
        json.dump(data, f, indent=1)


def append_rows(src: str, dst: str) -> int:
    """Append to ``dst`` the rows of ``src`` it lacks; returns how many. Each device call
    starts from the committed file, so copying the second call's file over would drop the
    first call's rows."""
    new, old = _load(src), (_load(dst) if os.path.exists(dst) else [])
    added = [r for r in new if r not in old]
    _dump(dst, old + added)
    return len(added)


def merge_extra(src: str, dst: str) -> Optional[str]:
    """Append the run's invocation, update its rows; returns the run's commit."""
    new, old = _load(src), _load(dst)
    env = new.get('env') or {}
    if env and env not in old.setdefault('invocations', []):
        old['invocations'].append(env)
    old.setdefault('rows', {}).update(new.get('rows', {}))
    for key in ('startup', 'probes'):
        if isinstance(new.get(key), dict):
            old.setdefault(key, {}).update(new[key])
        elif isinstance(new.get(key), list):       # startup rows: appended, none twice
            rows = old.setdefault(key, [])
            rows += [r for r in new[key] if r not in rows]
    _dump(dst, old)
    return env.get('commit')


def merge(device_dir: str, res_dir: str, commit: Optional[str] = None,
          tag: str = '') -> List[str]:
    """Merge every known file of ``device_dir`` into ``res_dir``; returns what was merged.
    ``tag``: suffix '@tag' of the keyed entries (equivalence, fused kernels, probes)."""
    done = []
    at = f'@{tag}' if tag else ''
    src = lambda name: os.path.join(device_dir, name)  # noqa: E731
    dst = lambda name: os.path.join(res_dir, name)  # noqa: E731
    if os.path.exists(src('h200.json')):
        results.save_json(dst('h200.json'), _load(src('h200.json')))
        done.append('h200.json')
    if os.path.exists(src('h200_interaction.json')):
        results.save_json(dst('h200_interaction.json'), _load(src('h200_interaction.json')),
                          key=interaction.row_key)
        done.append('h200_interaction.json')
    if os.path.exists(src('h200_extra.json')):
        commit = merge_extra(src('h200_extra.json'), dst('h200_extra.json')) or commit
        done.append('h200_extra.json')
    if os.path.exists(src('h200_node_latency.json')):
        append_rows(src('h200_node_latency.json'), dst('h200_node_latency.json'))
        done.append('h200_node_latency.json')
    probes = [name for name in PROBES if os.path.exists(src(name))] + sorted(
        name for name in os.listdir(device_dir)      # gpu_quick.sh's PROBE_RUNS: one per run
        if name.startswith('interaction_frames_') and name.endswith('obj.json'))
    if probes:
        if not commit:
            raise SystemExit(f'{probes}: no commit known; pass --commit')
        extra = _load(dst('h200_extra.json'))
        for name in probes:
            extra.setdefault('probes', {})[f'{name[:-5]}_{commit}{at}'] = _load(src(name))
        _dump(dst('h200_extra.json'), extra)
        done += probes
    eq_path = dst('h200_equivalence.json')
    eq = _load(eq_path)
    if os.path.exists(src('gpu_equivalence.json')):
        eq.update({f'{k}{at}': v for k, v in _load(src('gpu_equivalence.json')).items()})
        done.append('gpu_equivalence.json')
    if os.path.exists(src('gpu_fused_kernels.json')):
        if not commit:
            raise SystemExit('gpu_fused_kernels.json: no commit known; pass --commit')
        eq[f'fused_kernels_gpu_{commit}{at}'] = _load(src('gpu_fused_kernels.json'))
        done.append('gpu_fused_kernels.json')
    _dump(eq_path, eq)
    return done


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog='python -m tools.bench.merge', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('device_dir')
    p.add_argument('--results', default='benchmarks/results')
    p.add_argument('--commit', default=None)
    p.add_argument('--tag', default='', help="suffix of keyed entries, e.g. h100 for a run "
                                             "on an H100")
    a = p.parse_args(argv)
    for name in merge(a.device_dir, a.results, a.commit, a.tag):
        print('merged', name)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
