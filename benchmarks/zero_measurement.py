"""Zero-measurement compile, leave one model out: how much of a tuning run's gain the cost model's predicted
configs recover on a model none of whose groups it was trained on.

Usage: python benchmarks/zero_measurement.py -m onnx:light_squeezenet -m onnx:light_resnet50 ... \
           [--records benchmarks/records] [--holdout onnx:light_resnet50 ...] [--repeat 40] [--ungated]
           [--retime 5] [--json]

For each held-out model (default: every -m with records from this machine), a cost model and its confidence
table are trained as `python -m xcomp.autotune.pretrain` trains the shipped ones, on the records of every
workload the held-out model does not have (every host's; the confidence table by leaving each of the other
models out in turn, so the held-out model decides nothing). The held-out model is then compiled three ways and
timed whole, in alternating blocks on the same inputs (xcomp.report.bench.alternating_blocks):
  default    every group its template default (--no-costmodel)
  predicted  that cost model's pick where its confidence table trusts the template here, else the default
  tuned      this machine's tuning records of the held-out model (compile --db; --no-costmodel, so groups the
             tuner left alone stay at default)
  ungated    (--ungated) the same cost model's pick for every group of a template its table judged, trusted or
             not: what the confidence gate keeps out, measured
recovered = (default - predicted) / (default - tuned), from the medians (0 where no group was predicted: the
predicted build is then the default's, and its timed difference shows the noise; none where tuning gained
nothing). The records of this machine's model
are `<records>/<host fingerprint>/<model name>.jsonl`, one file per model (benchmarks/records/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS = os.path.join(HERE, "records")


def _name(model: str) -> str:
    return os.path.splitext(os.path.basename(model.split(":", 1)[-1]))[0]


def _ungated(folder, table) -> str:
    """A copy of the cost model whose confidence table trusts every template it judged on every hardware class:
    the predictions without the gate (the model file is the same, so the table's hash still matches)."""
    import shutil

    from xcomp.costmodel.predict import confidence_path

    path = os.path.join(folder, "ungated.json")
    shutil.copyfile(os.path.join(folder, "model.json"), path)
    opened = {**table, "hardware": {hw: {**entry, "templates": {t: {**row, "confident": True}
                                                                for t, row in entry["templates"].items()}}
                                    for hw, entry in table["hardware"].items()}}
    with open(confidence_path(path), "w") as f:
        json.dump(opened, f)
    return path


def held_out(model, rows, models, records_dir, scratch, repeat, warmup, seed, progress, ungated=False, retime=None):
    """The compiles of `model` and their medians; rows: pretrain.collect over every model; retime: a
    retime.Retimer the confidence table is judged with (None: the records' times)."""
    from costmodel_ab import predicted_groups, time_builds
    from xcomp.costmodel.predict import hardware_class
    from xcomp.frontends.examples import resolve

    from xcomp.autotune import pretrain
    from xcomp.autotune.db import TuningDB

    folder = os.path.join(scratch, _name(model))
    os.makedirs(folder)
    path = resolve(model)
    others = [m for m in models if m != path]
    table = pretrain.train(rows.subset(~rows.of_model(path)), others, os.path.join(folder, "model.json"), seed,
                           retime=retime)
    db = os.path.join(folder, "tuned.sqlite")
    with TuningDB(db) as tuned_db:
        tuned_db.import_jsonl(os.path.join(records_dir, _name(model) + ".jsonl"))

    builds = [("default", {"costmodel": False}), ("predicted", {"costmodel": os.path.join(folder, "model.json")}),
              ("tuned", {"costmodel": False, "tune_db": db})]
    if ungated:
        builds.append(("ungated", {"costmodel": _ungated(folder, table)}))
    modules, compile_s, ms, quartiles = time_builds(path, builds, repeat, warmup, seed, progress)
    gain = ms["default"] - ms["tuned"]

    def predicted(name):
        """(groups the build `name` gives the cost model's pick, its share of the tuning gain)"""
        groups = predicted_groups(modules[name])
        # with no group predicted the build is the default's program: recovered is 0, their difference the noise
        return groups, None if gain <= 0 else 0.0 if not groups else (ms["default"] - ms[name]) / gain

    groups, recovered = predicted("predicted")
    here = table["hardware"].get(hardware_class(modules["default"].spec), {}).get("templates", {})
    trusted = sorted(t for t, v in here.items() if v["confident"])  # on this host's class: what "predicted" used
    extra = dict(zip(("ungated_groups", "ungated_recovered"), predicted("ungated"))) if ungated else {}
    return {
        "model": _name(model),
        "ms": ms,
        "quartiles_ms": quartiles,
        "recovered": recovered,
        "predicted_groups": groups,
        "unique_groups": len(modules["predicted"].info["schedules"]),
        "trusted_templates": trusted,
        "compile_s": compile_s,
        "predict_s": modules["predicted"].info["compile_times"].get("predict_s", 0.0),
        "training_records": int((~rows.of_model(path)).sum()),
        **extra,
    }


def main():
    from xcomp.backends import get_backend
    from xcomp.frontends.examples import resolve

    from xcomp.autotune import pretrain
    from xcomp.autotune.retime import Retimer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", action="append", required=True, help="onnx:NAME or .onnx (repeatable)")
    parser.add_argument("--records", default=RECORDS, help="folder of host folders (default benchmarks/records)")
    parser.add_argument("--holdout", action="append", help="models to hold out (default: each -m with records "
                        "from this machine)")
    parser.add_argument("--repeat", type=int, default=40, help="timed calls per build")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ungated", action="store_true", help="also time a build with the cost model's pick for "
                        "every judged template, trusted or not (what the confidence gate keeps out)")
    parser.add_argument("--retime", type=int, default=0, metavar="ROUNDS",
                        help="judge each fold's confidence table by its held-out picks timed again beside their "
                             "defaults, as `pretrain --retime` does (0: by the records' times)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = parser.parse_args()

    backend = get_backend("cpu")
    mine = os.path.join(args.records, backend.spec.fingerprint())
    holdouts = args.holdout or [m for m in args.model if os.path.exists(os.path.join(mine, _name(m) + ".jsonl"))]
    if not holdouts:
        parser.error(f"no records of these models from this machine in {mine}")
    models = [resolve(m) for m in args.model]
    log = sys.stderr if args.json else sys.stdout
    start = time.perf_counter()
    rows = pretrain.collect(models, (), [args.records], progress=not args.json)
    print(f"featurized {len(rows.y)} records in {time.perf_counter() - start:.0f}s", file=log)
    retime = Retimer(models, rounds=args.retime, progress=not args.json) if args.retime else None
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for model in holdouts:
            result = held_out(model, rows, models, mine, scratch, args.repeat, args.warmup, args.seed,
                              progress=not args.json, ungated=args.ungated, retime=retime)
            results.append(result)
            ms, rec = result["ms"], result["recovered"]
            print(f"{result['model']:22s} default {ms['default']:8.2f}  predicted {ms['predicted']:8.2f}  tuned "
                  f"{ms['tuned']:8.2f} ms  recovered {'n/a' if rec is None else f'{rec:6.0%}'}  "
                  f"({result['predicted_groups']}/{result['unique_groups']} groups predicted, "
                  f"+{result['predict_s']:.1f}s compile; trusted here: "
                  f"{', '.join(result['trusted_templates']) or 'none'})", file=log)
            if not result["predicted_groups"]:
                print(f"{'':22s} no group predicted: the predicted build is the default's, their difference is "
                      "noise", file=log)
            if args.ungated:
                rec = result["ungated_recovered"]
                print(f"{'':22s} ungated  {ms['ungated']:8.2f} ms  recovered {'n/a' if rec is None else f'{rec:6.0%}'}"
                      f"  ({result['ungated_groups']}/{result['unique_groups']} groups predicted)", file=log)
    out = {"host": backend.spec.name, "fingerprint": backend.spec.fingerprint(), "repeat": args.repeat,
           "retime_rounds": args.retime,
           "models": [_name(m) for m in args.model], "results": results}
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
