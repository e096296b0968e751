"""Training data for the cost model from tuning records, and the pretrained model that ships with xcomp, with
the held-out evidence of where its picks beat the template default (the confidence file beside it).

Usage: python -m xcomp.autotune.pretrain [--db tune.sqlite ...] [--records benchmarks/records ...]
           -m onnx:light_resnet50 [-m ...] [-t cpu] [-o costmodel/pretrained/cpu.json] [--retime 5]

A record holds a workload key and knobs, not the program: each model's operator groups, partitioned and
scheduled for the hardware that measured the record, give the records of their key a scheduled program to
extract features from. Records of workloads none of the models has are skipped. `--records` folders hold one
folder per host: its `spec.json` (HardwareSpec) and JSONL exports (`xcomp db export`), so one model learns from
every kind of host the project has records of (benchmarks/records/README.md).

Besides the model (-o), it writes `<output>.confidence.json`: each model is held out in turn, a model trained
on the others' records picks, for each held-out group, the config it predicts fastest among the group's
records, and `costmodel.predict.judge` turns those picks' measured gains over the default into a verdict per
hardware class and template (docs/decisions/zero-measurement-compile.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import tempfile

import numpy as np


@dataclasses.dataclass
class TrainingRows:
    """Featurized records. One row per record; a ranking group is a workload on one host (`groups`)."""

    x: np.ndarray  # [n, LENGTH]
    y: np.ndarray  # median ms, inf for failures
    groups: list  # "<fingerprint>/<workload key>" per row
    default: np.ndarray  # bool: the row is its template's default config
    hardware: dict  # group -> costmodel.predict.hardware_class of the host that measured it
    template: dict  # group -> costmodel.predict.template_key
    models: dict  # workload key -> set of the models (as given) that have it
    specs: dict  # hardware class -> HardwareSpec name
    knobs: list  # the config of each row

    def keys(self) -> list:
        return [g.split("/", 1)[1] for g in self.groups]

    def of_model(self, model) -> np.ndarray:
        """Rows of workloads `model` has (held out together, also where another model shares them)."""
        return np.asarray([model in self.models.get(k, ()) for k in self.keys()], bool)

    def subset(self, mask) -> "TrainingRows":
        mask = np.asarray(mask, bool)
        return dataclasses.replace(self, x=self.x[mask], y=self.y[mask], default=self.default[mask],
                                   groups=[g for g, m in zip(self.groups, mask) if m],
                                   knobs=[k for k, m in zip(self.knobs, mask) if m])


def _host_specs(record_dirs) -> dict:
    """{fingerprint: HardwareSpec} of the hosts in `record_dirs` (each host folder's spec.json)."""
    from xcomp.backends import HardwareSpec

    specs = {}
    for folder in record_dirs:
        for path in sorted(glob.glob(os.path.join(folder, "*", "spec.json"))):
            with open(path) as f:
                spec = HardwareSpec.from_dict(json.load(f))
            specs[spec.fingerprint()] = spec
    return specs


def _databases(db_paths, record_dirs, scratch) -> list:
    """The tuning databases to read: those given, and one in `scratch` per host folder of JSONL records."""
    from xcomp.autotune.db import TuningDB

    paths = [os.fspath(p) for p in db_paths]
    for folder in record_dirs:
        for host in sorted(glob.glob(os.path.join(folder, "*", ""))):
            files = sorted(glob.glob(os.path.join(host, "*.jsonl")))
            if not files:
                continue
            path = os.path.join(scratch, f"{len(paths)}.sqlite")
            with TuningDB(path) as db:
                for jsonl in files:
                    db.import_jsonl(jsonl)
            paths.append(path)
    return paths


def collect(models, db_paths=(), record_dirs=(), target="cpu", progress=False) -> TrainingRows:
    """Every search record (timed as its workload's newest search was: a model learns rankings within a
    workload, and times taken in different ways would rank against each other) of a workload one of `models`
    has, from the databases and the record folders, featurized for the host that measured it: this machine's
    own records with `target`'s spec, other hosts' with their folder's spec.json."""
    from xcomp.autotune.db import TuningDB
    from xcomp.autotune.tuner import model_tasks
    from xcomp.backends import backend_for_spec, get_backend
    from xcomp.costmodel import FeatureExtractor
    from xcomp.costmodel.predict import hardware_class, template_key
    from xcomp.progress import bar

    here = get_backend(target)
    specs = {here.spec.fingerprint(): here.spec, **_host_specs(record_dirs)}
    backends = {here.spec.fingerprint(): here}
    tasks, extractors = {}, {}
    rows, latencies, groups, defaults, knobs = [], [], [], [], []
    hardware, templates, owners, names = {}, {}, {}, {}

    def host(fingerprint):
        """(backend, {key: task}, extractor) for the host with this fingerprint, or None if no spec names it."""
        if fingerprint not in specs:
            return None
        if fingerprint not in tasks:
            backend = backends.get(fingerprint) or backend_for_spec(specs[fingerprint])
            by_key = {}
            for model in models:
                for task in model_tasks(model, backend, None)[0]:
                    by_key.setdefault(task.group.key, task)
                    owners.setdefault(task.group.key, set()).add(model)
            tasks[fingerprint] = by_key
            extractors[fingerprint] = FeatureExtractor(backend.spec, backend.target())
        return tasks[fingerprint], extractors[fingerprint]

    with tempfile.TemporaryDirectory() as scratch:
        for path in _databases(db_paths, record_dirs, scratch):
            with TuningDB(path) as db:
                hosts = sorted({(r.target, r.hw_fingerprint) for r in db.records()})
                records = [r for t, fp in hosts for r in db.search_records(t, fp)]
            for record in bar(records, desc="featurize", unit="record", enabled=progress, leave=False):
                found = host(record.hw_fingerprint)
                task = found[0].get(record.workload_key) if found else None
                if task is None or not task.template.in_space(record.knobs):
                    continue
                try:
                    scheduled = task.template.schedule(record.knobs)
                except Exception:  # a config the template no longer applies: no program to learn from
                    continue
                spec = specs[record.hw_fingerprint]
                group = f"{record.hw_fingerprint}/{record.workload_key}"
                rows.append(found[1].vector(scheduled, record.knobs, task.group.kind))
                latencies.append(record.median_ms if record.ok else np.inf)
                groups.append(group)
                defaults.append(record.knobs == task.template.default_knobs())
                knobs.append(record.knobs)
                hardware[group] = hardware_class(spec)
                templates[group] = template_key(task.template, task.group.kind)
                names[hardware_class(spec)] = spec.name
    from xcomp.costmodel.features import LENGTH

    x = np.stack(rows) if rows else np.zeros((0, LENGTH), np.float32)
    return TrainingRows(x, np.asarray(latencies, np.float64), groups, np.asarray(defaults, bool), hardware,
                        templates, owners, names, knobs)


def training_set(models, db_paths, target="cpu"):
    """(features [n, LENGTH], median ms [n] (inf for failures), workload key per row) for every record in the
    databases whose workload one of `models` has, measured on this target's hardware (collect)."""
    from xcomp.backends import get_backend

    rows = collect(models, db_paths, (), target)
    mine = np.asarray([g.startswith(get_backend(target).spec.fingerprint() + "/") for g in rows.groups], bool)
    rows = rows.subset(mine)
    if not len(rows.y):
        return np.zeros((0, 0), np.float32), np.zeros(0), []
    return rows.x, rows.y, rows.keys()


def heldout_gains(rows: TrainingRows, models, seed: int = 0) -> list:
    """Each model held out in turn: a cost model trained on the records of every workload it does not have
    picks, per held-out group with a measured default, the config it predicts fastest among that group's
    records. Returns [{group, model, hardware, template, gain}] (gain: costmodel.predict.pick_gain), each group
    once (in the fold of the first model, in `models` order, that has it), and where the pick is not the default,
    its `knobs`, the `default_knobs` it is measured against and `margin`, its score less the default's (the
    pairwise objective's log-odds that it is faster)."""
    from xcomp.costmodel import CostModel
    from xcomp.costmodel.predict import pick_gain

    out, seen = [], set()
    for model in models:
        test = rows.of_model(model)
        if not test.any() or test.all():
            continue
        train = rows.subset(~test)
        fitted = CostModel(seed=seed).fit(train.x, train.y, train.groups)
        held = rows.subset(test)
        scores = fitted.predict(held.x)
        groups = np.asarray(held.groups)
        for group in dict.fromkeys(held.groups):
            mask = groups == group
            default = np.flatnonzero(held.default[mask])
            if group in seen or not len(default) or not np.isfinite(held.y[mask][default[0]]) or mask.sum() < 2:
                continue
            seen.add(group)
            row = {"group": group, "model": os.path.basename(str(model)), "hardware": rows.hardware[group],
                   "template": rows.template[group], "gain": pick_gain(scores[mask], held.y[mask], int(default[0]))}
            chosen = np.flatnonzero(mask)[int(np.argmax(scores[mask]))]
            if not held.default[chosen]:
                row["knobs"] = held.knobs[chosen]
                row["default_knobs"] = held.knobs[np.flatnonzero(mask)[default[0]]]
                row["margin"] = round(float(scores[chosen] - scores[np.flatnonzero(mask)[default[0]]]), 4)
            out.append(row)
    return out


def confidence(rows: TrainingRows, models, seed: int = 0, retime=None) -> dict:
    """The confidence table (without the model's hash): costmodel.predict.judge of the held-out gains, per
    hardware class and template; with `retime` (a retime.Retimer), the gains of picks timed beside their
    defaults: this machine's timed again, any host's kept in the records folders."""
    from xcomp.costmodel import FEATURES_VERSION
    from xcomp.costmodel.predict import POOL, RULE, judge

    gains = heldout_gains(rows, models, seed)
    if retime is not None:
        gains = retime(gains)
    table = {}
    for row in gains:
        table.setdefault(row["hardware"], {}).setdefault(row["template"], []).append(row)

    def verdict(picks):
        timed = all(p.get("timing") == "side-by-side" for p in picks if "knobs" in p)  # a default pick: 1.0 exactly
        return judge([p["gain"] for p in picks], side_by_side=timed)

    return {
        "features_version": FEATURES_VERSION,
        "rule": RULE,
        "pool": POOL,
        "evaluated": "leave-one-model-out: " + ", ".join(os.path.basename(str(m)) for m in models),
        "hardware": {hw: {"name": rows.specs.get(hw, hw), "templates": {t: verdict(g) for t, g in sorted(by.items())}}
                     for hw, by in sorted(table.items())},
        "heldout": gains,
    }


def train(rows: TrainingRows, models, output, seed: int = 0, provenance=None, retime=None) -> dict:
    """Fit on every row, save the model to `output` (with `provenance`, {name: value}, in its attributes) and
    its confidence table beside it (confidence, with `retime`); returns the table."""
    from xcomp.costmodel import CostModel
    from xcomp.costmodel.predict import confidence_path, file_sha256

    table = confidence(rows, models, seed, retime)
    attributes = {k: str(v) for k, v in (provenance or {}).items()}
    CostModel(seed=seed).fit(rows.x, rows.y, rows.groups).save(output, **attributes)
    table = {"model": os.path.basename(os.fspath(output)), "model_sha256": file_sha256(output), **table}
    with open(confidence_path(output), "w") as f:
        json.dump(table, f, indent=1, sort_keys=False)
        f.write("\n")
    return table


def main(argv=None):
    from xcomp.autotune.retime import ROUNDS, RetimedGains, Retimer
    from xcomp.costmodel.model import PRETRAINED_PATH
    from xcomp.frontends.examples import resolve

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", action="append", default=[], help="tuning database of this machine (repeatable)")
    parser.add_argument("--records", action="append", default=[],
                        help="folder of host folders (spec.json + *.jsonl), e.g. benchmarks/records (repeatable)")
    parser.add_argument("-m", "--model", action="append", required=True,
                        help=".onnx path or onnx:NAME whose groups the records belong to (repeatable)")
    parser.add_argument("-t", "--target", default="cpu")
    parser.add_argument("-o", "--output", default=PRETRAINED_PATH)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retime", type=int, default=0, metavar="ROUNDS",
                        help="time each held-out pick of this machine's records again beside its default, in ROUNDS "
                             "alternating rounds, judge by those times, and keep them in its records folder "
                             f"(retimed.json; xcomp/autotune/retime.py). {ROUNDS} is a sensible choice; 0 (the "
                             "default): time nothing, and judge by the gains kept there, else the records' times")
    args = parser.parse_args(argv)
    if not args.db and not args.records:
        parser.error("give records to learn from: --db and/or --records")

    models = [resolve(m) for m in args.model]
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)  # before minutes of featurizing
    rows = collect(models, args.db, args.records, args.target, progress=True)
    if not len(rows.y):
        parser.error("no record belongs to a group of these models on a host with a known spec")
    summary = {"records": len(rows.y), "workloads": len(set(rows.groups)), "failed": int(np.isinf(rows.y).sum()),
               "models": [os.path.basename(m) for m in args.model], "hardware": sorted(set(rows.specs.values()))}
    # every run judges by the side-by-side gains kept in the records folders; --retime adds this machine's own
    retime = Retimer(models, args.target, args.retime, progress=True, stored=RetimedGains(args.records))
    table = train(rows, models, args.output, args.seed, {**summary, "retime_rounds": args.retime}, retime)
    trusted = {hw: sorted(t for t, v in entry["templates"].items() if v["confident"])
               for hw, entry in table["hardware"].items()}
    print(json.dumps({"output": os.path.abspath(args.output), **summary, "trusted": trusted}))


if __name__ == "__main__":
    main()
