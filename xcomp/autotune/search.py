"""Proposing candidates for one task: random samples and mutations of the best, ranked by the cost model,
with epsilon-greedy exploration."""

from __future__ import annotations

import json
import random

import numpy as np

from xcomp.autotune.db import canonical_knobs


def mutate(knobs: dict, space: dict, rng: random.Random) -> dict:
    """Change one or two knobs to another value of their list (neighbours are more likely)."""
    child = dict(knobs)
    names = [n for n, values in space.items() if len(values) > 1]
    if not names:
        return child
    for name in rng.sample(names, k=min(len(names), rng.choice((1, 1, 2)))):
        values = space[name]
        try:
            i = values.index(child.get(name))
            j = min(len(values) - 1, max(0, i + rng.choice((-2, -1, 1, 2)))) if rng.random() < 0.7 else \
                rng.randrange(len(values))
        except ValueError:
            j = rng.randrange(len(values))
        child[name] = values[j]
    return child


def crossover(a: dict, b: dict, rng: random.Random) -> dict:
    return {name: (a if rng.random() < 0.5 else b)[name] for name in a}


def propose(template, measured: dict, count: int, rng: random.Random, score=None, epsilon: float = 0.25,
            pool_size: int = 256) -> list:
    """Up to `count` new (unmeasured, valid) configs.

    measured: {canonical knobs: median ms (inf if failed)}; score: configs -> predicted goodness (higher is
    better), or None before the cost model is trained.
    """
    space = template.knob_space()
    ranked = sorted(((ms, k) for k, ms in measured.items() if np.isfinite(ms)), key=lambda t: t[0])
    elites = [json.loads(k) for _, k in ranked[:8]]
    pool, seen = [], set(measured)

    def add(knobs):
        key = canonical_knobs(knobs)
        if key not in seen and template.valid(knobs):
            seen.add(key)
            pool.append(knobs)

    attempts = 0
    while len(pool) < pool_size and attempts < pool_size * 4:
        attempts += 1
        r = rng.random()
        if elites and r < 0.5:
            add(mutate(rng.choice(elites), space, rng))
        elif len(elites) >= 2 and r < 0.6:
            a, b = rng.sample(elites, 2)
            add(crossover(a, b, rng))
        else:
            add(template.sample(rng))
    if not pool:
        return []
    if score is None:
        rng.shuffle(pool)
        return pool[:count]
    explore = int(round(count * epsilon))
    order = np.argsort(-np.asarray(score(pool)), kind="stable")
    chosen = [pool[i] for i in order[: count - explore]]
    rest = [pool[i] for i in order[count - explore:]]
    chosen += rng.sample(rest, k=min(explore, len(rest)))
    return chosen
