"""An XGBoost ranking model over candidate features: which configs of a workload are fastest.

Trained with a pairwise ranking objective, grouped by workload, on "relevance" = how close a candidate is to the
best measured one of its workload (best = 1, 2x slower = 0.5, failed = 0). Only the order within a workload
matters, so one model serves workloads whose absolute latencies differ by orders of magnitude.
"""

from __future__ import annotations

import os

import numpy as np

from .features import FEATURES_VERSION, LENGTH

# Trained on this project's tuning records (python -m xcomp.autotune.pretrain) and shipped with the package, so a
# new user's first batches are ranked by a model rather than at random.
PRETRAINED_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained", "cpu.json")


def relevance(latencies: np.ndarray) -> np.ndarray:
    """Per-workload label in [0, 1]: best / latency, 0 for failures (inf)."""
    finite = np.isfinite(latencies)
    if not finite.any():
        return np.zeros_like(latencies, dtype=np.float32)
    best = latencies[finite].min()
    out = np.zeros_like(latencies, dtype=np.float32)
    out[finite] = best / latencies[finite]
    return out


class CostModel:
    def __init__(self, seed: int = 0, rounds: int = 120):
        self.seed = seed
        self.rounds = rounds
        self._booster = None

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def fit(self, features: np.ndarray, latencies_ms: np.ndarray, groups: list) -> "CostModel":
        """features [n, LENGTH]; latencies (inf for failures); groups: workload key of each row."""
        import xgboost as xgb

        features = np.asarray(features, np.float32)
        latencies_ms = np.asarray(latencies_ms, np.float64)
        order = np.argsort(np.asarray(groups), kind="stable")  # xgboost wants each group's rows together
        keys = np.asarray(groups)[order]
        labels = np.concatenate([relevance(latencies_ms[order][keys == k]) for k in dict.fromkeys(keys)])
        sizes = [int((keys == k).sum()) for k in dict.fromkeys(keys)]
        dtrain = xgb.DMatrix(features[order], label=labels)
        dtrain.set_group(sizes)
        params = {
            "objective": "rank:pairwise",
            "eta": 0.2,
            "max_depth": 6,
            "min_child_weight": 1,
            "subsample": 0.9,
            "seed": self.seed,
            "nthread": max(1, (os.cpu_count() or 1)),
            "verbosity": 0,
        }
        self._booster = xgb.train(params, dtrain, num_boost_round=self.rounds)
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Higher is predicted faster. Untrained: zeros (no preference)."""
        features = np.asarray(features, np.float32).reshape(-1, LENGTH)
        if self._booster is None:
            return np.zeros(len(features), np.float32)
        import xgboost as xgb

        return self._booster.predict(xgb.DMatrix(features))

    def save(self, path, **provenance):
        """provenance: strings kept in the file beside the trees (what it was trained on, where)."""
        if self._booster is None:
            raise ValueError("cannot save an untrained cost model")
        self._booster.set_attr(features_version=str(FEATURES_VERSION), **provenance)
        self._booster.save_model(os.fspath(path))

    @classmethod
    def load(cls, path) -> "CostModel":
        import xgboost as xgb

        model = cls()
        booster = xgb.Booster()
        booster.load_model(os.fspath(path))
        if booster.attr("features_version") != str(FEATURES_VERSION):
            raise ValueError(f"{path}: cost model for features v{booster.attr('features_version')}, "
                             f"need v{FEATURES_VERSION}")
        model._booster = booster
        return model


def pretrained_model() -> "CostModel | None":
    """The shipped model, or None when it is missing or was trained on another features version."""
    try:
        return CostModel.load(PRETRAINED_PATH)
    except (OSError, ValueError):  # missing, stale, or unreadable (XGBoostError is a ValueError)
        return None


def ranking_quality(predicted: np.ndarray, latencies_ms: np.ndarray, groups: list) -> dict:
    """Held-out quality: mean Spearman rank correlation per workload (of score vs speed) and how close the
    top-1 predicted candidate is to the best measured one (ratio best / chosen, 1.0 = perfect)."""
    from scipy.stats import spearmanr

    groups = np.asarray(groups)
    rhos, top1 = [], []
    for key in dict.fromkeys(groups):
        mask = groups == key
        lat = np.asarray(latencies_ms, np.float64)[mask]
        pred = np.asarray(predicted)[mask]
        ok = np.isfinite(lat)
        if ok.sum() >= 3 and np.ptp(pred[ok]) > 0:
            rho = spearmanr(pred[ok], -lat[ok]).statistic
            if np.isfinite(rho):
                rhos.append(float(rho))
        if ok.any():
            chosen = lat[np.argmax(pred)]
            top1.append(float(lat[ok].min() / chosen) if np.isfinite(chosen) else 0.0)
    return {
        "spearman": float(np.mean(rhos)) if rhos else float("nan"),
        "top1_vs_best": float(np.mean(top1)) if top1 else float("nan"),
        "workloads": len(top1),
    }
