"""How well the XGBoost cost model ranks candidates it has not seen, on records from a tuning database.

Usage: python benchmarks/costmodel_quality.py MODEL --db tune.sqlite [--holdout 0.3] [--seed 0] [--json out.json]
       python benchmarks/costmodel_quality.py MODEL --db tune.sqlite --pretrained

With --pretrained, nothing is trained: the model that ships (costmodel/pretrained/cpu.json) ranks every record,
which tells how well it guides a new user's first trials on a model it was not trained on.

The model's operator groups give each record its scheduled program; workloads are split (not records, so the
held-out groups are truly new to the model), the model trains on one part and ranks the other. Reported:
mean Spearman rank correlation per held-out workload, and the held-out mean of best measured / latency of the
top-1 predicted candidate (1.0: the model's first pick is the best measured one), beside the same numbers for a
random ranking.
"""

from __future__ import annotations

import argparse
import json
import random

import numpy as np


def main():
    from xcomp.autotune.pretrain import training_set
    from xcomp.costmodel import CostModel, pretrained_model, ranking_quality
    from xcomp.frontends.examples import resolve

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help=".onnx path or onnx:NAME (the model the database was tuned for)")
    parser.add_argument("--db", required=True)
    parser.add_argument("-t", "--target", default="cpu")
    parser.add_argument("--holdout", type=float, default=0.3, help="share of workloads held out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--pretrained", action="store_true",
                        help="rank every record with the shipped model instead of training on part of them")
    args = parser.parse_args()

    x, y, groups = training_set([resolve(args.model)], [args.db], args.target)
    measured = np.isfinite(y)  # rank what ran; failures are the builder's and runner's business
    x, y, groups = x[measured], y[measured], [g for g, m in zip(groups, measured) if m]
    keys = sorted(set(groups))
    random.Random(args.seed).shuffle(keys)
    held = set(keys if args.pretrained else keys[: max(1, int(len(keys) * args.holdout))])
    test = np.array([g in held for g in groups])
    train_groups = [g for g, t in zip(groups, test) if not t]
    test_groups = [g for g, t in zip(groups, test) if t]

    if args.pretrained:
        model = pretrained_model()
        if model is None:
            parser.error("no shipped model for this features version (retrain it: python -m xcomp.autotune.pretrain)")
    else:
        model = CostModel(seed=args.seed).fit(x[~test], y[~test], train_groups)
    learned = ranking_quality(model.predict(x[test]), y[test], test_groups)
    rng = np.random.default_rng(args.seed)
    chance = ranking_quality(rng.random(int(test.sum())), y[test], test_groups)
    result = {"records": len(y), "workloads": len(keys), "train_records": int((~test).sum()),
              "heldout_records": int(test.sum()), "model": learned, "random": chance}
    print(f"{len(y)} records over {len(keys)} workloads; held out {len(held)} workloads ({int(test.sum())} records)")
    for name, q in (("cost model", learned), ("random", chance)):
        print(f"{name:10s}  spearman {q['spearman']:+.3f}   top-1 predicted = {q['top1_vs_best']:.3f} of best")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
