"""This CPU's roofs, measured: the fp32 FMA rate and the main-memory bandwidth it sustains.

The spec's peak is nominal (cores x the cpuinfo clock x lanes x 2 FMA pipes x 2) and its bandwidth a guess. Turbo
runs above the cpuinfo clock, so well-scheduled groups read over 100% of that peak; reports set groups against
these instead. Both kernels are built with TVM for the host target, so they use the code generator xcomp's own
kernels use.
"""

from __future__ import annotations

# FMAs chained per accumulator between two trips through memory: long enough that the loop and the
# accumulators' loads and stores cost nothing, short enough that LLVM keeps every chain in registers.
CHAIN_DEPTH = 16
# Work per measurement: ~1 GFLOP per core (tens of ms) and 3 x 64 MB arrays, far beyond any cache here.
FLOPS_PER_CORE = 1e9
STREAM_ELEMENTS = 1 << 24
F32 = "float32"  # a name, not a string annotation, in the TVMScript below (pyflakes reads those as names)
METHOD = ("fp32 peak: every core runs (vector registers - 4) independent vector FMA chains held in registers, "
          "best of 5; memory: a parallel vectorized c = a + b over three 64 MB fp32 arrays, bytes counted as "
          "STREAM counts them (3 per element x 4 bytes), best of 5")


def _fma_kernel(cores: int, chains: int, lanes: int, steps: int):
    from tvm.script import tirx as T

    def chain(x):
        for _ in range(CHAIN_DEPTH):
            x = x * T.float32(0.999) + T.float32(0.001)
        return x

    @T.prim_func
    def fma_chains(out: T.Buffer((cores, chains, lanes), F32)):
        for core in T.parallel(cores):
            acc = T.alloc_buffer((chains, lanes), "float32", scope="local")
            for j in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[j, v] = T.Cast("float32", j)
            for _step in range(steps):
                for j in T.unroll(chains):
                    for v in T.vectorized(lanes):
                        acc[j, v] = chain(acc[j, v])
            for j in T.unroll(chains):
                for v in T.vectorized(lanes):
                    out[core, j, v] = acc[j, v]

    return fma_chains


def _add_kernel(cores: int, lanes: int, n: int):
    from tvm.script import tirx as T

    per_core = n // cores

    @T.prim_func
    def stream_add(a: T.Buffer((n,), F32), b: T.Buffer((n,), F32), c: T.Buffer((n,), F32)):
        for core in T.parallel(cores):
            for i in range(per_core // lanes):
                for v in T.vectorized(lanes):
                    c[core * per_core + i * lanes + v] = a[core * per_core + i * lanes + v] + \
                        b[core * per_core + i * lanes + v]

    return stream_add


def _best_seconds(backend, prim_func, args) -> float:
    executable = backend.compile(prim_func)
    timer = executable.mod.time_evaluator("main", backend.device(), number=1, repeat=5)
    return min(timer(*args).results)


def _measure(backend) -> dict:
    import numpy as np
    import tvm

    spec, dev = backend.spec, backend.device()
    cores, lanes = spec.cores, spec.simd_width
    chains = max(4, spec.vector_registers - 4)  # two constants and room for LLVM; enough to cover FMA latency
    flops_per_step = 2 * chains * lanes * CHAIN_DEPTH
    steps = max(1, int(FLOPS_PER_CORE // flops_per_step))
    out = tvm.runtime.tensor(np.zeros((cores, chains, lanes), "float32"), dev)
    peak = cores * steps * flops_per_step / _best_seconds(backend, _fma_kernel(cores, chains, lanes, steps), [out])
    n = STREAM_ELEMENTS - STREAM_ELEMENTS % (cores * lanes)
    arrays = [tvm.runtime.tensor(np.full(n, 1.0, "float32"), dev) for _ in range(3)]
    bandwidth = 3 * 4 * n / _best_seconds(backend, _add_kernel(cores, lanes, n), arrays)
    return {"peak_flops": {"float32": peak}, "mem_bandwidth": bandwidth}


_measured: dict = {}  # spec fingerprint -> _measure's result: once per process


def measured_roofs(backend) -> dict:
    """Backend.measured_roofs for a CPU backend this machine runs (about a second, once per process)."""
    key = backend.spec.fingerprint()
    if key not in _measured:
        _measured[key] = _measure(backend)
    return {"source": "measured", **_measured[key], "method": METHOD}
