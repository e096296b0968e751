"""The CPU roofs reports measure (backends/cpu/roofs.py): their kernels compute what they claim, and only a CPU
this machine runs is measured."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def backend():
    from xcomp.backends import get_backend

    return get_backend("cpu")


def _run(backend, prim_func, arrays):
    import tvm

    tensors = [tvm.runtime.tensor(a, backend.device()) for a in arrays]
    backend.compile(prim_func)["main"](*tensors)
    return [t.numpy() for t in tensors]


def test_fma_kernel_runs_its_chains(backend):
    """Every lane of every chain on every core ends at CHAIN_DEPTH x steps applications of x * 0.999 + 0.001."""
    from xcomp.backends.cpu import roofs

    cores, chains, lanes, steps = 2, 5, backend.spec.simd_width, 3
    (out,) = _run(backend, roofs._fma_kernel(cores, chains, lanes, steps),
                  [np.zeros((cores, chains, lanes), np.float32)])
    expected = np.arange(chains, dtype=np.float32)
    for _ in range(roofs.CHAIN_DEPTH * steps):
        expected = expected * np.float32(0.999) + np.float32(0.001)
    np.testing.assert_allclose(out, np.broadcast_to(expected[None, :, None], out.shape), rtol=1e-5)


def test_stream_kernel_adds_every_element(backend):
    from xcomp.backends.cpu import roofs

    cores, lanes = 2, backend.spec.simd_width
    n = cores * lanes * 7
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    _, _, c = _run(backend, roofs._add_kernel(cores, lanes, n), [a, b, np.zeros(n, np.float32)])
    np.testing.assert_array_equal(c, a + b)


def test_only_a_cpu_that_runs_here_is_measured(backend):
    from xcomp.backends import get_backend

    roofs = backend.measured_roofs()
    assert roofs["source"] == "measured" and roofs["peak_flops"]["float32"] > 0 and roofs["mem_bandwidth"] > 0
    assert backend.measured_roofs() == roofs  # once per process
    assert get_backend("cpu:aarch64-linux-gnu").measured_roofs() is None
    assert get_backend("cuda:sm_90").measured_roofs() is None
