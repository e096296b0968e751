"""xcomp tune end to end on a tiny model with a tiny budget: records land, resume skips, compile uses them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx

import xcomp
from conftest import ort_run, tiny_mlp
from xcomp.db import TuningDB


def test_tune_resume_and_compile_with_db(tmp_path):
    model = tiny_mlp(4)
    db = tmp_path / "tune.sqlite"
    first = xcomp.tune(model, db=db, trials=6, seed=0)
    with TuningDB(db) as d:
        n1 = d.count()
    assert first["trials"] >= 1 and n1 == first["trials"]
    assert all(g["default_ms"] > 0 for g in first["groups"])

    second = xcomp.tune(model, db=db, trials=6, seed=0)  # resumes: nothing measured twice
    with TuningDB(db) as d:
        records = d.records()
    keys = [(r.workload_key, json.dumps(r.knobs, sort_keys=True)) for r in records]
    assert len(keys) == len(set(keys)) == n1 + second["trials"]
    assert second["trials"] >= 1

    m = xcomp.compile(model, tune_db=db)
    tuned = [c for c in m.info["schedules"].values() if c["source"].startswith("database")]
    assert tuned, m.info["schedules"]
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(m(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_tune_cli_json_and_db_export(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(4), str(path))
    db = tmp_path / "t.sqlite"
    r = subprocess.run([sys.executable, "-m", "xcomp", "tune", str(path), "--trials", "4", "--db", str(db), "--json",
                        "-q"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["trials"] >= 1 and doc["groups"]
    r = subprocess.run([sys.executable, "-m", "xcomp", "db", "export", str(db), str(tmp_path / "r.jsonl"),
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["exported"] == doc["trials"]
