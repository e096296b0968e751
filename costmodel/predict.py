"""Compiling well with no measurements: each group's config predicted fastest by the cost model, where held-out
evidence says such picks beat the template default on this kind of hardware, and the default elsewhere.

The evidence ships beside the model (`cpu.confidence.json` beside `cpu.json`): per hardware class and per group
template, how the picks of models that never saw a group's records compared with its default, measured
(`xcomp.autotune.pretrain` writes it; the rule is `judge`, the reasons are in
docs/decisions/zero-measurement-compile.md). A hardware class without evidence gets no predictions.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
import zlib

import numpy as np

from .features import FEATURES_VERSION

# A template's picks are trusted on a hardware class when, over at least `min_groups` held-out groups, they were
# `min_geomean_gain` faster than the default on geometric mean and none was more than 1 - `min_worst_gain`
# slower. Fixed before the first held-out evaluation was seen; not fitted to it. And the picks' gains must come from
# timings side by side (xcomp/autotune/retime.py), added once re-timing showed how little the records' gains say.
RULE = {"min_groups": 4, "min_geomean_gain": 1.02, "min_worst_gain": 0.97, "timed_side_by_side": True}
# Candidates ranked per group at compile time: featurizing one costs about 20-100 ms (a Winograd conv more).
POOL = 24


def hardware_class(spec) -> str:
    """The hardware that confidence is earned on: same kind, microarchitecture and core count (a pick that wins
    on 2 cores of one CPU says little about 64 cores or another core's caches)."""
    return f"{spec.kind}:{spec.arch}:{spec.cores}c"


def template_key(template, kind: str) -> str:
    """What a confidence entry is about: a template class serving one group kind (the generic template schedules
    pools, reductions and elementwise groups, whose best configs differ), in one regime of its groups where it has
    them (Template.regime: picks that win on classifier rows say nothing about a decoder's GEMMs)."""
    return f"{kind}:{type(template).__name__}" + (f":{template.regime}" if template.regime else "")


def confidence_path(model_path) -> str:
    return os.path.splitext(os.fspath(model_path))[0] + ".confidence.json"


def file_sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def pick_gain(scores, latencies_ms, default_index: int) -> float:
    """Default latency / latency of the highest-scored config (0 where it failed): what a zero-measurement pick
    among these configs would have gained (1.0 where the default scores highest)."""
    chosen = int(np.argmax(scores))
    if chosen == default_index:
        return 1.0
    latency = float(latencies_ms[chosen])
    return float(latencies_ms[default_index]) / latency if math.isfinite(latency) and latency > 0 else 0.0


def judge(gains, rule=None, side_by_side: bool = True) -> dict:
    """Held-out picks' gains over the default (one per group) -> the confidence entry of their template;
    `side_by_side`: every pick's gain was timed beside its default, not read from tuning records."""
    rule = rule or RULE
    gains = [float(g) for g in gains]
    positive = [g for g in gains if g > 0]
    geomean = float(np.exp(np.mean(np.log(positive)))) if positive and len(positive) == len(gains) else 0.0
    worst = min(gains) if gains else 0.0
    return {"groups": len(gains), "wins": sum(g > 1.0 for g in gains), "losses": sum(g < 1.0 for g in gains),
            "geomean_gain": round(geomean, 4), "worst_gain": round(worst, 4),
            "side_by_side": side_by_side,
            "confident": bool(len(gains) >= rule["min_groups"] and geomean >= rule["min_geomean_gain"]
                              and worst >= rule["min_worst_gain"]
                              and (side_by_side or not rule.get("timed_side_by_side")))}


def candidates(template, limit: int = POOL, seed: str = "") -> list:
    """Configs to rank for a group, the default first: every one-knob change of the default (the configs the
    evidence has most of, and the least far from a known-safe point), then seeded random samples, `limit` in all;
    the same list on every compile of the same group."""
    from xcomp.autotune.db import canonical_knobs

    default = template.default_knobs()
    pool, seen = [default], {canonical_knobs(default)}

    def add(knobs):
        key = canonical_knobs(knobs)
        if key not in seen and len(pool) < limit and template.valid(knobs):
            seen.add(key)
            pool.append(knobs)

    rng = random.Random(zlib.crc32(seed.encode()))
    neighbours = [{**default, name: value} for name, values in template.knob_space().items() for value in values
                  if value != default.get(name)]
    rng.shuffle(neighbours)  # a knob with many values must not take the whole pool
    for knobs in neighbours:
        add(knobs)
    for _ in range(limit * 4):
        if len(pool) >= limit:
            break
        add(template.sample(rng))
    return pool


class Predictor:
    """The cost model and its confidence table for one backend's hardware; `pick` is what compile asks."""

    def __init__(self, model, confidence: dict, spec, target, limit: int = POOL):
        self.model = model
        self.spec = spec
        self.target = target
        self.limit = limit
        entry = confidence.get("hardware", {}).get(hardware_class(spec), {})
        self.table = entry.get("templates", {})
        self._features = None
        self.seconds = 0.0  # spent in pick: what predicting adds to a compile

    @property
    def any_confident(self) -> bool:
        return any(row.get("confident") for row in self.table.values())

    def confident(self, template, kind: str) -> bool:
        return bool(self.table.get(template_key(template, kind), {}).get("confident"))

    def pick(self, template, kind: str, seed: str = ""):
        """Knobs of the config predicted fastest among `candidates`, or None: no confidence for this template
        here, or the default predicted fastest (a config that fails to schedule is never picked)."""
        if not self.confident(template, kind) or not template.knob_space():
            return None
        start = time.perf_counter()
        try:
            return self._pick(template, kind, seed)
        finally:
            self.seconds += time.perf_counter() - start

    def _pick(self, template, kind, seed):
        if self._features is None:
            from .features import FeatureExtractor

            self._features = FeatureExtractor(self.spec, self.target)
        pool, rows = [], []
        for knobs in candidates(template, self.limit, seed):
            try:
                rows.append(self._features.vector(template.schedule(knobs), knobs, kind))
            except Exception:  # a config this template cannot apply to the group: not a candidate
                continue
            pool.append(knobs)
        if len(pool) < 2 or pool[0] != template.default_knobs():
            return None
        best = int(np.argmax(self.model.predict(np.stack(rows))))
        return None if best == 0 else pool[best]


def load_predictor(spec, target, model_path=None):
    """The Predictor of the model at `model_path` (default: the shipped one) with the confidence file beside it,
    or None where there is nothing to predict with here: no model of this features version, no confidence file,
    one written for another model file, or no template trusted on this hardware class."""
    from .model import PRETRAINED_PATH, CostModel

    model_path = os.fspath(model_path or PRETRAINED_PATH)
    try:
        with open(confidence_path(model_path)) as f:
            confidence = json.load(f)
    except (OSError, ValueError):
        return None
    if confidence.get("features_version") != FEATURES_VERSION:
        return None
    try:
        if confidence.get("model_sha256") != file_sha256(model_path):
            return None  # evidence about another model
        predictor = Predictor(None, confidence, spec, target)
        if not predictor.any_confident:
            return None
        predictor.model = CostModel.load(model_path)
    except (OSError, ValueError):  # missing, stale, or unreadable (XGBoostError is a ValueError)
        return None
    return predictor


__all__ = ["RULE", "POOL", "Predictor", "load_predictor", "hardware_class", "template_key", "confidence_path",
           "judge", "pick_gain", "candidates"]
