"""Measuring candidates: build in a process pool, run in an isolated worker process with a timeout.

A candidate that fails to build, crashes the runner, hangs, or computes a different answer than the group's
default schedule becomes a failed result with the reason, never a dead tuner. The `Runner` interface is what a
remote runner (a GPU machine, tvm.rpc) implements too.
"""

from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
import multiprocessing
import os
import tempfile
import time
import traceback

import numpy as np

from xcomp.errors import describe

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


def _last_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {describe(err)}"


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
        template = schedules.get_template(func, backend.spec)
        chosen = template.default_knobs() if knobs is None else knobs
        if not template.valid(chosen):
            return BuildResult(chosen, None, "invalid knob combination", time.perf_counter() - start)
        scheduled = template.schedule(chosen).with_attr("global_symbol", "main")
        tgt = backend.target()
        with tgt:
            executable = tvm.compile(scheduled, target=tgt)
        fd, path = tempfile.mkstemp(suffix=".so", dir=out_dir)
        os.close(fd)
        executable.export_library(path)
        return BuildResult(chosen, path, None, time.perf_counter() - start)
    except Exception as err:  # any failure is this candidate's, recorded with its reason
        return BuildResult(knobs or {}, None, "build: " + _last_line(err), time.perf_counter() - start)


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
                results.append(BuildResult(knobs or {}, None, "build: worker crashed: " + _last_line(err)))
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


class Runner(abc.ABC):
    """Times built candidates of one workload and checks them against a reference build."""

    @abc.abstractmethod
    def run(self, reference: str, builds: list, target: str, params: list) -> list:
        """reference: artifact of the default schedule; builds: [BuildResult]; params: [(shape, dtype)] of
        the workload's buffers -> [MeasureResult] in the same order."""

    def close(self):
        pass


def random_args(func_params, seed: int):
    """Deterministic data for every buffer: floats in [-1, 1), integers 0 (always a valid index)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in func_params:
        if np.issubdtype(np.dtype(dtype), np.floating):
            arrays.append(rng.uniform(-1, 1, shape).astype(dtype))
        else:
            arrays.append(np.zeros(shape, dtype))
    return arrays


def _run_worker(conn):
    """Runner process: loads libraries, runs them, replies with timings and a correctness verdict."""
    import tvm

    from xcomp.backends import get_backend

    references = {}
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        try:
            backend = get_backend(request["target"])
            dev = backend.device()

            def execute(path, args_np):
                lib = tvm.runtime.load_module(path)
                args = [tvm.runtime.tensor(a, dev) for a in args_np]
                lib["main"](*args)
                dev.sync()
                return lib, args

            params = request["params"]
            ref_key = (request["reference"], tuple(map(tuple, (p[0] for p in params))))
            if ref_key not in references:
                _, ref_args = execute(request["reference"], random_args(params, 0))
                references[ref_key] = [a.numpy() for a in ref_args]
            lib, args = execute(request["artifact"], random_args(params, 0))
            for got, want in zip(args, references[ref_key]):
                got = got.numpy()
                if not np.allclose(got, want, rtol=1e-3, atol=1e-4, equal_nan=True):
                    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                    conn.send({"error": f"wrong result: max |diff| {err:.3g} vs the default schedule"})
                    break
            else:
                timer = lib.time_evaluator("main", dev, number=request["number"], repeat=request["repeat"],
                                           min_repeat_ms=request["min_repeat_ms"])
                conn.send({"latencies_ms": [t * 1e3 for t in timer(*args).results]})
        except Exception as err:
            conn.send({"error": "run: " + _last_line(err), "trace": traceback.format_exc(limit=3)})


class LocalRunner(Runner):
    """One isolated runner process; a hang is killed after `timeout_s`, a crash is reported, then it restarts."""

    def __init__(self, timeout_s: float = 30.0, number: int = 3, repeat: int = 5, min_repeat_ms: int = 20):
        self.timeout_s = timeout_s
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self._proc = None
        self._conn = None

    def _start(self):
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_run_worker, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self._fresh = True  # its first request also pays for importing TVM

    def _stop(self):
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=5)
        self._proc = self._conn = None

    def run(self, reference, builds, target, params):
        results = []
        for build in builds:
            if build.artifact is None:
                results.append(MeasureResult(build.knobs, [], build.error, build.build_s))
                continue
            if self._proc is None or not self._proc.is_alive():
                self._start()
            request = {"target": target, "reference": reference, "artifact": build.artifact, "params": params,
                       "number": self.number, "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms}
            self._conn.send(request)
            results.append(MeasureResult(build.knobs, [], None, build.build_s))
            reply = self._await_reply()
            results[-1].latencies_ms = reply.get("latencies_ms", [])
            results[-1].error = reply.get("error")
        return results

    def _await_reply(self) -> dict:
        grace, self._fresh = (60.0 if self._fresh else 0.0), False
        if not self._conn.poll(self.timeout_s + grace):
            self._stop()
            return {"error": f"run: timed out after {self.timeout_s:.0f}s"}
        try:
            return self._conn.recv()
        except EOFError:  # the process died mid-run: a segfault, an abort, ...
            self._proc.join(timeout=5)
            code = self._proc.exitcode
            self._stop()
            return {"error": f"run: crashed (exit code {code})"}

    def close(self):
        if self._conn is not None:
            self._conn.close()
        self._stop()


def func_params(func) -> list:
    """[(shape, dtype)] of a PrimFunc's buffers, for the runner to make arguments (a symbolic dim at 1, the size
    `xcomp run` and `bench` use; per-group profiles time symbolic groups there, the tuner skips them)."""
    from xcomp.partition import at_smallest, func_buffers

    return [(tuple(at_smallest(d) for d in buf.shape), str(buf.dtype)) for buf in func_buffers(func)]
