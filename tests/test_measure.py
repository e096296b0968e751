"""Measurement isolation: a crashing, hanging or wrong candidate is a failed record, never a dead tuner."""

from __future__ import annotations

import pytest

from xcomp.autotune.measure import BuildResult, LocalRunner
from xcomp.timing import Timing

N = 1024


def _build(tmp_path, name, body_factor=2.0, mode="ok"):
    """A PrimFunc B = A * factor, optionally aborting or spinning forever, exported as a library."""
    import tvm
    from tvm.script import tirx as T

    if mode == "abort":
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
            T.evaluate(T.call_extern("int32", "abort"))
            for i in range(N):
                B[i] = A[i]
    elif mode == "hang":
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
            for j in range(T.int64(1) << T.int64(50)):
                for i in range(N):
                    B[i] = B[i] * T.float32(0.5) + A[i]
    else:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
            for i in range(N):
                B[i] = A[i] * T.float32(body_factor)

    ex = tvm.compile(main, tvm.target.Target({"kind": "llvm"}))
    path = str(tmp_path / f"{name}.so")
    ex.export_library(path)
    return BuildResult({"name": name}, path)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cands")
    return {
        "ref": _build(tmp, "ref"),
        "same": _build(tmp, "same"),
        "wrong": _build(tmp, "wrong", body_factor=3.0),
        "abort": _build(tmp, "abort", mode="abort"),
        "hang": _build(tmp, "hang", mode="hang"),
    }


def test_good_wrong_crash_hang_then_good_again(built):
    runner = LocalRunner(timeout_s=5, number=2, repeat=3, min_repeat_ms=1)
    failed_build = BuildResult({"name": "nobuild"}, None, "build: invalid")
    try:
        order = ["same", "wrong", "abort", "same", "hang", "same"]
        results = runner.run(built["ref"].artifact, [built[k] for k in order] + [failed_build], "cpu",
                             [((N,), "float32"), ((N,), "float32")])
    finally:
        runner.close()
    by = results
    assert by[0].ok and len(by[0].latencies_ms) == 2 * 3 and by[0].median_ms > 0  # cold: single runs
    assert by[1].error.startswith("wrong result")
    assert by[2].error.startswith("run: crashed")
    assert by[3].ok  # the runner restarted after the crash
    assert by[4].error == "run: timed out after 5s"
    assert by[5].ok  # and after the hang
    assert by[6].error == "build: invalid" and not by[6].ok


def test_warm_timing_averages_number_runs_per_sample(built):
    """Without cold_weights each of the `repeat` samples is the mean of `number` back-to-back runs, the inputs
    staying in cache; with it (the default on CPUs) every run is flushed and timed alone."""
    runner = LocalRunner(timeout_s=5, number=2, repeat=3, min_repeat_ms=1, cold_weights=False)
    try:
        result, = runner.run(built["ref"].artifact, [built["same"]], "cpu", [((N,), "float32"), ((N,), "float32")])
    finally:
        runner.close()
    assert result.ok and len(result.latencies_ms) == 3


class _RecordingMeasurer:
    """Answers like IsolatedMeasurer, one latency per timed run (the slice's index), and keeps the requests."""

    def __init__(self, fails_at=None):
        self.requests, self.fails_at = [], fails_at or {}

    def measure(self, request):
        self.requests.append(request)
        index = sum(r["artifact"] == request["artifact"] for r in self.requests) - 1
        if self.fails_at.get(request["artifact"]) == index:
            return {"error": "run: crashed (exit code -11)"}
        return {"latencies_ms": [float(index)] * request["number"] * request["repeat"]}

    def close(self):
        pass


def test_timed_runs_are_sliced_round_robin_over_every_candidate_measured_together():
    """Each candidate's 15 cold runs come in 3 slices of 5, taken in turns over all the candidates of all the
    workloads measured together; only the first slice checks the numerics; a candidate failing in a later slice
    fails, and is not timed again."""
    runner = LocalRunner(number=3, repeat=5)
    runner._measurer = _RecordingMeasurer(fails_at={"b.so": 1})
    params = [((N,), "float32"), ((N,), "float32")]
    jobs = [("ref1.so", [BuildResult({"k": "a"}, "a.so"), BuildResult({"k": "b"}, "b.so")], "cpu", params, None),
            ("ref2.so", [BuildResult({"k": "c"}, "c.so"), BuildResult({"k": "d"}, None, "build: invalid")], "cpu",
             params, None)]
    (a, b), (c, d) = runner.run_many(jobs)
    order = [(r["artifact"], r["check"], r["number"] * r["repeat"]) for r in runner._measurer.requests]
    assert order == [("a.so", True, 5), ("b.so", True, 5), ("c.so", True, 5),
                     ("a.so", False, 5), ("b.so", False, 5), ("c.so", False, 5),
                     ("a.so", False, 5), ("c.so", False, 5)]
    assert a.latencies_ms == c.latencies_ms == [0.0] * 5 + [1.0] * 5 + [2.0] * 5
    assert b.error == "run: crashed (exit code -11)" and not b.ok
    assert d.error == "build: invalid" and not d.ok
    assert [r["reference"] for r in runner._measurer.requests[:3]] == ["ref1.so", "ref1.so", "ref2.so"]


def test_slices_split_the_runs_a_timing_takes():
    from xcomp.autotune.measure import timed_slices

    cold = {"device": "cpu", "cold_weights": True, "number": 3, "repeat": 5}
    assert timed_slices(cold, 3) == [{"number": 1, "repeat": 5}] * 3
    assert timed_slices({**cold, "number": 2, "repeat": 2}, 3) == [{"number": 1, "repeat": 2},
                                                                    {"number": 1, "repeat": 1},
                                                                    {"number": 1, "repeat": 1}]
    warm = {**cold, "cold_weights": False}  # repeat means of `number` runs: the means are sliced
    assert timed_slices(warm, 3) == [{"repeat": 2}, {"repeat": 2}, {"repeat": 1}]
    assert timed_slices({**warm, "repeat": 1}, 3) == [{"repeat": 1}]


@pytest.mark.parametrize("evict_private_bytes", [0, 1 << 20], ids=["flush-to-memory", "evict-private-caches"])
def test_the_cold_preprocessor_rewrites_the_input_with_its_own_values(evict_private_bytes):
    """Before each cold run the data input is written anew by every thread (as its producer would have): the
    kernel then reads the same values, whatever the size, including sizes the threads do not split evenly; the
    other buffers keep theirs, flushed or evicted."""
    import numpy as np
    import tvm

    from xcomp.timing import producer_written

    for shape in [(7,), (3, 5, 11), (1, 64, 56, 16)]:
        data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        args = [tvm.runtime.tensor(data), tvm.runtime.tensor(np.ones(3, np.float32))]
        preprocess = tvm.get_global_func(producer_written(args, evict_private_bytes))
        args[0].copyfrom(np.zeros(shape, np.float32))  # what a candidate that scribbled on its input would leave
        preprocess(*args)
        np.testing.assert_array_equal(args[0].numpy(), data)
        np.testing.assert_array_equal(args[1].numpy(), np.ones(3, np.float32))


def test_each_runner_says_how_it_times_what_it_measures(tmp_path):
    """Records store it: a runner's timing label must follow the settings check_and_time acts on."""
    from xcomp.autotune.bundle import BundleRunner
    from xcomp.autotune.rpc import RPCRunner

    assert LocalRunner().timing("cpu") == BundleRunner(tmp_path / "b").timing("cpu") == Timing.COLD
    assert LocalRunner().timing("cpu", 1 << 21) == BundleRunner(tmp_path / "b").timing("cpu", 1 << 21) == Timing.LLC
    assert RPCRunner("127.0.0.1", 9190, "k").timing("cpu") == Timing.FLUSHED
    assert RPCRunner("127.0.0.1", 9190, "k").timing("cpu", 1 << 21) == Timing.FLUSHED
    for runner, target in ((LocalRunner(cold_weights=False), "cpu"), (LocalRunner(), "cuda:sm_90"),
                           (RPCRunner("127.0.0.1", 9190, "k", cold_weights=False), "cpu")):
        assert runner.timing(target) == Timing.WARM
