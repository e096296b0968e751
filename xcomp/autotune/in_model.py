"""The tuner's last step: a group's tuned config replaces its default only where it is faster inside the model.

The search times a group alone (measure.py), its weights where the timing leaves them. Inside the model they
come from memory, after the rest of the model ran, and configs that tie alone do not tie there; a config fastest
alone can even lose to the default there. The measurements behind this step are in
docs/decisions/in-model-step.md.

So after the search the model is compiled once per rank, build 0 giving every group its default config and
build i its i-th fastest other config, and the builds run in turns, one run each at a time (rounds x runs),
each group's calls timed inside them (runtime/group_times.py). A tuned config is chosen only where
it was faster than the default in every round (choose); elsewhere the default stays. The pick's times go to the
database as a record of their own timing (Timing.IN_MODEL), replacing the group's earlier one; being the
group's newest record, it is what `compile --db` uses, until a later search measures the group again.

Build i sets every group to its i-th config, so a pick was timed beside its neighbours' i-th configs, not beside
their picks; where a config's speed depends on where its input lies (a serial pool after a parallel conv), a pick
can lose among the others. So the picks are then built together and timed against the default build
(check_together): they are kept only as a set that beat the default build in every round, the picks that lost
there going back to their default.
"""

from __future__ import annotations

import json
import math

import numpy as np

from xcomp.autotune.db import Record, canonical_knobs
from xcomp.progress import bar
from xcomp.timing import Timing

TOP = 4  # configs per group timed inside the model, its default included (the model is built once per rank)
ROUNDS = 4  # rounds the choice compares (choose); in each the builds alternate, RUNS runs of each
RUNS = 10
CHECKS = 4  # builds of the picks together, at most (check_together)


def candidates(tasks, top: int) -> dict:
    """{group key: canonical knobs of its default, then of its `top` - 1 fastest other configs measured alone},
    for groups whose default and at least one other config were measured successfully."""
    chosen = {}
    for task in tasks:
        default = canonical_knobs(task.template.default_knobs())
        if task.waiting or not math.isfinite(task.measured.get(default, math.inf)):
            continue
        others = [knobs for knobs in task.fastest(top) if knobs != default][:top - 1]
        if others:
            chosen[task.group.key] = [default, *others]
    return chosen


def build_ranks(build, configs: dict, progress: bool = True) -> list:
    """The model built once per rank of `configs` ({group key: [canonical knobs, ...]}): build i gives each group
    its i-th config (its last where it has fewer), so build 0 is the default build. build({group key: knobs}) ->
    xcomp.Module."""
    ranks = max(len(knobs) for knobs in configs.values())
    steps = bar(total=ranks, desc="in the model", unit="build", enabled=progress, leave=False)
    modules = []
    for rank in range(ranks):
        modules.append(build({key: json.loads(_at_rank(knobs, rank)) for key, knobs in configs.items()}))
        steps.update()
    steps.close()
    return modules


def _at_rank(knobs: list, rank: int) -> str:
    return knobs[min(rank, len(knobs) - 1)]


def time_configs_in_model(modules, configs: dict, rounds: int = ROUNDS, runs: int = RUNS, progress: bool = True,
                          desc: str = "in the model") -> tuple:
    """Each group's configs (`configs`: {group key: [canonical knobs, ...]}) timed inside `modules`, module i
    running each group's i-th config (its last where it has fewer), the modules alternating run by run. Returns
    ({group key: {canonical knobs: [[ms per call in round 0, ...], [... round 1], ...]}}, [[each round's sum of
    kernel times per run (median per call x calls per run, over every kernel)] per module])."""
    from xcomp.runtime.group_times import interleaved_in_model_times

    times = {key: {knobs: [[] for _ in range(rounds)] for knobs in knob_list} for key, knob_list in configs.items()}
    totals = [[] for _ in modules]
    for round_ in bar(range(rounds), desc=desc, unit="round", enabled=progress, leave=False):
        for rank, (module, calls_by_name) in enumerate(zip(modules, interleaved_in_model_times(modules, runs))):
            totals[rank].append(sum(float(np.median(calls)) * len(calls) / runs for calls in calls_by_name.values()))
            keys = {group.name: group.key for group in module.groups}
            for name, calls in calls_by_name.items():
                key = keys.get(name)
                if key in configs:
                    times[key][_at_rank(configs[key], rank)][round_].extend(calls)
    return times, totals


def check_together(build, default_module, defaults: dict, picks: dict, rounds: int = ROUNDS, runs: int = RUNS,
                   progress: bool = True) -> tuple:
    """The picks that hold together: `picks` ({group key: canonical knobs}, those other than the group's default
    in `defaults`) built into one model and timed against `default_module` (every group at its default) in
    `rounds` rounds of `runs` runs, alternating. A set holds where the model's sum of group times (median per
    call x calls, over every group) beats the default build's in every round. Where it holds, picks slower than
    their default in every round go back to it; where it does not, so do picks slower in half the rounds or more;
    the rest are built and timed again, up to CHECKS builds; a losing set with no pick to blame (one that slows a
    neighbour) ends the checks. The last set that held is kept; where none held, the defaults stay.
    Returns (kept: {group key: canonical knobs}, {group key: [[ms per call] per round] of its kept pick, timed
    together}, checks: [{picks, held, slower: [group keys sent back after it], model_default_ms, model_picked_ms,
    rounds_won}])."""
    trying = {key: knobs for key, knobs in picks.items() if knobs != defaults[key]}
    kept, kept_times, checks = {}, {}, []
    builds = bar(total=CHECKS, desc="together", unit="build", enabled=progress and bool(trying), leave=False)
    while trying and len(checks) < CHECKS:
        module = build({key: json.loads(trying.get(key, knobs)) for key, knobs in defaults.items()})
        builds.update()
        times, totals = time_configs_in_model([default_module, module],
                                              {key: [defaults[key], knobs] for key, knobs in trying.items()},
                                              rounds, runs, progress, desc="together")
        won = sum(picked < default for default, picked in zip(*totals))
        lost = {key: rounds - rounds_won(times[key], defaults[key])[knobs] for key, knobs in trying.items()}
        held = won == rounds
        if held:
            kept, kept_times = dict(trying), {key: times[key][knobs] for key, knobs in trying.items()}
        slower = [key for key, rounds_lost in lost.items() if rounds_lost == rounds or
                  (not held and 2 * rounds_lost >= rounds)]
        checks.append({"picks": len(trying), "held": held, "slower": slower, "rounds_won": won,
                       "model_default_ms": float(np.median(totals[0])), "model_picked_ms": float(np.median(totals[1]))})
        if not slower:
            break
        trying = {key: knobs for key, knobs in trying.items() if key not in slower}
    builds.close()
    return kept, kept_times, checks


def refine(model, backend, db, tasks, top: int = TOP, rounds: int = ROUNDS, runs: int = RUNS,
           input_shapes=None, input_values=None, progress: bool = True) -> dict | None:
    """Time each task's default and `top` - 1 fastest other configs inside the model, pick one per group (choose),
    keep the picks that hold together (check_together) and store the kept configs' times (db.replace_picks);
    returns {ranks, rounds, runs, groups: [{group, key, count, default, picked, fastest_alone, in_model_ms:
    {knobs: median}, rounds_won: {knobs: rounds faster than the default}, slower_together: whether its pick went
    back to the default in check_together}], together: check_together's checks,
    model_default_ms, model_fastest_alone_ms, model_picked_ms} (sums over the refined groups of median x count
    in the rank builds; fastest_alone is the fastest alone of the configs other than the default), or None where
    no group has a tuned config to set against its default."""
    from xcomp.costmodel import FEATURES_VERSION
    from xcomp.pipeline import compile_model

    configs = candidates(tasks, top)
    if not configs:
        return None

    def build(group_knobs):
        return compile_model(model, backend.target_string, input_shapes, progress=False, input_values=input_values,
                             group_knobs=group_knobs, costmodel=False)  # the others at default, as measured

    modules = build_ranks(build, configs, progress)
    times, _ = time_configs_in_model(modules, configs, rounds, runs, progress)
    default_module, ranks = modules[0], len(modules)
    del modules  # the other builds' memory
    timed = {key for key, by_knobs in times.items() if all(by_knobs[configs[key][0]])}  # not timed: a VM builtin
    picks = {key: choose(times[key], configs[key][0]) for key in timed}
    defaults = {key: knobs[0] for key, knobs in configs.items()}
    kept, kept_times, checks = check_together(build, default_module, defaults, picks, rounds, runs, progress)
    target, fingerprint = backend.target_string, backend.spec.fingerprint()
    rows, stored = [], {}
    totals = {"model_default_ms": 0.0, "model_fastest_alone_ms": 0.0, "model_picked_ms": 0.0}
    for task in tasks:
        key = task.group.key
        if key not in timed:
            continue
        default, fastest_alone = configs[key][:2]
        picked = kept.get(key, default)
        medians = {knobs: float(np.median(np.concatenate(by_round))) for knobs, by_round in times[key].items()}
        calls = kept_times.get(key, times[key][default])
        stored[key] = [Record(key, task.group.kind, target, fingerprint, json.loads(picked),
                              [ms for round_calls in calls for ms in round_calls],
                              features_version=FEATURES_VERSION, timing=Timing.IN_MODEL)]
        rows.append({"group": task.group.name, "key": key, "count": task.count, "default": json.loads(default),
                     "picked": json.loads(picked), "fastest_alone": json.loads(fastest_alone),
                     "in_model_ms": medians, "rounds_won": rounds_won(times[key], default),
                     "slower_together": picks[key] != default and key not in kept})
        for total, knobs in (("model_default_ms", default), ("model_fastest_alone_ms", fastest_alone),
                             ("model_picked_ms", picked)):
            totals[total] += medians[knobs] * task.count
    db.replace_picks(target, fingerprint, stored)
    return {"ranks": ranks, "rounds": rounds, "runs": runs, "groups": rows, "together": checks, **totals}


def choose(by_round: dict, default: str) -> str:
    """The group's config inside the model, from {canonical knobs: [[ms per call] per round]}: of the configs
    faster than its default in every round, the one with the lowest median, else the default. A round times
    every build within seconds, so a drift of the machine's speed shifts the configs alike in it; a config that
    wins only overall may have won on the drift (docs/decisions/in-model-step.md)."""
    winners = {knobs: float(np.median(np.concatenate(by_round[knobs])))
               for knobs, wins in rounds_won(by_round, default).items() if wins == len(by_round[default])}
    return min(winners, key=winners.get) if winners else default


def rounds_won(by_round: dict, default: str) -> dict:
    """{canonical knobs: the rounds in which its median per call was below the default's} for every config of
    {canonical knobs: [[ms per call] per round]} but the default; a round without calls wins nothing."""
    reference = [np.median(calls) for calls in by_round[default]]
    return {knobs: sum(bool(len(calls)) and bool(np.median(calls) < ref) for calls, ref in zip(rounds, reference))
            for knobs, rounds in by_round.items() if knobs != default}


def kept_default(result: dict) -> list:
    """The refined groups that keep their default: no tuned config beat it in every round inside the model, or
    the build of the picks together did not keep its pick (check_together)."""
    return [row for row in result["groups"] if canonical_knobs(row["picked"]) == canonical_knobs(row["default"])]


def changed(result: dict) -> list:
    """The refined groups whose pick is a tuned config other than their fastest alone."""
    return [row for row in result["groups"]
            if canonical_knobs(row["picked"]) not in (canonical_knobs(row["fastest_alone"]),
                                                      canonical_knobs(row["default"]))]


__all__ = ["refine", "build_ranks", "time_configs_in_model", "check_together", "candidates", "choose", "rounds_won",
           "kept_default", "changed", "TOP"]
