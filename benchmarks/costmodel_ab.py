"""A cost model against the template defaults, whole models timed side by side: the check before shipping one.

Usage: python benchmarks/costmodel_ab.py MODEL... [--costmodel costmodel/pretrained/cpu.json] [--repeat 20]
           [--warmup 3] [--seed 0] [--json]

Each model is compiled twice for this CPU: with the cost model's pick wherever the confidence table beside it
trusts a template here (`xcomp compile`'s default when the model is the shipped one), and with every group at
its template default (`--no-costmodel`). Both builds run on the same seeded random inputs and must agree; then
they are timed in alternating blocks (xcomp.report.bench.alternating_blocks). Reported per model: the medians,
predicted / default (< 1: the predictions made it faster) and how many groups got a predicted config. A
predicted build above 1.0 by more than the noise is a reason not to ship the model and its table; a build with
no predicted group runs the default's program, and its ratio shows the noise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def time_builds(path, builds, repeat, warmup, seed, progress=False):
    """Compile `path` once per (name, xcomp.compile keyword arguments) in `builds`, check every build's outputs
    against the first's on seeded random inputs, and time them in alternating blocks. Returns (modules, compile
    seconds, median ms, [25th, 75th] percentile ms), each {name: ...}."""
    import xcomp
    from xcomp.report.bench import alternating_blocks

    modules, compile_s = {}, {}
    for name, kwargs in builds:
        start = time.perf_counter()
        modules[name] = xcomp.compile(path, **kwargs)
        compile_s[name] = time.perf_counter() - start
    first, *others = modules
    inputs = modules[first].random_inputs(seed)
    reference = modules[first].run(inputs)
    for name in others:
        for (out, got), want in zip(modules[name].run(inputs).items(), reference.values()):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=f"{path} {name}: output {out}")
    steady, _ = alternating_blocks({name: (lambda m=m: m.run(inputs)) for name, m in modules.items()}, repeat,
                                   warmup, progress=progress)
    ms = {name: float(np.median(times)) for name, times in steady.items()}
    quartiles = {name: [float(q) for q in np.percentile(times, [25, 75])] for name, times in steady.items()}
    return modules, compile_s, ms, quartiles


def predicted_groups(module) -> int:
    """Unique groups of a compiled module scheduled with the cost model's pick."""
    return [c["source"] for c in module.info["schedules"].values()].count("costmodel")


def main():
    from xcomp.costmodel.model import PRETRAINED_PATH
    from xcomp.frontends.examples import resolve

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="+", help="onnx:NAME or .onnx")
    parser.add_argument("--costmodel", default=PRETRAINED_PATH,
                        help="cost model file, its .confidence.json beside it (default: the shipped one)")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per build")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = parser.parse_args()

    log = sys.stderr if args.json else sys.stdout
    results = []
    for model in args.model:
        builds = [("default", {"costmodel": False}), ("predicted", {"costmodel": args.costmodel})]
        modules, compile_s, ms, quartiles = time_builds(resolve(model), builds, args.repeat, args.warmup,
                                                        args.seed, progress=not args.json)
        row = {"model": model, "ms": ms, "quartiles_ms": quartiles, "ratio": ms["predicted"] / ms["default"],
               "predicted_groups": predicted_groups(modules["predicted"]),
               "unique_groups": len(modules["predicted"].info["schedules"]), "compile_s": compile_s}
        results.append(row)
        print(f"{model:36s} default {ms['default']:9.2f}  predicted {ms['predicted']:9.2f} ms  "
              f"{row['ratio']:.3f}x  ({row['predicted_groups']}/{row['unique_groups']} groups predicted)", file=log)
    if args.json:
        json.dump({"costmodel": args.costmodel, "repeat": args.repeat, "results": results}, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
