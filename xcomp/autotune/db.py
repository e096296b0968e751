"""The tuning database: every measurement of every candidate, durable and shareable.

SQLite in WAL mode; one transaction per measured batch, so a tuner killed with SIGKILL loses nothing it had
already committed, and a resumed run can skip every candidate it has measured. JSONL export/import moves records
between machines (the hardware fingerprint keeps measurements from different machines apart, the measure version
those timed in different ways).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import statistics
import time

from xcomp.errors import UserError
from xcomp.timing import PICKS, Timing

# 2: records say how they were timed (Timing.UNRECORDED for older ones); 3: as the short ids of xcomp.timing.Timing
SCHEMA_VERSION = 3
# Records timed as a pick (timing.PICKS) are a tuning run's last choice among configs the search measured: the
# newest of them are a group's pick.

_RECORDS_TABLE = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    workload_key TEXT NOT NULL,     -- the operator group's structural key
    kind TEXT NOT NULL,             -- template kind (conv, matmul, ...)
    target TEXT NOT NULL,           -- target string, e.g. cpu, cuda:sm_90
    hw_fingerprint TEXT NOT NULL,   -- HardwareSpec.fingerprint() of the machine that measured
    knobs TEXT NOT NULL,            -- canonical JSON (sorted keys)
    features_version INTEGER NOT NULL,
    latencies_ms TEXT NOT NULL,     -- JSON list; empty when the candidate failed
    median_ms REAL,                 -- NULL when the candidate failed
    error TEXT,                     -- NULL on success; build/run/timeout/wrong-result message otherwise
    created REAL NOT NULL,
    timing TEXT NOT NULL,           -- how the candidate was timed (a xcomp.timing.Timing id): only records
                                    -- timed the same way compare
    UNIQUE (workload_key, target, hw_fingerprint, knobs, timing)
)"""
_RECORDS_INDEX = ("CREATE INDEX IF NOT EXISTS records_by_workload ON records (workload_key, target, hw_fingerprint,"
                  " median_ms)")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
{_RECORDS_TABLE};
{_RECORDS_INDEX};
"""


def canonical_knobs(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True, separators=(",", ":"))


_COLUMNS = ("workload_key, kind, target, hw_fingerprint, knobs, features_version, latencies_ms, median_ms, error,"
            " created, timing")
_INSERT = f" INTO records ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"


def _row(r) -> tuple:
    """A record's values in _INSERT's column order."""
    return (r.workload_key, r.kind, r.target, r.hw_fingerprint, canonical_knobs(r.knobs), r.features_version,
            json.dumps(r.latencies_ms), r.median_ms, r.error, r.created, r.timing)


@dataclasses.dataclass
class Record:
    workload_key: str
    kind: str
    target: str
    hw_fingerprint: str
    knobs: dict
    latencies_ms: list
    error: str | None = None
    features_version: int = 1
    created: float = dataclasses.field(default_factory=time.time)
    timing: str = Timing.UNRECORDED

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.latencies_ms)

    @property
    def median_ms(self):
        return statistics.median(self.latencies_ms) if self.ok else None

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["median_ms"] = self.median_ms
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Record":
        """A record from its JSON; a timing label an older xcomp wrote becomes its short id (ValueError if
        unknown)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        record = cls(**{k: v for k, v in d.items() if k in fields})
        record.timing = Timing.parse(record.timing).value
        return record


class TuningDB:
    """Open (creating if needed) the database at `path`."""

    def __init__(self, path):
        self.path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise UserError(f"tuning database {self.path}: folder {folder} does not exist")
        try:
            self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            self._conn.executescript(_SCHEMA)
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            version = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
            if int(version) in (1, 2):
                version = self._upgrade(int(version))
        except sqlite3.DatabaseError as err:
            raise UserError(f"tuning database {self.path}: not a usable SQLite database ({err})") from None
        if int(version) != SCHEMA_VERSION:
            raise UserError(f"tuning database {self.path}: schema {version}, this xcomp reads {SCHEMA_VERSION}")

    def _upgrade(self, version: int) -> int:
        """Bring an older database to SCHEMA_VERSION in one transaction (another process may have upgraded it
        while this one waited for the lock). Returns the schema version now stored."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
            if version == 1:
                self._add_timing_column()
            if version in (1, 2):
                self._short_timing_ids()
                self._conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
                version = SCHEMA_VERSION
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return version

    def _add_timing_column(self):
        """Schema 1 -> 2: every record gains the timing Timing.UNRECORDED (they were timed warm or cold, nobody
        knows which now), and the same knobs may be recorded once per timing."""
        old_columns = _COLUMNS.replace(", timing", "")
        self._conn.execute("ALTER TABLE records RENAME TO records_schema1")
        self._conn.execute("DROP INDEX records_by_workload")
        self._conn.execute(_RECORDS_TABLE)  # (not executescript: it would commit first)
        self._conn.execute(_RECORDS_INDEX)
        self._conn.execute(f"INSERT INTO records ({_COLUMNS}) SELECT {old_columns}, ?"
                           " FROM records_schema1", (Timing.UNRECORDED.value,))
        self._conn.execute("DROP TABLE records_schema1")

    def _short_timing_ids(self):
        """Schema 2 -> 3: the sentences schema 2 stored as timings become their short ids (one to one, so no
        two records collide)."""
        for (label,) in self._conn.execute("SELECT DISTINCT timing FROM records").fetchall():
            try:
                short = Timing.parse(label).value
            except ValueError:
                raise UserError(f"tuning database {self.path}: records timed {label!r}, a timing this xcomp does not"
                                " know") from None
            if short != label:
                self._conn.execute("UPDATE records SET timing = ? WHERE timing = ?", (short, label))

    def close(self):
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- writing ---------------------------------------------------------------------------------------------

    def add_batch(self, records) -> int:
        """Insert records in one transaction (all or nothing); duplicates of a measured candidate are ignored.
        Returns how many rows were new."""
        before = self._conn.total_changes
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.executemany("INSERT OR IGNORE" + _INSERT, [_row(r) for r in records])
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return self._conn.total_changes - before

    def add_remeasurements(self, records) -> None:
        """Second measurements of candidates, in one transaction. The record keeps the slower of its two runs
        (a config counts as fast only if it was fast both times: one lucky run cannot stay the best); a failed
        run marks the record failed (a candidate that crashes or hangs now and then is no candidate). A record
        not stored yet is inserted."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for r in records:
                key = (r.workload_key, r.target, r.hw_fingerprint, canonical_knobs(r.knobs), r.timing)
                row = self._conn.execute(
                    "SELECT id, latencies_ms, error FROM records WHERE workload_key = ? AND target = ? AND "
                    "hw_fingerprint = ? AND knobs = ? AND timing = ?", key).fetchone()
                if row is None:
                    self._conn.execute("INSERT" + _INSERT, _row(r))
                elif r.error is not None or row[2] is not None:
                    self._conn.execute("UPDATE records SET median_ms = NULL, error = ? WHERE id = ?",
                                       (r.error or row[2], row[0]))
                elif r.median_ms > statistics.median(json.loads(row[1])):
                    self._conn.execute("UPDATE records SET latencies_ms = ?, median_ms = ? WHERE id = ?",
                                       (json.dumps(r.latencies_ms), r.median_ms, row[0]))
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def replace_picks(self, target, hw_fingerprint, records_by_group: dict) -> None:
        """Store groups' picks ({workload key: records}, each timed as one of timing.PICKS) in place of the ones
        each group had timed so before, all in one transaction: a pick was timed beside the other configs of
        its run, and compares only with times taken in the same runs."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for workload_key, records in records_by_group.items():
                for timing in {r.timing for r in records}:
                    self._conn.execute("DELETE FROM records WHERE workload_key = ? AND target = ? AND"
                                       " hw_fingerprint = ? AND timing = ?",
                                       (workload_key, target, hw_fingerprint, Timing(timing).value))
                self._conn.executemany("INSERT" + _INSERT, [_row(r) for r in records])
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    # -- reading ---------------------------------------------------------------------------------------------

    def _where(self, workload_key=None, target=None, hw_fingerprint=None, timing=None, successful=False):
        clauses, args = (["median_ms IS NOT NULL"] if successful else []), []
        for column, value in (("workload_key", workload_key), ("target", target), ("hw_fingerprint", hw_fingerprint),
                              ("timing", timing)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", args

    def records(self, workload_key=None, target=None, hw_fingerprint=None, timing=None, accept=None) -> list:
        """The records that match every filter given, oldest first. `accept(knobs) -> bool` keeps only configs a
        template takes as it is now (`Template.in_space`): a record of an older version of the template has other
        knobs, and its time labels another program."""
        where, args = self._where(workload_key, target, hw_fingerprint, timing)
        cur = self._conn.execute(
            "SELECT workload_key, kind, target, hw_fingerprint, knobs, latencies_ms, error, features_version, created,"
            f" timing FROM records{where} ORDER BY id",
            args,
        )
        records = [
            Record(k, kind, t, fp, json.loads(knobs), json.loads(lat), err, fv, created, timing)
            for k, kind, t, fp, knobs, lat, err, fv, created, timing in cur
        ]
        return records if accept is None else [r for r in records if accept(r.knobs)]

    def count(self, workload_key=None, target=None, hw_fingerprint=None, timing=None) -> int:
        where, args = self._where(workload_key, target, hw_fingerprint, timing)
        return self._conn.execute(f"SELECT COUNT(*) FROM records{where}", args).fetchone()[0]

    def measured_knobs(self, workload_key, target, hw_fingerprint, timing=None) -> set:
        """Canonical knob strings already measured (failed ones included; timed this way, when given)."""
        where, args = self._where(workload_key, target, hw_fingerprint, timing)
        return {row[0] for row in self._conn.execute(f"SELECT knobs FROM records{where}", args)}

    def latest_timing(self, workload_key, target, hw_fingerprint=None, picks: bool = True):
        """How the group's newest successful record was timed, or None: the latest tuning run's way of timing,
        the one whose records to trust where older runs timed differently. With picks=False, the newest
        search's, leaving out the picks (timing.PICKS: one config per group, nothing to learn a cost model
        from)."""
        where, args = self._where(workload_key, target, hw_fingerprint, successful=True)
        if not picks:
            where += f" AND timing NOT IN ({', '.join('?' for _ in PICKS)})"
            args += [timing.value for timing in PICKS]
        row = self._conn.execute(f"SELECT timing FROM records{where} ORDER BY created DESC, id DESC LIMIT 1",
                                 args).fetchone()
        return row[0] if row else None

    def best(self, workload_key, target, hw_fingerprint=None, timing=None):
        """(knobs, median_ms) of the fastest successful record, or None. Without a fingerprint, any machine's;
        without a timing, timed any way."""
        where, args = self._where(workload_key, target, hw_fingerprint, timing, successful=True)
        row = self._conn.execute(f"SELECT knobs, median_ms FROM records{where} ORDER BY median_ms LIMIT 1",
                                 args).fetchone()
        return (json.loads(row[0]), row[1]) if row else None

    def best_knobs(self, groups, target, hw_fingerprint) -> dict:
        """{group key: knobs} of the fastest record per group measured on this hardware (any machine's if none),
        among those timed as the group's newest record was: records timed in other ways (warm against cold, or
        by an older xcomp) do not compare, and the latest tuning run's are the ones to trust. Where a tuning run
        ended timing its fastest configs inside the model (autotune/in_model.py), those records are the newest."""
        best = {}
        for group in groups:
            found = self._tuned_on(group.key, target, hw_fingerprint)
            hit = self.best(group.key, target, *found) if found else None
            if hit:
                best[group.key] = hit[0]
        return best

    def searched_knobs(self, workload_key, target, hw_fingerprint) -> set:
        """Canonical knobs the group's newest tuning search measured, on the machine whose records best_knobs
        reads, that run's template default among them: the tuner always measures it first."""
        found = self._tuned_on(workload_key, target, hw_fingerprint)
        timing = self.latest_timing(workload_key, target, found[0], picks=False) if found else None
        return self.measured_knobs(workload_key, target, found[0], timing) if timing else set()

    def _tuned_on(self, workload_key, target, hw_fingerprint):
        """(machine, timing) of the records best_knobs reads for a group: this hardware's where it has a
        successful record, else any machine's (machine None), timed as the newest of them; None where none is."""
        for machine in (hw_fingerprint, None):
            timing = self.latest_timing(workload_key, target, machine)
            if timing:
                return machine, timing
        return None

    def search_records(self, target, hw_fingerprint) -> list:
        """The records of every group measured on this hardware that its newest search timed as it did: what a
        cost model learns from (records timed otherwise, or inside the model, rank configs differently)."""
        records = self.records(target=target, hw_fingerprint=hw_fingerprint)
        timings = {key: self.latest_timing(key, target, hw_fingerprint, picks=False)
                   for key in {r.workload_key for r in records}}
        return [r for r in records if r.timing == timings[r.workload_key]]

    # -- sharing ---------------------------------------------------------------------------------------------

    def export_jsonl(self, path) -> int:
        records = self.records()
        tmp = os.fspath(path) + ".tmp"
        with open(tmp, "w") as f:
            for r in records:
                f.write(json.dumps(r.to_json(), sort_keys=True) + "\n")
        os.replace(tmp, path)
        return len(records)

    def import_jsonl(self, path) -> tuple:
        """Returns (new records, records already present)."""
        records = []
        try:
            with open(path) as f:
                for lineno, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    try:
                        records.append(Record.from_json(json.loads(line)))
                    except (ValueError, TypeError) as err:  # (an unknown timing label is a ValueError)
                        raise UserError(f"{path}:{lineno}: not a tuning record ({err})") from None
        except OSError as err:
            raise UserError(f"cannot read {path}: {err.strerror}") from None
        new = self.add_batch(records)
        return new, len(records) - new
