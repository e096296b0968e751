"""Held-out picks timed again: the evidence behind a confidence verdict measured side by side, not read from
records.

A held-out pick's gain read from the records is the ratio of two single timings taken minutes apart in a tuning
run, the default's and the pick's, and on these machines one timing spreads by a third. One loss of more than 3%
withholds a template's trust (costmodel.predict.judge), so over tens of groups the noise alone can withhold it.
Where the records are this machine's own, `Retimer` builds each pick and its group's default and times them
together in alternating rounds, as the tuner sets its pick beside the default (Tuner.side_by_side), under the
cache policy the tuner timed that model with; the gain is then the ratio of their medians
(docs/decisions/zero-measurement-compile.md).

Only the host that measured a pick can time it again, so the gains are kept (`RetimedGains`, a `retimed.json` in
each host's records folder): a retrain on another host judges this host's picks by them wherever its pick and the
group's default are the configs that were timed.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import tempfile

import numpy as np

ROUNDS = 5
RETIMED_FILE = "retimed.json"  # in a host's records folder, beside its spec.json


class RetimedGains:
    """The side-by-side gains of held-out picks, per host, read from and written to `<records>/<fingerprint>/
    retimed.json`. A gain is found for a pick only with the default it was timed against: a template whose default
    changed since has no stored evidence for its picks."""

    def __init__(self, record_dirs=()):
        self._entries = {}  # (group, pick, default), canonical knobs -> entry
        self._files = {}  # fingerprint -> its host folder's retimed.json
        for folder in record_dirs:
            for host in sorted(glob.glob(os.path.join(folder, "*", "spec.json"))):
                path = os.path.join(os.path.dirname(host), RETIMED_FILE)
                self._files[os.path.basename(os.path.dirname(host))] = path
                if os.path.exists(path):
                    with open(path) as f:
                        for entry in json.load(f):
                            self._entries[self._key(entry["group"], entry["knobs"], entry["default_knobs"])] = entry

    @staticmethod
    def _key(group, pick, default):
        from xcomp.autotune.db import canonical_knobs

        return group, canonical_knobs(pick), canonical_knobs(default)

    def find(self, row):
        """The stored entry for a held-out row's pick against its default, or None."""
        if "knobs" not in row or "default_knobs" not in row:
            return None
        return self._entries.get(self._key(row["group"], row["knobs"], row["default_knobs"]))

    def add(self, row, gain: float, rounds: int):
        self._entries[self._key(row["group"], row["knobs"], row["default_knobs"])] = {
            "group": row["group"], "model": row.get("model"), "template": row.get("template"), "knobs": row["knobs"],
            "default_knobs": row["default_knobs"], "gain": round(float(gain), 4), "rounds": rounds,
            "measured": datetime.date.today().isoformat()}

    def save(self, fingerprint: str):
        """Write this host's entries to its records folder, if the folders read have one for it."""
        path = self._files.get(fingerprint)
        if path is None:
            return
        mine = sorted((e for e in self._entries.values() if e["group"].startswith(fingerprint + "/")),
                      key=lambda e: (e["group"], json.dumps(e["knobs"], sort_keys=True)))
        with open(path, "w") as f:  # an entry a line: a retrain's change reads as the entries it changed
            f.write("[\n" + ",\n".join(json.dumps(e, sort_keys=True) for e in mine) + "\n]\n")


class Retimer:
    """Called with pretrain.heldout_gains' rows, returns them with the gain of every pick this machine's records hold
    timed again ("timing": "side-by-side"; the records' own in "record_gain"); other hosts' rows with the gain
    `stored` (RetimedGains) holds for their pick, where it holds one ("retimed": the day it was timed), else as they
    were. This machine's new gains go into `stored`, saved to its records folder; with `rounds` 0 nothing is timed,
    and this machine's picks take stored gains too. A pick re-timed once keeps its
    gain for the rest of the run (the folds of benchmarks/zero_measurement.py pick mostly the same configs)."""

    def __init__(self, models, target: str = "cpu", rounds: int = ROUNDS, progress: bool = False,
                 stored: RetimedGains | None = None):
        from xcomp.backends import get_backend

        self.models, self.rounds, self.progress = models, rounds, progress
        self.backend = get_backend(target)
        self.fingerprint = self.backend.spec.fingerprint()
        self.prefix = self.fingerprint + "/"
        self.stored = stored
        self._tasks = None  # workload key -> (Task, the private-cache bytes its model's timing evicts)
        self._gains = {}  # (group, canonical knobs) -> re-timed gain

    def __call__(self, gains: list) -> list:
        from xcomp.autotune.db import TuningDB
        from xcomp.autotune.tuner import Tuner
        from xcomp.progress import bar

        todo = [row for row in gains if "knobs" in row and row["group"].startswith(self.prefix)] if self.rounds else []
        retimed = {}
        with tempfile.TemporaryDirectory() as scratch, TuningDB(os.path.join(scratch, "unused.sqlite")) as db:
            tuner = Tuner(self.backend, db, progress=False, guided=False)  # its builder pool serves every pick
            try:
                for row in bar(todo, desc="re-time picks", unit="pick", enabled=self.progress, leave=False):
                    retimed[id(row)] = self._gain(tuner, row)
            finally:
                tuner.close()
        out = []
        for row in gains:
            if id(row) in retimed:
                if self.stored is not None and "default_knobs" in row:
                    self.stored.add(row, retimed[id(row)], self.rounds)
                out.append({**row, "gain": retimed[id(row)], "record_gain": row["gain"], "timing": "side-by-side"})
                continue
            entry = self.stored.find(row) if self.stored is not None else None
            out.append(row if entry is None else {**row, "gain": entry["gain"], "record_gain": row["gain"],
                                                  "timing": "side-by-side", "retimed": entry["measured"]})
        if self.stored is not None and todo:
            self.stored.save(self.fingerprint)
        return out

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


__all__ = ["Retimer", "RetimedGains", "ROUNDS", "RETIMED_FILE"]
