"""Tuning bundles for a lent GPU rehearsed without one (tools/gpu/bundles.py): build a tiny cuda:sm_90 bundle, run
run_all.sh's bundle step in its dry run (run.py starts with every GPU hidden, stops at its device check) and check
the one archive it packs; then import results in that archive's shape and build the next round's bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu"))

import bundles  # noqa: E402

TINY = [("gemm64", "gemm:64,64,64,float32", 8)]  # float32: no matrix-core intrinsics to import


def test_run_all_runs_the_bundle_step_after_the_suite():
    script = open(os.path.join(ROOT, "tools", "gpu", "run_all.sh")).read()
    suite, step = script.index("benchmarks/gpu_suite.py --out"), script.index('tools/gpu/bundles.py run "$out"')
    assert suite < step  # the tests and the suite first, as documented; the bundles get what is left


def test_a_waiting_bundle_is_found_packed_and_its_results_imported(tmp_path):
    folder, records = tmp_path / "bundles", tmp_path / "records"
    (row,) = bundles.make([], bundles=str(folder), workloads=TINY, records=str(records))
    assert row["state"] == "waiting" and row["candidates"] == 1 and row["groups"] == 1  # round 1: the default
    assert row["worst_case_s"] == 30 + 120  # one candidate at its timeout, plus run.py's start-up grace
    assert bundles.make([], bundles=str(folder), workloads=TINY, records=str(records))[0]["note"].endswith(
        "it waits for a GPU run")

    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu", "bundles.py"), "run", str(out),
                           "--dry-run", "--budget-s", "300", "--bundles", str(folder)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(out) == [bundles.RESULTS_ARCHIVE]  # one file of the device tool's 8, whatever the count
    with tarfile.open(out / bundles.RESULTS_ARCHIVE) as tar:
        names = set(tar.getnames())
        summary = json.load(tar.extractfile("summary.json"))
        log = tar.extractfile("gemm64/run.log").read().decode()
    assert summary["dry_run"] and summary["bundles"]["gemm64"]["rc"] == 1
    assert "no cuda device visible here" in log and "Traceback" not in log  # run.py started and refused cleanly
    assert "gemm64/results.json" not in names and not (folder / "gemm64" / "results.json").exists()

    # what a GPU run packs: results.json of the bundle (a made-up time for its one candidate) beside its log
    manifest = json.loads((folder / "gemm64" / "manifest.json").read_text())
    (item,) = manifest["items"]
    results = {"format": 1, "bundle_id": manifest["bundle_id"], "tvm_version": manifest["tvm_version"],
               "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "compute_version": "9.0"},
               "complete": True, "results": {item["id"]: {"latencies_ms": [0.01, 0.011, 0.012]}}, "side_by_side": {}}
    (tmp_path / "run" / "gemm64").mkdir(parents=True)

    def import_from_gpu(complete):
        (tmp_path / "run" / "gemm64" / "results.json").write_text(json.dumps({**results, "complete": complete}))
        archive = tmp_path / "from_gpu.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(tmp_path / "run" / "gemm64", arcname="gemm64")
        return bundles.import_archive(str(archive), bundles=str(folder), records=str(records))

    # a run cut short by its budget: the results stay in the bundle, which still waits for the next GPU run
    assert import_from_gpu(False)[0]["note"] == "partial results kept in the bundle"
    assert bundles.waiting(str(folder)) == [str(folder / "gemm64")] and not list(records.glob("*/*.jsonl"))
    (imported,) = import_from_gpu(True)
    assert imported["imported"] == 1 and imported["not_measured"] == 0
    assert bundles.bundle_state(str(folder / "gemm64")) == "empty"  # consumed: the next make builds round 2
    (host,) = os.listdir(records)
    lines = (records / host / "gemm64.jsonl").read_text().splitlines()
    assert [json.loads(line)["target"] for line in lines] == ["cuda:sm_90"]
    assert json.loads((records / host / "spec.json").read_text())["arch"] == "sm_90"

    (row,) = bundles.make([], bundles=str(folder), workloads=TINY, records=str(records))
    assert row["state"] == "waiting" and row["candidates"] == 8  # round 2: one batch, the default now known


def test_a_run_past_its_budget_is_interrupted_and_keeps_what_it_wrote(tmp_path):
    # run.py answers SIGINT by keeping results.json as it stands (bundle_run.main): this one says that it did
    (tmp_path / "run.py").write_text(
        "import sys, time\ntry:\n    print('started', flush=True)\n    time.sleep(120)\n"
        "except KeyboardInterrupt:\n    print('interrupted: results.json kept', flush=True)\n    sys.exit(130)\n")
    with open(tmp_path / "run.log", "w") as log:
        row = bundles.run_one(str(tmp_path), bundles.INTERRUPT_GRACE_S + 5, log, dry_run=False)
    # SIGINT 5 s in, early enough for run.py to answer before the limit, where it would be killed
    assert row["rc"] == 130 and 5 <= row["seconds"] < bundles.INTERRUPT_GRACE_S + 5
    assert (tmp_path / "run.log").read_text().splitlines() == ["started", "interrupted: results.json kept"]
