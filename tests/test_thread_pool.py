"""The pool governor (xcomp/runtime/thread_pool.py): one thread while the host does not give the pool its cores, the
whole pool again once a trial call finds them back."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from conftest import tiny_mlp

from xcomp.runtime import thread_pool
from xcomp.runtime.thread_pool import (CONTENDED_FOR_S, FIRST_RETRY_S, LAST_RETRY_S, MEASURE_EVERY_S, STRIKES,
                                       PoolGovernor)


class _Host:
    """Fake clocks: each call takes `wall` seconds, of which the calling thread runs `share`."""

    def __init__(self):
        self.now = self.cpu_time = 0.0
        self.configured = []

    def governor(self, size=2, configure=None):
        return PoolGovernor(size, configure or self.configured.append, clock=lambda: self.now,
                            cpu_clock=lambda: self.cpu_time)

    def call(self, governor, wall=0.05, share=1.0):
        def body():
            self.now += wall
            self.cpu_time += wall * share

        governor.run(body)

    def shrink(self, governor):
        """Contended calls until the pool shrinks."""
        for _ in range(STRIKES):
            self.call(governor, share=0.05)
        assert governor.threads == 1


def test_a_pool_that_gets_its_cores_keeps_them():
    host = _Host()
    governor = host.governor()
    for _ in range(100):
        host.call(governor, share=0.95)
    assert governor.threads == 2 and host.configured == []


def test_contended_calls_in_a_row_shrink_the_pool_to_one_thread():
    host = _Host()
    governor = host.governor()
    for _ in range(STRIKES - 1):
        host.call(governor, share=0.05)
    host.call(governor, share=0.95)  # a call that got its cores: the strikes start again
    for _ in range(STRIKES - 1):
        host.call(governor, share=0.05)
    assert governor.threads == 2
    host.call(governor, share=0.05)
    assert governor.threads == 1 and host.configured == [1]


def test_short_contended_calls_shrink_the_pool_only_once_they_add_up():
    """A new process's first calls can find the calling thread on a worker's core until Linux moves it."""
    host = _Host()
    governor = host.governor()
    wall = CONTENDED_FOR_S / 10
    for _ in range(9):
        host.call(governor, wall=wall, share=0.5)
    assert governor.threads == 2
    host.call(governor, wall=wall * 1.01, share=0.5)
    assert governor.threads == 1


def test_a_trial_of_the_whole_pool_restores_it_once_the_cores_are_back():
    host = _Host()
    governor = host.governor()
    host.shrink(governor)
    host.call(governor, share=1.0)  # before the retry time: still one thread, whatever that call got
    assert governor.threads == 1 and host.configured == [1]
    host.now += FIRST_RETRY_S
    host.call(governor, share=0.95)
    assert governor.threads == 2 and host.configured == [1, 2]


def test_a_trial_s_share_leaves_out_the_time_reconfiguring_the_pool_takes():
    host = _Host()

    def slow_configure(threads):  # the calling thread waits, off its core, while the pool changes
        host.configured.append(threads)
        host.now += 1.0

    governor = host.governor(configure=slow_configure)
    host.shrink(governor)
    host.now = governor._retry_at
    host.call(governor, wall=0.01, share=0.95)
    assert governor.threads == 2


def test_failed_trials_wait_longer_each_time_up_to_the_last_wait():
    host = _Host()
    governor = host.governor()
    host.shrink(governor)
    waits = []
    for _ in range(10):
        shrunk_at = host.now
        host.now = governor._retry_at
        waits.append(governor._retry_at - shrunk_at)
        host.call(governor, share=0.05)  # the trial: contended again
        assert governor.threads == 1
    assert waits[:3] == pytest.approx([FIRST_RETRY_S, 2 * FIRST_RETRY_S, 4 * FIRST_RETRY_S])
    assert max(waits) == pytest.approx(LAST_RETRY_S)
    assert host.configured == [1] + [2, 1] * 10


def test_the_waits_start_again_after_the_whole_pool_ran_for_the_last_wait():
    host = _Host()
    governor = host.governor()
    host.shrink(governor)
    host.now = governor._retry_at
    host.call(governor, share=0.05)  # a failed trial doubles the wait
    host.now = governor._retry_at
    host.call(governor, share=0.95)  # restored
    host.shrink(governor)  # contended again soon: the doubled wait doubles again
    assert governor._retry_at - host.now == pytest.approx(4 * FIRST_RETRY_S)
    host.now = governor._retry_at
    host.call(governor, share=0.95)
    host.now += LAST_RETRY_S
    host.shrink(governor)  # contended after a long healthy run: the first wait again
    assert governor._retry_at - host.now == pytest.approx(FIRST_RETRY_S)


def test_calls_read_the_cpu_time_at_most_once_a_period():
    host = _Host()
    reads = []
    governor = PoolGovernor(2, host.configured.append, clock=lambda: host.now,
                            cpu_clock=lambda: reads.append(host.now) or host.cpu_time)
    for _ in range(100):  # ten periods of back-to-back calls: one measured call (two reads) each
        host.call(governor, wall=MEASURE_EVERY_S / 10)
    assert 2 * 9 <= len(reads) <= 2 * 10
    for _ in range(1 + STRIKES):  # slow (contended): each call after one of these is measured
        host.call(governor, wall=1.0, share=0.05)
    assert governor.threads == 1


def test_a_one_thread_pool_is_left_alone():
    host = _Host()
    governor = host.governor(size=1)
    for _ in range(10):
        host.call(governor, share=0.05)
    assert governor.threads == 1 and host.configured == []


def test_the_governor_sets_the_calling_threads_tvm_pool():
    """With the real clocks and TVM's pool, in a thread of its own (TVM keeps a pool per launching thread): calls that
    take no CPU time shrink that thread's pool to one thread, and a module's outputs stay the same on it."""
    import tvm

    import xcomp

    module = xcomp.compile(tiny_mlp(batch=8192))  # rows enough for a parallel loop
    inputs = module.random_inputs(0)
    expected = module.run(inputs)
    seen = {}

    def in_a_thread():
        governor = thread_pool.pool_governor()
        seen["size"] = governor.size
        for _ in range(STRIKES):
            governor.run(time.sleep, CONTENDED_FOR_S / 2)  # the calling thread gets no CPU time
        seen["threads"] = governor.threads, int(tvm.get_global_func("runtime.NumThreads")())
        seen["outputs"] = module.run(inputs)
        seen["governor"] = governor
        seen["same governor"] = thread_pool.pool_governor() is governor

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    assert seen["size"] == int(tvm.get_global_func("runtime.NumThreads")())
    if seen["size"] > 1:
        assert seen["threads"] == (1, 1)
    assert seen["same governor"] and thread_pool.pool_governor() is not seen["governor"]  # one per thread
    for name, value in expected.items():
        np.testing.assert_array_equal(seen["outputs"][name], value)


def test_the_contention_benchmark_times_both_runtimes_and_stops_its_busy_processes(tmp_path):
    import json
    import os
    import subprocess
    import sys

    import onnx

    model = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(batch=64), model)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "contention.py")
    subprocess.run([sys.executable, script, str(model), "--busy", "0", "--busy", "1", "--repeat", "10",
                    "--json", str(tmp_path / "out.json")], check=True, capture_output=True, timeout=300)
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert [row["busy"] for row in rows] == [0, 1]
    assert all(row["xcomp_ms"] > 0 and row["onnxruntime_ms"] > 0 and row["xcomp_threads"] >= 1 for row in rows)
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _command_line(pid).endswith("while True: pass")]


def _command_line(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:  # the process ended meanwhile
        return ""
