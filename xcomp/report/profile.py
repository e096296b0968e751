"""Per-group timing: each unique operator group built on its own with the config the module uses, timed on
random data, and set against the hardware's roofline."""

from __future__ import annotations

import dataclasses

import numpy as np

from xcomp.errors import UserError
from xcomp.progress import bar
from xcomp.runtime.group_times import in_model_times
from xcomp.timing import Timing, time_kernel


def time_func(func, backend, repeat: int, min_repeat_ms: int):
    """Latencies (ms) of one PrimFunc built alone for the backend, on deterministic random data; a scalar param
    (a size the kernel takes as an argument) gets 1, the size symbolic dims are timed at."""
    import tvm

    from xcomp.autotune.measure import random_args, func_params

    executable = backend.compile(func.with_attr("global_symbol", "main"))
    dev = backend.device()
    tensors = iter([tvm.runtime.tensor(a, dev) for a in random_args(func_params(func), 0)])
    args = [next(tensors) if hasattr(param, "shape") else 1 for param in func.params]
    return time_kernel(executable.mod, dev, args, Timing.WARM, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)


def roofline_ms(flops: float, nbytes: float, spec) -> float:
    """The fastest a group could run on `spec`: limited by compute or by memory traffic."""
    compute = flops / spec.peak() * 1e3 if spec.peak() else 0.0
    memory = nbytes / spec.mem_bandwidth * 1e3 if spec.mem_bandwidth else 0.0
    return max(compute, memory)


@dataclasses.dataclass
class GroupProfile:
    """One unique operator group of a profiled module."""

    group: str
    kind: str
    key: str
    count: int  # calls per run of the model
    flops: float
    bytes: float
    signature: str
    median_ms: float  # the group timed alone, warm caches
    in_model_ms: float | None  # its median per call inside whole runs; None: the VM runs it as a builtin
    roofline_ms: float
    schedule: str  # where its schedule came from (pipeline.ScheduleChoice.source)
    # set by profile_module once every group is timed: from the in-model time where any group was seen running,
    # else from the time alone (rates_from says which)
    rates_from: str = "alone"
    share: float = 0.0  # of the model's time
    gflops: float = 0.0
    gbps: float = 0.0
    pct_of_roofline: float = 0.0
    # set by a report for groups built from tuning records: the template default timed alone beside it
    tuned: bool = False
    default_ms: float | None = None

    @property
    def total_ms(self) -> float:
        return self.median_ms * self.count

    @property
    def in_model_total_ms(self) -> float:
        """What the group costs a run of the model (nothing for a group with no calls)."""
        return self.in_model_ms * self.count if self.in_model_ms is not None else 0.0

    @property
    def speedup_vs_default(self) -> float | None:
        return self.default_ms / self.median_ms if self.default_ms is not None and self.median_ms > 0 else None

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "total_ms": self.total_ms, "in_model_total_ms": self.in_model_total_ms,
                "speedup_vs_default": self.speedup_vs_default}


def _median(values):
    """The median, or None for no values (a group the VM runs as a builtin, e.g. a reshape, has no calls)."""
    return float(np.median(values)) if values else None


def profile_module(module, repeat: int = 5, min_repeat_ms: int = 10, progress: bool = True,
                   roofs: dict | None = None) -> list:
    """[GroupProfile] for every unique group, largest share of the model's time first. median_ms is the group
    timed alone (warm caches); in_model_ms its median per call inside whole runs (see in_model_times). Share,
    achieved rates and % of roofline come from the in-model time, which is what the model spends; only when no
    group was seen running (in_model_times found no kernel calls) do they fall back to the time alone, and
    rates_from says which. The roofline is the spec's, or `roofs` (Backend.measured_roofs) where given."""
    from xcomp.graph.partition import unique_groups
    from xcomp.pipeline import schedule_group

    backend = module.backend
    roof_spec = backend.spec if roofs is None else dataclasses.replace(
        backend.spec, peak_flops={**backend.spec.peak_flops, **roofs["peak_flops"]},
        mem_bandwidth=roofs["mem_bandwidth"])
    if not backend.can_run():
        raise UserError(f"cannot time {module.target} groups on this machine")
    if any(g.func is None for g in module.groups):
        raise UserError("this module was loaded from a file; per-group timing needs the model (compile it)")
    schedules = module.info.get("schedules", {})
    in_model = in_model_times(module)
    rows = []
    merged = unique_groups(module.groups)
    for key, (rep, count) in bar(merged.items(), desc="profile", unit="group", enabled=progress, leave=False):
        built = schedules.get(key) or {}
        func, choice = schedule_group(rep, backend.schedule_context(), built.get("knobs"))
        median = float(np.median(time_func(func, backend, repeat, min_repeat_ms)))
        in_model_ms = _median([ms for g in module.groups if g.key == key for ms in in_model.get(g.name, [])])
        # the source the module was built with: rebuilt from its knobs, every config would read as the database's
        rows.append(GroupProfile(rep.name, rep.kind, key, count, rep.flops, rep.bytes, rep.signature, median,
                                 in_model_ms, roofline_ms(rep.flops, rep.bytes, roof_spec),
                                 built.get("source", choice.source)))
    in_model_seen = any(r.in_model_ms is not None for r in rows)

    def cost(r):
        return r.in_model_total_ms if in_model_seen else r.total_ms

    total = sum(cost(r) for r in rows) or 1.0
    for r in rows:
        ms = r.in_model_ms if in_model_seen else r.median_ms
        r.rates_from = "in_model" if in_model_seen else "alone"
        r.share = cost(r) / total
        r.gflops = r.flops / ms / 1e6 if ms else 0.0
        r.gbps = r.bytes / ms / 1e6 if ms else 0.0
        r.pct_of_roofline = 100.0 * r.roofline_ms / ms if ms else 0.0
    rows.sort(key=lambda r: (-cost(r), -r.total_ms))
    return rows
