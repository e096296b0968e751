"""Timing runners side by side (xcomp.report.bench.alternating_blocks): who runs when, and which calls count as
steady."""

from __future__ import annotations

import time

import pytest

from xcomp.report import bench
from xcomp.errors import UserError


def _runners(calls: list, names=("a", "b", "c")):
    """Runners that log their calls; a call right after another runner's is slow (as with cold caches)."""
    def make(name):
        def run():
            time.sleep(0.004 if calls and calls[-1] != name else 0.001)
            calls.append(name)
        return run
    return {name: make(name) for name in names}


def test_blocks_alternate_and_keep_each_block_s_first_call_apart(monkeypatch):
    monkeypatch.setattr(bench, "SETTLE_S", 0.0)
    calls = []
    steady, after_switch = bench.alternating_blocks(_runners(calls), repeat=7, warmup=2, block=4)
    warmup, timed = calls[:6], calls[6:]
    assert warmup == ["a", "a", "b", "b", "c", "c"]
    # 7 steady calls in blocks of 3 steady calls: rounds of 3 + 3 + 1, each block led by its switch call
    assert timed == (["a"] * 4 + ["b"] * 4 + ["c"] * 4) * 2 + ["a", "a", "b", "b", "c", "c"]
    for name in "abc":
        assert len(steady[name]) == 7 and len(after_switch[name]) == 3
        # the slow first calls are the ones kept apart, none of them among the steady ones
        assert min(after_switch[name]) > max(steady[name])


def test_one_runner_has_no_switches(monkeypatch):
    monkeypatch.setattr(bench, "SETTLE_S", 1.0)  # never slept: nothing to settle
    calls = []
    t = time.perf_counter()
    steady, after_switch = bench.alternating_blocks(_runners(calls, "a"), repeat=9, warmup=1, block=4)
    assert time.perf_counter() - t < 0.5
    assert calls == ["a"] * 10 and len(steady["a"]) == 9 and after_switch["a"] == []


def test_a_block_needs_a_steady_call():
    with pytest.raises(UserError, match="block of 1"):
        bench.alternating_blocks(_runners([]), repeat=3, warmup=0, block=1)
