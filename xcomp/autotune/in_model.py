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


def time_configs_in_model(build, configs: dict, rounds: int = ROUNDS, runs: int = RUNS,
                          progress: bool = True) -> dict:
    """{group key: {canonical knobs: [[ms per call in round 0, ...], [... round 1], ...]}}: each group's configs
    (`configs`: {group key: [canonical knobs, ...]}) timed inside the model. build({group key: knobs}) ->
    xcomp.Module; build i gives each group its i-th config (its last where it has fewer)."""
    from xcomp.runtime.group_times import interleaved_in_model_times

    ranks = max(len(knobs) for knobs in configs.values())

    def pick(key, rank):
        return configs[key][min(rank, len(configs[key]) - 1)]

    steps = bar(total=ranks + rounds, desc="in the model", unit="step", enabled=progress, leave=False)
    modules = []
    for rank in range(ranks):
        modules.append(build({key: json.loads(pick(key, rank)) for key in configs}))
        steps.update()
    times = {key: {knobs: [[] for _ in range(rounds)] for knobs in knob_list} for key, knob_list in configs.items()}
    for round_ in range(rounds):
        for rank, (module, calls_by_name) in enumerate(zip(modules, interleaved_in_model_times(modules, runs))):
            keys = {group.name: group.key for group in module.groups}
            for name, calls in calls_by_name.items():
                key = keys.get(name)
                if key in configs:
                    times[key][pick(key, rank)][round_].extend(calls)
        steps.update()
    steps.close()
    return times


def refine(model, backend, db, tasks, top: int = TOP, rounds: int = ROUNDS, runs: int = RUNS,
           input_shapes=None, input_values=None, progress: bool = True) -> dict | None:
    """Time each task's default and `top` - 1 fastest other configs inside the model, pick one per group (choose)
    and store the pick's times (db.replace_picks); returns {ranks, rounds, runs, groups: [{group, key, count,
    default, picked, fastest_alone, in_model_ms: {knobs: median}, rounds_won: {knobs: rounds faster than the
    default}}], model_default_ms, model_fastest_alone_ms,
    model_picked_ms} (sums over the refined groups of median x count; fastest_alone is the fastest alone of the
    configs other than the default), or None where no group has a tuned config to set against its default."""
    from xcomp.costmodel import FEATURES_VERSION
    from xcomp.pipeline import compile_model

    configs = candidates(tasks, top)
    if not configs:
        return None

    def build(group_knobs):
        return compile_model(model, backend.target_string, input_shapes, progress=False, input_values=input_values,
                             group_knobs=group_knobs, costmodel=False)  # the others at default, as measured

    times = time_configs_in_model(build, configs, rounds, runs, progress)
    target, fingerprint = backend.target_string, backend.spec.fingerprint()
    rows, stored = [], {}
    totals = {"model_default_ms": 0.0, "model_fastest_alone_ms": 0.0, "model_picked_ms": 0.0}
    for task in tasks:
        key = task.group.key
        default, fastest_alone = (configs[key][:2] if key in configs else (None, None))
        if default is None or not all(times[key][default]):
            continue  # not refined, or its calls were not timed (a builtin in the VM): nothing to choose by
        picked = choose(times[key], default)
        medians = {knobs: float(np.median(np.concatenate(by_round))) for knobs, by_round in times[key].items()}
        stored[key] = [Record(key, task.group.kind, target, fingerprint, json.loads(picked),
                              [ms for calls in times[key][picked] for ms in calls],
                              features_version=FEATURES_VERSION, timing=Timing.IN_MODEL)]
        rows.append({"group": task.group.name, "key": key, "count": task.count, "default": json.loads(default),
                     "picked": json.loads(picked), "fastest_alone": json.loads(fastest_alone),
                     "in_model_ms": medians, "rounds_won": rounds_won(times[key], default)})
        for total, knobs in (("model_default_ms", default), ("model_fastest_alone_ms", fastest_alone),
                             ("model_picked_ms", picked)):
            totals[total] += medians[knobs] * task.count
    db.replace_picks(target, fingerprint, stored)
    return {"ranks": max(len(k) for k in configs.values()), "rounds": rounds, "runs": runs, "groups": rows,
            **totals}


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
    """The refined groups that keep their default: no tuned config beat it in every round inside the model."""
    return [row for row in result["groups"] if canonical_knobs(row["picked"]) == canonical_knobs(row["default"])]


def changed(result: dict) -> list:
    """The refined groups whose pick is a tuned config other than their fastest alone."""
    return [row for row in result["groups"]
            if canonical_knobs(row["picked"]) not in (canonical_knobs(row["fastest_alone"]),
                                                      canonical_knobs(row["default"]))]


__all__ = ["refine", "time_configs_in_model", "candidates", "choose", "rounds_won", "kept_default", "changed", "TOP"]
