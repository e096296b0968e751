"""Latency on a quiet host and on one whose cores other processes keep busy: xcomp against onnxruntime.

Usage: python benchmarks/contention.py [--busy N ...] [--repeat 100] [--json out.json] [model]
(default: onnx:light_shufflenet, with 0, 1 and 4 busy processes)

The model is compiled for this CPU and run by xcomp (Module calls, as a user's code makes them) and by onnxruntime
(its default settings) on the same seeded random inputs, in alternating blocks (xcomp.report.bench). For each
count of busy processes, that many pure-Python spin loops start, the runtimes are timed, and the loops stop. The
table gives the medians, xcomp / onnxruntime, and how many threads xcomp's pool ran at the end: its governor
runs the calls on one thread while the host does not give the pool its cores (docs/decisions/thread-count.md).
More busy processes than cores is where a pool that waits for descheduled workers fails: spinning workers without
the governor ran mobilenet_v3_small 50 times slower there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time

import numpy as np

import xcomp
from xcomp.frontends.examples import resolve
from xcomp.report.bench import OnnxRuntimeBaseline, alternating_blocks
from xcomp.runtime.thread_pool import pool_governor


@contextlib.contextmanager
def busy_processes(count: int):
    """`count` processes spinning in Python (a core each, wherever the scheduler puts them) for the duration."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5 if count else 0)  # the loops are running before anything is timed
        yield
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default="onnx:light_shufflenet")
    parser.add_argument("--busy", type=int, action="append", help="busy processes (repeatable; default 0, 1, 4)")
    parser.add_argument("--repeat", type=int, default=100, help="timed calls of each runtime per setting")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()

    module = xcomp.compile(args.model, progress=False)
    with open(resolve(args.model), "rb") as f:
        ort = OnnxRuntimeBaseline(f.read())
    feed = module.random_inputs(0)
    for got, want in zip(module.run(feed).values(), ort(feed)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)

    rows = []
    print(f"{args.model}: xcomp against onnxruntime; medians of {args.repeat} calls each")
    print(f"{'busy processes':>14}  {'xcomp ms':>9}  {'ort ms':>9}  {'ratio':>6}  xcomp threads at the end")
    for busy in args.busy or [0, 1, 4]:
        with busy_processes(busy):
            samples, _after_switch = alternating_blocks({"xcomp": lambda: module.run(feed), "ort": lambda: ort(feed)},
                                                        repeat=args.repeat, warmup=5)
            threads = pool_governor().threads
        xcomp_ms, ort_ms = (float(np.median(samples[k])) for k in ("xcomp", "ort"))
        rows.append({"busy": busy, "xcomp_ms": xcomp_ms, "onnxruntime_ms": ort_ms, "ratio": xcomp_ms / ort_ms,
                     "xcomp_threads": threads})
        print(f"{busy:>14}  {xcomp_ms:9.3f}  {ort_ms:9.3f}  {xcomp_ms / ort_ms:6.2f}  {threads}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "repeat": args.repeat, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
