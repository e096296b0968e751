"""The tuning database: durable across SIGKILL, resumable, shareable as JSONL."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from xcomp.autotune.db import Record, TuningDB
from xcomp.errors import UserError
from xcomp.timing import Timing


def rec(i, median=None, error=None, key="conv-abc", fp="fp1"):
    lat = [] if error else [median or float(i + 1)] * 3
    return Record(key, "conv", "cpu", fp, {"tile": i, "unroll": i % 3}, lat, error)


def test_best_measured_and_failures(tmp_path):
    with TuningDB(tmp_path / "t.sqlite") as db:
        assert db.add_batch([rec(0, 5.0), rec(1, 2.0), rec(2, error="build failed: x"), rec(3, 3.0)]) == 4
        assert db.add_batch([rec(1, 9.0)]) == 0  # same candidate again: kept once
        knobs, median = db.best("conv-abc", "cpu", "fp1")
        assert knobs == {"tile": 1, "unroll": 1} and median == 2.0
        assert db.best("conv-abc", "cpu", "other-machine") is None
        assert db.best("conv-abc", "cpu") == ({"tile": 1, "unroll": 1}, 2.0)
        assert len(db.measured_knobs("conv-abc", "cpu", "fp1")) == 4  # failed ones are not retried either
        failed = [r for r in db.records() if not r.ok]
        assert len(failed) == 1 and failed[0].error.startswith("build failed")


def test_remeasurements_keep_the_slower_run_and_failures_stick(tmp_path):
    with TuningDB(tmp_path / "t.sqlite") as db:
        db.add_batch([rec(0, 1.0), rec(1, 2.0), rec(2, 3.0)])
        db.add_remeasurements([rec(0, 4.0), rec(1, 1.5), rec(2, error="run timed out"), rec(5, 2.5)])
        medians = {r.knobs["tile"]: r.median_ms for r in db.records()}
        assert medians == {0: 4.0, 1: 2.0, 2: None, 5: 2.5}  # slower run kept; failure sticks; new one added
        assert db.best("conv-abc", "cpu", "fp1") == ({"tile": 1, "unroll": 1}, 2.0)


def test_jsonl_round_trip(tmp_path):
    with TuningDB(tmp_path / "a.sqlite") as a:
        a.add_batch([rec(i) for i in range(5)])
        assert a.export_jsonl(tmp_path / "r.jsonl") == 5
    with TuningDB(tmp_path / "b.sqlite") as b:
        b.add_batch([rec(0)])
        assert b.import_jsonl(tmp_path / "r.jsonl") == (4, 1)
        assert [r.knobs for r in b.records()] == [rec(i).knobs for i in [0, 1, 2, 3, 4]]


WRITER = """
import sys, time
from xcomp.autotune.db import Record, TuningDB
db = TuningDB(sys.argv[1])
batch = 0
while True:
    db.add_batch([Record("k", "conv", "cpu", "fp", {"b": batch, "i": i}, [1.0 + i]) for i in range(8)])
    batch += 1
    print(batch * 8, flush=True)
    time.sleep(0.002)
"""


def test_sigkilled_writer_loses_no_committed_row(tmp_path):
    path = tmp_path / "killed.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    committed = 0
    deadline = time.time() + 60
    while committed < 400 and time.time() < deadline:
        committed = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert committed >= 400
    with TuningDB(path) as db:
        n = db.count()
        assert n >= committed  # everything reported committed is there (one more batch may have landed)
        assert n % 8 == 0  # batches are all-or-nothing
        assert db._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert len(db.measured_knobs("k", "cpu", "fp")) == n


def test_not_a_database(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(UserError, match="not a usable SQLite database"):
        TuningDB(bad)


SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE records (
    id INTEGER PRIMARY KEY, workload_key TEXT NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL,
    hw_fingerprint TEXT NOT NULL, knobs TEXT NOT NULL, features_version INTEGER NOT NULL,
    latencies_ms TEXT NOT NULL, median_ms REAL, error TEXT, created REAL NOT NULL,
    UNIQUE (workload_key, target, hw_fingerprint, knobs));
CREATE INDEX records_by_workload ON records (workload_key, target, hw_fingerprint, median_ms);
INSERT INTO records VALUES (1, 'k', 'conv', 'cpu', 'fp', '{"tile":1}', 3, '[1.0,1.0]', 1.0, NULL, 100.0);
INSERT INTO records VALUES (2, 'k', 'conv', 'cpu', 'fp', '{"tile":2}', 3, '[]', NULL, 'run timed out', 101.0);
"""


def test_a_schema_1_database_is_upgraded_keeping_every_record(tmp_path):
    """Its records say they were timed in a way nobody recorded; the same knobs timed now are a record of their
    own, and `best` can keep the two apart."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_1)
    with TuningDB(path) as db:
        old = db.records()
        assert [(r.knobs, r.latencies_ms, r.error, r.features_version, r.created, r.timing) for r in old] == [
            ({"tile": 1}, [1.0, 1.0], None, 3, 100.0, "unrecorded"),
            ({"tile": 2}, [], "run timed out", 3, 101.0, "unrecorded")]
        assert db.add_batch([Record("k", "conv", "cpu", "fp", {"tile": 1}, [2.0], timing="cold")]) == 1
        assert db.best("k", "cpu", "fp", timing="cold") == ({"tile": 1}, 2.0)
        assert db.best("k", "cpu", "fp", timing="unrecorded") == ({"tile": 1}, 1.0)
        assert db.latest_timing("k", "cpu", "fp") == "cold"
        assert db.measured_knobs("k", "cpu", "fp", timing="cold") == {'{"tile":1}'}
    with TuningDB(path) as db:  # opened again: already upgraded
        assert db.count() == 3 and db.count(timing="unrecorded") == 2


SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '2');
CREATE TABLE records (
    id INTEGER PRIMARY KEY, workload_key TEXT NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL,
    hw_fingerprint TEXT NOT NULL, knobs TEXT NOT NULL, features_version INTEGER NOT NULL,
    latencies_ms TEXT NOT NULL, median_ms REAL, error TEXT, created REAL NOT NULL, timing TEXT NOT NULL,
    UNIQUE (workload_key, target, hw_fingerprint, knobs, timing));
CREATE INDEX records_by_workload ON records (workload_key, target, hw_fingerprint, median_ms);
"""


def _schema_2(path, labels):
    """A schema-2 database, as the xcomp before short timing ids wrote it: one record per timing label."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_2)
        for i, label in enumerate(labels):
            conn.execute("INSERT INTO records VALUES (?, 'k', 'conv', 'cpu', 'fp', '{\"tile\":1}', 3, '[1.0]', 1.0,"
                         " NULL, ?, ?)", (i + 1, 100.0 + i, label))


def test_a_schema_2_database_gets_short_timing_ids_keeping_every_record(tmp_path):
    """The sentences schema 2 stored as timings become the short ids, each record kept, and searches by the
    new ids find them."""
    labels = ["cold weights, producer-written input", "weights in the last-level cache, producer-written input",
              "cold weights, flushed input", "in the model", "warm", "unrecorded"]
    _schema_2(tmp_path / "v2.sqlite", labels)
    with TuningDB(tmp_path / "v2.sqlite") as db:
        assert [r.timing for r in db.records()] == ["cold", "llc", "flushed", "in-model", "warm", "unrecorded"]
        assert db.best("k", "cpu", "fp", timing=Timing.LLC) == ({"tile": 1}, 1.0)
        assert db.latest_timing("k", "cpu", "fp", picks=False) == Timing.UNRECORDED


def test_a_database_with_a_timing_this_xcomp_does_not_know_is_refused_unchanged(tmp_path):
    import sqlite3

    _schema_2(tmp_path / "v2.sqlite", ["timed by a sundial"])
    with pytest.raises(UserError, match="sundial"):
        TuningDB(tmp_path / "v2.sqlite")
    with sqlite3.connect(tmp_path / "v2.sqlite") as conn:  # the failed upgrade rolled back
        assert conn.execute("SELECT value FROM meta").fetchone() == ("2",)
        assert conn.execute("SELECT timing FROM records").fetchall() == [("timed by a sundial",)]


def test_jsonl_lines_with_an_older_timing_label_import_as_its_short_id(tmp_path):
    line = {**rec(0).to_json(), "timing": "weights in the last-level cache, producer-written input"}
    (tmp_path / "old.jsonl").write_text(json.dumps(line) + "\n")
    with TuningDB(tmp_path / "t.sqlite") as db:
        assert db.import_jsonl(tmp_path / "old.jsonl") == (1, 0)
        assert [r.timing for r in db.records()] == ["llc"]
    (tmp_path / "odd.jsonl").write_text(json.dumps({**line, "timing": "by ear"}) + "\n")
    with TuningDB(tmp_path / "t.sqlite") as db, pytest.raises(UserError, match="odd.jsonl:1: .*by ear"):
        db.import_jsonl(tmp_path / "odd.jsonl")


def test_jsonl_lines_without_a_timing_are_unrecorded(tmp_path):
    """A line exported before records said how they were timed imports as such, beside the same candidate
    timed now; an export says each record's timing."""
    line = {k: v for k, v in rec(0).to_json().items() if k != "timing"}
    (tmp_path / "old.jsonl").write_text(json.dumps(line) + "\n")
    with TuningDB(tmp_path / "t.sqlite") as db:
        assert db.import_jsonl(tmp_path / "old.jsonl") == (1, 0)
        assert db.add_batch([dataclasses.replace(rec(0), timing="warm")]) == 1
        db.export_jsonl(tmp_path / "new.jsonl")
    exported = [json.loads(x)["timing"] for x in (tmp_path / "new.jsonl").read_text().splitlines()]
    assert exported == ["unrecorded", "warm"]


def test_in_model_records_replace_their_group_s_earlier_ones_and_are_no_search_timing(tmp_path):
    """A group's configs timed inside the model replace the ones timed so before (they compare only with
    times taken in the same runs), leave its search records and other groups' alone, are the group's newest
    timing for choosing, and not a search timing to learn from."""
    def timed_in_model(i, median, key="conv-abc"):
        return dataclasses.replace(rec(i, median, key=key), timing=Timing.IN_MODEL)

    with TuningDB(tmp_path / "t.sqlite") as db:
        db.add_batch([dataclasses.replace(rec(i, float(i + 1)), timing="cold") for i in range(4)])
        db.replace_picks("cpu", "fp1", {"conv-other": [timed_in_model(0, 1.0, key="conv-other")],
                                           "conv-abc": [timed_in_model(0, 3.0), timed_in_model(1, 2.5)]})
        db.replace_picks("cpu", "fp1", {"conv-abc": [timed_in_model(0, 2.0), timed_in_model(2, 2.2)]})
        in_model = {r.knobs["tile"]: r.median_ms for r in db.records("conv-abc", timing=Timing.IN_MODEL)}
        assert in_model == {0: 2.0, 2: 2.2}
        assert db.count("conv-abc", timing="cold") == 4 and db.count("conv-other") == 1
        assert db.latest_timing("conv-abc", "cpu", "fp1") == Timing.IN_MODEL
        assert db.latest_timing("conv-abc", "cpu", "fp1", picks=False) == "cold"
        assert db.best("conv-abc", "cpu", "fp1", Timing.IN_MODEL) == ({"tile": 0, "unroll": 0}, 2.0)


def test_records_can_be_kept_to_the_configs_a_template_takes(tmp_path):
    with TuningDB(tmp_path / "t.sqlite") as db:
        db.add_batch([rec(i, float(i + 1)) for i in range(4)])
        kept = db.records("conv-abc", accept=lambda knobs: knobs["tile"] % 2 == 0)
        assert [r.knobs["tile"] for r in kept] == [0, 2]
        assert len(db.records("conv-abc")) == 4
