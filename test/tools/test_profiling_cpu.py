"""tools.bench.profiling.tally: the census of a profiler's kernels per frame, on fake events
(the profiler has no kernels on the CPU)."""

from types import SimpleNamespace as NS

from tools.bench import profiling

CUDA, CPU = 'cuda', 'cpu'


def _kernel(name, us, start):
    return NS(name=name, device_type=CUDA, device_time=us,
              time_range=NS(start=start, end=start + us))


def test_tally_counts_time_launches_and_groups_per_frame():
    events = [_kernel('_rope_kernel', 30.0, 0), _kernel('_rope_kernel', 30.0, 40),
              _kernel('void at::native::direct_copy_kernel_cuda', 2.0, 80),
              _kernel('void at::native::direct_copy_kernel_cuda', 2.0, 90),
              _kernel('void at::native::direct_copy_kernel_cuda', 2.0, 100),
              _kernel('Memcpy HtoD', 50.0, 110),
              NS(name='cudaGraphLaunch', device_type=CPU, device_time=0.0,
                 time_range=NS(start=0, end=5))]
    info = {}
    ms = profiling.tally(events, 2, info, CUDA)                  # two frames
    assert ms == (60.0 + 6.0) / 1e3 / 2                          # memcpy left out
    assert info['kernels_per_frame'] == 2.5
    assert info['top_kernels_ms'][0] == ['_rope_kernel', 0.03]
    # most launched first: the glue a census by time hides
    assert info['most_launched'][0] == ['direct_copy_kernel_cuda', 1.5]
    assert info['kernel_groups']['ours_triton'] == [1.0, 0.03]
    assert info['kernel_groups']['copy'] == [1.5, 0.003]
    # every kernel: launches and ms per frame, most time first
    assert info['kernel_table'] == [['_rope_kernel', 1.0, 0.03],
                                    ['direct_copy_kernel_cuda', 1.5, 0.003]]


def test_kernel_names_keep_the_functor_that_tells_pytorch_kernels_apart():
    """PyTorch's namespaces go before the cut, so two elementwise kernels of different functors
    (here a copy and an add) stay two rows of the kernel table; names are cut to the width."""
    copy = ('void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<'
            'at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}>')
    add = ('void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<'
           'at::native::CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&)')
    names = [profiling.kernel_name(n) for n in (copy, add)]
    assert copy[:90] == add[:90] and names[0] != names[1]
    assert 'direct_copy_kernel_cuda' in names[0] and 'CUDAFunctor_add' in names[1]
    assert profiling.kernel_name('x' * 300) == 'x' * 110
