"""Measure on another machine by carrying files: tune a GPU target from a CPU-only workstation.

One round trip:
  1. here, `xcomp tune ... --runner bundle --bundle-dir DIR` builds candidates and writes them into DIR: every
     candidate's library (for CUDA: host code plus the kernels' CUDA C, compiled by NVRTC when loaded there), each
     operator group's reference build, argument shapes/dtypes and seeds, timing settings, versions and the target
     (manifest.json), and the measuring script (run.py, a copy of bundle_run.py, and beside it timing.py: they need
     only numpy and TVM);
  2. there, `python3 DIR/run.py` measures them all and writes DIR/results.json;
  3. here again, the same `xcomp tune` command (or `xcomp db import-results DB DIR`) imports the results into the
     database as ordinary records (failures as failure records), empties DIR, and queues the next batch.
Each round trip measures one batch per operator group, proposed knowing every result so far.

A pick never loses to the default: after the batch, run.py times each group's default and its fastest alone (of
the batch and the fastest known here) side by side, PAIRED_ROUNDS rounds, and the import stores the pick as
measure.side_by_side_pick does for the rpc runner: the fastest alone only where it won every round. Stored last,
it is the group's newest record, the one `compile --db` builds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import uuid

from xcomp import timing
from xcomp.timing import Timing
from xcomp.autotune import bundle_run
from xcomp.autotune.db import canonical_knobs
from xcomp.autotune.measure import PAIRED_ROUNDS, MeasurementDeferred, Runner, Workload, side_by_side_pick
from xcomp.errors import UserError

MANIFEST, RESULTS, SCRIPT, LIBS = "manifest.json", "results.json", "run.py", "libs"
TIMING_MODULE = "timing.py"  # what run.py imports its timing from


class BundleRunner(Runner):
    """Queues every batch it is given into a bundle folder (see the module doc) instead of measuring it."""

    deferred = True

    def __init__(self, folder, timeout_s: float = 30.0, number: int = 3, repeat: int = 5, min_repeat_ms: int = 20,
                 startup_grace_s: float = 120.0, cold_weights: bool = True):
        self.folder = os.path.abspath(folder)
        # cold_weights: as LocalRunner; it applies on CPU targets only (bundle_run.check_and_time)
        self.settings = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms, "timeout_s": timeout_s,
                         "startup_grace_s": startup_grace_s, "cold_weights": cold_weights}
        self.manifest = None  # the bundle being filled; close() writes it
        self.imported = None  # import_results' summary of what begin() found
        self._workload_ids = {}

    def begin(self, db):
        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise UserError(f"--bundle-dir {self.folder}: a file, not a folder")
        self.imported = import_results(self.folder, db)

    def run(self, reference, builds, target, params, workload=None):
        if workload is None:
            raise TypeError("BundleRunner.run needs the workload, to make records of the results later")
        manifest, wid = self._workload_id(reference, target, params, workload)
        for build in builds:
            cid = f"c{len(manifest['items'])}"
            manifest["items"].append({
                "id": cid, "workload": wid, "knobs": build.knobs, "build_s": build.build_s, "error": build.error,
                "artifact": self._copy(build.artifact, f"{cid}.so") if build.artifact else None})
        raise MeasurementDeferred(f"{len(builds)} candidate(s) queued in {self.folder}")

    def queue_side_by_side(self, reference, target, params, workload, default: tuple, contender: tuple | None):
        """Have run.py time the group's default (`reference` is its build) and its fastest alone side by side
        after the batch, PAIRED_ROUNDS rounds: the fastest alone of the batch's results and of `contender`, the
        fastest other config known here. default: (canonical knobs, median ms known here); contender:
        (BuildResult, median ms known here) or None. No contender and no batch of the group: nothing to time."""
        manifest, wid = self._workload_id(reference, target, params, workload)
        known = [{"knobs": json.loads(default[0]), "median_ms": default[1], "artifact": manifest["workloads"][wid][
            "reference"]}]
        if contender is not None:
            build, ms = contender
            known.append({"knobs": build.knobs, "median_ms": ms,
                          "artifact": self._copy(build.artifact, f"{wid}-fastest.so")})
        manifest["side_by_side"][wid] = {"rounds": PAIRED_ROUNDS, "known": known}

    def _workload_id(self, reference, target, params, workload) -> tuple:
        """(the bundle being filled, the workload's id in it), adding the workload on its first batch."""
        manifest = self.manifest or self._new_bundle(target)
        if manifest["target"] != target:
            raise UserError(f"one bundle holds one target: {manifest['target']}, not {target}")
        if workload.key not in self._workload_ids:
            wid = self._workload_ids[workload.key] = f"w{len(self._workload_ids)}"
            manifest["workloads"][wid] = {
                "key": workload.key, "kind": workload.kind, "hw_fingerprint": workload.hw_fingerprint,
                "features_version": workload.features_version, "evict_private_bytes": workload.evict_private_bytes,
                "reference": self._copy(reference, f"{wid}-ref.so"),
                "params": [[list(shape), dtype] for shape, dtype in params], "seed": bundle_run.INPUT_SEED}
        return manifest, self._workload_ids[workload.key]

    def _new_bundle(self, target):
        import tvm

        from xcomp.version import __version__

        shutil.rmtree(os.path.join(self.folder, LIBS), ignore_errors=True)  # leftovers of an interrupted run
        os.makedirs(os.path.join(self.folder, LIBS))
        shutil.copy(bundle_run.__file__, os.path.join(self.folder, SCRIPT))
        shutil.copy(timing.__file__, os.path.join(self.folder, TIMING_MODULE))
        self.manifest = {
            "format": bundle_run.FORMAT, "bundle_id": uuid.uuid4().hex, "created": time.time(),
            "xcomp_version": __version__, "tvm_version": tvm.__version__, "target": target,
            "device": bundle_run.device_kind(target), "arch": target.partition(":")[2],
            "measure": self.settings, "workloads": {}, "items": [], "side_by_side": {}}
        return self.manifest

    def _copy(self, path, name):
        shutil.copy(path, os.path.join(self.folder, LIBS, name))
        return f"{LIBS}/{name}"

    @property
    def pending(self) -> int:
        """Candidates queued in this run for the other machine."""
        return sum(item["error"] is None for item in self.manifest["items"]) if self.manifest else 0

    @property
    def side_by_side(self) -> int:
        """Groups whose default and fastest alone the bundle times side by side (with pending, 0: nothing to
        measure there)."""
        return len(self.manifest["side_by_side"]) if self.manifest else 0

    def close(self):
        """Write the manifest last: a folder whose filling was interrupted never looks like a bundle."""
        if self.manifest is not None:
            bundle_run.write_json(os.path.join(self.folder, MANIFEST), self.manifest)

    def instructions(self, rerun: str) -> str:
        """What the user does next; `rerun` is the command that imports the results and goes on."""
        cuda = "; libcudart on LD_LIBRARY_PATH" if self.manifest["device"] == "cuda" else ""
        return (f"{self.pending} candidate(s) of {len(self.manifest['workloads'])} operator group(s), and "
                f"{self.side_by_side} group(s)' default and fastest config side by side, wait in "
                f"{self.folder} to be measured on a {self.manifest['target']} machine. Copy that folder there and run "
                f"(needs python3, numpy, apache-tvm=={self.manifest['tvm_version']}{cuda}):\n"
                f"    python3 {os.path.basename(self.folder)}/{SCRIPT}\n"
                f"then copy its {RESULTS} back into {self.folder} here and run again:\n    {rerun}")


def _owner(manifest, wid) -> Workload:
    """The workload `wid` of the bundle, timed as run_bundle timed it (a bundle written before cold_weights
    existed timed warm)."""
    w = manifest["workloads"][wid]
    evict = w.get("evict_private_bytes", 0)
    policy = bundle_run.request_timing({"device": manifest["device"], **manifest["measure"],
                                        "evict_private_bytes": evict})
    return Workload(w["key"], w["kind"], manifest["target"], w["hw_fingerprint"], w["features_version"], policy,
                    evict)


def _records(manifest, results):
    """Records of every candidate with a result (build failures included); the ids of those without one."""
    records, missing = [], []
    for item in manifest["items"]:
        result = {"error": item["error"]} if item["error"] else results.get(item["id"])
        if result is None:
            missing.append(item["id"])
            continue
        owner = _owner(manifest, item["workload"])
        records.append(owner.record(item["knobs"], result.get("latencies_ms", []), result.get("error")))
    return records, missing


def _picks(manifest, outcomes: dict, db) -> dict:
    """Store the pick of every group the bundle was to time side by side (side_by_side_pick), after the batch's
    records so that it is the group's newest; returns {workload key: outcome with "picked"} of those timed (the
    tuning summary shows them). Where the fastest alone was the default, nothing was timed and the default is the
    fastest record already; where the rounds did not run (an interrupted run.py), the default stays, and the
    next bundle times them."""
    shown, picks = {}, {}
    for wid, entry in manifest.get("side_by_side", {}).items():
        owner, outcome = _owner(manifest, wid), outcomes.get(wid)
        if outcome is None or (outcome["best"] != outcome["default"] and not outcome["default_ms"]):
            default = entry["known"][0]
            picks[owner] = [dataclasses.replace(owner.record(default["knobs"], [default["median_ms"]], None),
                                                timing=Timing.SIDE_BY_SIDE)]
            continue
        default, best = (canonical_knobs(outcome[k]) for k in ("default", "best"))
        if best == default:
            continue
        picks[owner] = side_by_side_pick(owner, default, best, {default: outcome["default_ms"],
                                                                best: outcome["best_ms"]}, entry["rounds"])
        if outcome.get("error") and len(picks[owner]) > 1:  # a run failed: the rounds stopped there
            picks[owner][1].error = f"side by side: {outcome['error']}"
        shown[owner.key] = {**outcome, "picked": picks[owner][0].knobs}
    for owner, records in picks.items():
        db.replace_picks(owner.target, owner.hw_fingerprint, {owner.key: records})
    return shown


def import_results(folder, db) -> dict | None:
    """Import a measured bundle's results into `db`, then empty the folder for the next bundle.

    Returns None when `folder` holds no bundle, else {"imported", "already_present", "not_measured", "device"}.
    A bundle still waiting for its measurement, or the results of another bundle, are a UserError saying what to
    do."""
    if not os.path.exists(os.path.join(folder, MANIFEST)):
        return None
    results_path = os.path.join(folder, RESULTS)
    try:
        manifest = bundle_run.read_manifest(folder)
        if not os.path.exists(results_path):
            raise UserError(
                f"{folder} holds a bundle of {len(manifest['items'])} candidate(s) for {manifest['target']} waiting "
                f"to be measured: run `python3 {SCRIPT}` in a copy of it on a {manifest['target']} machine and copy "
                f"{RESULTS} back here (or delete the folder to drop the bundle)")
        results = bundle_run.read_json(results_path)
    except bundle_run.BundleError as err:
        raise UserError(str(err)) from None
    if results.get("format") != bundle_run.FORMAT or results.get("bundle_id") != manifest["bundle_id"]:
        raise UserError(f"{results_path} holds the results of another bundle (id {results.get('bundle_id')}; this "
                        f"bundle is {manifest['bundle_id']}): copy back the results.json made from this bundle")
    records, missing = _records(manifest, results["results"])
    new = db.add_batch(records)
    picks = _picks(manifest, results.get("side_by_side", {}), db)
    for name in (MANIFEST, RESULTS, SCRIPT):
        os.remove(os.path.join(folder, name))
    shutil.rmtree(os.path.join(folder, LIBS), ignore_errors=True)
    return {"imported": new, "already_present": len(records) - new, "not_measured": len(missing),
            "device": results["device"], "side_by_side": picks}
