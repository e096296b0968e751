"""Training data for the cost model from tuning databases, and the pretrained model that ships with xcomp.

Usage: python -m xcomp.autotune.pretrain --db tune.sqlite [--db more.sqlite] -m onnx:light_resnet50 [-m ...]
           [-t cpu] [-o costmodel/pretrained/cpu.json]

A record holds a workload key and knobs, not the program: each model's operator groups give the records of their
key a scheduled program to extract features from. Records of workloads none of the models has are skipped.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def training_set(models, db_paths, target="cpu"):
    """(features [n, LENGTH], median ms [n] (inf for failures), workload key per row) for every record in the
    databases whose workload one of `models` has, measured on this target and hardware and timed as the newest
    record of its workload was (the model learns rankings within a workload: times taken in different ways
    would rank against each other)."""
    from xcomp.autotune.tuner import model_tasks
    from xcomp.backends import get_backend
    from xcomp.costmodel import FeatureExtractor
    from xcomp.autotune.db import TuningDB

    backend = get_backend(target)
    tasks = {}
    for model in models:
        tasks.update({t.group.key: t for t in model_tasks(model, backend, None)[0]})
    features = FeatureExtractor(backend.spec, backend.target())
    rows, latencies, groups = [], [], []
    for path in db_paths:
        fingerprint = backend.spec.fingerprint()
        with TuningDB(path) as db:
            records = db.search_records(backend.target_string, fingerprint)
        for record in records:
            task = tasks.get(record.workload_key)
            if task is None or not task.template.in_space(record.knobs):
                continue
            try:
                scheduled = task.template.schedule(record.knobs)
            except Exception:  # a config the template no longer applies: no program to learn from
                continue
            rows.append(features.vector(scheduled, record.knobs, task.group.kind))
            latencies.append(record.median_ms if record.ok else np.inf)
            groups.append(record.workload_key)
    if not rows:
        return np.zeros((0, 0), np.float32), np.zeros(0), []
    return np.stack(rows), np.asarray(latencies, np.float64), groups


def main(argv=None):
    from xcomp.costmodel import CostModel
    from xcomp.costmodel.model import PRETRAINED_PATH
    from xcomp.frontends.examples import resolve

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", action="append", required=True, help="tuning database (repeatable)")
    parser.add_argument("-m", "--model", action="append", required=True,
                        help=".onnx path or onnx:NAME whose groups the records belong to (repeatable)")
    parser.add_argument("-t", "--target", default="cpu")
    parser.add_argument("-o", "--output", default=PRETRAINED_PATH)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    x, y, groups = training_set([resolve(m) for m in args.model], args.db, args.target)
    if not len(y):
        parser.error("no record in the databases belongs to a group of these models on this target")
    from xcomp.backends import get_backend

    summary = {"records": len(y), "workloads": len(set(groups)), "failed": int(np.isinf(y).sum()),
               "models": [os.path.basename(m) for m in args.model], "hardware": get_backend(args.target).spec.name}
    CostModel(seed=args.seed).fit(x, y, groups).save(args.output, **{k: str(v) for k, v in summary.items()})
    print(json.dumps({"output": os.path.abspath(args.output), **summary}))


if __name__ == "__main__":
    main()
