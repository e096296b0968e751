"""Hostile .xc files: every malformed module file loads or ends in an ArtifactError naming it, never another error.

The library inside a .xc is native code that load maps into the process: these cases damage the zip and the
metadata, never hand it a forged library (a .xc is trusted like any shared library; README.md says so).
"""

from __future__ import annotations

import json
import os
import random
import re
import zipfile

import pytest

import xcomp

# Mutants per byte-level test: 150 in the fast suite (a few seconds); XCOMP_FUZZ_EXAMPLES=5000 for a longer run.
FUZZ_EXAMPLES = int(os.environ.get("XCOMP_FUZZ_EXAMPLES", "150"))

REQUIRED_KEYS = ["format", "tvm_version", "target", "hardware", "library", "inputs", "outputs"]
# a value of each JSON type; a key gets every one that is not its own type
WRONG_VALUES = [None, True, 0, -7, 1.5, "", "cpu:nonsense", [], [1, "a"], {}, {"name": 3}]


@pytest.fixture(scope="module")
def saved(tiny_module, tmp_path_factory):
    """(metadata dict, {member: bytes}, the .xc file's bytes) of a real saved module."""
    module, _ = tiny_module
    path = module.save(tmp_path_factory.mktemp("xc") / "mlp.xc")
    with zipfile.ZipFile(path) as zf:
        meta = json.loads(zf.read("metadata.json"))
        members = {name: zf.read(name) for name in zf.namelist()}
    with open(path, "rb") as f:
        return meta, members, f.read()


def _write(path, members, metadata) -> str:
    """A .xc at `path`: `members` with metadata.json replaced by `metadata` (a dict, or raw bytes)."""
    data = metadata if isinstance(metadata, bytes) else json.dumps(metadata).encode()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("metadata.json", data)
        for name, content in members.items():
            if name != "metadata.json":
                zf.writestr(name, content)
    return os.fspath(path)


def _load(path):
    """The loaded module, or the ArtifactError it gave (one line, naming the file); any other error fails."""
    try:
        return xcomp.load(path)
    except xcomp.ArtifactError as err:
        message = str(err)
        assert os.fspath(path) in message and "\n" not in message, message
        return err


def test_the_unmodified_module_loads(saved, tmp_path):
    meta, members, _ = saved
    assert isinstance(_load(_write(tmp_path / "m.xc", members, meta)), xcomp.Module)


@pytest.mark.parametrize("dropped", [True, False], ids=["dropped", "null"])
@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_each_required_key_dropped_or_null_names_the_key(saved, tmp_path, key, dropped):
    meta, members, _ = saved
    broken = {k: v for k, v in meta.items() if k != key} if dropped else {**meta, key: None}
    path = _write(tmp_path / "m.xc", members, broken)
    with pytest.raises(xcomp.ArtifactError, match=f"{re.escape(path)}: .*'{key}'"):
        xcomp.load(path)


def test_every_key_dropped_loads_or_is_an_artifact_error(saved, tmp_path):
    meta, members, _ = saved
    cases = [{k: v for k, v in meta.items() if k != key} for key in meta]
    cases += [{**meta, "hardware": {}}]
    for key in ("inputs", "outputs", "groups"):  # each field of an entry
        for field in meta[key][0]:
            entry = {f: v for f, v in meta[key][0].items() if f != field}
            cases.append({**meta, key: [entry, *meta[key][1:]]})
    for i, case in enumerate(cases):
        _load(_write(tmp_path / f"m{i}.xc", members, case))


def test_wrong_types_load_or_are_an_artifact_error(saved, tmp_path):
    meta, members, _ = saved
    cases = [{**meta, key: value} for key in meta for value in WRONG_VALUES]
    cases += [{**meta, "hardware": {**meta["hardware"], "name": value}} for value in WRONG_VALUES]
    cases += [{**meta, key: [value]} for key in ("inputs", "outputs", "bound_inputs", "groups")
              for value in WRONG_VALUES]
    for key in ("inputs", "outputs", "groups"):  # each field of an entry
        for field in meta[key][0]:
            cases += [{**meta, key: [{**meta[key][0], field: value}]} for value in WRONG_VALUES]
    cases += [{**meta, "inputs": [{**meta["inputs"][0], "index_range": value}]} for value in WRONG_VALUES]
    cases += [{**meta, "bound_inputs": [{**meta["inputs"][0], "value": value}]} for value in WRONG_VALUES]
    cases += [[], "metadata", 1, None]  # not an object at all
    errors = 0
    for i, case in enumerate(cases):
        errors += isinstance(_load(_write(tmp_path / f"m{i}.xc", members, case)), xcomp.ArtifactError)
    assert errors > len(cases) // 2  # most of them are caught, not loaded


@pytest.mark.parametrize("target", ["tpu", "cpu:nonsense", "cuda:sm_1"])
def test_a_bad_target_string_is_an_artifact_error(saved, tmp_path, target):
    meta, members, _ = saved
    path = _write(tmp_path / "m.xc", members, {**meta, "target": target})
    with pytest.raises(xcomp.ArtifactError, match=f"{re.escape(path)}: .*'target'"):
        xcomp.load(path)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """`data` with 1-4 bytes overwritten, or cut short, or a run of bytes deleted."""
    buf = bytearray(data)
    kind = rng.randrange(3)
    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif kind == 1:
        del buf[rng.randrange(len(buf)):]
    else:
        start = rng.randrange(len(buf))
        del buf[start:start + rng.randint(1, 16)]
    return bytes(buf)


def test_fuzzed_xc_bytes_load_or_are_an_artifact_error(saved, tmp_path):
    _, _, data = saved
    rng = random.Random(0)
    for i in range(FUZZ_EXAMPLES):
        path = tmp_path / f"m{i}.xc"
        path.write_bytes(_mutate(data, rng))
        _load(path)
        path.unlink()


def test_fuzzed_metadata_text_loads_or_is_an_artifact_error(saved, tmp_path):
    """The metadata's JSON text damaged inside an intact zip (whose checksums would catch it otherwise)."""
    _, members, _ = saved
    rng = random.Random(1)
    for i in range(FUZZ_EXAMPLES):
        path = _write(tmp_path / f"m{i}.xc", members, _mutate(members["metadata.json"], rng))
        _load(path)
        os.unlink(path)
