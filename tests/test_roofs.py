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


def test_a_peak_measured_lower_than_the_cached_one_keeps_the_cached(backend, monkeypatch, tmp_path):
    """A busy host measures low: the roofs are the best seen on this machine, and a better run raises them."""
    import json

    from xcomp.backends.cpu import roofs

    monkeypatch.setenv("XCOMP_CACHE_DIR", str(tmp_path))
    machine = roofs.machine_key(backend.spec)
    (tmp_path / "roofs.json").write_text(json.dumps({machine: {"peak_flops": {"float32": 2e11},
                                                               "mem_bandwidth": 3e10}}))
    now = {"peak_flops": {"float32": 1e11}, "mem_bandwidth": 4e10}
    monkeypatch.setattr(roofs, "_measure", lambda _backend: now)
    monkeypatch.setattr(roofs, "_measured", {})
    found = backend.measured_roofs()
    assert found["peak_flops"]["float32"] == 2e11 and found["mem_bandwidth"] == 4e10  # each roof on its own
    assert found["this_run"] == now and found["machine"] == machine
    cached = json.loads((tmp_path / "roofs.json").read_text())
    assert cached == {machine: {"peak_flops": {"float32": 2e11}, "mem_bandwidth": 4e10}}


def test_an_unreadable_cache_is_measured_over(backend, monkeypatch, tmp_path):
    from xcomp.backends.cpu import roofs

    monkeypatch.setenv("XCOMP_CACHE_DIR", str(tmp_path))
    (tmp_path / "roofs.json").write_text("{not json")
    best, _, machine = roofs._best_seen(backend.spec, {"peak_flops": {"float32": 1e11}, "mem_bandwidth": 4e10})
    assert best == {"peak_flops": {"float32": 1e11}, "mem_bandwidth": 4e10}
    assert machine in (tmp_path / "roofs.json").read_text()
