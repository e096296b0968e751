"""Held-out picks timed again: the evidence behind a confidence verdict measured side by side, not read from
records.

A held-out pick's gain read from the records is the ratio of two single timings taken minutes apart in a tuning
run, the default's and the pick's, and on these machines one timing spreads by a third. One loss of more than 3%
withholds a template's trust (costmodel.predict.judge), so over tens of groups the noise alone can withhold it.
Where the records are this machine's own, `Retimer` builds each pick and its group's default and times them
together in alternating rounds, as the tuner sets its pick beside the default (Tuner.side_by_side), under the
cache policy the tuner timed that model with; the gain is then the ratio of their medians
(docs/decisions/zero-measurement-compile.md).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

ROUNDS = 5


class Retimer:
    """Called with pretrain.heldout_gains' rows, returns them with the gain of every pick this machine's records hold
    timed again ("timing": "side-by-side"; the records' own in "record_gain"); other hosts' rows as they were. A
    pick re-timed once keeps its gain for the rest of the run (the folds of benchmarks/zero_measurement.py pick
    mostly the same configs)."""

    def __init__(self, models, target: str = "cpu", rounds: int = ROUNDS, progress: bool = False):
        from xcomp.backends import get_backend

        self.models, self.rounds, self.progress = models, rounds, progress
        self.backend = get_backend(target)
        self.prefix = self.backend.spec.fingerprint() + "/"
        self._tasks = None  # workload key -> (Task, the private-cache bytes its model's timing evicts)
        self._gains = {}  # (group, canonical knobs) -> re-timed gain

    def __call__(self, gains: list) -> list:
        from xcomp.autotune.db import TuningDB
        from xcomp.autotune.tuner import Tuner
        from xcomp.progress import bar

        todo = [row for row in gains if "knobs" in row and row["group"].startswith(self.prefix)]
        retimed = {}
        with tempfile.TemporaryDirectory() as scratch, TuningDB(os.path.join(scratch, "unused.sqlite")) as db:
            tuner = Tuner(self.backend, db, progress=False, guided=False)  # its builder pool serves every pick
            try:
                for row in bar(todo, desc="re-time picks", unit="pick", enabled=self.progress, leave=False):
                    retimed[id(row)] = self._gain(tuner, row)
            finally:
                tuner.close()
        return [{**row, "gain": retimed[id(row)], "record_gain": row["gain"], "timing": "side-by-side"}
                if id(row) in retimed else row for row in gains]

    def _gain(self, tuner, row) -> float:
        """Default median / pick median over the rounds; 0 where the pick failed to build, run or match."""
        from xcomp.autotune.db import canonical_knobs

        pick = canonical_knobs(row["knobs"])
        cached = (row["group"], pick)
        if cached not in self._gains:
            task, evict = self._task(row["group"].split("/", 1)[1])
            default = canonical_knobs(task.template.default_knobs())
            tuner.evict_private_bytes = evict
            timed = tuner.side_by_side(task, default, pick, self.rounds)
            self._gains[cached] = 0.0 if timed is None else float(np.median(timed[1][default]) /
                                                                   np.median(timed[1][pick]))
        return self._gains[cached]

    def _task(self, key: str):
        from xcomp.autotune.tuner import model_tasks, weights_stay_cached

        if self._tasks is None:
            self._tasks = {}
            private = self.backend.spec.cache_bytes[1]
            for model in self.models:
                tasks = model_tasks(model, self.backend, None)[0]
                evict = private if weights_stay_cached(tasks, self.backend.spec) else 0  # as Tuner.start sets it
                for task in tasks:
                    self._tasks.setdefault(task.group.key, (task, evict))
        return self._tasks[key]


__all__ = ["Retimer", "ROUNDS"]
