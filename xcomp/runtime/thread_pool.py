"""TVM's CPU thread pool, run on one thread while the host does not give the pool its cores.

TVM splits each parallel region statically: the calling thread waits for every worker's share. Its workers spin
between regions (backends/tvm_compat.py), which saves a wake-up per region, but a spinning worker that the scheduler
has put behind other processes makes every region wait for a time slice, and a model then runs tens of times slower
(docs/decisions/thread-count.md). The calling thread runs a share of each region and spins while it waits for the
others, yielding its core to whoever else is runnable: its CPU time over a call's wall time says what share of a
core the pool's threads got. (The process's CPU time would count the workers too, but Linux adds a running
thread's time to it only at ticks and switches: it missed whole calls of a millisecond.) With too small a share,
one thread runs the calls, since it waits for no one, and the whole pool is tried again now and then.
"""

from __future__ import annotations

import threading
import time

CONTENDED_SHARE = 0.6  # a call whose calling thread got less of its wall time on a core was contended
RECOVERED_SHARE = 0.85  # a trial call of the whole pool that got at least this finds the cores back
# Contended calls in a row, and their seconds, before the pool shrinks: one slow call can be a page fault or an
# interrupt, and a new process's first milliseconds its calling thread sharing a core with a worker until Linux
# moves it (seen for 3-12 calls of a small CNN).
STRIKES, CONTENDED_FOR_S = 3, 0.1
# Waits before trying the whole pool again: doubling while trials fail, from the first again once the whole pool
# has run for the longest wait since it came back.
FIRST_RETRY_S, LAST_RETRY_S = 0.5, 30.0
# Calls read the CPU time, a system call each (0.6 us on a VM), at most once in this many seconds: every call's
# reads cost a tiny model 30% of its call, and a small GEMM's 1%. A contended call takes a time slice, longer than
# this, so the call after it is measured.
MEASURE_EVERY_S = 1e-3
_BIG_CORES = 1  # TVM's ThreadGroup::kBig, the affinity mode its pool starts with

_local = threading.local()


class PoolGovernor:
    """The thread count of one launching thread's pool: TVM keeps a pool per thread that launches work."""

    def __init__(self, size: int, configure, clock=time.perf_counter, cpu_clock=time.thread_time):
        self.size = size  # the whole pool
        self.threads = size  # in use now
        self._configure = configure  # threads -> None: sets the pool's thread count
        self._clock, self._cpu_clock = clock, cpu_clock
        self._strikes, self._contended_s = 0, 0.0
        self._retry_wait = FIRST_RETRY_S
        self._retry_at = 0.0
        self._restored_at = float("-inf")
        self._measured_at = float("-inf")  # when the last measured call started

    def run(self, func, *args):
        """func(*args), on the pool's threads in use; the calling thread's share of a core during it decides how
        many the next calls use."""
        if self.size == 1:
            return func(*args)
        trial = self.threads < self.size and self._clock() >= self._retry_at
        if trial:
            self._use(self.size)  # before the call's clocks start: reconfiguring takes 30 us
        start = self._clock()
        measured = trial or start - self._measured_at >= MEASURE_EVERY_S
        if measured:
            self._measured_at = start
        cpu_start = self._cpu_clock() if measured else 0.0
        try:
            return func(*args)
        finally:
            now = self._clock()
            elapsed = now - start
            if measured and elapsed > 0:
                self._observe((self._cpu_clock() - cpu_start) / elapsed, trial, now, elapsed)

    def _observe(self, share: float, trial: bool, now: float, elapsed: float) -> None:
        if trial:
            if share >= RECOVERED_SHARE:
                self._restored_at = now
            else:
                self._shrink(now, longer=True)
        elif self.threads == self.size:
            contended = share < CONTENDED_SHARE
            self._strikes = self._strikes + 1 if contended else 0
            self._contended_s = self._contended_s + elapsed if contended else 0.0
            if self._strikes >= STRIKES and self._contended_s >= CONTENDED_FOR_S:
                self._shrink(now, longer=now - self._restored_at < LAST_RETRY_S)

    def _shrink(self, now: float, longer: bool) -> None:
        """One thread until a trial at `now` plus the next wait: double the last (`longer`) or the first."""
        self._use(1)
        self._strikes, self._contended_s = 0, 0.0
        self._retry_wait = min(2 * self._retry_wait, LAST_RETRY_S) if longer else FIRST_RETRY_S
        self._retry_at = now + self._retry_wait

    def _use(self, threads: int) -> None:
        self._configure(threads)
        self.threads = threads


def pool_governor() -> PoolGovernor:
    """The calling thread's governor, made with its pool on first use."""
    governor = getattr(_local, "governor", None)
    if governor is None:
        import tvm

        configure = tvm.get_global_func("runtime.config_threadpool")
        size = int(tvm.get_global_func("runtime.NumThreads")())
        governor = _local.governor = PoolGovernor(size, lambda threads: configure(_BIG_CORES, threads))
    return governor
