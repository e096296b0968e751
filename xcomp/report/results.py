"""Measured results from another machine: a report.json written by `xcomp bench --report` there."""

from __future__ import annotations

import json
import os

from xcomp.errors import UserError


SCHEMA_VERSION = 1
KIND = "xcomp-bench-report"


def read_report(path) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise UserError(f"{path}: not JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise UserError(f"{path}: not an xcomp bench report (expected the report.json of `xcomp bench --report`)")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"{path}: report schema {doc.get('schema_version')}, this xcomp reads {SCHEMA_VERSION}")
    return doc


def imported(paths, model_sha256: str, measured_here: set) -> tuple:
    """(target entries, baseline entries, blas rows, notes) measured elsewhere, each with an `origin` naming the
    file and machine. Only measured entries are imported; a target measured here wins over the file's."""
    targets, baselines, blas, notes = {}, [], [], []
    for path in paths or []:
        doc = read_report(path)
        if doc["model"]["sha256"] != model_sha256:
            raise UserError(f"{path}: measured on a different model (sha256 {doc['model']['sha256'][:12]}..., "
                            f"this one is {model_sha256[:12]}...)")
        origin = {"kind": "results file", "file": os.path.abspath(path), "hostname": doc["machine"].get("hostname"),
                  "cpu_model": doc["machine"].get("cpu_model"), "created": doc.get("created"),
                  "command": doc.get("command", {}).get("text")}
        for entry in doc.get("targets", []):
            name = entry["target"]
            if entry.get("status") != "measured":
                continue
            if name in measured_here:
                notes.append(f"{path}: {name} was also measured in this run; this run's numbers are used")
                continue
            if name in targets:
                notes.append(f"{path}: {name} already imported from {targets[name]['origin']['file']}; skipped")
                continue
            targets[name] = {**entry, "origin": origin}
        for entry in doc.get("baselines", []):
            if entry.get("status") == "measured":
                baselines.append({**entry, "origin": origin})
        for row in doc.get("blas", []):
            if row["target"] in targets and row["target"] not in measured_here:
                blas.append({**row, "origin": origin})
    return list(targets.values()), baselines, blas, notes
