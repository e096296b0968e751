"""`xcomp tune`: search every unique operator group's knob space, guided by the cost model.

Time goes where the model spends its time: each round tunes the task with the largest remaining share of model
latency (best latency x occurrences), as Ansor's task scheduler does, with a round-robin warm-up so every task
gets measured. Every measured batch is committed to the database before the next one starts; a resumed run
skips what is already there; Ctrl-C stops after keeping everything measured. At the end each group's three
fastest configs and its default are measured once more, until the fastest has been measured twice
(Tuner.confirm), so a lucky first measurement cannot pick the config; then, measuring on this machine,
tune_model times each group's default and fastest configs inside the model, and a tuned config replaces the
default only where it was faster there in every round (in_model.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import sys
import time

import numpy as np
from xcomp.progress import bar
from xcomp.timing import PICKS, Timing

from xcomp.costmodel import FEATURES_VERSION, CostModel, FeatureExtractor, pretrained_model
from xcomp.autotune.db import TuningDB, canonical_knobs
from xcomp.errors import UserError, describe
from xcomp.autotune.measure import (PAIRED_ROUNDS, LocalBuilder, LocalRunner, MeasurementDeferred, Workload,
                                    func_params, side_by_side_pick)
from xcomp.autotune import in_model
from xcomp.autotune.search import propose


@dataclasses.dataclass
class Task:
    group: object  # partition.OpGroup (representative)
    count: int  # occurrences in the model
    template: object
    func_json: str
    default_ms: float = math.inf
    best_ms: float = math.inf
    best_knobs: dict | None = None
    reference: str | None = None  # artifact of the default schedule: the numerics every candidate must match
    trials: int = 0
    exhausted: bool = False
    waiting: bool = False  # its last batch went to a deferred runner: results come in a later run
    measured: dict = dataclasses.field(default_factory=dict)  # canonical knobs -> median ms (inf: failed)
    kept_why: str = ""  # why the side-by-side rounds kept the default (where they made the pick)
    curve: list = dataclasses.field(default_factory=list)  # best ms after each trial of this run

    def fastest(self, count: int) -> list:
        """Canonical knobs of the task's `count` fastest successful configs."""
        return [knobs for ms, knobs in sorted((ms, knobs) for knobs, ms in self.measured.items()
                                              if math.isfinite(ms))[:count]]

    def priority(self, window: int = 16) -> float:
        """Expected model-latency gain of this task's next trial, as Ansor's task scheduler estimates it: half
        the recent improvement rate (backward), half an optimistic share of what remains (forward: best time over
        trials so far), both times the group's count. A task that stopped improving yields to the others."""
        if not math.isfinite(self.best_ms):
            return math.inf
        past = [ms for ms in self.curve[-window - 1:-window] or self.curve[:1] if math.isfinite(ms)]
        backward = (past[0] - self.best_ms) / window if past else 0.0
        forward = self.best_ms / max(1, self.trials)
        return self.count * (0.5 * backward + 0.5 * forward)


def model_tasks(model, backend, input_shapes, input_values=None):
    """(one tuning Task per unique operator group of `model` for `backend`, [unique groups left untuned]).

    A group with a symbolic dim is left untuned: its generic schedule serves every size, and a measured time
    would hold for one size only. Tuning a model compiled with --input-shape tunes every group."""
    import tvm

    from xcomp import schedules
    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition, unique_groups

    imported = load_onnx(model, input_shapes, input_values)
    _, groups = partition(imported.mod, backend.spec)
    tasks, symbolic = [], []
    for rep, count in unique_groups(groups).values():
        if rep.symbols:
            symbolic.append(rep)
            continue
        template = schedules.get_template(rep.func, backend.schedule_context())
        tasks.append(Task(rep, count, template, tvm.ir.save_json(rep.func)))
    return tasks, symbolic


def _unguarded_script_hint(error: str) -> str:
    """Builds run in spawned processes, which import the caller's __main__ script again: a script that calls
    xcomp.tune at top level re-runs it there, Python refuses, and the pool breaks before any build."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if "BrokenProcessPool" not in error or not script or os.path.basename(script) in ("xcomp", "pytest",
                                                                                      "__main__.py"):
        return ""  # xcomp's CLI, pytest and `python -m` guard their entry points
    return (f" -- if {os.path.basename(script)} calls xcomp.tune at its top level, put the call under "
            "`if __name__ == \"__main__\":` (tuning spawns worker processes, and each imports the script again)")


def weights_stay_cached(tasks, spec) -> bool:
    """Do the model's weights stay in the last-level cache from one inference to the next? What its groups read
    besides their data inputs (every buffer of a group but its first and last: the weights, and residual inputs)
    times their counts, against the spec's last-level cache. Then a group inside the model finds its weights
    there, not in memory, and timing it with only the private caches evicted ranks configs closest to how they
    run in the model (docs/decisions/tuning-timing.md)."""
    from xcomp.autotune.measure import func_params

    last_level = spec.cache_bytes[2]
    total = sum(task.count * sum(int(np.prod(shape)) * np.dtype(dtype).itemsize
                                 for shape, dtype in func_params(task.group.func)[1:-1]) for task in tasks)
    return bool(last_level) and total <= last_level


def _side_by_side_why(records) -> str:
    """Why a group's side-by-side records (measure.side_by_side_pick's; the default its pick) keep the default,
    where a tuned config was faster alone: how the loser lost, or that the rounds have not run yet."""
    lost = [r.error for r in records if r.error]
    if lost:
        return lost[0].replace("lost to the default side by side", "the fastest alone lost to it side by side")
    return "the side-by-side rounds against the fastest alone did not run yet" if records else ""


class Tuner:
    """guided=False never builds nor consults the cost model: the same proposals (random samples, mutations and
    crossovers of the best measured) in random order, the baseline that shows what the model is worth.

    pretrained: until the model has trained on this run's own records (and the database's), rank with the model
    that ships with xcomp, so the first batches are not random."""

    def __init__(self, backend, db: TuningDB, seed: int = 0, batch_size: int = 8, runner=None, builder=None,
                 progress: bool = True, guided: bool = True, pretrained: bool = True):
        self.backend = backend
        self.guided = guided
        self.prior = pretrained_model() if guided and pretrained else None
        self.db = db
        self.rng = random.Random(seed)
        self.batch_size = batch_size
        self.builder = builder or LocalBuilder()
        self.runner = runner or LocalRunner()
        self.progress = progress
        self.cost_model = CostModel(seed=seed) if guided else None
        self.features = FeatureExtractor(backend.spec, backend.target()) if guided else None
        self._train_x, self._train_y, self._train_g = [], [], []
        self.history = []  # (trial number, task key, median ms) in measurement order
        self.evict_private_bytes = 0  # Workload.evict_private_bytes, set by start() for the tasks' model
        self.interrupted = False  # tune() stopped by Ctrl-C

    # -- measurement --------------------------------------------------------------------------------------

    def _workload(self, task):
        target = self.backend.target_string
        return Workload(task.group.key, task.group.kind, target, self.backend.spec.fingerprint(), FEATURES_VERSION,
                        self.runner.timing(target, self.evict_private_bytes), self.evict_private_bytes)

    def _vector(self, task, knobs):
        return self.features.vector(task.template.schedule(knobs), knobs, task.group.kind)

    def _build_and_run(self, task, knob_list):
        """(workload, measured results) of `knob_list`; MeasurementDeferred from a runner that measures later."""
        return self._run(task, self.builder.build(task.func_json, self.backend.target_string, knob_list))

    def _run(self, task, builds):
        """(workload, measured results) of already built `builds`."""
        workload = self._workload(task)
        results = self.runner.run(task.reference or builds[0].artifact, builds, self.backend.target_string,
                                  func_params(task.group.func), workload=workload)
        return workload, results

    def _measure(self, task, knob_list):
        try:
            workload, results = self._build_and_run(task, knob_list)
        except MeasurementDeferred:
            task.waiting = True
            return []
        self._commit(task, workload, results)
        return results

    def _commit(self, task, workload, results):
        # committed before anything else happens: a kill loses nothing measured
        self.db.add_batch([workload.record(r.knobs, r.latencies_ms, r.error) for r in results])
        for result in results:
            ms = result.median_ms
            task.measured[canonical_knobs(result.knobs)] = ms
            task.trials += 1
            self.history.append((len(self.history) + 1, task.group.key, ms))
            if ms < task.best_ms:
                task.best_ms, task.best_knobs = ms, result.knobs
            task.curve.append(task.best_ms)
            self._learn(task, result.knobs, ms)

    def _learn(self, task, knobs, ms):
        if not self.guided:
            return
        try:
            self._train_x.append(self._vector(task, knobs))
            self._train_y.append(ms)
            self._train_g.append(task.group.key)
        except Exception:  # a config that cannot even be scheduled teaches nothing about speed
            pass

    def _start(self, task):
        """Build the default config (the reference for numerics) and load what the database knows; returns the
        default's build where the database has no time of it, for _measure_defaults."""
        for record in self._records(task):
            ms = record.median_ms if record.ok else math.inf
            task.measured[canonical_knobs(record.knobs)] = ms
            if ms < task.best_ms:
                task.best_ms, task.best_knobs = ms, record.knobs
            self._learn(task, record.knobs, ms)  # a resumed run is guided from its first batch
        default = task.template.default_knobs()
        builds = self.builder.build(task.func_json, self.backend.target_string, [default])
        if builds[0].artifact is None:
            raise UserError(f"group {task.group.name}: its default schedule does not build: {builds[0].error}"
                            + _unguarded_script_hint(builds[0].error))
        task.reference = builds[0].artifact
        if canonical_knobs(default) in task.measured:
            task.default_ms = task.measured[canonical_knobs(default)]
            return None
        return builds[0]

    def _measure_defaults(self, started):
        """Time the default of every (task, its build): with a runner that measures several workloads at once
        (LocalRunner.run_many), all in one pass, each default's slices between the other groups' (a default
        timed alone at the start lands wholly in whatever spell the machine is in, and every gain read from the
        records is against it); else one task after another."""
        run_many = getattr(self.runner, "run_many", None)
        if run_many is None or getattr(self.runner, "deferred", False):
            for task, _ in started:
                for result in self._measure(task, [task.template.default_knobs()]):
                    task.default_ms = result.median_ms
            return
        target = self.backend.target_string
        workloads = [self._workload(task) for task, _ in started]
        jobs = [(task.reference, [build], target, func_params(task.group.func), workload)
                for (task, build), workload in zip(started, workloads)]
        for (task, _), workload, results in zip(started, workloads, run_many(jobs)):
            self._commit(task, workload, results)
            task.default_ms = results[0].median_ms

    def _retrain(self):
        if len(self._train_y) >= 16 and len(set(self._train_g)) >= 1:
            self.cost_model.fit(np.stack(self._train_x), np.asarray(self._train_y), self._train_g)

    def _score(self, task):
        if not self.guided:
            return None
        model = self.cost_model if self.cost_model.trained else self.prior
        if model is None:
            return None

        def score(configs):
            rows = []
            for knobs in configs:
                try:
                    rows.append(self._vector(task, knobs))
                except Exception:
                    rows.append(None)
            valid = [r for r in rows if r is not None]
            preds = iter(model.predict(np.stack(valid)) if valid else [])
            return [next(preds) if r is not None else -np.inf for r in rows]

        return score

    # -- the loop -------------------------------------------------------------------------------------------

    def start(self, tasks):
        """Measure every task's default config and load what the database knows (tune() does this first)."""
        private = self.backend.spec.cache_bytes[1]
        self.evict_private_bytes = private if weights_stay_cached(tasks, self.backend.spec) else 0
        started = [(task, self._start(task)) for task in bar(tasks, desc="defaults", unit="group",
                                                              enabled=self.progress, leave=False)]
        self._measure_defaults([(task, build) for task, build in started if build is not None])
        self._retrain()

    def step(self, tasks, count: int):
        """Measure one batch of up to `count` new configs of the task expected to gain most; retrain.

        Returns (that task, configs measured or queued), or (None, 0) once every task's knob space is exhausted
        or waits for a deferred runner's results. A caller may interleave the steps of several tuners
        (benchmarks/learning_curve.py does); close() afterwards."""
        while True:
            open_tasks = [t for t in tasks if not (t.exhausted or t.waiting)]
            if not open_tasks:
                return None, 0
            untried = [t for t in open_tasks if t.trials < 2 * self.batch_size]
            task = untried[0] if untried else max(open_tasks, key=lambda t: t.priority())
            batch = propose(task.template, task.measured, count, self.rng, score=self._score(task))
            if batch:
                break
            task.exhausted = True
        self._measure(task, batch)
        self._retrain()
        return task, len(batch)

    def confirm(self, tasks, top: int = 3, rounds: int = 10):
        """Measure each task's `top` fastest configs (and its default) again and fold the new times into their
        records, so a config that was fast once by luck (a quiet moment on a shared machine) does not stay the
        best. A record keeps the slower of its runs, so a config measured once may now look fastest: it is
        measured again too, round after round (at most `rounds`), until the fastest record has been measured
        twice, and the tuner and `compile --db` (fastest record) agree on a confirmed config. The default is
        confirmed as well, and then measured side by side with the best for the summary's "default -> tuned"
        (_compare_with_default). Not new trials: the budget and the curves stay as they are. A deferred runner
        (a bundle) gets the side-by-side rounds to carry instead (_queue_side_by_side)."""
        if getattr(self.runner, "deferred", False):  # a duck-typed runner measures when asked
            for task in tasks:
                self._queue_side_by_side(task)
            return
        for task in bar(tasks, desc="confirm", unit="group", enabled=self.progress, leave=False):
            if task.waiting:
                continue
            default = canonical_knobs(task.template.default_knobs())
            confirmed = set()
            batch = task.fastest(top)
            if batch and default not in batch and math.isfinite(task.measured.get(default, math.inf)):
                batch.append(default)
            for _ in range(rounds):
                if not batch or not self._remeasure(task, batch):
                    break
                confirmed.update(batch)
                best_confirmed = min(task.measured[k] for k in confirmed)
                batch = [k for k in task.fastest(top) if k not in confirmed
                         and task.measured[k] < best_confirmed]
            task.default_ms = task.measured.get(default, task.default_ms)
            task.best_ms, best = min((ms, knobs) for knobs, ms in task.measured.items())
            task.best_knobs = json.loads(best) if math.isfinite(task.best_ms) else None
            if task.best_knobs is not None and math.isfinite(task.default_ms):
                self._compare_with_default(task, default, best)

    def _compare_with_default(self, task, default: str, best: str, rounds: int = PAIRED_ROUNDS):
        """Set the summary's "default -> tuned" from `rounds` measurements of the two side by side, the median
        of each. Their records keep the slower of two runs, which is right for choosing (a lucky run cannot
        pick a config) but not for reporting: one slow run of the default would pass for a speedup
        (docs/decisions/tuning-timing.md). These rounds also make the pick (_pick_side_by_side): the in-model
        step, where one follows, replaces it for the groups it can time inside the model, and the others (a
        group the VM runs as a builtin, or every group where no in-model step follows) keep it."""
        timed = self.side_by_side(task, default, best, rounds)
        if timed is None:
            return
        workload, times = timed
        task.default_ms, task.best_ms = (float(np.median(times[k])) for k in (default, best))
        self._pick_side_by_side(task, workload, default, best, times)

    def side_by_side(self, task, first: str, second: str, rounds: int = PAIRED_ROUNDS):
        """(workload, {canonical knobs: [median ms per round]}) of two configs built once and timed together in
        each of `rounds` rounds, so a drift of the machine's speed reaches both alike; None where one failed or
        the runner measures later."""
        builds = self.builder.build(task.func_json, self.backend.target_string,
                                    [json.loads(knobs) for knobs in dict.fromkeys((first, second))])
        times = {knobs: [] for knobs in (first, second)}  # one list when both are the same config
        workload = None
        for _ in range(rounds):
            try:
                workload, results = self._run(task, builds)
            except MeasurementDeferred:
                return None
            for result in results:
                if result.error is not None:
                    return None
                times[canonical_knobs(result.knobs)].append(result.median_ms)
        return workload, times

    def _pick_side_by_side(self, task, workload, default: str, best: str, times: dict) -> None:
        """The fastest alone replaces the default only where it was faster in every round side by side, else the
        default stays (measure.side_by_side_pick); the pick is stored as the group's one record timed
        Timing.SIDE_BY_SIDE, the newest, so `compile --db` builds it."""
        records = side_by_side_pick(workload, default, best, times)
        if canonical_knobs(records[0].knobs) == default:
            task.best_knobs, task.best_ms = json.loads(default), task.default_ms
            task.kept_why = _side_by_side_why(records) if best != default else ""
        self.db.replace_picks(workload.target, workload.hw_fingerprint, {workload.key: records})

    def _queue_side_by_side(self, task) -> None:
        """A deferred runner (a bundle) times the default and the fastest alone side by side where it measures,
        after the batch it carries; importing its results applies the rule of _pick_side_by_side. Queued where the
        bundle carries a batch of the group (run.py then sets the best of the batch against the fastest alone
        known here), or where the group's fastest alone is not the default and no pick was stored after it. The
        summary shows what compile --db builds."""
        default = canonical_knobs(task.template.default_knobs())
        if not math.isfinite(task.measured.get(default, math.inf)):
            return  # its first bundle measures the default, the numerics reference: nothing to set against it
        target, fingerprint = self.backend.target_string, self.backend.spec.fingerprint()
        fastest = next((knobs for knobs in task.fastest(1) if knobs != default), None)
        judged = (self.db.latest_timing(task.group.key, target, fingerprint) in PICKS and fastest in
                  self.db.measured_knobs(task.group.key, target, fingerprint, Timing.SIDE_BY_SIDE))
        if task.waiting or (fastest is not None and not judged):
            contender = None
            if fastest is not None:
                (build,) = self.builder.build(task.func_json, target, [json.loads(fastest)])
                contender = (build, task.measured[fastest]) if build.artifact else None
            self.runner.queue_side_by_side(task.reference, target, func_params(task.group.func),
                                           self._workload(task), (default, task.measured[default]), contender)
        outcome = ((self.runner.imported or {}).get("side_by_side") or {}).get(task.group.key)
        if outcome:  # timed side by side in the bundle just imported
            task.default_ms, task.best_ms = (float(np.median(outcome[k])) for k in ("default_ms", "best_ms"))
            task.best_knobs = outcome["picked"]
        else:
            picked = self.db.best_knobs([task.group], target, fingerprint).get(task.group.key)
            if picked is not None and canonical_knobs(picked) in task.measured:
                task.best_knobs, task.best_ms = picked, task.measured[canonical_knobs(picked)]
        if task.best_knobs is not None and canonical_knobs(task.best_knobs) == default:
            task.best_ms = task.default_ms
            if task.fastest(1) != [default]:
                task.kept_why = _side_by_side_why(self.db.records(task.group.key, target, fingerprint,
                                                                  Timing.SIDE_BY_SIDE))

    def _remeasure(self, task, batch) -> bool:
        """Measure `batch` (canonical knobs) again into the database and refresh task.measured; False when the
        runner defers its results."""
        try:
            workload, results = self._build_and_run(task, [json.loads(knobs) for knobs in batch])
        except MeasurementDeferred:
            return False
        self.db.add_remeasurements([workload.record(r.knobs, r.latencies_ms, r.error) for r in results])
        for record in self._records(task):
            task.measured[canonical_knobs(record.knobs)] = record.median_ms if record.ok else math.inf
        return True

    def _records(self, task):
        """The database's records of the task's group on this hardware that are configs of its template, timed
        as this runner times: a record timed otherwise (warm, or by an older xcomp) does not compare with this
        run's."""
        target = self.backend.target_string
        return self.db.records(task.group.key, target, self.backend.spec.fingerprint(),
                               self.runner.timing(target, self.evict_private_bytes), accept=task.template.in_space)

    def close(self):
        self.builder.close()
        self.runner.close()

    def tune(self, tasks, trials: int | None = None, time_budget_s: float | None = None) -> list:
        if trials is None and time_budget_s is None:
            trials = 64 * len(tasks)
        deadline = time.monotonic() + time_budget_s if time_budget_s else math.inf
        overall = bar(total=trials, desc="tune", unit="trial", enabled=self.progress,
                       bar_format=None if trials else "{desc}: {n} trials [{elapsed}]")
        spent = 0
        try:
            self.start(tasks)
            while (trials is None or spent < trials) and time.monotonic() < deadline:
                task, measured = self.step(tasks, self.batch_size if trials is None else
                                           min(self.batch_size, trials - spent))
                if task is None:
                    break
                spent += measured
                overall.update(measured)
                overall.set_postfix_str(f"{task.group.kind} best {task.best_ms:.3f}ms")
            self.confirm(tasks)
        except KeyboardInterrupt:
            self.interrupted = True
            overall.write("interrupted: every measured candidate is in the database")
        finally:
            overall.close()
            self.close()
        return tasks


@dataclasses.dataclass
class GroupSummary:
    """A group's line of the tuning summary: its default and the config compile --db builds it with, timed side
    by side."""

    group: str
    kind: str
    key: str
    count: int
    trials: int
    default_ms: float
    best_ms: float
    best_knobs: dict | None
    waiting: bool  # its last batch went to a deferred runner
    timed: str = "alone"  # where the two were timed side by side: "alone" (Tuner.confirm) or "in-model"
    kept_default: bool = False  # the default stays: no tuned config beat it
    why: str = ""  # where the default stays, why

    @property
    def speedup(self) -> float | None:
        return self.default_ms / self.best_ms if math.isfinite(self.best_ms) and self.best_ms > 0 else None

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "speedup": self.speedup}


def summary(tasks) -> list:
    """A GroupSummary per task: its default and best config measured side by side alone (Tuner.confirm)."""
    rows = []
    for t in tasks:
        default = canonical_knobs(t.template.default_knobs())
        kept = t.best_knobs is not None and canonical_knobs(t.best_knobs) == default
        rows.append(GroupSummary(
            t.group.name, t.group.kind, t.group.key, t.count, t.trials, t.default_ms, t.best_ms, t.best_knobs,
            t.waiting, kept_default=kept, why=(t.kept_why or "no tuned config was faster alone") if kept else ""))
    return rows


def set_in_model_picks(rows, refined: dict) -> None:
    """Each refined group's GroupSummary says what compile --db runs: its pick inside the model (the default
    unless a tuned config beat it there in every round, alone and beside the other picks), set against the
    default in the same runs."""
    picks = {row["key"]: row for row in refined["groups"]}
    for row in rows:
        pick = picks.get(row.key)
        if pick is None:
            continue
        default, picked = canonical_knobs(pick["default"]), canonical_knobs(pick["picked"])
        row.default_ms, row.best_ms = pick["in_model_ms"][default], pick["in_model_ms"][picked]
        row.best_knobs, row.timed, row.kept_default = pick["picked"], "in-model", picked == default
        won = max(pick["rounds_won"].values(), default=0)
        if pick["slower_together"]:
            row.why = "its pick beat it inside the model, but not in the build of the picks together"
        elif row.kept_default:
            row.why = (f"no tuned config beat it inside the model in every round (the best in {won} of "
                       f"{refined['rounds']})")
        else:
            row.why = ""


def tune_model(model, target="cpu", db_path="tune.sqlite", trials=None, time_budget_s=None, input_shapes=None,
               seed=0, progress=True, runner=None, input_values=None, in_model_top=in_model.TOP) -> dict:
    """Tune, then (measuring on this machine) time each group's default and `in_model_top` - 1 fastest configs
    inside the model to choose among them (in_model.py; 0 or 1: no such step). Each group's summary row says
    how its default and pick were set side by side ("timed": "in-model", or "alone" where the step did not
    time it) and whether the default stays ("kept_default")."""
    from xcomp.backends import get_backend

    backend = get_backend(target)
    if not backend.can_run() and runner is None:
        raise UserError(f"cannot measure {backend.target_string} on this machine; measure on one that can with "
                        "--runner bundle (carry files there and back) or --runner rpc (a tvm.rpc tracker)")
    with TuningDB(db_path) as db:
        if runner is not None:
            runner.begin(db)
        tasks, symbolic = model_tasks(model, backend, input_shapes, input_values)
        tuner = Tuner(backend, db, seed=seed, runner=runner, progress=progress)
        tuner.tune(tasks, trials=trials, time_budget_s=time_budget_s)
        rows = summary(tasks)
        refined = None
        if in_model_top > 1 and tuner.runner.measures_here and not tuner.interrupted:
            try:
                refined = in_model.refine(model, backend, db, tasks, top=in_model_top, input_shapes=input_shapes,
                                          input_values=input_values, progress=progress)
            except KeyboardInterrupt:  # the groups' times are stored together, after all were taken
                print("interrupted: no group was timed inside the model; compile --db uses each group's pick "
                      "side by side alone", file=sys.stderr)
            except Exception as err:  # the search's records are stored: a failing last step must not lose them
                refined = {"error": describe(err)}
        if refined and "groups" in refined:
            set_in_model_picks(rows, refined)
    return {
        "target": backend.target_string,
        "db": str(db_path),
        "trials": sum(r.trials for r in rows),
        "groups": [r.to_dict() for r in rows],
        "untuned_symbolic": [{"group": g.name, "kind": g.kind, "key": g.key, "symbols": list(g.symbols)}
                             for g in symbolic],
        "history": tuner.history,
        "model_default_ms": sum(r.default_ms * r.count for r in rows if math.isfinite(r.default_ms)),
        "model_tuned_ms": sum(r.best_ms * r.count for r in rows if math.isfinite(r.best_ms)),
        "in_model": refined,
    }


__all__ = ["Tuner", "GroupSummary", "tune_model", "summary"]
