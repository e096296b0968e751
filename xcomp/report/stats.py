"""Latency statistics every report uses (one definition, so reports from different machines compare)."""

from __future__ import annotations

import numpy as np


def latency_summary(samples_ms) -> dict:
    """median, p90, min/max, mean/std, p10/p25/p75, runs, and spread_pct = 100 x (p90 - p10) / median."""
    a = np.asarray(samples_ms, dtype=np.float64)
    median = float(np.median(a))
    p10, p25, p75, p90 = (float(v) for v in np.percentile(a, [10, 25, 75, 90]))
    return {
        "median_ms": median,
        "p90_ms": p90,
        "p10_ms": p10,
        "p25_ms": p25,
        "p75_ms": p75,
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
        "mean_ms": float(a.mean()),
        "std_ms": float(a.std()),
        "spread_pct": 100.0 * (p90 - p10) / median if median > 0 else 0.0,
        "runs": int(a.size),
    }


def throughput(median_ms: float, batch: int | None) -> dict:
    per_s = 1e3 / median_ms if median_ms > 0 else 0.0
    return {"inferences_per_s": per_s, "batch": batch, "samples_per_s": per_s * batch if batch else None}
