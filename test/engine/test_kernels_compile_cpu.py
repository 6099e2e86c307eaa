"""Our Triton kernels of the fused groups compile for the H200 (sm_90) here, without a GPU:
Triton's own ptxas builds the cubin, so what the interpreter never sees (CUDA-only branches
such as libdevice calls, the code generator's dtype and layout rules) fails in CI instead of
in a capture on the GPU machine, where a failing fused capture falls back to sam2's modules.
Each case is a configuration the tracker launches at tiny@512 (bf16 under autocast, fp32)."""

import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip('triton')

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from sam2_ros.engine.cuda.kernels import (elementwise, layernorm, layernorm2d,  # noqa: E402
                                          patch_embed, pointer_pos, q_pool, rope, split_merge,
                                          value_attention, window_attention)

I64, I32, F32 = 'i64', 'i32', 'fp32'


def _pointer(dist, w, bf16):
    sig = dict(d_ptr=dist, d_sp=I64, d_sb=I64, f_ptr='*fp32', w_ptr=w, w_sn=I64, w_sk=I64,
               b_ptr=w, o_ptr=w, o_sp=I64, o_ss=I64, o_sb=I64, o_sc=I64, rows=I32,
               batch=I32, t_arg=F32)
    return sig, dict(SPLIT=4, HALF=128, N=64, BLOCK_K=128, BLOCK_N=64, BLOCK_R=16, BF16=bf16,
                     PRECISION='tf32' if bf16 else 'ieee', UPCAST=False, RECIPROCAL=True,
                     LIBDEVICE=True)


_ADD_LN = dict(a_ptr='*bf16', a_idx_ptr='*i32', a_sb=I64, a_sl=I64, a_sc=I64, b_ptr='*bf16',
               b_idx_ptr='*i32', b_sb=I64, b_sl=I64, b_sc=I64, b_scale=F32, w_ptr='*fp32',
               bias_ptr='*fp32', eps=F32, s_ptr='*bf16', s_sb=I64, s_sl=I64, y_ptr='*bf16',
               y_sb=I64, y_sl=I64, y_sc=I64, pe_ptr='*bf16', pe_sb=I64, pe_sl=I64, pe_sc=I64,
               yp_ptr='*bf16', yp_sb=I64, yp_sl=I64, yc_ptr='*bf16', yc_sb=I64, yc_sl=I64,
               yg_ptr='*bf16', yg_sb=I64, yg_sl=I64, n_rows=I32, L=I32, L_in=I32, C=I32)

_MERGE = dict(o_ptr='*bf16', o_sb=I64, o_ss=I64, o_sl=I64, o_sh=I64, lse_ptr='*fp32', l_sb=I64,
              l_ss=I64, l_sl=I64, l_sh=I64, full_ptr='*i1', y_ptr='*bf16', y_sb=I64, y_sl=I64,
              y_sh=I64, H=I32, Lq=I32, D=I32)

_WINDOW = dict(qkv_ptr='*bf16', s_b=I64, s_l=I64, s_t=I64, s_h=I64, out_ptr='*bf16', o_b=I64,
               o_l=I64, o_h=I64, L=I32, LQ=I32, W=I32, W2=I32, D=I32, H=I32, scale=F32)


def _values(dtype, out, dense=False, long=False):
    sig = dict(q_ptr=dtype, q_sb=I64, q_sl=I64, k_ptr=dtype, k_sl=I64, v_ptr=dtype, v_sl=I64,
               cu_ptr='*i32', n_keys=I32, o_ptr=out, o_sb=I64, o_ss=I64, o_sl=I64, lse_ptr='*fp32',
               l_sb=I64, l_ss=I64, Lq=I32, splits=I32, scale_log2=F32)
    bf16 = dtype == '*bf16'
    # value_attention.CONFIG_LONG, CONFIG, CONFIG_FP32 (the warps: ``WARPS``)
    bm, bn = (128, 64) if long else (64, 64) if bf16 else (32, 32)
    return sig, dict(N_BLOCKS=16, D=256, DV=64, BM=bm, BN=bn, BF16=bf16, UPCAST=False,
                     PRECISION='tf32' if bf16 else 'ieee', DENSE=dense)


def _patch(dtype, out, bn):
    sig = dict(x_ptr=dtype, x_sb=I64, x_sc=I64, x_sh=I64, x_sw=I64, w_ptr=out, b_ptr=out,
               y_ptr=out, n_pix=I32, Ho=I32, Wo=I32, H=I32, W=I32, N=I32)
    bf16 = out == '*bf16'
    return sig, dict(K=147, KH=7, KW=7, S=4, P=3, K_BLOCKS=5, BM=64, BN=bn, BK=32, BF16=bf16,
                     UPCAST=False, PRECISION='tf32' if bf16 else 'ieee')


CASES = {
    # the untimed 'patch_embed': Hiera-L's 144 channels (a 256-wide tile, 8 warps: ``WARPS``)
    # from the float32 image in bf16 and float32; Hiera-T's 96 in bf16
    'patch embed bf16 large': (patch_embed, '_patch_embed_kernel',
                               *_patch('*fp32', '*bf16', 256)),
    'patch embed fp32 large': (patch_embed, '_patch_embed_kernel',
                               *_patch('*fp32', '*fp32', 256)),
    'patch embed bf16 tiny': (patch_embed, '_patch_embed_kernel',
                              *_patch('*fp32', '*bf16', 128)),
    # the opt-in 'memory_values': one 256-channel head over 64-channel values, split (float32
    # chunk outputs) and whole (bf16 output); float32 models
    'memory values bf16 split': (value_attention, '_values_kernel', *_values('*bf16', '*fp32')),
    'memory values bf16 dense': (value_attention, '_values_kernel',
                                 *_values('*bf16', '*fp32', dense=True)),
    'memory values bf16': (value_attention, '_values_kernel', *_values('*bf16', '*bf16')),
    'memory values bf16 long chunks': (value_attention, '_values_kernel',
                                       *_values('*bf16', '*fp32', long=True)),
    'memory values fp32': (value_attention, '_values_kernel', *_values('*fp32', '*fp32')),
    # the opt-in 'window_attention' (Hiera-L: 8x8 windows of 72-channel heads, 4x4 windows)
    'window attention 64 tokens': (window_attention, '_window_attention_kernel', _WINDOW, dict(
        BLOCK_L=64, BLOCK_Q=64, BLOCK_D=128, SH=1, SW=1, UPCAST=False, PRECISION='tf32')),
    'window attention 16 tokens': (window_attention, '_window_attention_kernel', _WINDOW, dict(
        BLOCK_L=16, BLOCK_Q=16, BLOCK_D=128, SH=1, SW=1, UPCAST=False, PRECISION='tf32')),
    # a stage change's first block: 8x8 windows, queries pooled 2x2 in the kernel
    'window attention pooled': (window_attention, '_window_attention_kernel', _WINDOW, dict(
        BLOCK_L=64, BLOCK_Q=16, BLOCK_D=128, SH=2, SW=2, UPCAST=False, PRECISION='tf32')),
    'rope bf16': (rope, '_rope_kernel', dict(
        q_ptr='*bf16', q_sb=I64, q_sl=I64, k_ptr='*bf16', k_sb=I64, k_sl=I64, cos_ptr='*fp32',
        sin_ptr='*fp32', qo_ptr='*bf16', ko_ptr='*bf16', Lq=I32, Lk=I32, n_rope=I32, H=I32,
        D2=I32, n_q_blocks=I32), dict(BLOCK_L=16, BLOCK_D2=128)),
    'rope fp32': (rope, '_rope_kernel', dict(
        q_ptr='*fp32', q_sb=I64, q_sl=I64, k_ptr='*fp32', k_sb=I64, k_sl=I64, cos_ptr='*fp32',
        sin_ptr='*fp32', qo_ptr='*fp32', ko_ptr='*fp32', Lq=I32, Lk=I32, n_rope=I32, H=I32,
        D2=I32, n_q_blocks=I32), dict(BLOCK_L=16, BLOCK_D2=128)),
    'q_pool bf16': (q_pool, '_q_pool_kernel', dict(
        x_ptr='*bf16', x_sb=I64, x_sr=I64, y_ptr='*bf16', W=I32, H2=I32, W2=I32, C=I32),
        dict(SH=2, SW=2, BLOCK_P=16, BLOCK_C=256)),
    # the stage changes' shortcut pooling (``q_pool.pool_grid``): Hiera-T's last stage change
    # (768 channels)
    'q_pool shortcut bf16': (q_pool, '_q_pool_kernel', dict(
        x_ptr='*bf16', x_sb=I64, x_sr=I64, y_ptr='*bf16', W=I32, H2=I32, W2=I32, C=I32),
        dict(SH=2, SW=2, BLOCK_P=4, BLOCK_C=1024)),
    'q_pool shortcut fp32': (q_pool, '_q_pool_kernel', dict(
        x_ptr='*fp32', x_sb=I64, x_sr=I64, y_ptr='*fp32', W=I32, H2=I32, W2=I32, C=I32),
        dict(SH=2, SW=2, BLOCK_P=4, BLOCK_C=1024)),
    'pointer_pos bf16': (pointer_pos, '_pointer_pos_kernel', *_pointer('*fp32', '*bf16', True)),
    'pointer_pos fp32': (pointer_pos, '_pointer_pos_kernel', *_pointer('*i64', '*fp32', False)),
    'layernorm2d residual': (layernorm2d, '_ln2d_kernel', dict(
        x_ptr='*bf16', x_sb=I64, x_sc=I64, r_ptr='*bf16', r_sb=I64, r_sc=I64, r_sh=I64,
        r_sw=I64, w_ptr='*fp32', b_ptr='*fp32', y_ptr='*bf16', C=I32, HW=I32, W=I32, eps=F32),
        dict(HAS_R=True, SUM_OF_R=False, GELU=True, BLOCK_C=64, BLOCK_P=64)),
    'add_gelu': (layernorm2d, '_add_gelu_kernel', dict(
        x_ptr='*bf16', x_sb=I64, x_sc=I64, x_sh=I64, x_sw=I64, r_ptr='*bf16', r_sb=I64,
        r_sc=I64, r_sh=I64, r_sw=I64, y_ptr='*bf16', C=I32, HW=I32, W=I32),
        dict(BLOCK_C=32, BLOCK_P=128)),
    'keys of a sum': (elementwise, '_add_cast_kernel', dict(
        m_ptr='*fp32', m_sb=I64, m_sl=I64, m_sc=I64, p_ptr='*fp32', p_sb=I64, p_sl=I64,
        p_sc=I64, a_ptr='*fp32', a_sb=I64, a_sl=I64, a_sc=I64, s_ptr='*fp32', k_ptr='*bf16',
        v_ptr='*bf16', n_rows=I32, L=I32, C=I32),
        dict(HAS_P=True, SUM_BF16=False, HAS_A=True, A_SUM_BF16=False, BLOCK_R=16,
             BLOCK_C=256)),
    'split-KV merge': (split_merge, '_merge_kernel', _MERGE, dict(
        SPLITS=2, HAS_FULL=False, BLOCK_L=16, BLOCK_D=256)),
    'split-KV merge of padded memories': (split_merge, '_merge_kernel', _MERGE, dict(
        SPLITS=16, HAS_FULL=True, BLOCK_L=16, BLOCK_D=256)),
    'add_layernorm into windows and grid': (layernorm, '_add_ln_kernel', _ADD_LN, dict(
        A_IDX=True, HAS_B=True, B_IDX=False, B_SCALE=False, SUM_BF16=True, STORE_S=True,
        HAS_PE=False, STORE_YC=False, STORE_YG=True, BLOCK_R=16, BLOCK_C=256)),
}

# Arguments the GPU's launches pass divisible by 16 (Triton specialises such pointers and
# integers at launch; strides of 256-channel rows, 128 pairs per head): the compile here gets
# the same hints, so the PTX is the one the GPU runs
_ROPE_DIVISIBLE = ('q_ptr', 'q_sb', 'q_sl', 'k_ptr', 'k_sb', 'k_sl', 'cos_ptr', 'sin_ptr',
                   'qo_ptr', 'ko_ptr', 'D2', 'Lq', 'Lk')
DIVISIBLE = {'rope bf16': _ROPE_DIVISIBLE, 'rope fp32': _ROPE_DIVISIBLE}
# launches with other warps or pipeline stages than 4 and 3 (value_attention's configurations)
WARPS = {'memory values bf16 long chunks': 8, 'patch embed bf16 large': 8,
         'patch embed fp32 large': 8}
STAGES = {'memory values fp32': 2}


def compile_case(case: str) -> dict:
    """Compile one case for sm_90: its signature's check and what the PTX / cubin hold."""
    module, name, signature, constexprs = CASES[case]
    fn = JITFunction(getattr(module, name).fn)
    sig = dict(signature, **{k: 'constexpr' for k in constexprs})
    assert set(sig) == set(fn.arg_names), set(sig) ^ set(fn.arg_names)
    attrs = {(fn.arg_names.index(k),): [['tt.divisibility', 16]]
             for k in DIVISIBLE.get(case, ())}
    src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(k),): v
                                         for k, v in constexprs.items()}, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget('cuda', 90, 32),
                              options={'num_warps': WARPS.get(case, 4),
                                       'num_stages': STAGES.get(case, 3)})
    ptx = compiled.asm['ptx']
    return {'cubin_bytes': len(compiled.asm['cubin']), 'div_rn': 'div.rn.f32' in ptx,
            'div_full': 'div.full' in ptx, 'sin_approx': 'sin.approx' in ptx,
            'shared_bytes': int(getattr(compiled.metadata, 'shared', 0)),
            'scalar_b16_access': ptx.count('ld.global.b16') + ptx.count('st.global.b16'),
            # rounding.cast_rne's integer rounding adds 0x7FFF: only the interpreter runs it
            'integer_rounding': ptx.count('32767')}


@pytest.fixture(scope='module')
def compiled():
    """Every case compiled in a fresh interpreter: Triton's interpreter, which the other CPU
    tests run in this process, leaves triton.language patched for itself, and a compile after
    it fails (``tl.program_id`` returns an IR value), whichever order the tests run in."""
    code = ('import json, sys; sys.path[:0] = ["test/engine", "."]; '
            'import test_kernels_compile_cpu as t; '
            'print(json.dumps({c: t.compile_case(c) for c in t.CASES}))')
    root = pathlib.Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, '-c', code], cwd=root, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('case', sorted(CASES))
def test_kernel_compiles_for_sm90_without_a_gpu(case, compiled):
    got = compiled[case]
    assert got['cubin_bytes'] > 0
    if CASES[case][1] == '_pointer_pos_kernel':   # IEEE divisions and libdevice's sine
        assert got['div_rn'] and not got['div_full'] and not got['sin_approx'], got
    # a program's shared memory fits an H100's / H200's multiprocessor (227 KiB), or the
    # launch fails on the GPU machine ('out of resources') and the capture falls back
    assert got['shared_bytes'] <= 227 * 1024, got
    # bf16 conversions by the GPU's instruction (rounding.HARDWARE_RNE), not integer steps
    assert got['integer_rounding'] == 0, got
    if CASES[case][1] == '_rope_kernel':   # whole rows in vector loads and stores, no
        assert got['scalar_b16_access'] == 0, got   # element-wise access of the pairs


def test_interpreted_rounding_is_restored_after_nested_blocks():
    from sam2_ros.engine.cuda.kernels import rounding
    assert rounding.HARDWARE_RNE
    with rounding.interpreted():
        with rounding.interpreted():
            assert not rounding.HARDWARE_RNE
        assert not rounding.HARDWARE_RNE        # the outer interpreted launch still runs
    assert rounding.HARDWARE_RNE        # compiled kernels see the value they were built with
