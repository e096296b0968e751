"""Tuning bundles for a lent GPU: build them here, run them in run_all.sh's call, import what they measured.

    python tools/gpu/bundles.py make [--only NAME ...]        here (no GPU): one bundle per workload, committed
    python tools/gpu/bundles.py run OUT [--budget-s S] [--dry-run]   on the device (run_all.sh): run.py of each
    python tools/gpu/bundles.py import RESULTS.tar.gz          here: results into the database, the next bundles
    python tools/gpu/bundles.py model NAME OUT.onnx           the workload's model (pretrain's -m, xcomp compile)

A bundle is what `xcomp tune -t cuda:sm_90 --runner bundle` writes (xcomp/autotune/bundle.py); a waiting one sits
in tools/gpu/bundles/<workload>/ (a few hundred KiB: CUDA C and host code per candidate). The tuning database
lives as JSONL in benchmarks/records/<sm_90 fingerprint>/<workload>.jsonl beside its spec.json, where the CPU hosts'
records are (benchmarks/records/README.md): `make` rebuilds a scratch database from it, `import` exports it back.
The device side (`run`) needs only the standard library here: each bundle's own run.py does the measuring.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLES = os.path.join(REPO, "tools", "gpu", "bundles")
RECORDS = os.path.join(REPO, "benchmarks", "records")
TARGET = "cuda:sm_90"
RESULTS_ARCHIVE = "bundle-results.tar.gz"  # the one file run_all.sh's bundle step adds to $OUT
INTERRUPT_GRACE_S = 15  # from run.py's SIGINT to its kill: results.json is written in this time
# Where `run` also keeps each results.json on the device: a later call on the same warm machine gets a fresh copy
# of the tree, and run.py goes on from this copy (it ignores one of another bundle).
KEPT = "/tmp/xcomp-bundle-results"
# (name, model, --trials of one round trip). A round trip measures at most one batch (8) per operator group, plus
# the side-by-side rounds; the first one measures each group's default only (docs/tuning.md). --trials keeps the
# later ones near 2-3 minutes of the GPU call (tools/gpu/README.md has the estimate).
WORKLOADS = [("gemm4096_f16", "gemm:4096,4096,4096,float16", 8),
             ("light_resnet50_f16", "onnx:light_resnet50:float16", 24)]


# -- the models ---------------------------------------------------------------------------------------------------


def to_float16(model):
    """The model with every float32 tensor (inputs, outputs, weights, constants, casts) in float16: the float16
    variant of a shipped float32 model, for tuning its float16 groups."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    f32, f16 = TensorProto.FLOAT, TensorProto.FLOAT16

    def half(tensor):
        if tensor.data_type == f32:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), tensor.name))

    graph = model.graph
    for tensor in graph.initializer:
        half(tensor)
    for info in list(graph.input) + list(graph.output) + list(graph.value_info):
        if info.type.tensor_type.elem_type == f32:
            info.type.tensor_type.elem_type = f16
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == f32:
                attr.i = f16
            elif attr.name == "value" and attr.HasField("t"):
                half(attr.t)
    return model


def write_model(spec: str, path: str) -> str:
    """Write the model `spec` names to `path`: 'gemm:M,N,K,DTYPE' (benchmarks/gpu_suite.py's one-MatMul model)
    or 'onnx:NAME[:float16]' (a model shipped with onnx, optionally in float16)."""
    import onnx

    kind, _, rest = spec.partition(":")
    if kind == "gemm":
        sys.path.insert(0, os.path.join(REPO, "benchmarks"))
        from gpu_suite import gemm_model

        m, n, k, dtype = rest.split(",")
        model = gemm_model(int(m), int(n), int(k), dtype)
    else:
        from xcomp.frontends.examples import resolve

        name, _, dtype = rest.partition(":")
        model = onnx.load(resolve(f"onnx:{name}"))
        if dtype == "float16":
            model = to_float16(model)
    onnx.save(model, path)
    return path


# -- here: make and import ------------------------------------------------------------------------------------------


def host_folder(records=RECORDS) -> str:
    """benchmarks/records/<fingerprint of cuda:sm_90>/, created with its spec.json (what the records of every
    sm_90 GPU, H100 or H200, are featurized with)."""
    from xcomp.backends import get_backend

    spec = get_backend(TARGET).spec
    folder = os.path.join(records, spec.fingerprint())
    os.makedirs(folder, exist_ok=True)
    if not os.path.exists(os.path.join(folder, "spec.json")):
        with open(os.path.join(folder, "spec.json"), "w") as f:
            f.write(json.dumps(spec.to_dict(), indent=1) + "\n")
    return folder


def xcomp_cli(*args) -> str:
    """Run an xcomp command in this process (TVM is imported once for them all); returns what it printed."""
    import contextlib

    from xcomp.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = main(list(args))
    if rc != 0:
        raise SystemExit(f"xcomp {' '.join(args)} failed with exit code {rc} (its error is above)")
    return printed.getvalue()


def scratch_db(name: str, scratch: str, records=RECORDS) -> str:
    """A database holding the workload's shipped records (none before its first GPU run)."""
    db = os.path.join(scratch, f"{name}.sqlite")
    jsonl = os.path.join(host_folder(records), f"{name}.jsonl")
    if os.path.exists(jsonl):
        xcomp_cli("db", "import", db, jsonl)
    return db


def bundle_state(folder: str) -> str:
    """'empty' (nothing waits), 'waiting' (to be measured, or a cut-short run's results.json to go on from), or
    'measured' (a complete results.json to import)."""
    if not os.path.exists(os.path.join(folder, "manifest.json")):
        return "empty"
    results = os.path.join(folder, "results.json")
    if not os.path.exists(results):
        return "waiting"
    with open(results) as f:
        return "measured" if json.load(f).get("complete") else "waiting"


def make(names, bundles=BUNDLES, workloads=WORKLOADS, records=RECORDS) -> list:
    """Build the next bundle of each workload whose folder holds none; returns a summary row per workload."""
    rows = []
    for name, spec, trials in workloads:
        if names and name not in names:
            continue
        folder = os.path.join(bundles, name)
        state = bundle_state(folder)
        if state != "empty":
            rows.append({"bundle": name, "state": state, "note": "left as it is: import its results first"
                         if state == "measured" else "left as it is: it waits for a GPU run"})
            continue
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as scratch:
            model = write_model(spec, os.path.join(scratch, f"{name}.onnx"))
            xcomp_cli("tune", model, "-t", TARGET, "--db", scratch_db(name, scratch, records), "--runner", "bundle",
                      "--bundle-dir", folder, "--trials", str(trials), "-q")
        rows.append({"bundle": name, "state": bundle_state(folder), "build_s": round(time.perf_counter() - start),
                     **describe(folder)})
    return rows


def describe(folder: str) -> dict:
    """Candidates, groups and size of a bundle folder, and the longest its run.py may take (every candidate at
    its timeout, plus the start-up grace)."""
    if bundle_state(folder) == "empty":
        return {"candidates": 0}
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    candidates = sum(item["error"] is None for item in manifest["items"])
    side = sum(entry["rounds"] * 2 for entry in manifest["side_by_side"].values())
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "**"), recursive=True) if os.path.isfile(p))
    worst = (candidates + side) * manifest["measure"]["timeout_s"] + manifest["measure"]["startup_grace_s"]
    return {"candidates": candidates, "groups": len(manifest["workloads"]), "side_by_side_runs": side,
            "kib": size // 1024, "worst_case_s": worst}


def import_archive(archive: str, bundles=BUNDLES, records=RECORDS) -> list:
    """Put each results.json of a GPU run's archive into its bundle folder; where complete, import it into the
    workload's database and export that back to benchmarks/records/<fingerprint>/<workload>.jsonl, which empties
    the folder for `make`. A bundle whose results belong to another bundle (it was rebuilt since) is refused by
    the import, naming both."""
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(archive) as tar:
            tar.extractall(os.path.join(scratch, "run"), filter="data")
        for results in sorted(glob.glob(os.path.join(scratch, "run", "*", "results.json"))):
            name = os.path.basename(os.path.dirname(results))
            folder = os.path.join(bundles, name)
            if bundle_state(folder) == "empty":
                rows.append({"bundle": name, "imported": 0, "note": "no bundle of that name waits here"})
                continue
            shutil.copy(results, os.path.join(folder, "results.json"))
            if bundle_state(folder) == "waiting":  # cut short: commit it as it is, the next GPU run goes on
                rows.append({"bundle": name, "imported": 0, "note": "partial results kept in the bundle"})
                continue
            db = scratch_db(name, scratch, records)
            summary = json.loads(xcomp_cli("db", "import-results", db, folder, "--json"))
            xcomp_cli("db", "export", db, os.path.join(host_folder(records), f"{name}.jsonl"))
            rows.append({"bundle": name, **{k: summary.get(k) for k in ("imported", "not_measured", "device")}})
    return rows


# -- on the device: run ---------------------------------------------------------------------------------------------


def waiting(bundles=BUNDLES) -> list:
    """The bundle folders that wait to be measured (or were cut short: run.py goes on where it stopped)."""
    folders = [os.path.dirname(p) for p in sorted(glob.glob(os.path.join(bundles, "*", "manifest.json")))]
    return [folder for folder in folders if bundle_state(folder) == "waiting"]


def run_one(folder: str, seconds: float, log, dry_run: bool) -> dict:
    """Run the bundle's run.py for at most `seconds`; INTERRUPT_GRACE_S before the limit it gets SIGINT, which it
    answers by keeping results.json as it stands (every candidate measured so far), and at the limit it is killed.
    dry_run: with every GPU hidden, so run.py stops at its device check having timed nothing."""
    start = time.perf_counter()
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="") if dry_run else None
    # a job started in the background inherits SIGINT ignored, and Python then never raises KeyboardInterrupt:
    # restore the default in the child so the SIGINT below reaches run.py
    proc = subprocess.Popen([sys.executable, os.path.join(folder, "run.py")], stdout=log, stderr=subprocess.STDOUT,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        rc = proc.wait(timeout=max(1.0, seconds - INTERRUPT_GRACE_S))
    except subprocess.TimeoutExpired:
        proc.send_signal(2)  # SIGINT: run.py's KeyboardInterrupt path
        try:
            rc = proc.wait(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    return {"rc": rc, "seconds": round(time.perf_counter() - start, 1)}


def run(out: str, budget_s: float, dry_run: bool = False, bundles=BUNDLES) -> dict:
    """Measure every waiting bundle while `budget_s` lasts, packing each one's results.json and log, and a
    summary, into OUT/bundle-results.tar.gz: one file, whatever the number of bundles (the device tool returns 8).
    The archive is rewritten after each bundle, so a call killed at its limit still returns the bundles before.
    dry_run: the rehearsal, with or without a GPU: run.py starts with every GPU hidden and stops at its device
    check, which proves that every bundle is found, that its script starts, and that the packing works."""
    deadline = time.monotonic() + budget_s
    summary = {"budget_s": budget_s, "dry_run": dry_run, "bundles": {}}
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as logs:
        for folder in waiting(bundles):
            name, left = os.path.basename(folder), deadline - time.monotonic()
            try:
                row = summary["bundles"][name] = describe(folder)
            except (OSError, ValueError, KeyError) as err:  # one broken bundle must not cost the others their turn
                summary["bundles"][name] = {"error": f"{type(err).__name__}: {err}"}
                continue
            if left < INTERRUPT_GRACE_S + 10:
                row["skipped"] = f"budget spent ({budget_s:.0f}s)"
                print(f"bundle {name}: {row['skipped']}, it waits for the next call", flush=True)
                continue
            os.makedirs(os.path.join(logs, name))
            results, kept = os.path.join(folder, "results.json"), os.path.join(KEPT, name, "results.json")
            if not dry_run and not os.path.exists(results) and os.path.exists(kept):
                shutil.copy(kept, results)
            with open(os.path.join(logs, name, "run.log"), "w") as log:
                row.update(run_one(folder, left, log, dry_run))
            if os.path.exists(results):
                os.makedirs(os.path.dirname(kept), exist_ok=True)
                shutil.copy(results, kept)
                with open(results) as f:
                    doc = json.load(f)
                row.update(measured=len(doc["results"]), complete=doc["complete"])
                shutil.copy(results, os.path.join(logs, name, "results.json"))
            print(f"bundle {name}: {json.dumps(row)}", flush=True)
            _pack(logs, summary, out)
        _pack(logs, summary, out)
    return summary


def _pack(logs: str, summary: dict, out: str) -> None:
    """The summary and every bundle's log and results so far into OUT's archive, replaced whole (never half
    written)."""
    with open(os.path.join(logs, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    archive = os.path.join(out, RESULTS_ARCHIVE)
    with tarfile.open(archive + ".part", "w:gz") as tar:
        for name in sorted(os.listdir(logs)):
            tar.add(os.path.join(logs, name), arcname=name)
    os.replace(archive + ".part", archive)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("make", help="here: build the next bundle of each workload with none waiting")
    p.add_argument("--only", action="append", default=[], help="a workload's name (repeatable)")
    p = sub.add_parser("run", help="on the device: measure the waiting bundles, pack results into OUT")
    p.add_argument("out")
    p.add_argument("--budget-s", type=float, default=150.0)
    p.add_argument("--dry-run", action="store_true", help="no GPU: start each run.py, pack what it leaves")
    p.add_argument("--bundles", default=BUNDLES, help="the folder of bundle folders (default tools/gpu/bundles)")
    p = sub.add_parser("import", help=f"here: import a GPU run's {RESULTS_ARCHIVE}, export the records")
    p.add_argument("archive")
    p = sub.add_parser("model", help="write a workload's model (its float16 variant) as ONNX")
    p.add_argument("name", choices=[name for name, _, _ in WORKLOADS])
    p.add_argument("path")
    args = parser.parse_args(argv)
    if args.action == "run":
        run(args.out, args.budget_s, args.dry_run, args.bundles)
        return 0
    if args.action == "model":
        write_model(dict((name, spec) for name, spec, _ in WORKLOADS)[args.name], args.path)
        return 0
    rows = make(args.only) if args.action == "make" else import_archive(args.archive)
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
