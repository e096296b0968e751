"""fp32 GEMM / GEMV through xcomp's matmul template against numpy's BLAS, measured in the same run.

Usage: python benchmarks/gemm.py [--trials 40] [--rounds 5] [--json out.json] [PROBLEM ...]
PROBLEM is MxNxK (default: 512x512x512 1024x1024x1024 1x4096x4096). Each problem is a one-node ONNX model,
x[M, K] @ W[K, N] with a constant W, compiled by xcomp.compile: the group timed is the one the compiler makes
(weight packed by our legalization). Per problem: the template's default config, then the tuner's pick after
`--trials` trials, as `xcomp tune` makes it (benchmarks/workloads.py tuner_pick: the default unless a tuned config
beat it inside the model in every round), then `--rounds` interleaved rounds of numpy / default / tuned (the tuned
kernel is not timed again where it is the default), reported as medians; the ratios are medians of each round's.
A pick re-timed here more than 3% slower than the default is flagged below its row.

Threads: TVM's runtime starts half of the hardware threads on x86 (it assumes hyper-threading), so this script
sets TVM_NUM_THREADS to the usable cores when unset; numpy's BLAS uses them all by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "TVM_NUM_THREADS" not in os.environ:  # before TVM's thread pool starts
    os.environ["TVM_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))

import numpy as np  # noqa: E402

import workloads  # noqa: E402

DEFAULT_PROBLEMS = ["512x512x512", "1024x1024x1024", "1x4096x4096"]


def gemm_model(m: int, n: int, k: int):
    """x[m, k] @ W[k, n], W a constant."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class Timer:
    """One scheduled func built once, as the tuner and the model build it: through the backend's TIR pipeline (a
    plain tvm.compile leaves small tile buffers on the heap, so configs timed slower here than in the tuner;
    docs/decisions/stack-buffers.md). Each call gives its median latency in ms over `repeat` samples."""

    def __init__(self, func, backend):
        import tvm

        from xcomp.autotune.measure import func_params, random_args

        self.executable = backend.compile(func.with_attr("global_symbol", "main"))
        dev = backend.device()
        self.args = [tvm.runtime.tensor(a, dev) for a in random_args(func_params(func), 0)]
        self.dev = dev

    def __call__(self) -> float:
        from xcomp.timing import Timing, time_kernel

        return float(np.median(time_kernel(self.executable.mod, self.dev, self.args, Timing.WARM, number=1, repeat=7,
                                           min_repeat_ms=50)))


def run_problem(text: str, trials: int, rounds: int, seed: int = 0) -> dict:
    from xcomp.backends import get_backend
    from xcomp.report.bench import SETTLE_S
    from xcomp.report.blas import time_gemm

    m, n, k = (int(d) for d in text.lower().split("x"))
    backend, model = get_backend("cpu"), gemm_model(m, n, k)
    task = workloads.computing_task(model, backend, text)
    template = task.template
    default = template.default_knobs()
    pick = workloads.tuner_pick(model, task, backend, trials, seed) if trials else {
        "knobs": default, "kept_default": True, "picked_by": None}
    tuned, kept_default = pick["knobs"], pick["kept_default"]
    timers = {"default": Timer(template.schedule(default), backend)}
    if not kept_default:
        timers["tuned"] = Timer(template.schedule(tuned), backend)
    shape = {"batch": 1, "m": m, "n": n, "k": k, "dtype": "float32"}
    samples = {"numpy": [], **{name: [] for name in timers}}
    for _ in range(rounds):  # interleaved: a slower moment of the machine hits all three alike
        time.sleep(SETTLE_S)  # TVM's pool threads spin a while after a kernel: numpy's threads would share cores
        samples["numpy"].append(time_gemm(shape, repeat=7, min_ms=50)["median_ms"])
        for name, timer in timers.items():
            samples[name].append(timer())
    if kept_default:  # one kernel: timing it twice would only measure the machine's noise
        samples["tuned"] = samples["default"]
    flops = 2.0 * m * n * k
    row = {"problem": text, "m": m, "n": n, "k": k, "template": type(template).__name__,
           "default_knobs": default, "tuned_knobs": tuned, "kept_default": kept_default,
           "picked_by": pick["picked_by"], "trials": trials,
           "rounds": rounds}
    for name, values in samples.items():
        row[f"{name}_ms"] = float(np.median(values))
        row[f"{name}_gflops"] = flops / row[f"{name}_ms"] / 1e6

    def paired(faster, slower):  # median over rounds of slower / faster, each round's pair timed together
        return float(np.median(np.asarray(samples[slower]) / np.asarray(samples[faster])))

    # Ratios per round: this VM's speed shifts by a third for seconds at a time, which medians taken apart
    # would set against each other.
    row["default_vs_numpy"] = paired("default", "numpy")
    row["tuned_vs_numpy"] = paired("tuned", "numpy")
    row["tuned_vs_default"] = paired("tuned", "default")
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="*", help="MxNxK (default: %s)" % " ".join(DEFAULT_PROBLEMS))
    parser.add_argument("--trials", type=int, default=40, help="tuning trials per problem (0: no tuning)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    from xcomp.backends import get_backend

    spec = get_backend("cpu").spec
    print(f"# {spec.name}, {spec.simd_width} fp32 lanes; TVM threads {os.environ['TVM_NUM_THREADS']}; "
          f"numpy {np.__version__}", flush=True)
    print(f"{'problem':>16s} {'numpy GF/s':>11s} {'default GF/s':>13s} {'tuned GF/s':>11s} {'def/np':>7s} "
          f"{'tuned/np':>8s} {'tuned/def':>9s}  tuned knobs", flush=True)
    rows = []
    for text in args.problems or DEFAULT_PROBLEMS:
        row = run_problem(text, args.trials, args.rounds)
        rows.append(row)
        knobs = "= default" if row["kept_default"] else json.dumps(row["tuned_knobs"])
        print(f"{text:>16s} {row['numpy_gflops']:11.1f} {row['default_gflops']:13.1f} {row['tuned_gflops']:11.1f} "
              f"{row['default_vs_numpy']:6.2f}x {row['tuned_vs_numpy']:7.2f}x {row['tuned_vs_default']:8.2f}x  {knobs}",
              flush=True)
        if row["tuned_vs_default"] < 0.97:  # the tuner judged the pick faster (in the model); here it is not
            print(f"{'':>16s} the tuner's pick ({row['picked_by']}) re-timed {1 / row['tuned_vs_default']:.2f}x "
                  "slower than the default here", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"spec": spec.name, "lanes": spec.simd_width, "tvm_threads": os.environ["TVM_NUM_THREADS"],
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
