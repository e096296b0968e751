"""This CPU's roofs, measured: the fp32 FMA rate and the main-memory bandwidth it sustains.

The spec's peak is nominal (cores x the cpuinfo clock x lanes x 2 FMA pipes x 2) and its bandwidth a guess. Turbo
runs above the cpuinfo clock, so well-scheduled groups read over 100% of that peak; reports set groups against
these instead. Both kernels are built with TVM for the host target, so they use the code generator xcomp's own
kernels use. Each roof is the best seen on this machine: a busy host measures low, never high, so the highest
measurement kept (roofs.json in xcomp's cache folder) is the closest to the hardware's.
"""

from __future__ import annotations

import json
import os

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
    from xcomp.timing import Timing, time_kernel

    executable = backend.compile(prim_func)
    return min(time_kernel(executable.mod, backend.device(), args, Timing.WARM, number=1, repeat=5)) / 1e3


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


_measured: dict = {}  # spec fingerprint -> _best_seen's result: once per process


def measured_roofs(backend) -> dict:
    """Backend.measured_roofs for a CPU backend this machine runs (about a second, once per process): the best
    roofs seen on this machine, with this run's own measurement under "this_run"."""
    key = backend.spec.fingerprint()
    if key not in _measured:
        _measured[key] = _best_seen(backend.spec, _measure(backend))
    best, this_run, machine = _measured[key]
    return {"source": "measured", **best, "this_run": this_run, "machine": machine,
            "method": METHOD + "; each the best seen on this machine (kept in xcomp's cache folder)"}


def cache_path() -> str:
    """$XCOMP_CACHE_DIR/roofs.json, else under $XDG_CACHE_HOME/xcomp or ~/.cache/xcomp."""
    folder = os.environ.get("XCOMP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "xcomp")
    return os.path.join(folder, "roofs.json")


def machine_key(spec) -> str:
    """What the roofs depend on: the CPU model, the cores this process may use and the vector width the kernels
    use ('Intel(R) Xeon(R) Platinum 8580, 2 cores, 16 fp32 lanes')."""
    from .detect import cpu_model_name

    return f"{cpu_model_name() or spec.arch}, {spec.cores} cores, {spec.simd_width} fp32 lanes"


def _best_seen(spec, measured: dict) -> tuple:
    """(each roof the larger of `measured` and the cache's for this machine, `measured`, the machine's key); the
    cache is updated where this run did better. A cache that cannot be read or written is left out."""
    path, machine = cache_path(), machine_key(spec)
    try:
        with open(path) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        cache = {}
    if not isinstance(cache, dict):
        cache = {}
    cached = cache.get(machine) if isinstance(cache.get(machine), dict) else {}
    try:
        cached_peak = float(cached.get("peak_flops", {}).get("float32", 0.0))
        cached_bandwidth = float(cached.get("mem_bandwidth", 0.0))
    except (AttributeError, TypeError, ValueError):  # an entry not written by this code
        cached_peak = cached_bandwidth = 0.0
    best = {"peak_flops": {"float32": max(measured["peak_flops"]["float32"], cached_peak)},
            "mem_bandwidth": max(measured["mem_bandwidth"], cached_bandwidth)}
    if best["peak_flops"]["float32"] > cached_peak or best["mem_bandwidth"] > cached_bandwidth:
        cache[machine] = best
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(cache, f, indent=1, sort_keys=True)
            os.replace(tmp, path)  # another process reading at the same time sees the old file or the new one
        except OSError:
            pass
    return best, measured, machine
