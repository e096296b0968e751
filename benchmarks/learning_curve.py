"""The tuner's learning curve: best latency vs trials, cost-model-guided search against unguided search.

Usage: python benchmarks/learning_curve.py [--trials 64] [--seeds 0 1] [--batch-size 8] [--rounds 5]
           [--plot learning_curve.png] [--json out.json] [WORKLOAD ...]

WORKLOAD is one of gemm, conv3x3, dwconv3x3 (default: all; see benchmarks/workloads.py). For every workload and
seed, two xcomp Tuners run with the same budget and seed, each on a fresh database, one batch each in turn:
guided (candidates ranked by the XGBoost cost model, which trains once 16 records exist and retrains after every
batch; until then both runs propose the same configs, unless --pretrained ranks them with the shipped model) and
unguided (`Tuner(guided=False)`: the same proposals,
random samples plus mutations and crossovers of the best measured, taken in random order). Both start by
measuring the template's default config (trial 0, the baseline).

The curve: after each trial, the latency of the config the tuner then held for best. Those configs (of both runs)
are re-timed together at the end in `--rounds` interleaved rounds, because on a shared machine one quiet moment
while tuning can record a best that no config reaches again; the latencies as measured while tuning are kept too
("as tuned", dotted in the plot). With several seeds the curves are averaged per trial. Output: a markdown table
(best ms at a few trial counts, how many trials guided search needed to reach unguided search's final best,
tuning wall time of each run's own steps), a PNG with one subplot per workload, and `--json` with every curve.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time

import numpy as np

import workloads
from gemm import Timer

MODES = {"guided": True, "random": False}


@dataclasses.dataclass
class Racer:
    """One side of a race: its tuner, database and task, what it has spent so far."""

    workload: str
    mode: str
    tuner: object
    db: object
    task: object
    spent: int = 0
    wall_s: float = 0.0
    done: bool = False

    def timed(self, method, *args):
        start = time.perf_counter()
        result = method(*args)
        self.wall_s += time.perf_counter() - start
        return result

    def held_best(self) -> list:
        """The config this tuner held for best after each trial (index 0: the default), from its database."""
        best, best_ms, held = None, math.inf, []
        for record in self.db.records():  # in measurement order
            if record.ok and record.median_ms < best_ms:
                best, best_ms = record.knobs, record.median_ms
            held.append(best)
        return held

    def run_dict(self, seed: int, held: list, retimed: dict) -> dict:
        from xcomp.autotune.db import canonical_knobs

        task = self.task
        return {"workload": self.workload, "seed": seed, "mode": self.mode, "space_size": task.template.space_size(),
                "trials": self.spent, "exhausted": task.exhausted, "best_knobs": held[-1],
                "curve": [retimed[canonical_knobs(knobs)] for knobs in held], "tuning_curve": task.curve,
                "wall_s": self.wall_s}


def retime(template, backend, configs: list, rounds: int) -> dict:
    """{canonical knobs: median ms} of each distinct config, built once and timed in interleaved rounds."""
    from xcomp.autotune.db import canonical_knobs

    timers = {}
    for knobs in configs:
        key = canonical_knobs(knobs)
        if key not in timers:
            timers[key] = Timer(template.schedule(knobs), backend)
    return workloads.interleaved_medians(timers, rounds)


def race(name: str, backend, trials: int, seed: int, batch_size: int, rounds: int, pretrained: bool) -> list:
    """Guided and unguided tuning of the workload, each on a fresh database, batch for batch in alternation.

    One run dict per mode whose curve is, after each trial, the latency of the config the tuner held for best
    then, re-timed at the end with every such config of both runs in interleaved rounds: on a shared machine a
    lucky quiet moment during tuning would otherwise set a best no config really reaches
    (docs/decisions/bench-timing.md)."""
    from xcomp.autotune.tuner import Tuner
    from xcomp.autotune.db import TuningDB

    with tempfile.TemporaryDirectory(prefix="xcomp-curve-") as tmp:
        racers = []
        for mode, guided in MODES.items():
            db = TuningDB(os.path.join(tmp, f"{mode}.sqlite"))
            tuner = Tuner(backend, db, runner=workloads.runner(), seed=seed, batch_size=batch_size,
                          progress=False, guided=guided, pretrained=pretrained)
            racers.append(Racer(name, mode, tuner, db, workloads.task(name, backend)))
        try:
            for racer in racers:
                racer.timed(racer.tuner.start, [racer.task])
            while not all(r.done for r in racers):
                for racer in (r for r in racers if not r.done):
                    _, measured = racer.timed(racer.tuner.step, [racer.task], min(batch_size, trials - racer.spent))
                    racer.spent += measured
                    racer.done = measured == 0 or racer.spent >= trials
            held = {racer.mode: racer.held_best() for racer in racers}
        finally:
            for racer in racers:
                racer.tuner.close()
                racer.db.close()
    retimed = retime(racers[0].task.template, backend, [k for knobs in held.values() for k in knobs], rounds)
    return [racer.run_dict(seed, held[racer.mode], retimed) for racer in racers]


def mean_curve(runs: list, trials: int, key: str = "curve") -> np.ndarray:
    """Per-trial mean of best-so-far over runs; a run that exhausted the space stays at its best."""
    padded = [run[key] + [run[key][-1]] * (trials + 1 - len(run[key])) for run in runs]
    return np.mean(np.asarray(padded, np.float64), axis=0)


def checkpoints(trials: int) -> list:
    return [n for n in (8, 16, 32, 64, 128, 256) if n < trials] + [trials]


def summarize(runs: list, trials: int) -> list:
    """One row per workload: default ms, each mode's mean curve at the checkpoints, trials to match."""
    rows = []
    for name in dict.fromkeys(r["workload"] for r in runs):
        mine = [r for r in runs if r["workload"] == name]
        curves = {mode: mean_curve([r for r in mine if r["mode"] == mode], trials) for mode in MODES}
        random_final = curves["random"][-1]
        # index 0 is the default config, the same for both: a match there means random search never beat it
        reached = np.flatnonzero(curves["guided"] <= random_final) if random_final < curves["random"][0] else []
        rows.append({
            "workload": name, "space_size": mine[0]["space_size"],
            "default_ms": float(np.mean([r["curve"][0] for r in mine])),
            "at": {mode: {n: float(curve[n]) for n in checkpoints(trials)} for mode, curve in curves.items()},
            "as_tuned_ms": {mode: float(mean_curve([r for r in mine if r["mode"] == mode], trials, "tuning_curve")[-1])
                            for mode in MODES},
            "wall_s": {mode: float(np.mean([r["wall_s"] for r in mine if r["mode"] == mode])) for mode in MODES},
            "measured": {mode: max(r["trials"] for r in mine if r["mode"] == mode) for mode in MODES},
            "guided_trials_to_random_final": int(reached[0]) if len(reached) else None,
        })
    return rows


def markdown(rows: list, trials: int) -> str:
    points = checkpoints(trials)
    head = ["workload", "space", "default ms", "search"] + [f"@{n}" for n in points] + \
        ["x default", "as tuned", "measured", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        for mode in MODES:
            at = row["at"][mode]
            cells = [row["workload"], str(row["space_size"]), f"{row['default_ms']:.3f}", mode] + \
                [f"{at[n]:.3f}" for n in points] + \
                [f"{row['default_ms'] / at[trials]:.2f}", f"{row['as_tuned_ms'][mode]:.3f}", str(row["measured"][mode]),
                 f"{row['wall_s'][mode]:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for row in rows:
        n, random_final = row["guided_trials_to_random_final"], row["at"]["random"][trials]
        if random_final >= row["default_ms"]:
            lines.append(f"{row['workload']}: random search's final pick is no faster than the default config")
        else:
            lines.append(f"{row['workload']}: guided search reached random search's final pick "
                         + (f"after {n} of {trials} trials" if n is not None else "never"))
    return "\n".join(lines)


def plot(runs: list, trials: int, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["workload"] for r in runs))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    x = np.arange(trials + 1)
    for ax, name in zip(axes[0], names):
        mine = [r for r in runs if r["workload"] == name]
        for mode, color in zip(MODES, ("tab:blue", "tab:orange")):
            runs_of_mode = [r for r in mine if r["mode"] == mode]
            curves = np.stack([mean_curve([r], trials) for r in runs_of_mode])
            ax.plot(x, curves.mean(axis=0), color=color, label=f"{mode} (re-timed)")
            if len(curves) > 1:  # the spread over seeds
                ax.fill_between(x, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.2)
            ax.plot(x, mean_curve(runs_of_mode, trials, "tuning_curve"), color=color, linestyle=":", linewidth=1,
                    label=f"{mode} (as measured while tuning)")
        ax.axhline(np.mean([r["curve"][0] for r in mine]), color="gray", linestyle="--", label="default config")
        ax.set_title(workloads.WORKLOADS[name][0], fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best latency (ms)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="default: all")
    parser.add_argument("--trials", type=int, default=64, help="measured configs per run, after the default")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds re-timing the held-best configs")
    parser.add_argument("--plot", default="learning_curve.png", help="PNG path")
    parser.add_argument("--json", help="also write every run and the table here")
    parser.add_argument("--pretrained", action="store_true",
                        help="the guided run also starts from the shipped cost model (costmodel/pretrained/): what a "
                             "new user gets; off by default, so the curve shows what the model learns online")
    args = parser.parse_args()
    names, backend = workloads.setup(parser, args.workloads)
    runs = []
    for name in names:
        for seed in args.seeds:
            for run in race(name, backend, args.trials, seed, args.batch_size, args.rounds, args.pretrained):
                runs.append(run)
                print(f"# {name} seed {seed} {run['mode']}: default {run['curve'][0]:.3f} ms -> best "
                      f"{run['curve'][-1]:.3f} ms (as tuned {run['tuning_curve'][-1]:.3f}) in {run['trials']} trials, "
                      f"{run['wall_s']:.0f} s", file=sys.stderr, flush=True)
    rows = summarize(runs, args.trials)
    print(f"# {backend.spec.name}; {args.trials} trials per run, batch {args.batch_size}, seeds {args.seeds}; "
          f"ms = median of {args.rounds} interleaved re-timing rounds")
    print(markdown(rows, args.trials))
    plot(runs, args.trials, args.plot)
    print(f"plot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"spec": backend.spec.name, "target": str(backend.target()), "trials": args.trials,
                       "seeds": args.seeds, "batch_size": args.batch_size, "rows": rows, "runs": runs}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
