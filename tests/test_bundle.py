"""Remote measurement by bundle: build here, measure with run.py "on the GPU machine" (a subprocess that cannot
import xcomp), import the results as records; failures stay failures; a CUDA bundle carries its kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

import xcomp
from conftest import tiny_mlp
from test_measure import N, _build
from xcomp.autotune.bundle import BundleRunner, import_results
from xcomp.autotune.measure import BuildResult, MeasurementDeferred, Workload
from xcomp.backends import get_backend
from xcomp.autotune.db import TuningDB, canonical_knobs
from xcomp.errors import UserError
from xcomp.timing import PICKS, Timing


def run_elsewhere(folder, tmp_path):
    """Run the bundle's own run.py as the measuring machine would: a copy of the folder, no xcomp importable,
    then carry results.json back."""
    import shutil

    blocker = tmp_path / "no_xcomp" / "xcomp"
    blocker.mkdir(parents=True, exist_ok=True)
    (blocker / "__init__.py").write_text("raise ImportError('run.py must not need xcomp')\n")
    there = tmp_path / "gpu_machine" / os.path.basename(folder)
    shutil.rmtree(there, ignore_errors=True)
    shutil.copytree(folder, there)
    env = dict(os.environ, PYTHONPATH=str(blocker.parent))
    proc = subprocess.run([sys.executable, str(there / "run.py")], capture_output=True, text=True, env=env,
                          timeout=600)
    if proc.returncode == 0:
        shutil.copy(there / "results.json", os.path.join(folder, "results.json"))
    return proc


def test_cpu_round_trips_import_and_resume(tmp_path):
    model, db, folder = tiny_mlp(4), tmp_path / "t.sqlite", tmp_path / "bundle"
    runner = BundleRunner(folder, number=2, repeat=3, min_repeat_ms=1)
    first = xcomp.tune(model, db=db, trials=8, runner=runner)
    assert runner.imported is None and runner.pending == 1  # round 1: the defaults, the numerics references
    assert first["trials"] == 0 and all(g["waiting"] for g in first["groups"])
    assert sorted(os.listdir(folder)) == ["libs", "manifest.json", "run.py", "timing.py"]
    with TuningDB(db) as d:
        assert d.count() == 0

    with pytest.raises(UserError, match="waiting to be measured: run `python3 run.py`"):
        xcomp.tune(model, db=db, trials=8, runner=BundleRunner(folder))

    proc = run_elsewhere(folder, tmp_path)
    assert proc.returncode == 0, proc.stderr
    runner = BundleRunner(folder, number=2, repeat=3, min_repeat_ms=1)
    second = xcomp.tune(model, db=db, trials=8, runner=runner)
    assert runner.imported["imported"] == 1 and runner.imported["device"]["kind"] == "cpu"
    assert second["groups"][0]["default_ms"] > 0 and runner.pending == 8
    manifest = json.loads((folder / "manifest.json").read_text())
    queued = {canonical_knobs(item["knobs"]) for item in manifest["items"]}
    with TuningDB(db) as d:
        measured = {canonical_knobs(r.knobs) for r in d.records()}
    assert len(queued) == 8 and not queued & measured  # the resumed run skips what is measured

    assert run_elsewhere(folder, tmp_path).returncode == 0
    from xcomp.cli import main

    assert main(["db", "import-results", str(db), str(folder), "--json"]) == 0
    assert not os.path.exists(folder / "manifest.json")  # emptied for the next bundle
    with TuningDB(db) as d:
        records = d.records()
    spec = get_backend("cpu").spec
    # a tiny model's weights stay in any last-level cache: each core's private caches are evicted before a run
    timing = runner.timing("cpu", spec.cache_bytes[1] if spec.cache_bytes[2] else 0)
    picks = [r for r in records if r.timing in PICKS]  # the default against the fastest alone, side by side
    records = [r for r in records if r.timing not in PICKS]
    assert len(picks) <= 2 and sum(r.ok for r in picks) <= 1  # a pick, and a fastest alone that lost to it
    assert len(records) == 9 and all(r.ok and r.hw_fingerprint == spec.fingerprint() and r.target == "cpu"
                                     and r.timing == timing for r in records)
    assert {canonical_knobs(r.knobs) for r in records} == measured | queued


def _workload():
    return Workload("k-test", "elementwise", "cpu", get_backend("cpu").spec.fingerprint(), 1, "warm")


def test_crashing_hanging_and_wrong_candidates_are_failure_records(tmp_path):
    built = {name: _build(tmp_path, name, **kw) for name, kw in
             [("ref", {}), ("same", {}), ("wrong", {"body_factor": 3.0}), ("abort", {"mode": "abort"}),
              ("hang", {"mode": "hang"})]}
    folder = tmp_path / "bundle"
    runner = BundleRunner(folder, timeout_s=3, number=2, repeat=3, min_repeat_ms=1, startup_grace_s=60)
    order = ["same", "wrong", "abort", "same", "hang", "same"]
    builds = [BuildResult({"i": i, "name": k}, built[k].artifact) for i, k in enumerate(order)]
    builds.append(BuildResult({"name": "nobuild"}, None, "build: invalid"))
    with pytest.raises(MeasurementDeferred):
        runner.run(built["ref"].artifact, builds, "cpu", [((N,), "float32"), ((N,), "float32")],
                   workload=_workload())
    runner.close()
    proc = run_elsewhere(folder, tmp_path)
    assert proc.returncode == 0, proc.stderr
    with TuningDB(tmp_path / "t.sqlite") as db:
        summary = import_results(str(folder), db)
        errors = {canonical_knobs(r.knobs): r.error for r in db.records()}
        timed = [r.latencies_ms for r in db.records() if r.ok]
    assert summary["imported"] == 7 and summary["not_measured"] == 0
    got = [errors[canonical_knobs(b.knobs)] for b in builds]
    assert got[0] is None and got[3] is None and got[5] is None
    assert [len(t) for t in timed] == [2 * 3] * 3  # a CPU bundle times cold weights, as locally: single runs
    assert got[1].startswith("wrong result")
    assert got[2].startswith("run: crashed")
    assert got[4] == "run: timed out after 3s"
    assert got[6] == "build: invalid"


def _one_candidate_bundle(tmp_path):
    """A cpu bundle of one candidate (the reference itself), written but not closed: (folder, runner)."""
    folder = tmp_path / "bundle"
    ref = _build(tmp_path, "ref")
    runner = BundleRunner(folder)
    with pytest.raises(MeasurementDeferred):
        runner.run(ref.artifact, [ref], "cpu", [((N,), "float32"), ((N,), "float32")], workload=_workload())
    return folder, runner


def test_results_of_another_bundle_are_refused(tmp_path):
    folder, runner = _one_candidate_bundle(tmp_path)
    runner.close()
    (folder / "results.json").write_text(json.dumps({"format": 1, "bundle_id": "other", "results": {}}))
    with TuningDB(tmp_path / "t.sqlite") as db, pytest.raises(UserError, match="results of another bundle"):
        import_results(str(folder), db)
    (folder / "results.json").write_text("{not json")
    with TuningDB(tmp_path / "t.sqlite") as db, pytest.raises(UserError, match="not JSON"):
        import_results(str(folder), db)


def test_cuda_bundle_is_made_here_with_its_kernels(tmp_path):
    folder = tmp_path / "cuda_bundle"
    runner = BundleRunner(folder)
    xcomp.tune(tiny_mlp(4), target="cuda:sm_90", db=tmp_path / "t.sqlite", trials=8, runner=runner)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["target"], manifest["device"], manifest["arch"]) == ("cuda:sm_90", "cuda", "sm_90")
    assert runner.pending == 1 and "libcudart" in runner.instructions("xcomp tune ...")
    for item in manifest["items"]:
        lib = (folder / item["artifact"]).read_bytes()
        assert b"__global__" in lib and b"_kernel" in lib  # the kernels' CUDA C, compiled when loaded there
    proc = run_elsewhere(folder, tmp_path)  # this machine has no GPU: a clear refusal, not a traceback
    assert proc.returncode == 1 and "no cuda device visible here" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_script_refuses_another_tvm_version(tmp_path):
    folder, runner = _one_candidate_bundle(tmp_path)
    runner.manifest["tvm_version"] = "0.19.0"
    runner.close()
    proc = run_elsewhere(folder, tmp_path)
    assert proc.returncode == 1 and "built with TVM 0.19.0" in proc.stderr


def test_cli_bundle_needs_a_folder_and_import_needs_a_bundle(tmp_path, capsys):
    from xcomp.cli import main

    assert main(["tune", "x.onnx", "--runner", "bundle"]) == 1
    assert "--bundle-dir" in capsys.readouterr().err
    assert main(["db", "import-results", str(tmp_path / "t.sqlite"), str(tmp_path)]) == 1
    assert "no measurement bundle there" in capsys.readouterr().err


@pytest.fixture(scope="module")
def second_bundle(tmp_path_factory):
    """(db, folder) after two round trips' bundles of tiny_mlp(4): the default measured and imported, then a
    batch of 8 and the side-by-side rounds measured by run.py, its results not imported yet. The default's median
    known here is made slow in the manifest, so run.py finds a faster config to set against it."""
    tmp_path = tmp_path_factory.mktemp("second_bundle")
    model, db, folder = tiny_mlp(4), tmp_path / "t.sqlite", tmp_path / "bundle"
    xcomp.tune(model, db=db, trials=8, runner=BundleRunner(folder, number=2, repeat=3, min_repeat_ms=1))
    assert run_elsewhere(folder, tmp_path).returncode == 0
    runner = BundleRunner(folder, number=2, repeat=3, min_repeat_ms=1)
    xcomp.tune(model, db=db, trials=8, runner=runner)
    assert runner.pending == 8 and runner.side_by_side == 1
    manifest = json.loads((folder / "manifest.json").read_text())
    (entry,) = manifest["side_by_side"].values()
    (default,) = entry["known"]  # the default is the fastest known here: no other config to carry
    assert entry["rounds"] == 3 and default["artifact"] == manifest["workloads"]["w0"]["reference"]
    default["median_ms"] = 1e9
    (folder / "manifest.json").write_text(json.dumps(manifest))
    proc = run_elsewhere(folder, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "side by side w0: default/fastest ms per round" in proc.stdout
    return db, folder


@pytest.mark.parametrize("outcome", ["won", "lost", pytest.param("not timed", marks=pytest.mark.slow)])
def test_a_bundle_s_pick_beats_the_default_side_by_side_in_every_round(tmp_path, second_bundle, outcome, capsys):
    """run.py times the default and the fastest alone side by side, 3 rounds; the import keeps the default
    unless the other won every round, or where the rounds did not run, and compile --db builds that pick."""
    import shutil

    model, db, folder = tiny_mlp(4), tmp_path / "t.sqlite", tmp_path / "bundle"
    shutil.copy(second_bundle[0], db)  # closed: no write-ahead log beside it
    shutil.copytree(second_bundle[1], folder)
    results = json.loads((folder / "results.json").read_text())
    timed = results["side_by_side"]["w0"]
    default, fastest = canonical_knobs(timed["default"]), canonical_knobs(timed["best"])
    assert default != fastest and len(timed["default_ms"]) == len(timed["best_ms"]) == 3 and "error" not in timed
    with TuningDB(db) as d:
        measured = {canonical_knobs(r.knobs): r.median_ms for r in d.records()}
    manifest = json.loads((folder / "manifest.json").read_text())
    batch = {canonical_knobs(item["knobs"]) for item in manifest["items"]}
    # the fastest alone of this bundle's batch (the default's median there was made slow)
    assert fastest in batch and default in measured
    # the rule, not the noisy host, decides below: made-up times per round
    timed["default_ms"], timed["best_ms"] = [2.0, 2.0, 2.0], [1.0, 1.0, 1.0] if outcome == "won" else [1.0, 3.0, 1.0]
    if outcome == "not timed":
        del results["side_by_side"]["w0"]
    (folder / "results.json").write_text(json.dumps(results))

    if outcome == "lost":  # imported on its own: the next run's summary shows the pick stored in the database
        from xcomp.cli import main

        assert main(["db", "import-results", str(db), str(folder)]) == 0
        assert "keeps the default (the tuned config was faster in 2 of 3 rounds)" in capsys.readouterr().out
    runner = BundleRunner(folder, number=2, repeat=3, min_repeat_ms=1)
    third = xcomp.tune(model, db=db, trials=8, runner=runner)  # imports, then queues the next bundle
    expected = fastest if outcome == "won" else default
    backend = get_backend("cpu")
    (row,) = third["groups"]
    with TuningDB(db) as d:
        (chosen,) = d.best_knobs([types.SimpleNamespace(key=row["key"])], backend.target_string,
                                 backend.spec.fingerprint()).values()
        side_by_side = {canonical_knobs(r.knobs): r for r in d.records(timing=Timing.SIDE_BY_SIDE)}
    assert canonical_knobs(chosen) == expected
    assert side_by_side[expected].ok
    if outcome == "lost":
        assert side_by_side[fastest].error == "lost to the default side by side: faster in 2 of 3 rounds"
    assert row["kept_default"] == (outcome != "won") and canonical_knobs(row["best_knobs"]) == expected
    with TuningDB(db) as d:
        alone = {canonical_knobs(r.knobs): r.median_ms for r in d.records() if r.ok and r.timing not in PICKS}
    fastest_here = min(alone, key=alone.get)
    why = {"won": "", "lost": "the fastest alone lost to it side by side: faster in 2 of 3 rounds",
           "not timed": "the side-by-side rounds against the fastest alone did not run yet"}[outcome]
    assert row["why"] == ("no tuned config was faster alone" if why and fastest_here == default else why)
    if outcome == "won":
        assert runner.imported["side_by_side"][row["key"]]["picked"] == json.loads(expected)
    # the next bundle sets its batch against the fastest alone known here, carried beside the default
    (entry,) = json.loads((folder / "manifest.json").read_text())["side_by_side"].values()
    assert [canonical_knobs(k["knobs"]) for k in entry["known"]] == [default] + (
        [fastest_here] if fastest_here != default else [])
