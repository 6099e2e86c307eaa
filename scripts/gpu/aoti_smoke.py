"""Go/no-go check for AOTInductor packages on this machine's torch, before building on them.

    python scripts/gpu/aoti_smoke.py [--device cuda]

Why: fused kernels that start in seconds (issue 12) need AOTInductor packages loaded at
configure. On the H200 machine with torch 2.11.0+cu130, ``aoti_compile_and_package`` worked but
``aoti_load_package`` crashed the process (SIGSEGV in ``_load_aoti``) even for one Linear layer,
in the compiling process and in a fresh one. This script compiles a small model in a parent
process and loads it in child processes with each packaging option (constants inside the
shared object, or outside it and loaded afterwards), so a crash costs one child, not the run.
It prints one line per option: ok (max difference to eager) or how the child died.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

OPTIONS = {
    'default': {},
    'constants_outside_so': {'aot_inductor.package_constants_in_so': False},
}


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.register_buffer('scale', torch.full((64,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * self.scale


def child(path: str, device: str, option: str) -> None:
    """Load the package (in a fresh process), run it, compare with eager."""
    torch.manual_seed(0)
    model = Small().to(device).eval()
    x = torch.randn(8, 64, device=device)
    runner = torch._inductor.aoti_load_package(path)
    if option == 'constants_outside_so':
        runner.load_constants({k: v for k, v in model.state_dict().items()},
                              check_full_update=True, user_managed=False)
    with torch.no_grad():
        diff = float((runner(x) - model(x)).abs().max())
    print(json.dumps({'option': option, 'ok': True, 'max_diff': diff}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    ap.add_argument('--child', nargs=2, metavar=('PACKAGE', 'OPTION'), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.device, a.child[1])
        return 0
    print(f'torch {torch.__version__}, device {a.device}', flush=True)
    torch.manual_seed(0)
    model = Small().to(a.device).eval()
    x = torch.randn(8, 64, device=a.device)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, configs in OPTIONS.items():
            path = os.path.join(tmp, f'{name}.pt2')
            ep = torch.export.export(model, (x,))
            torch._inductor.aoti_compile_and_package(ep, package_path=path,
                                                     inductor_configs=configs)
            out = subprocess.run([sys.executable, __file__, '--device', a.device,
                                  '--child', path, name], capture_output=True, text=True,
                                 timeout=600)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith('{')]
            if out.returncode == 0 and lines:
                print(f'{name}: ok, max diff {json.loads(lines[-1])["max_diff"]:.3g}')
            else:
                failed += 1
                print(f'{name}: FAILED (exit {out.returncode}): {out.stderr.strip()[-400:]}')
    return 1 if failed == len(OPTIONS) else 0


if __name__ == '__main__':
    sys.exit(main())
