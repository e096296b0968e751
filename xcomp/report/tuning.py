"""Tuning curves from a tuning database: best latency found so far vs trials, per operator group."""

from __future__ import annotations

import math


def tuning_curves(db_path, targets: list) -> dict:
    """{db, curves: [{target, key, group, kind, hw_fingerprint, timing, trials, failed, points: [[trial, best_ms]],
    best_ms}]} for the groups of the report's targets, a curve per machine and way of timing (times taken warm
    and cold do not make one curve). Records are ordered by `created`; a failed candidate counts as a trial but
    does not lower the curve. A tuning run's picks (timing.PICKS) are no trials."""
    from xcomp.backends.base import HardwareSpec
    from xcomp.autotune.db import TuningDB
    from xcomp.timing import PICKS

    curves = []
    with TuningDB(db_path) as db:
        for entry in targets:
            names = {g["key"]: g["group"] for g in entry.get("groups", [])}
            fingerprint_here = HardwareSpec.from_dict(entry["hardware"]).fingerprint()
            by_group = {}
            for record in db.records(target=entry["target"]):
                if (names and record.workload_key not in names) or record.timing in PICKS:
                    continue
                group = (record.workload_key, record.hw_fingerprint, record.kind, record.timing)
                by_group.setdefault(group, []).append(record)
            for (key, fingerprint, kind, timing), records in by_group.items():
                records.sort(key=lambda r: r.created)
                best, points, failed = math.inf, [], 0
                for i, record in enumerate(records, start=1):
                    if record.ok:
                        best = min(best, record.median_ms)
                    else:
                        failed += 1
                    if math.isfinite(best):
                        points.append([i, best])
                curves.append({"target": entry["target"], "key": key, "group": names.get(key, key), "kind": kind,
                               "hw_fingerprint": fingerprint, "timing": timing,
                               "same_hardware": fingerprint == fingerprint_here, "trials": len(records),
                               "failed": failed,
                               "points": points, "best_ms": best if math.isfinite(best) else None})
    return {"db": str(db_path), "curves": curves}
