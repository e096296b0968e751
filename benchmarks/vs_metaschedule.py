"""xcomp's tuner against TVM MetaSchedule on the same operator group, target and trial budget.

Usage: python benchmarks/vs_metaschedule.py [--trials 64 256] [--seed 0] [--ms-per-iter 16] [--rounds 7]
           [--json out.json] [WORKLOAD ...]

WORKLOAD is one of gemm, conv3x3, dwconv3x3 (default: all; see benchmarks/workloads.py). For each workload and
each budget in `--trials`: xcomp's tuner as `xcomp tune` runs it (cost-model guided, fresh database; its pick is
what `compile --db` would use: the default unless a tuned config beat it inside the model in every round) and
`ms.tune_tir` (MetaSchedule's
default CPU search space, evolutionary search with its XGBoost model, in-memory database) tune the exact PrimFunc
xcomp's partitioner makes for the group (packed conv weights included), for the same target
(`get_backend("cpu").target()`), each with its candidates timed like xcomp's runner times them (number, repeat,
min_repeat_ms of xcomp.autotune.measure.LocalRunner). Tuning wall time is the tuning call alone: MetaSchedule's
one-time `import tvm.s_tir.tensor_intrin` (slow; its TuneContext needs it) is paid before the clock
starts, and its builder skips that import in every worker. Then every best kernel (and xcomp's default config)
is built once and re-timed in `--rounds` interleaved rounds in this one process with one timer; the table gives
the medians, after checking that MetaSchedule's kernel computes what xcomp's default does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time

import numpy as np

import workloads
from gemm import Timer


def build_without_tensor_intrin(mod, target, _params):
    """MetaSchedule's default build, minus its `import tvm.s_tir.tensor_intrin` (slow in each fresh worker:
    docs/decisions/one-time-costs.md; no tensor intrinsic is used on this CPU target)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.driver.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def tune_xcomp(name: str, backend, trials: int, seed: int) -> dict:
    """xcomp's pick as `xcomp tune` makes it (workloads.tuner_pick), its wall time including the in-model step."""
    task = workloads.task(name, backend)
    pick = workloads.tuner_pick(workloads.onnx_model(name), task, backend, trials, seed)
    knobs = pick.pop("knobs")
    return {"func": task.template.schedule(knobs), "best": knobs, **pick}


def metaschedule_timing(timing: dict):
    """MetaSchedule's EvaluatorConfig for xcomp's LocalRunner settings: with cold_weights, single runs after a
    flush of every argument but the first, as ours."""
    from tvm.s_tir import meta_schedule as ms

    if timing["cold_weights"]:
        return ms.runner.EvaluatorConfig(number=1, repeat=timing["number"] * timing["repeat"], min_repeat_ms=0,
                                         enable_cpu_cache_flush=True)
    return ms.runner.EvaluatorConfig(number=timing["number"], repeat=timing["repeat"],
                                     min_repeat_ms=timing["min_repeat_ms"])


def tune_metaschedule(func, backend, trials: int, seed: int, per_iter: int) -> dict:
    from tvm.s_tir import meta_schedule as ms

    timing = workloads.runner().settings  # xcomp's measurement settings, so both searches see equally noisy numbers
    target = backend.target()
    # its log handler writes each iteration's table to sys.stdout as it is when tuning starts: keep the table ours
    with tempfile.TemporaryDirectory(prefix="ms-") as work_dir, contextlib.redirect_stdout(sys.stderr):
        start = time.perf_counter()
        database = ms.tune_tir(
            func, target, work_dir, max_trials_global=trials, num_trials_per_iter=per_iter, seed=seed,
            builder=ms.builder.LocalBuilder(max_workers=backend.spec.cores, timeout_sec=60,
                                            f_build=build_without_tensor_intrin),
            runner=ms.runner.LocalRunner(timeout_sec=30, evaluator_config=metaschedule_timing(timing)),
            database="memory")
        wall_s = time.perf_counter() - start
        records = database.get_all_tuning_records()
        schedule = ms.tir_integration.compile_tir(database, func, target)
    if schedule is None:
        raise RuntimeError(f"MetaSchedule found no valid schedule in {trials} trials")
    ok = [float(np.median([float(s) for s in r.run_secs])) * 1e3 for r in records if r.run_secs]
    return {"func": schedule.mod["main"], "wall_s": wall_s, "measured": len(records),
            "tuner_best_ms": min(ok) if ok else float("inf"), "best": str(schedule.trace)}


def same_result(reference: Timer, other: Timer) -> bool:
    """Both kernels, run on the same deterministic inputs, leave the same buffers behind."""
    for timer in (reference, other):
        timer.executable.mod["main"](*timer.args)
    return all(np.allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-4) for a, b in zip(reference.args, other.args))


def run_workload(name: str, backend, budgets: list, seed: int, per_iter: int, rounds: int) -> list:
    task = workloads.task(name, backend)
    kernels = {"default": task.template.schedule(None)}
    tuned = {}
    for trials in budgets:
        results = {"xcomp": tune_xcomp(name, backend, trials, seed),
                   "metaschedule": tune_metaschedule(task.group.func, backend, trials, seed, per_iter)}
        for tuner, result in results.items():
            kernels[(tuner, trials)] = result.pop("func")
            tuned[(tuner, trials)] = result
            print(f"# {name} {tuner} {trials} trials: {result['wall_s']:.0f} s, best as it measured "
                  f"{result['tuner_best_ms']:.3f} ms", file=sys.stderr, flush=True)
    timers = {key: Timer(func, backend) for key, func in kernels.items()}
    for key, timer in timers.items():
        if key != "default" and not same_result(timers["default"], timer):
            raise RuntimeError(f"{name}: {key[0]}'s kernel after {key[1]} trials computes another result")
    medians = workloads.interleaved_medians(timers, rounds)
    rows = []
    for (tuner, trials), result in tuned.items():
        final_ms, default_ms = medians[(tuner, trials)], medians["default"]
        rows.append({"workload": name, "tuner": tuner, "trials": trials, "final_ms": final_ms,
                     "default_ms": default_ms, "speedup_vs_default": default_ms / final_ms, **result})
    return rows


def markdown(rows: list) -> str:
    head = ["workload", "trials", "tuner", "measured", "tuning wall s", "best as tuned ms", "final ms", "x default",
            "xcomp / MS time"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    final = {(r["workload"], r["trials"], r["tuner"]): r["final_ms"] for r in rows}
    for r in sorted(rows, key=lambda r: (r["workload"], r["trials"], r["tuner"] != "xcomp")):
        ratio = final[(r["workload"], r["trials"], "xcomp")] / final[(r["workload"], r["trials"], "metaschedule")]
        lines.append("| " + " | ".join([
            r["workload"], str(r["trials"]), r["tuner"], str(r["measured"]), f"{r['wall_s']:.0f}",
            f"{r['tuner_best_ms']:.3f}", f"{r['final_ms']:.3f}", f"{r['speedup_vs_default']:.2f}",
            f"{ratio:.2f}" if r["tuner"] == "xcomp" else ""]) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="default: all")
    parser.add_argument("--trials", type=int, nargs="+", default=[64, 256], help="trial budgets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ms-per-iter", type=int, default=16, help="MetaSchedule's num_trials_per_iter")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds of the final kernels")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    names, backend = workloads.setup(parser, args.workloads)
    rows = []
    for name in names:
        rows += run_workload(name, backend, args.trials, args.seed, args.ms_per_iter, args.rounds)
    print(f"# {backend.spec.name}; target {backend.target()}; seed {args.seed}; MetaSchedule {args.ms_per_iter} "
          f"trials per iteration; final ms = median of {args.rounds} interleaved rounds")
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"spec": backend.spec.name, "target": str(backend.target()), "seed": args.seed,
                       "ms_per_iter": args.ms_per_iter, "rounds": args.rounds, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
