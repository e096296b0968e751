"""How xcomp times things: the timing policies, and the functions that time under them.

Every measurement in xcomp comes from here: a kernel timed alone under a cache policy (`time_kernel`: the tuner's
candidates, the profile's groups), calls timed inside whole runs of a model (`time_in_model`: the tuner's last
step, the profile's in-model column), and wall-clock calls of anything (`time_calls`: `Module.benchmark`, the
bench's alternating blocks, the BLAS baseline). The policies and the evidence behind them are in
docs/decisions/tuning-timing.md, in-model-step.md and bench-timing.md.

This module needs only numpy and TVM: a measurement bundle carries a copy of it beside its run.py.
"""

from __future__ import annotations

import enum
import time

import numpy as np


class Timing(str, enum.Enum):
    """How a time was taken. The value is the short id the tuning database stores; only times taken the same
    way compare."""

    WARM = "warm"
    COLD = "cold"
    LLC = "llc"
    FLUSHED = "flushed"
    IN_MODEL = "in-model"
    SIDE_BY_SIDE = "side-by-side"
    UNRECORDED = "unrecorded"

    def __str__(self) -> str:
        return self.value

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]

    @classmethod
    def parse(cls, label: str) -> "Timing":
        """The policy of a stored label: a short id, or the sentence an older xcomp stored. ValueError if none."""
        try:
            return cls(label)
        except ValueError:
            if label in _LEGACY_LABELS:
                return _LEGACY_LABELS[label]
            raise ValueError(f"unknown timing {label!r} (known: {', '.join(t.value for t in cls)})") from None


_DESCRIPTIONS = {
    Timing.WARM: "repeat means of back-to-back runs, caches warm",
    # Inside a model a group's weights were last used an inference ago, and its data input was just written by
    # the producer group's threads: each timed run starts from caches like those.
    Timing.COLD: "cold weights, producer-written input",
    Timing.LLC: "weights in the last-level cache, producer-written input",
    # a stock rpc_server has TVM's own preprocessors only
    Timing.FLUSHED: "cold weights, flushed input",
    Timing.IN_MODEL: "in the model",
    Timing.SIDE_BY_SIDE: "the default and the fastest alone, side by side in rounds",
    Timing.UNRECORDED: "unrecorded",
}
# What xcomp before the short ids stored: the descriptions themselves (WARM and UNRECORDED were already short).
_LEGACY_LABELS = {description: timing for timing, description in _DESCRIPTIONS.items()}

CACHE_POLICIES = (Timing.COLD, Timing.LLC, Timing.FLUSHED)  # each timed run after a cache preprocessor
# A tuning run's last choice for a group, stored as the one record of its timing: the search's configs timed
# again inside the model (the in-model step), or, where the runner measures elsewhere, its fastest alone against
# the default in rounds. Not a way of searching: a cost model learns nothing from them.
PICKS = (Timing.IN_MODEL, Timing.SIDE_BY_SIDE)


def kernel_timing(device: str, cold_weights: bool, rpc_session: bool = False,
                  evict_private_bytes: int = 0) -> Timing:
    """The policy a kernel timed alone gets. Cache policies exist on CPUs only; through a stock rpc_server the
    data input is flushed too; with evict_private_bytes the weights stay in the last-level cache."""
    if not (cold_weights and device == "cpu"):
        return Timing.WARM
    if rpc_session:
        return Timing.FLUSHED
    return Timing.LLC if evict_private_bytes else Timing.COLD


def time_kernel(lib, dev, args, timing: Timing, number: int, repeat: int, min_repeat_ms: int = 0,
                evict_private_bytes: int = 0) -> list:
    """Milliseconds per run of lib["main"](*args) on `dev`.
    WARM: `repeat` means of `number` back-to-back runs, each mean over at least min_repeat_ms.
    A cache policy: number x repeat single runs, each timed alone after its preprocessor set the caches."""
    if timing is Timing.WARM:
        timer = lib.time_evaluator("main", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    elif timing in CACHE_POLICIES:
        preprocessor = ("cache_flush_cpu_non_first_arg" if timing is Timing.FLUSHED else
                        producer_written(args, evict_private_bytes if timing is Timing.LLC else 0))
        timer = lib.time_evaluator("main", dev, number=1, repeat=number * repeat, f_preproc=preprocessor)
    else:
        raise ValueError(f"a kernel alone is not timed {timing.description!r}")
    return [t * 1e3 for t in timer(*args).results]


def time_calls(fn, repeat: int, warmup: int = 0, number: int = 1, sync=None) -> list:
    """Wall-clock milliseconds per call of fn(): `repeat` samples, each the mean of `number` back-to-back calls
    (then `sync()`, which waits for a device's queued work), after `warmup` untimed calls."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / number * 1e3)
    return samples


def calls_filling(fn, min_ms: float, sync=None) -> int:
    """How many back-to-back calls of fn() take at least `min_ms` (after one warm-up call)."""
    once = time_calls(fn, repeat=1, warmup=1, sync=sync)[0]
    return max(1, int(min_ms / max(once, 1e-4)))


def time_in_model(machines, runs: int, sync=None) -> list:
    """{kernel name: [ms per call, ...]} per machine, each a (relax VirtualMachine, args) whose "main" was run
    once already: `runs` runs of each, alternating (run i of every machine before run i + 1 of any, so a drift
    of the machine's speed reaches them alike), each kernel call timed by a VM instrument around it. A call
    finds its inputs where the previous kernel left them and its weights where the rest of the model evicted
    them to. Each time includes the instrument's own overhead, a few microseconds. On a GPU pass the device's
    `sync`: a launch returns before its kernel ran, so each call is timed from an idle device to its end."""
    times = [{} for _ in machines]
    for (vm, _), calls in zip(machines, times):
        vm.set_instrument(_instrument(calls, sync))
    for _ in range(runs):
        for vm, args in machines:
            vm["main"](*args)
    return times


def _instrument(times: dict, sync):
    started = {}

    def instrument(func, name, before, ret, *call_args):  # noqa: ARG001 (TVM's instrument signature)
        if sync is not None:  # a CPU call's time needs no wait: nothing extra inside the timed span
            sync()
        now = time.perf_counter()
        if before:
            started[name] = now
        else:
            times.setdefault(name, []).append((now - started[name]) * 1e3)

    return instrument


# -- the CPU cache preprocessors ------------------------------------------------------------------------------

PRODUCER_WRITTEN = "xcomp.producer_written_cold_weights"
_rewrite_kernels = {}  # (elements, dtype, parts) -> compiled kernel
_evict_kernels = {}  # (floats per thread, parts) -> (compiled kernel, its junk, its sums)


def producer_written(args, evict_private_bytes: int = 0) -> str:
    """Register (for this measurement) and name a time_evaluator preprocessor that flushes every argument but the
    data input (args[0]) from the caches, or with evict_private_bytes only out of every core's private caches
    (each thread reads twice that many bytes of its own through them: what they held goes to the last-level
    cache), then writes the data input anew in as many contiguous parts as the thread pool has threads, each part
    by its own thread, as a producer group splitting its outer loop would have.
    Inside a model a group finds its input in the caches of the cores that wrote it: a conv whose channel tiles
    each read the whole input on one core pulls half of it from the other core. TVM's flush alone leaves the input
    wherever the previous timed run read it, which hides that (docs/decisions/tuning-timing.md)."""
    import tvm

    data = args[0]
    elements, dtype = int(np.prod(data.shape)), str(data.dtype)
    parts = max(1, int(tvm.get_global_func("runtime.NumThreads")()))
    key = (elements, dtype, parts)
    if key not in _rewrite_kernels:
        _rewrite_kernels[key] = _rewrite_kernel(elements, dtype, parts)
    rewrite = _rewrite_kernels[key]
    flat = data._create_view((elements,), dtype)
    saved = tvm.runtime.tensor(data.numpy().reshape(-1), data.device)
    if evict_private_bytes:
        per_thread = 2 * evict_private_bytes // 4  # float32s: twice the private caches
        if (per_thread, parts) not in _evict_kernels:
            _evict_kernels[per_thread, parts] = (
                _evict_kernel(per_thread, parts), tvm.runtime.tensor(np.zeros((parts, per_thread), np.float32)),
                tvm.runtime.tensor(np.zeros(parts, np.float32)))
        stream, junk, sums = _evict_kernels[per_thread, parts]

        def flush(*call_args):  # noqa: ARG001 (every argument leaves the private caches alike)
            stream(junk, sums)
    else:
        flush = tvm.get_global_func("cache_flush_cpu_non_first_arg")

    def preprocess(*call_args):
        flush(*call_args)
        rewrite(flat, saved)

    tvm.register_global_func(PRODUCER_WRITTEN, preprocess, override=True)
    return PRODUCER_WRITTEN


def _rewrite_kernel(elements: int, dtype: str, parts: int):
    """dst[:] = src[:] in `parts` contiguous slices, one per parallel task."""
    import tvm
    from tvm import te

    part = -(-elements // parts)
    src = te.placeholder((elements,), dtype, name="src")
    dst = te.compute((elements,), lambda i: src[i], name="dst")
    sch = tvm.s_tir.Schedule(te.create_prim_func([src, dst]))
    outer, _ = sch.split(sch.get_loops(sch.get_sblock("dst"))[0], [None, part])
    sch.parallel(outer)
    built = tvm.compile(sch.mod["main"].with_attr("global_symbol", "main"), target="llvm")
    return lambda dst_tensor, src_tensor: built(src_tensor, dst_tensor)


def _evict_kernel(per_thread: int, parts: int):
    """sums[t] = sum(junk[t, :]), one row per parallel task: each thread reads its row through its own caches,
    replacing what they held with clean lines (a copy would leave them dirty, every line then written back
    before the timed kernel can use its place)."""
    import tvm
    from tvm import te

    junk = te.placeholder((parts, per_thread), "float32", name="junk")
    i = te.reduce_axis((0, per_thread), name="i")
    sums = te.compute((parts,), lambda t: te.sum(junk[t, i], axis=i), name="sums")
    sch = tvm.s_tir.Schedule(te.create_prim_func([junk, sums]))
    sch.parallel(sch.get_loops(sch.get_sblock("sums"))[0])
    return tvm.compile(sch.mod["main"].with_attr("global_symbol", "main"), target="llvm")
