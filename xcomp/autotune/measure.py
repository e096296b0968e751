"""Measuring candidates: build in a process pool, run in an isolated worker process with a timeout.

A candidate that fails to build, crashes the runner, hangs, or computes a different answer than the group's
default schedule becomes a failed result with the reason, never a dead tuner. The `Runner` interface is what the
remote runners implement too (bundle.py: measured on another machine later; rpc.py: through a tvm.rpc tracker);
the checking is bundle_run.py's and the timing xcomp/timing.py's, one implementation for all of them.
"""

from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import tempfile
import time

import numpy as np

from xcomp.autotune.bundle_run import INPUT_SEED, IsolatedMeasurer, device_kind, failure_reason, request_timing
from xcomp.autotune.bundle_run import random_args  # noqa: F401 - re-exported: profiles and tests make inputs too
from xcomp.autotune.db import Record
from xcomp.timing import CACHE_POLICIES, Timing

# -- results ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class BuildResult:
    knobs: dict
    artifact: str | None  # path of the exported library, None when the build failed
    error: str | None = None
    build_s: float = 0.0


@dataclasses.dataclass
class MeasureResult:
    knobs: dict
    latencies_ms: list
    error: str | None = None
    build_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.latencies_ms)

    @property
    def median_ms(self) -> float:
        return float(np.median(self.latencies_ms)) if self.ok else float("inf")


# -- building -----------------------------------------------------------------------------------------------------


def build_candidate(func_json: str, target: str, knobs: dict | None, out_dir: str) -> BuildResult:
    """Schedule `func` with `knobs` (None: the template default) and export it as a shared library."""
    import tvm

    from xcomp import schedules
    from xcomp.backends import get_backend

    start = time.perf_counter()
    try:
        backend = get_backend(target)
        func = tvm.ir.load_json(func_json)
        template = schedules.get_template(func, backend.schedule_context())
        chosen = template.default_knobs() if knobs is None else knobs
        if not template.valid(chosen):
            return BuildResult(chosen, None, "invalid knob combination", time.perf_counter() - start)
        scheduled = template.schedule(chosen).with_attr("global_symbol", "main")
        executable = backend.compile(scheduled)
        fd, path = tempfile.mkstemp(suffix=".so", dir=out_dir)
        os.close(fd)
        executable.export_library(path)
        return BuildResult(chosen, path, None, time.perf_counter() - start)
    except Exception as err:  # any failure is this candidate's, recorded with its reason
        return BuildResult(knobs or {}, None, "build: " + failure_reason(err), time.perf_counter() - start)


class LocalBuilder:
    """Builds candidates in worker processes (spawned: TVM's thread pools do not survive fork well)."""

    def __init__(self, workers: int | None = None, timeout_s: float = 120.0):
        self.workers = workers or max(1, (os.cpu_count() or 1))
        self.timeout_s = timeout_s
        self._pool = None
        self.out_dir = tempfile.mkdtemp(prefix="xcomp-build-")

    def _executor(self):
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=ctx)
        return self._pool

    def build(self, func_json: str, target: str, knob_list: list) -> list:
        pool = self._executor()
        futures = [pool.submit(build_candidate, func_json, target, knobs, self.out_dir) for knobs in knob_list]
        results = []
        for knobs, future in zip(knob_list, futures):
            try:
                results.append(future.result(timeout=self.timeout_s))
            except concurrent.futures.TimeoutError:
                results.append(BuildResult(knobs or {}, None, f"build: timed out after {self.timeout_s:.0f}s"))
                self._restart()
            except Exception as err:  # the worker died (e.g. a segfault in codegen)
                results.append(BuildResult(knobs or {}, None, "build: worker crashed: " + failure_reason(err)))
                self._restart()
        return results

    def _restart(self):
        if self._pool is not None:
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.kill()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


# -- running ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Workload:
    """Who a measurement belongs to: what a runner needs to make database records of its results."""

    key: str  # the operator group's structural key
    kind: str
    target: str
    hw_fingerprint: str
    features_version: int
    timing: Timing  # how its candidates are timed (Runner.timing)
    # CPU cold timing: 0 flushes the weights to memory before each run; else the model's weights stay in the
    # last-level cache between inferences and each core's private cache of this many bytes is evicted instead
    evict_private_bytes: int = 0

    def record(self, knobs: dict, latencies_ms: list, error: str | None) -> Record:
        return Record(self.key, self.kind, self.target, self.hw_fingerprint, knobs, latencies_ms, error,
                      self.features_version, timing=self.timing)


# Rounds of a group's default and fastest alone timed side by side: behind the tuning summary's speedup, and the
# pick where no in-model step follows (side_by_side_pick).
PAIRED_ROUNDS = 3


def side_by_side_pick(workload: Workload, default: str, best: str, times: dict, rounds: int = PAIRED_ROUNDS) -> list:
    """A group's pick between its default and its fastest alone (canonical knobs), from their medians in `rounds`
    paired rounds ({canonical knobs: [ms per round]}): the fastest alone only where it was faster in every one of
    them, else the default (so too where a round was cut short by a failure). Returns the group's records timed
    Timing.SIDE_BY_SIDE (for db.replace_picks): the pick with its times, the one successful record; where the
    default stays, also the fastest alone as a failure saying how it lost, so the tuner knows it was judged. A
    round times both within seconds, so a drift of the machine's speed reaches them alike."""
    wins = sum(b < d for b, d in zip(times[best], times[default]))
    won = len(times[best]) == len(times[default]) == rounds and wins == rounds
    records = [workload.record(json.loads(best if won else default), times[best if won else default], None)]
    if not won and best != default:
        records.append(workload.record(json.loads(best), times[best], f"lost to the default side by side: faster in "
                                       f"{wins} of {rounds} rounds"))
    return [dataclasses.replace(record, timing=Timing.SIDE_BY_SIDE) for record in records]


class MeasurementDeferred(Exception):
    """Raised by a runner that measures later, elsewhere (a bundle for another machine): the batch is queued and
    its results reach the database in a later run."""


class Runner(abc.ABC):
    """Times built candidates of one workload and checks them against a reference build. `settings` holds how
    (number, repeat, cold_weights, ...: what bundle_run.check_and_time reads)."""

    settings: dict
    remote_session = False  # times through a stock tvm rpc_server (TVM's own preprocessors only)
    measures_here = False  # times on this machine, where the model can be timed too (the in-model step)
    deferred = False  # queues what it is given, measured elsewhere later (a bundle): run() raises MeasurementDeferred

    def timing(self, target: str, evict_private_bytes: int = 0) -> Timing:
        """How this runner times candidates for `target`: their records say it."""
        return request_timing(self._timing_request(target, evict_private_bytes))

    def _timing_request(self, target: str, evict_private_bytes: int) -> dict:
        """What check_and_time reads to choose how to time: every request starts from it, so a record's timing
        label is worked out from the very settings its candidate was timed with."""
        return {"device": device_kind(target), "rpc_session": self.remote_session,
                "evict_private_bytes": evict_private_bytes, **self.settings}

    def begin(self, db):
        """Called with the tuning database before tuning starts (a deferred runner imports results that came
        back)."""

    @abc.abstractmethod
    def run(self, reference: str, builds: list, target: str, params: list, workload: Workload) -> list:
        """reference: artifact of the default schedule; builds: [BuildResult]; params: [(shape, dtype)] of
        the workload's buffers -> [MeasureResult] in the same order, or MeasurementDeferred."""

    def close(self):
        pass

    @staticmethod
    def _measure_each(builds, measure) -> list:
        """[MeasureResult] per build: one that failed to build keeps its error, the others get `measure(build)`,
        a reply {"latencies_ms": [...]} or {"error": reason}."""
        results = []
        for build in builds:
            reply = {"error": build.error} if build.artifact is None else measure(build)
            results.append(MeasureResult(build.knobs, reply.get("latencies_ms", []), reply.get("error"),
                                         build.build_s))
        return results


# Slices a candidate's timed runs are split into, taken round-robin over every candidate measured together. A
# 2-vCPU VM of this project ran parallel kernels at one core's speed for spells of tens of milliseconds, long
# enough to hold all of one candidate's runs; sliced, a candidate's time samples that many moments of the machine
# (docs/decisions/tuning-timing.md, "Spells of one core").
SLICES = 3


def timed_slices(request: dict, slices: int) -> list:
    """The request's timed runs as up to `slices` requests of fewer ({"number", "repeat"} each) that add up to
    them: single runs under a cache policy (number x repeat of them), else the `repeat` means of `number` runs."""
    if request_timing(request) in CACHE_POLICIES:
        runs = request["number"] * request["repeat"]
        return [{"number": 1, "repeat": runs // slices + (i < runs % slices)} for i in range(min(slices, runs))]
    repeat = request["repeat"]
    return [{"repeat": repeat // slices + (i < repeat % slices)} for i in range(min(slices, repeat))]


class LocalRunner(Runner):
    """Measures on this machine in an isolated process (bundle_run.IsolatedMeasurer). Each candidate is checked
    against the reference, then its runs are timed in `slices` slices, round-robin over the candidates
    (timed_slices, SLICES). cold_weights (CPU targets): number x repeat single runs, each after the weights and
    output are flushed from the caches and the data input is written anew by all threads, as its producer would
    have (bundle_run.check_and_time, timing.producer_written), instead of repeat means of number warm runs."""

    measures_here = True

    def __init__(self, timeout_s: float = 30.0, number: int = 3, repeat: int = 5, min_repeat_ms: int = 20,
                 cold_weights: bool = True, slices: int = SLICES):
        self.settings = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms,
                         "cold_weights": cold_weights}
        self.slices = slices
        self._measurer = IsolatedMeasurer(timeout_s)

    def run(self, reference, builds, target, params, workload=None):
        return self.run_many([(reference, builds, target, params, workload)])[0]

    def run_many(self, jobs) -> list:
        """run()'s results for several workloads at once, each job (reference, builds, target, params,
        workload): the slices go round-robin over the candidates of every job, so a group's default measured
        at the start is sliced between the other groups' defaults, as its configs are between each other."""
        requests = [{**self._timing_request(target, workload.evict_private_bytes if workload else 0),
                     "reference": reference, "params": params, "seed": INPUT_SEED}
                    for reference, _, target, params, workload in jobs]
        slices = [timed_slices(request, self.slices) for request in requests]
        runs = [[[] for _ in builds] for _, builds, *_ in jobs]
        errors = [[build.error or "build failed" if build.artifact is None else None for build in builds]
                  for _, builds, *_ in jobs]
        for index in range(max(map(len, slices), default=0)):
            for j, ((_, builds, *_), request, parts) in enumerate(zip(jobs, requests, slices)):
                for b, build in enumerate(builds):
                    if index >= len(parts) or errors[j][b]:
                        continue
                    # the first slice checks the numerics; the others only time
                    reply = self._measurer.measure({**request, **parts[index], "artifact": build.artifact,
                                                    "check": index == 0})
                    if "error" in reply:
                        errors[j][b] = reply["error"]
                    else:
                        runs[j][b] += reply["latencies_ms"]
        return [[MeasureResult(build.knobs, [] if error else times, error, build.build_s)
                 for build, times, error in zip(builds, job_runs, job_errors)]
                for (_, builds, *_), job_runs, job_errors in zip(jobs, runs, errors)]

    def close(self):
        self._measurer.close()


def func_params(func) -> list:
    """[(shape, dtype)] of a PrimFunc's buffers, for the runner to make arguments (a symbolic dim at 1, the size
    `xcomp run` and `bench` use; per-group profiles time symbolic groups there, the tuner skips them)."""
    from xcomp.graph.partition import at_smallest, func_buffers

    return [(tuple(at_smallest(d) for d in buf.shape), str(buf.dtype)) for buf in func_buffers(func)]
