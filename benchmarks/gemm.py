"""fp32 GEMM / GEMV through xcomp's matmul template against numpy's BLAS, measured in the same run.

Usage: python benchmarks/gemm.py [--trials 40] [--rounds 5] [--json out.json] [PROBLEM ...]
PROBLEM is MxNxK (default: 512x512x512 1024x1024x1024 1x4096x4096). Each problem is a one-node ONNX model,
x[M, K] @ W[K, N] with a constant W, compiled by xcomp.compile: the group timed is the one the compiler makes
(weight packed by our legalization). Per problem: the template's default config, then the best of a random
search over its knob space (`--trials` configs, each timed once with xcomp.profile.time_func; the top three
re-timed), then `--rounds` interleaved rounds of numpy / default / tuned, reported as medians.

Threads: TVM's runtime starts half of the hardware threads on x86 (it assumes hyper-threading), so this script
sets TVM_NUM_THREADS to the usable cores when unset; numpy's BLAS uses them all by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

if "TVM_NUM_THREADS" not in os.environ:  # before TVM's thread pool starts
    os.environ["TVM_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))

import numpy as np  # noqa: E402

DEFAULT_PROBLEMS = ["512x512x512", "1024x1024x1024", "1x4096x4096"]


def matmul_group(m: int, n: int, k: int):
    """The matmul group xcomp.compile makes for x[m, k] @ W[k, n] (W constant)."""
    from onnx import TensorProto, helper, numpy_helper

    import xcomp
    from xcomp.partition import unique_groups

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = xcomp.compile(model)
    (group,) = [rep for rep, _ in unique_groups(module.groups).values() if rep.kind == "matmul"]
    return module.backend, group.func


class Timer:
    """One scheduled func built once; each call gives its median latency in ms over `repeat` samples."""

    def __init__(self, func, backend):
        import tvm

        from xcomp.autotune.measure import func_params, random_args

        target = backend.target()
        with target:
            self.executable = tvm.compile(func.with_attr("global_symbol", "main"), target=target)
        dev = backend.device()
        self.args = [tvm.runtime.tensor(a, dev) for a in random_args(func_params(func), 0)]
        self.timer = self.executable.mod.time_evaluator("main", dev, number=1, repeat=7, min_repeat_ms=50)

    def __call__(self) -> float:
        return float(np.median(self.timer(*self.args).results)) * 1e3


def search(template, backend, trials: int, seed: int = 0):
    """(best knobs, its ms): the default and `trials` random valid configs timed once, the top three again."""
    from xcomp.profile import time_func

    candidates = [template.default_knobs()]
    pool = list(template.enumerate())
    random.Random(seed).shuffle(pool)
    candidates += [c for c in pool if c not in candidates][:trials]
    timed = []
    for knobs in candidates:
        ms = float(np.median(time_func(template.schedule(knobs), backend, repeat=3, min_repeat_ms=20)))
        timed.append((ms, knobs))
    timed.sort(key=lambda t: t[0])
    finals = [(min(float(np.median(time_func(template.schedule(k), backend, repeat=5, min_repeat_ms=50)))
                   for _ in range(2)), k) for _, k in timed[:3]]
    best_ms, best = min(finals, key=lambda t: t[0])
    return best, best_ms


def run_problem(text: str, trials: int, rounds: int) -> dict:
    from xcomp.report.blas import time_gemm
    from xcomp.schedules import get_template

    m, n, k = (int(d) for d in text.lower().split("x"))
    backend, func = matmul_group(m, n, k)
    template = get_template(func, backend.spec)
    default = template.default_knobs()
    tuned, _ = search(template, backend, trials) if trials else (default, None)
    timers = {"default": Timer(template.schedule(default), backend), "tuned": Timer(template.schedule(tuned), backend)}
    shape = {"batch": 1, "m": m, "n": n, "k": k, "dtype": "float32"}
    samples = {"numpy": [], "default": [], "tuned": []}
    for _ in range(rounds):  # interleaved: a slower moment of the machine hits all three alike
        samples["numpy"].append(time_gemm(shape, repeat=7, min_ms=50)["median_ms"])
        for name, timer in timers.items():
            samples[name].append(timer())
    flops = 2.0 * m * n * k
    ms = {name: float(np.median(v)) for name, v in samples.items()}
    row = {"problem": text, "m": m, "n": n, "k": k, "template": type(template).__name__,
           "default_knobs": default, "tuned_knobs": tuned, "trials": trials, "rounds": rounds}
    for name in samples:
        row[f"{name}_ms"] = ms[name]
        row[f"{name}_gflops"] = flops / ms[name] / 1e6
    row["default_vs_numpy"] = ms["numpy"] / ms["default"]
    row["tuned_vs_numpy"] = ms["numpy"] / ms["tuned"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="*", help="MxNxK (default: %s)" % " ".join(DEFAULT_PROBLEMS))
    parser.add_argument("--trials", type=int, default=40, help="random configs searched per problem (0: none)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    from xcomp.backends import get_backend

    spec = get_backend("cpu").spec
    print(f"# {spec.name}, {spec.simd_width} fp32 lanes; TVM threads {os.environ['TVM_NUM_THREADS']}; "
          f"numpy {np.__version__}", flush=True)
    print(f"{'problem':>16s} {'numpy GF/s':>11s} {'default GF/s':>13s} {'tuned GF/s':>11s} {'def/np':>7s} "
          f"{'tuned/np':>8s}  tuned knobs", flush=True)
    rows = []
    for text in args.problems or DEFAULT_PROBLEMS:
        row = run_problem(text, args.trials, args.rounds)
        rows.append(row)
        print(f"{text:>16s} {row['numpy_gflops']:11.1f} {row['default_gflops']:13.1f} {row['tuned_gflops']:11.1f} "
              f"{row['default_vs_numpy']:6.2f}x {row['tuned_vs_numpy']:7.2f}x  {json.dumps(row['tuned_knobs'])}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"spec": spec.name, "lanes": spec.simd_width, "tvm_threads": os.environ["TVM_NUM_THREADS"],
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
