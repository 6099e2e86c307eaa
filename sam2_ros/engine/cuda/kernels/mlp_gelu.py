"""sam2's Hiera MLP (``sam2_utils.MLP``: Linear, exact GELU, Linear) with the GELU fused into
the first GEMM: group 'hiera_mlp'.

A Hiera block's MLP is fc1 [C -> 4C], GELU, fc2 [4C -> C]. sam2 runs fc1 (cuBLAS), then GELU
as a kernel of its own that reads and writes the [M, 4C] hidden again, the block's largest
tensor. Here fc1 and the GELU are one Triton GEMM (``linear_gelu``) whose epilogue applies the
GELU to the tile in registers; fc2 stays sam2's Linear (cuBLAS, cast by autocast as before).

Numerics are sam2's under autocast: float32 accumulation; in bf16 (autocast's, or a model run
in bf16) the operands rounded to bf16 as autocast's casts round (on load, where they are not
bf16 yet), fc1's output rounded once from acc + bias (cuBLAS's epilogue), the GELU computed in
float32 on that bf16 value and rounded again (torch's bf16 GELU). float32: no TF32 unless
torch's matmuls allow it (``torch.backends.cuda.matmul.allow_tf32``), as F.linear.

Block sizes: a few configurations timed on the first call per (M bucket, N, K, dtypes) outside
a graph capture (the capturer's warm-up), the fastest kept; a capture of an untimed key takes
one already compiled for (N, K) or the default, never timing inside a capture.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.dtypes import autocast_dtype
from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne, rne_as
from sam2_ros.engine.cuda.kernels.swap import with_children

Config = Tuple[int, int, int, int, int]    # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
# Few: each is compiled per K (a constexpr: 4 per model), on the first start only (Triton's
# cache). bf16 on the tensor cores: K of Hiera's MLPs is 96 .. 768 (tiny), 144 .. 1152 (large),
# so BLOCK_K 32 (96 = 3 x 32) and 64; wide N tiles for the 4C outputs; 64- or 128-wide ones
# where M is small (the last stage: 256 rows at tiny@512, 48 programs of 128 x 128 for 132 SMs)
BF16_CONFIGS: Tuple[Config, ...] = ((128, 128, 64, 8, 3), (128, 256, 64, 8, 3),
                                    (64, 128, 32, 4, 4), (128, 64, 64, 4, 4))
# float32 ('ieee': FMA, no tensor cores): smaller tiles (4 bytes an operand, shared memory)
FP32_CONFIGS: Tuple[Config, ...] = ((64, 64, 32, 4, 3), (128, 64, 32, 4, 3),
                                    (64, 128, 32, 4, 3))
# the CPU tests: few programs and K steps (the interpreter's cost is per program and op: a
# tiny@64 trunk's 12 MLPs take 2 s so, 17 s in 64 x 128 x 64 blocks), each cut to the
# power of two of M, N, K where that is smaller
INTERPRETED: Config = (64, 256, 256, 4, 1)
_TUNED: Dict[tuple, Config] = {}           # key (device, dtypes, M bucket, N, K) -> config
_TIMING_REPS = 5


@jit
def _linear_gelu_kernel(x_ptr, x_sm, w_ptr, b_ptr, y_ptr, M, N, K: tl.constexpr,
                        BF16: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                        EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    # K a constexpr: the loop's trip count is known (a few per model: C of each stage)
    # The N tiles of one M tile run next to each other: the x tile [BLOCK_M, K] is read from
    # L2 after the first of them, and the weights ([4C, C], at most ~10 MB in bf16) stay in L2
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    rm = (pid // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    mm = rm < M
    nm = rn < N
    m64 = rm.to(tl.int64)          # M * N may pass 2^31 (batched frames at 1024)
    x_rows = x_ptr + (m64 * x_sm)[:, None]
    w_cols = w_ptr + (rn.to(tl.int64) * K)[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        if EVEN_K:
            x = tl.load(x_rows + kk[None, :], mask=mm[:, None], other=0.0)       # [BM, BK]
            w = tl.load(w_cols + kk[:, None], mask=nm[None, :], other=0.0)       # [BK, BN]
        else:
            km = kk < K
            x = tl.load(x_rows + kk[None, :], mask=mm[:, None] & km[None, :], other=0.0)
            w = tl.load(w_cols + kk[:, None], mask=km[:, None] & nm[None, :], other=0.0)
        # the operands in the compute dtype, inline (a helper call per iteration costs the
        # interpreter milliseconds): autocast's bf16 casts where not bf16 yet; UPCAST as
        # float32 holding those values (the interpreter multiplies bf16 tl.dot operands as bit
        # patterns: ``mlp_heads.py``), exact products, the same float32 sums
        if BF16:
            if x.dtype != tl.bfloat16:
                x = cast_rne(x.to(tl.float32), tl.bfloat16)
            if w.dtype != tl.bfloat16:
                w = cast_rne(w.to(tl.float32), tl.bfloat16)
        if UPCAST or not BF16:
            x, w = x.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(x, w, acc, input_precision=PRECISION)
    bias = rne_as(tl.load(b_ptr + rn, mask=nm, other=0.0).to(tl.float32), BF16)
    y = rne_as(acc + bias[None, :], BF16)          # the Linear's output as it would be written
    y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))        # nn.GELU(), exact erf
    out = y_ptr + (m64 * N)[:, None] + rn[None, :]
    tl.store(out, cast_rne(y, y_ptr.dtype.element_ty), mask=mm[:, None] & nm[None, :])


def _launch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor,
            cfg: Config, precision: str) -> None:
    m, k = x.shape
    n = weight.shape[0]
    block_m, block_n, block_k, warps, stages = cfg
    upcast = x.device.type != 'cuda'
    _linear_gelu_kernel[(triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)](
        x, x.stride(0), weight, bias, out, m, n, K=k, BF16=out.dtype == torch.bfloat16,
        UPCAST=upcast, PRECISION='ieee' if upcast else precision, EVEN_K=k % block_k == 0,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        num_stages=stages)


def _time_ms(fn) -> float:
    """Mean milliseconds of ``fn`` over a few launches on the current stream (after one)."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(_TIMING_REPS):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / _TIMING_REPS


def _config(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor,
            precision: str) -> Config:
    """The block sizes for this call: timed once per key on CUDA, INTERPRETED on the CPU."""
    (m, k), n = x.shape, weight.shape[0]
    if x.device.type != 'cuda':
        blocks = tuple(min(b, max(16, next_pow2(d))) for b, d in zip(INTERPRETED, (m, n, k)))
        return blocks + INTERPRETED[3:]
    key = (x.device, x.dtype, weight.dtype, out.dtype, precision, n, k, next_pow2(m))
    configs = BF16_CONFIGS if out.dtype == torch.bfloat16 else FP32_CONFIGS
    return pick(key, configs, torch.cuda.is_current_stream_capturing(),
                lambda cfg: _time_ms(lambda: _launch(x, weight, bias, out, cfg, precision)))


def pick(key: tuple, configs: Sequence[Config], capturing: bool,
         time_ms: Callable[[Config], float]) -> Config:
    """The config for ``key`` (its last entry the M bucket): the one timed fastest by
    ``time_ms`` on the first call, kept. Inside a capture nothing is timed (nor compiled,
    where it can be helped): a config kept for the same key but another M bucket (built
    already: M and N are no constexprs), else the first; nothing is kept."""
    if key in _TUNED:
        return _TUNED[key]
    if capturing:
        return next((c for kk, c in _TUNED.items() if kk[:-1] == key[:-1]), configs[0])
    best, best_ms = None, float('inf')
    for cfg in configs:
        try:
            ms = time_ms(cfg)
        except Exception:  # noqa: BLE001 - a config this GPU cannot build (shared memory)
            continue
        if ms < best_ms:
            best, best_ms = cfg, ms
    if best is None:
        raise RuntimeError(f'linear_gelu: no block configuration builds for {key}')
    _TUNED[key] = best
    return best


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                compute: Optional[torch.dtype] = None,
                out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """gelu(x @ weight^T + bias), exact erf GELU, in one kernel.

    x [M, K] (rows at any stride, columns contiguous), weight [N, K] contiguous, bias [N]:
    any of float32 / bf16 each. ``compute`` (default x's dtype): bf16 or float32, the dtype
    the Linear computes and writes in (autocast's); returns ``out`` or a new [M, N] of it."""
    compute = x.dtype if compute is None else compute
    assert compute in (torch.float32, torch.bfloat16), compute
    assert x.dim() == 2 and x.stride(1) == 1 and weight.is_contiguous(), (x.shape, x.stride())
    m, k = x.shape
    n = weight.shape[0]
    assert weight.shape == (n, k) and bias.shape == (n,), (x.shape, weight.shape, bias.shape)
    if out is None:
        out = torch.empty(m, n, device=x.device, dtype=compute)
    assert out.shape == (m, n) and out.is_contiguous() and out.dtype == compute
    # bf16: 'tf32', as row_gemm.py and mlp_heads.py pass it (the tensor cores; the argument
    # rounds float32 operands only); float32: TF32 only where torch's matmuls allow it
    fp32 = compute == torch.float32 and not torch.backends.cuda.matmul.allow_tf32
    precision = 'ieee' if fp32 else 'tf32'
    _launch(x, weight, bias, out, _config(x, weight, bias, out, precision), precision)
    return out


def supported(mlp: torch.nn.Module) -> bool:
    """True for a sam2 MLP of Linear, exact GELU, Linear (fc1 with its bias), no sigmoid: a
    Hiera block's."""
    from sam2.modeling.sam2_utils import MLP
    if not isinstance(mlp, MLP) or mlp.num_layers != 2 or mlp.sigmoid_output:
        return False
    act = mlp.act
    if type(act) is not torch.nn.GELU or act.approximate != 'none':
        return False
    fc1, fc2 = mlp.layers
    return (type(fc1) is torch.nn.Linear and type(fc2) is torch.nn.Linear
            and fc1.bias is not None and fc1.out_features == fc2.in_features)


_FLOATS = (torch.float32, torch.bfloat16)
# The compute dtypes GeluMLP runs our kernel in (the others: sam2's MLP). float32 runs on FMA
# units, not tensor cores, as cuBLAS's does; tools/probes/mlp_gelu_probe.py says whether it is
# faster than sam2's there too: if not, drop it here
KERNEL_DTYPES = (torch.bfloat16, torch.float32)


class GeluMLP(torch.nn.Module):
    """Replaces a Hiera block's ``mlp`` (a sam2 MLP, its weights shared, not copied): fc1 +
    GELU in ``linear_gelu``, fc2 as sam2 runs it. Anything else runs sam2's module: another
    MLP structure, training or autograd, autocast other than bf16, dtypes other than float32
    and bf16 (or, without autocast, x and fc1's weights of different dtypes)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.fits = supported(inner)

    def compute_dtype(self, x: torch.Tensor) -> Optional[torch.dtype]:
        """The dtype sam2's fc1 computes in on x, where our kernel computes it; else None."""
        if not self.fits or self.inner.training:
            return None
        fc1 = self.inner.layers[0]
        w, b = fc1.weight, fc1.bias
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or b.requires_grad):
            return None          # autograd wants sam2's graph (our kernel has no backward)
        if x.dtype not in _FLOATS or w.dtype not in _FLOATS or b.dtype not in _FLOATS:
            return None
        if x.device != w.device or x.shape[-1] != fc1.in_features:
            return None
        auto = autocast_dtype(x.device)
        if auto is not None:
            compute = auto if auto == torch.bfloat16 else None
        else:
            compute = x.dtype if x.dtype == w.dtype == b.dtype else None
        return compute if compute in KERNEL_DTYPES else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        compute = self.compute_dtype(x)
        if compute is None:
            return self.inner(x)
        fc1, fc2 = self.inner.layers
        rows = x.reshape(-1, x.shape[-1])                  # [M, C], a view when it can be
        if rows.stride(1) != 1:
            rows = rows.contiguous()
        hidden = linear_gelu(rows, fc1.weight, fc1.bias, compute)       # [M, 4C]
        return fc2(hidden.view(*x.shape[:-1], fc1.out_features))      # sam2's Linear


def with_gelu_mlps(module: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of a Hiera trunk (or of a module holding one: a SAM 2 model, its image
    encoder, ``FusedHiera``) whose blocks' supported MLPs are ``GeluMLP``s; ``module`` and its
    blocks are unchanged (each swapped block is a copy of its own). ``module`` itself where
    no MLP is swapped."""
    children = module._modules
    for name in ('image_encoder', 'trunk'):
        if name in children:
            inner = with_gelu_mlps(children[name])
            return module if inner is children[name] else with_children(module, **{name: inner})
    blocks = children.get('blocks')
    if blocks is None:
        return module
    swapped = [with_children(b, mlp=GeluMLP(b.mlp)) if supported(getattr(b, 'mlp', None))
               else b for b in blocks]
    if all(s is b for s, b in zip(swapped, blocks)):
        return module
    return with_children(module, blocks=torch.nn.ModuleList(swapped))
