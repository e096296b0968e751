"""xcomp tune end to end on a tiny model with a tiny budget: records land, resume skips, compile uses them."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import zlib

import numpy as np
import onnx
import pytest

import xcomp
from conftest import make_model, ort_run, tiny_mlp
from xcomp.autotune.db import TuningDB, canonical_knobs
from xcomp.timing import PICKS, Timing


def test_tune_resume_and_compile_with_db(tmp_path):
    model = tiny_mlp(4)
    db = tmp_path / "tune.sqlite"
    first = xcomp.tune(model, db=db, trials=6, seed=0)
    with TuningDB(db) as d:
        n1 = d.count() - sum(d.count(timing=t) for t in PICKS)  # the search's records, not the picks
    assert first["trials"] >= 1 and n1 == first["trials"]
    assert all(g["default_ms"] > 0 for g in first["groups"])
    # Timed on this host, no group runs slower than its default where compile --db will use it: each keeps its
    # default or runs a config that beat it inside the model in every round (0.97: the medians over all rounds
    # may differ from the per-round ones by noise).
    for row in first["groups"]:
        assert row["kept_default"] or (row["timed"] == "in-model" and row["speedup"] >= 0.97), row

    second = xcomp.tune(model, db=db, trials=6, seed=0)  # resumes: nothing measured twice
    with TuningDB(db) as d:
        records = [r for r in d.records() if r.timing not in PICKS]
    keys = [(r.workload_key, json.dumps(r.knobs, sort_keys=True)) for r in records]
    assert len(keys) == len(set(keys)) == n1 + second["trials"]
    assert second["trials"] >= 1

    m = xcomp.compile(model, tune_db=db)
    tuned = [c for c in m.info["schedules"].values() if c["source"].startswith("database")]
    assert tuned, m.info["schedules"]
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(m(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_tuning_from_an_unguarded_script_says_how_to_guard_it(tmp_path):
    """Build workers are spawned and import the caller's script again: a top-level xcomp.tune call there breaks
    the pool. The error must say so, not only "worker crashed: BrokenProcessPool"."""
    onnx.save(tiny_mlp(4), str(tmp_path / "mlp.onnx"))
    script = tmp_path / "tune_it.py"
    script.write_text("import xcomp\n"
                      f"xcomp.tune({str(tmp_path / 'mlp.onnx')!r}, db={str(tmp_path / 't.sqlite')!r}, trials=2)\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert run.returncode != 0
    assert "if tune_it.py calls xcomp.tune at its top level" in run.stderr and '__name__ == "__main__"' in run.stderr


def test_tune_cli_json_and_db_export(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(4), str(path))
    db = tmp_path / "t.sqlite"
    r = subprocess.run([sys.executable, "-m", "xcomp", "tune", str(path), "--trials", "4", "--db", str(db), "--json",
                        "-q"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["trials"] >= 1 and doc["groups"]
    assert all(len(g["in_model_ms"]) >= 2 for g in doc["in_model"]["groups"])
    timed_in_model = len(doc["in_model"]["groups"])  # the last step stores each group's pick
    r = subprocess.run([sys.executable, "-m", "xcomp", "db", "export", str(db), str(tmp_path / "r.jsonl"),
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    exported = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert json.loads(r.stdout)["exported"] == len(exported)
    timings = [Timing(record["timing"]) for record in exported]
    assert sum(t not in PICKS for t in timings) == doc["trials"]
    assert timings.count(Timing.IN_MODEL) == timed_in_model


class _FakeBuilder:
    """Every config 'builds' (nothing is compiled): the search loop runs in well under a second."""

    def build(self, func_json, target, knob_list):
        from xcomp.autotune.measure import BuildResult

        return [BuildResult(knobs, "fake.so") for knobs in knob_list]

    def close(self):
        pass


class _FakeRunner:
    """A made-up latency per config, the same in every process."""

    measures_here = True

    def timing(self, target, evict_private_bytes=0):
        return "made up"

    def run(self, reference, builds, target, params, workload=None):
        from xcomp.autotune.measure import MeasureResult
        from xcomp.autotune.db import canonical_knobs

        return [MeasureResult(b.knobs, [1.0 + zlib.crc32(canonical_knobs(b.knobs).encode()) % 1000 / 1000])
                for b in builds]

    def close(self):
        pass


def _gemm_model():
    rng = np.random.default_rng(0)
    weight = onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W")
    return make_model([onnx.helper.make_node("MatMul", ["x", "W"], ["y"])],
                      [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [64, 64])],
                      [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [64, 64])], [weight])


def _tune_gemm_with_fakes(tmp_path, guided):
    from xcomp.autotune.tuner import Tuner, model_tasks
    from xcomp.backends import get_backend

    model = _gemm_model()
    backend = get_backend("cpu")
    with TuningDB(tmp_path / "t.sqlite") as db:
        tuner = Tuner(backend, db, seed=0, runner=_FakeRunner(), builder=_FakeBuilder(), progress=False,
                      guided=guided)
        tasks = tuner.tune(model_tasks(model, backend, None)[0], trials=32)
    return tuner, tasks


def test_unguided_tuner_never_consults_the_cost_model(tmp_path, monkeypatch):
    from xcomp.costmodel import CostModel, FeatureExtractor

    def forbidden(*args, **kwargs):
        raise AssertionError("the unguided tuner used the cost model")

    for cls, name in ((CostModel, "__init__"), (CostModel, "fit"), (CostModel, "predict"),
                      (FeatureExtractor, "__init__"), (FeatureExtractor, "vector")):
        monkeypatch.setattr(cls, name, forbidden)
    tuner, (task,) = _tune_gemm_with_fakes(tmp_path, guided=False)
    assert task.trials == 33 and len(task.curve) == 33  # the default, then the 32 trials of the budget


def test_guided_tuner_ranks_with_the_cost_model(tmp_path):
    tuner, (task,) = _tune_gemm_with_fakes(tmp_path, guided=True)
    assert tuner.cost_model.trained and task.trials == 33


def test_pretrained_model_ranks_the_first_batches(tmp_path, monkeypatch):
    """Before the tuner has 16 records of its own it ranks with the shipped model, not at random."""
    import xcomp.autotune.tuner as tuner_module

    calls = []

    class _Prior:
        def predict(self, features):
            calls.append(len(features))
            return -np.arange(len(features), dtype=np.float32)

    monkeypatch.setattr(tuner_module, "pretrained_model", lambda: _Prior())
    with TuningDB(tmp_path / "t.sqlite") as db:
        from xcomp.backends import get_backend

        backend = get_backend("cpu")
        tuner = tuner_module.Tuner(backend, db, runner=_FakeRunner(), builder=_FakeBuilder(), progress=False)
        tuner.tune(tuner_module.model_tasks(_gemm_model(), backend, None)[0], trials=8)
    assert calls and not tuner.cost_model.trained


def test_shipped_pretrained_model_loads():
    from xcomp.costmodel import pretrained_model
    from xcomp.costmodel.features import LENGTH

    model = pretrained_model()
    assert model is not None and model.trained, "costmodel/pretrained/cpu.json missing or for other features"
    assert np.isfinite(model.predict(np.zeros((2, LENGTH), np.float32))).all()


def test_pretrain_from_a_database(tmp_path):
    """python -m xcomp.autotune.pretrain: records of a model's groups -> a model file the tuner can load."""
    from xcomp.autotune.pretrain import main
    from xcomp.costmodel import CostModel

    _tune_gemm_with_fakes(tmp_path, guided=False)
    path = tmp_path / "gemm.onnx"
    onnx.save(_gemm_model(), path)
    main(["--db", str(tmp_path / "t.sqlite"), "-m", str(path), "-o", str(tmp_path / "model.json")])
    assert CostModel.load(tmp_path / "model.json").trained


def test_records_of_an_older_template_version_teach_nothing(tmp_path):
    """A record whose knobs the template no longer has may still apply (extra knobs are ignored) and label one
    program with another program's latency: training skips it."""
    from xcomp.autotune.pretrain import training_set

    tuner, (task,) = _tune_gemm_with_fakes(tmp_path, guided=False)
    template = task.template
    default = template.default_knobs()
    assert template.in_space(default)
    assert not template.in_space({**default, "retired_knob": 1})
    name = next(iter(default))
    assert not template.in_space({**default, name: "not one of its choices"})

    path = tmp_path / "gemm.onnx"
    onnx.save(_gemm_model(), path)
    _, y, _ = training_set([str(path)], [tmp_path / "t.sqlite"])
    with TuningDB(tmp_path / "t.sqlite") as db:
        stale = next(iter(db.records(task.group.key)))
        db.add_batch([dataclasses.replace(stale, knobs={**stale.knobs, "retired_knob": 1})])
    _, y_after, _ = training_set([str(path)], [tmp_path / "t.sqlite"])
    assert len(y_after) == len(y)


def test_a_resumed_run_skips_records_of_an_older_template_version(tmp_path):
    """A database from before a template gained a knob (resnet50's conv records without `ci_chunk`): a resumed
    run neither crosses those configs with new ones (it crashed on the missing knob) nor takes one as its best."""
    _, (task,) = _tune_gemm_with_fakes(tmp_path, guided=False)
    with TuningDB(tmp_path / "t.sqlite") as db:
        records = list(db.records(task.group.key))
        knob = next(iter(task.template.default_knobs()))
        stale = [dataclasses.replace(r, knobs={k: v for k, v in r.knobs.items() if k != knob},
                                     latencies_ms=[1e-6])
                 for r in records if r.ok][:8]
        db.add_batch(stale)
    _, (resumed,) = _tune_gemm_with_fakes(tmp_path, guided=False)
    assert resumed.best_knobs is not None and knob in resumed.best_knobs
    assert resumed.best_ms > 1e-6
    assert all(knob in json.loads(k) for k in resumed.measured)


class _OnceLuckyRunner(_FakeRunner):
    """The made-up latencies, except that the first config measured after the default runs 10x faster the first
    time it is measured: a quiet moment on a shared machine."""

    def __init__(self):
        self.lucky, self.seen = None, set()

    def run(self, reference, builds, target, params, workload=None):
        from xcomp.autotune.db import canonical_knobs

        results = super().run(reference, builds, target, params, workload)
        for result in results:
            key = canonical_knobs(result.knobs)
            if self.lucky is None and len(self.seen) == 1:
                self.lucky = key
            if key == self.lucky and key not in self.seen:
                result.latencies_ms = [ms / 10 for ms in result.latencies_ms]
            self.seen.add(key)
        return results


def test_a_lucky_first_measurement_does_not_pick_the_config(tmp_path):
    """The top configs are measured again at the end; the lucky one's record then keeps its slower run, and the
    config chosen (by the tuner and by compile --db) is one that is fast every time."""
    from xcomp.autotune.tuner import Tuner, model_tasks
    from xcomp.backends import get_backend
    from xcomp.autotune.db import canonical_knobs

    backend = get_backend("cpu")
    runner = _OnceLuckyRunner()
    with TuningDB(tmp_path / "t.sqlite") as db:
        tuner = Tuner(backend, db, seed=0, runner=runner, builder=_FakeBuilder(), progress=False, guided=False)
        (task,) = tuner.tune(model_tasks(_gemm_model(), backend, None)[0], trials=16)
        (record,) = [r for r in db.records() if canonical_knobs(r.knobs) == runner.lucky]
    assert record.median_ms > 1.0  # its second, honest run (the lucky one was below 0.2)
    assert task.trials == 17 and canonical_knobs(task.best_knobs) != runner.lucky
    honest = min(ms for key, ms in task.measured.items() if key != runner.lucky)
    assert task.best_ms == honest
    (chosen,) = _best_knobs(tmp_path / "t.sqlite", [task.group], backend.target_string,
                                   backend.spec.fingerprint()).values()
    assert chosen == task.best_knobs


def test_a_config_that_does_not_apply_is_a_failure_not_the_default(tmp_path, monkeypatch):
    """A candidate whose config the template cannot apply fails its build (it used to be built, measured and
    recorded as the default program under the candidate's knobs); a database config that does not apply falls
    back to the default at compile time, and the schedule's source says so."""
    import tvm

    from xcomp.autotune.measure import build_candidate
    from xcomp.autotune.tuner import model_tasks
    from xcomp.backends import get_backend
    from xcomp.pipeline import schedule_group
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    backend = get_backend("cpu")
    (task,), _ = model_tasks(_gemm_model(), backend, None)
    default = task.template.default_knobs()
    broken = {**default, "nr": next(n for n in task.template.knob_space()["nr"] if n != default["nr"])}
    assert task.template.valid(broken)
    apply = MatmulTemplate.apply

    def apply_unless_broken(self, sch, knobs):
        if knobs == broken:
            raise ValueError("this config does not apply")
        return apply(self, sch, knobs)

    monkeypatch.setattr(MatmulTemplate, "apply", apply_unless_broken)
    result = build_candidate(tvm.ir.save_json(task.group.func), "cpu", broken, str(tmp_path))
    assert result.artifact is None and "does not apply" in result.error
    assert build_candidate(tvm.ir.save_json(task.group.func), "cpu", default, str(tmp_path)).artifact

    _, choice = schedule_group(task.group, backend.schedule_context(), broken)
    assert choice.knobs is None and choice.source.startswith("default (database failed:")
    assert "does not apply" in choice.source
    _, choice = schedule_group(task.group, backend.schedule_context(), default)
    assert choice.source == "database" and choice.knobs == default


def test_compile_db_leaves_out_a_pick_tuned_against_another_default(tmp_path):
    """A pick beat the default of its tuning run. Where that run never measured the template's current default
    (the default changed since), or the pick has knobs the template no longer takes, compile --db builds today's
    default and a note says why; once a search has measured today's default, the pick is used again."""
    import time

    from xcomp.autotune.db import Record
    from xcomp.autotune.tuner import model_tasks
    from xcomp.backends import get_backend
    from xcomp.costmodel.predict import candidates

    backend = get_backend("cpu")
    model = _gemm_model()
    (task,), _ = model_tasks(model, backend, None)
    template, key = task.template, task.group.key
    default = template.default_knobs()
    old_default, pick = [k for k in candidates(template, limit=8, seed=key)[1:] if k != default][:2]
    path = str(tmp_path / "t.sqlite")
    target, fingerprint = backend.target_string, backend.spec.fingerprint()

    def record(knobs, ms, timing, when):
        return Record(key, task.group.kind, target, fingerprint, knobs, [ms] * 3, created=when, timing=timing)

    start = time.time()
    with TuningDB(path) as db:
        db.add_batch([record(old_default, 1.0, Timing.COLD, start), record(pick, 0.5, Timing.COLD, start + 1),
                      record(pick, 0.5, Timing.IN_MODEL, start + 2)])
    info = xcomp.compile(model, tune_db=path, costmodel=False).info
    choice = info["schedules"][key]
    assert choice["knobs"] is None and choice["source"].startswith("default (stale record: it was tuned against")
    assert any("1 of 1 unique groups do not use their tuning record" in n for n in info["notes"])

    with TuningDB(path) as db:  # a later search measured today's default
        db.add_batch([record(default, 0.9, Timing.COLD, start + 3)])
    assert xcomp.compile(model, tune_db=path, costmodel=False).info["schedules"][key] == {
        "knobs": pick, "source": "database"}

    older = {name: value for name, value in pick.items() if name != next(iter(pick))}  # a knob since added
    with TuningDB(path) as db:
        db.add_batch([record(older, 0.1, Timing.IN_MODEL, start + 4)])
    choice = xcomp.compile(model, tune_db=path, costmodel=False).info["schedules"][key]
    assert choice["knobs"] is None and "older version of the template" in choice["source"]


def _benchmark_workloads():
    """benchmarks/workloads.py, which the tuning benchmarks share."""
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
    try:
        import workloads
    finally:
        sys.path.pop(0)
    return workloads


def test_benchmark_workloads_each_tune_one_computing_group():
    """benchmarks/learning_curve.py and vs_metaschedule.py tune these; the blocked conv layout once broke the
    3x3 conv's (its layout transforms became groups too) without any test noticing."""
    workloads = _benchmark_workloads()
    from xcomp.backends import get_backend

    backend = get_backend("cpu")
    kinds = {name: workloads.task(name, backend).group.kind for name in workloads.WORKLOADS}
    assert kinds == {"gemm": "matmul", "conv3x3": "conv", "dwconv3x3": "conv"}


class _SlowerSecondTimeRunner(_FakeRunner):
    """The made-up latencies, each config 1.5x slower from its second measurement on (a machine that got busy)."""

    def __init__(self):
        self.seen = set()

    def run(self, reference, builds, target, params, workload=None):
        from xcomp.autotune.db import canonical_knobs

        results = super().run(reference, builds, target, params, workload)
        for result in results:
            key = canonical_knobs(result.knobs)
            if key in self.seen:
                result.latencies_ms = [ms * 1.5 for ms in result.latencies_ms]
            self.seen.add(key)
        return results


def _refine_with_times_inside(tmp_path, monkeypatch, inside_ms):
    """Tune the GEMM model with made-up times, then run the in-model step with made-up times inside the model:
    inside_ms(candidates, knobs, builds timed together) -> ms per call of a candidate (the rank builds are
    timed TOP together, the build of the picks 2, with the default build). Returns (model, backend, db path, task,
    the candidates [default, fastest other alone, ...], the step's result)."""
    from xcomp.runtime import group_times
    from xcomp.autotune import in_model
    from xcomp.autotune.tuner import Tuner, model_tasks
    from xcomp.backends import get_backend
    from xcomp.autotune.db import canonical_knobs

    model, backend, path = _gemm_model(), get_backend("cpu"), tmp_path / "t.sqlite"
    with TuningDB(path) as db:
        tuner = Tuner(backend, db, seed=0, runner=_FakeRunner(), builder=_FakeBuilder(), progress=False,
                      guided=False)
        (task,) = tuner.tune(model_tasks(model, backend, None)[0], trials=8)
        configs = in_model.candidates([task], in_model.TOP)[task.group.key]

        def made_up_inside(modules, runs):
            times = []
            for module in modules:
                (group,) = [g for g in module.groups if g.key == task.group.key]
                knobs = canonical_knobs(module.info["schedules"][group.key]["knobs"])
                times.append({group.name: [inside_ms(configs, knobs, len(modules))] * runs})
            return times

        monkeypatch.setattr(group_times, "interleaved_in_model_times", made_up_inside)
        result = in_model.refine(model, backend, db, [task], progress=False)
        assert db.count(task.group.key, timing=Timing.IN_MODEL) == 1  # the pick
    return model, backend, path, task, configs, result


def test_a_config_fastest_alone_that_loses_to_the_default_inside_the_model_is_not_used(tmp_path, monkeypatch):
    """The default stays unless a tuned config beats it inside the model: here every tuned config is slower
    there, so compile --db builds the default, and the summary says so."""
    from xcomp.autotune import in_model
    from xcomp.autotune.tuner import set_in_model_picks, summary
    from xcomp.autotune.db import canonical_knobs

    def default_fastest(configs, knobs, builds):  # noqa: ARG001
        return 1.0 if knobs == configs[0] else 1.1 + configs.index(knobs) / 10

    model, backend, path, task, configs, result = _refine_with_times_inside(tmp_path, monkeypatch,
                                                                             default_fastest)
    default = task.template.default_knobs()
    assert configs[0] == canonical_knobs(default) and len(configs) == in_model.TOP
    assert canonical_knobs(task.best_knobs) != configs[0]  # the search's fastest alone is a tuned config
    (row,) = result["groups"]
    assert row["picked"] == row["default"] == default and in_model.kept_default(result) == [row]
    assert _best_knobs(path, [task.group], backend.target_string, backend.spec.fingerprint()) == {
        task.group.key: default}
    (summary_row,) = rows = summary([task])
    set_in_model_picks(rows, result)
    assert summary_row.kept_default and summary_row.timed == "in-model"
    assert summary_row.why == "no tuned config beat it inside the model in every round (the best in 0 of 4)"
    assert summary_row.best_knobs == default and summary_row.speedup == 1.0


def test_the_fastest_config_inside_the_model_is_the_one_compile_uses(tmp_path, monkeypatch):
    """After the search each group's default and fastest configs are timed inside the model
    (autotune/in_model.py). Where their order there is not the one alone (here reversed: the slowest of them runs
    fastest inside the model, all beat the default), compile --db uses the fastest inside the model, and computes
    right with it; a later search's records, newer, take over again."""
    from xcomp.autotune import in_model
    from xcomp.autotune.tuner import Tuner, model_tasks
    from xcomp.autotune.db import canonical_knobs

    def reversed_inside(configs, knobs, builds):  # noqa: ARG001
        return 9.0 if knobs == configs[0] else float(len(configs) - configs.index(knobs))

    model, backend, path, task, alone, result = _refine_with_times_inside(tmp_path, monkeypatch, reversed_inside)
    (row,) = result["groups"]
    assert canonical_knobs(row["fastest_alone"]) == alone[1] and canonical_knobs(row["picked"]) == alone[-1]
    assert in_model.changed(result) == [row] and result["model_picked_ms"] == 1.0
    assert result["model_default_ms"] == 9.0
    target, fingerprint = backend.target_string, backend.spec.fingerprint()
    assert _best_knobs(path, [task.group], target, fingerprint) == {task.group.key: row["picked"]}
    module = xcomp.compile(model, tune_db=path)
    assert module.info["schedules"][task.group.key] == {"knobs": row["picked"], "source": "database"}
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(module(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)

    with TuningDB(path) as db:  # a later search, without the in-model step
        tuner = Tuner(backend, db, seed=1, runner=_FakeRunner(), builder=_FakeBuilder(), progress=False,
                      guided=False)
        (task,) = tuner.tune(model_tasks(model, backend, None)[0], trials=4)
    assert _best_knobs(path, [task.group], target, fingerprint) == {task.group.key: task.best_knobs}


def test_a_pick_that_loses_in_the_build_of_the_picks_keeps_the_default_and_says_why(tmp_path, monkeypatch):
    """A tuned config beats the default in the rank builds but not in the build of the picks together: the
    default stays, in the database and in the summary, which says why."""
    from xcomp.autotune import in_model
    from xcomp.autotune.tuner import set_in_model_picks, summary

    def slower_together(configs, knobs, builds):
        return 1.0 if knobs == configs[0] else 0.9 if builds == in_model.TOP else 1.1

    model, backend, path, task, configs, result = _refine_with_times_inside(tmp_path, monkeypatch,
                                                                             slower_together)
    (row,) = result["groups"]
    assert row["slower_together"] and row["picked"] == row["default"]
    assert [(c["picks"], c["held"]) for c in result["together"]] == [(1, False)]
    default = task.template.default_knobs()
    assert _best_knobs(path, [task.group], backend.target_string, backend.spec.fingerprint()) == {
        task.group.key: default}
    (summary_row,) = rows = summary([task])
    set_in_model_picks(rows, result)
    assert summary_row.kept_default and summary_row.best_knobs == default
    assert summary_row.why == "its pick beat it inside the model, but not in the build of the picks together"


def test_inside_the_model_a_tuned_config_replaces_the_default_only_where_it_wins_every_round():
    """A config beats the default inside the model only by winning each round (each times all builds within
    seconds): one that wins overall on two slow rounds does not."""
    from xcomp.autotune.in_model import choose

    default, steady, lucky = "default", "steady", "lucky"
    by_round = {default: [[1.00], [1.00], [1.30], [1.00]],
                steady: [[0.97], [0.98], [1.25], [0.99]],  # faster every round
                lucky: [[1.01], [0.70], [0.90], [1.01]]}  # fastest overall, from two rounds
    assert choose(by_round, default) == steady
    assert choose({default: by_round[default], lucky: by_round[lucky]}, default) == default
    assert choose({default: by_round[default]}, default) == default


def _check_with_made_up_times(monkeypatch, picks: dict, ms):
    """in_model.check_together on made-up builds of groups "a" and "b" (default knobs "d", picks as given):
    ms(group or "neighbour", {group: knobs of the build}) -> ms per call; "neighbour" is a kernel of every build
    that is no group. Returns (kept, checks, the configs of each build made)."""
    import types

    from xcomp.autotune import in_model
    from xcomp.runtime import group_times

    built = []

    def build(group_knobs):
        built.append({key: json.dumps(knobs) for key, knobs in group_knobs.items()})
        groups = [types.SimpleNamespace(name=f"fused_{key}", key=key) for key in group_knobs]
        return types.SimpleNamespace(groups=groups, configs=built[-1])

    def made_up_inside(modules, runs):
        return [{**{f"fused_{key}": [ms(key, module.configs)] * runs for key in module.configs},
                 "neighbour": [ms("neighbour", module.configs)] * runs} for module in modules]

    monkeypatch.setattr(group_times, "interleaved_in_model_times", made_up_inside)
    defaults = {"a": json.dumps("d"), "b": json.dumps("d")}
    kept, _, checks = in_model.check_together(build, build({"a": "d", "b": "d"}), defaults,
                                              {key: json.dumps(knobs) for key, knobs in picks.items()},
                                              progress=False)
    return kept, checks, built[1:]


def test_a_pick_that_loses_beside_the_other_picks_goes_back_to_its_default(monkeypatch):
    """The rank builds time a pick beside the other groups' same-rank configs, not beside their picks. Here a's
    pick is faster only while b runs its default: built together it loses, goes back, and b's pick is kept
    from a second build in which the set beat the default build."""
    def ms(group, configs):
        if group == "a":
            return 0.9 if configs["a"] == '"pa"' and configs["b"] == '"d"' else 1.2 if configs["a"] == '"pa"' else 1.0
        return 0.8 if configs.get(group) == '"pb"' else 1.0

    kept, checks, builds = _check_with_made_up_times(monkeypatch, {"a": "pa", "b": "pb"}, ms)
    assert kept == {"b": '"pb"'}
    assert [(c["picks"], c["held"], c["slower"]) for c in checks] == [(2, False, ["a"]), (1, True, [])]
    assert builds == [{"a": '"pa"', "b": '"pb"'}, {"a": '"d"', "b": '"pb"'}]


def test_picks_that_slow_a_kernel_beside_them_are_not_kept(monkeypatch):
    """Each pick beats its default, but the set slows a kernel that is no pick (a consumer reading what a serial
    pick left in one core's caches) by more than they gain: nothing is to blame alone, and the defaults stay."""
    def ms(group, configs):
        if group == "neighbour":
            return 2.0 if configs["a"] == '"pa"' else 1.0
        return 0.9 if configs[group] != '"d"' else 1.0

    kept, checks, builds = _check_with_made_up_times(monkeypatch, {"a": "pa", "b": "pb"}, ms)
    assert kept == {} and len(builds) == 1
    assert checks == [{"picks": 2, "held": False, "slower": [], "rounds_won": 0, "model_default_ms": 3.0,
                       "model_picked_ms": 3.8}]


def test_a_failing_in_model_step_loses_nothing_the_search_measured(tmp_path, monkeypatch):
    """The in-model step runs after the whole search: if it fails, tune still returns its summary, says why,
    and compile --db uses the search's records, each group's config as its side-by-side rounds picked it."""
    from xcomp.autotune import in_model

    def fails(*args, **kwargs):
        raise RuntimeError("no memory for a fourth build")

    monkeypatch.setattr(in_model, "time_configs_in_model", fails)
    model, db = tiny_mlp(4), tmp_path / "t.sqlite"
    result = xcomp.tune(model, db=db, trials=4, seed=0)
    assert "no memory for a fourth build" in result["in_model"]["error"]
    with TuningDB(db) as d:
        assert d.count() - d.count(timing=Timing.SIDE_BY_SIDE) == result["trials"]
        assert d.count(timing=Timing.IN_MODEL) == 0
    module = xcomp.compile(model, tune_db=db)
    assert all(c["source"] == "database" for c in module.info["schedules"].values())


def test_default_and_best_are_confirmed_alike(tmp_path):
    """The confirm round measures the default again too: "default -> tuned" sets two configs measured the same
    way against each other, so the default never looks faster than itself (it did: 0.55x in a squeezenet
    summary, when the best config was the default, confirmed slower, and its first run stood as "default")."""
    from xcomp.autotune.tuner import Tuner, model_tasks, summary
    from xcomp.backends import get_backend
    from xcomp.autotune.db import canonical_knobs

    backend = get_backend("cpu")
    with TuningDB(tmp_path / "t.sqlite") as db:
        tuner = Tuner(backend, db, seed=0, runner=_SlowerSecondTimeRunner(), builder=_FakeBuilder(),
                      progress=False, guided=False)
        (task,) = tuner.tune(model_tasks(_gemm_model(), backend, None)[0], trials=8)
    default = canonical_knobs(task.template.default_knobs())
    first = 1.0 + zlib.crc32(default.encode()) % 1000 / 1000
    assert task.default_ms == pytest.approx(1.5 * first)  # confirmed, whether or not it is among the fastest
    (row,) = summary([task])
    best_first = min(1.0 + zlib.crc32(k.encode()) % 1000 / 1000 for k in task.measured)
    assert row.speedup == pytest.approx(first / best_first)


class _JumpyDefaultRunner(_FakeRunner):
    """The default config's second measurement (its confirm run) 3x slow, as this host's timing jumps are."""

    def __init__(self, default: str):
        self.default, self.runs = default, 0

    def run(self, reference, builds, target, params, workload=None):
        from xcomp.autotune.db import canonical_knobs

        results = super().run(reference, builds, target, params, workload)
        for result in results:
            if canonical_knobs(result.knobs) == self.default:
                self.runs += 1
                if self.runs == 2:
                    result.latencies_ms = [ms * 3 for ms in result.latencies_ms]
        return results


def test_the_summary_compares_default_and_best_side_by_side(tmp_path):
    """One slow run of the default stays in its record (a record keeps the slower of two runs), but the
    summary's "default -> tuned" is the median of the two measured side by side: the jump is not a speedup."""
    from xcomp.autotune.tuner import PAIRED_ROUNDS, Tuner, model_tasks, summary
    from xcomp.backends import get_backend
    from xcomp.autotune.db import canonical_knobs

    backend = get_backend("cpu")
    (task,) = model_tasks(_gemm_model(), backend, None)[0]
    default = canonical_knobs(task.template.default_knobs())
    runner = _JumpyDefaultRunner(default)
    with TuningDB(tmp_path / "t.sqlite") as db:
        tuner = Tuner(backend, db, seed=0, runner=runner, builder=_FakeBuilder(), progress=False, guided=False)
        (task,) = tuner.tune([task], trials=8)
        (record,) = [r for r in db.records(task.group.key) if canonical_knobs(r.knobs) == default]
    first = 1.0 + zlib.crc32(default.encode()) % 1000 / 1000
    assert record.median_ms == pytest.approx(3 * first)  # the jump is kept for choosing
    assert runner.runs == 2 + PAIRED_ROUNDS
    assert task.default_ms == pytest.approx(first)
    others = min(1.0 + zlib.crc32(k.encode()) % 1000 / 1000 for k in task.measured if k != default)
    (row,) = summary([task])
    # against the best other config, or none when the default's slow record still beats them all
    assert row.speedup == pytest.approx(first / others if others < 3 * first else 1.0)


class _TimingRunner(_FakeRunner):
    """The made-up latencies as `remap`(ms) gives them, as a runner that times its own way (`timing`) would."""

    def __init__(self, timing, remap):
        self._timing, self.remap = timing, remap

    def timing(self, target, evict_private_bytes=0):
        return self._timing

    def run(self, reference, builds, target, params, workload=None):
        results = super().run(reference, builds, target, params, workload)
        for result in results:
            result.latencies_ms = [self.remap(ms) for ms in result.latencies_ms]
        return results


def test_records_timed_another_way_are_neither_resumed_nor_chosen(tmp_path):
    """A database tuned with warm timing (numbers 10x lower, in another order), then tuned again with cold
    timing: the second run measures every config it tries itself, and compile --db chooses among the newest
    run's records only (the warm ones would all look faster)."""
    from xcomp.autotune.tuner import Tuner, model_tasks
    from xcomp.backends import get_backend

    backend = get_backend("cpu")
    path = tmp_path / "t.sqlite"
    for timing, remap in (("warm", lambda ms: (3.0 - ms) / 10), ("cold", lambda ms: ms)):
        with TuningDB(path) as db:
            tuner = Tuner(backend, db, seed=0, runner=_TimingRunner(timing, remap), builder=_FakeBuilder(),
                          progress=False, guided=False)
            (task,) = tuner.tune(model_tasks(_gemm_model(), backend, None)[0], trials=8)
        assert task.trials == 9  # the default and 8 trials, none taken from the other timing's records
        assert all(1.0 <= ms < 2.0 for ms in task.measured.values()) == (timing == "cold")
    with TuningDB(path) as db:
        assert db.count(timing="warm") == db.count(timing="cold") == 9
        fastest_warm, _ = db.best(task.group.key, backend.target_string, timing="warm")
    (chosen,) = _best_knobs(path, [task.group], backend.target_string, backend.spec.fingerprint()).values()
    assert chosen == task.best_knobs != fastest_warm


def test_weights_that_stay_in_the_last_level_cache_are_timed_there(tmp_path):
    """A model whose weights fit the last-level cache is timed with only the private caches evicted before each
    run (inside the model its weights come from there); one whose weights do not, with them flushed to memory."""
    from xcomp.autotune.measure import LocalRunner
    from xcomp.autotune.tuner import Tuner, model_tasks, weights_stay_cached
    from xcomp.backends import get_backend

    backend = get_backend("cpu")
    tasks = model_tasks(_gemm_model(), backend, None)[0]  # a 16 KB weight
    roomy = dataclasses.replace(backend.spec, cache_bytes=(32 << 10, 1 << 20, 32 << 20))
    assert weights_stay_cached(tasks, roomy)
    assert not weights_stay_cached(tasks, dataclasses.replace(roomy, cache_bytes=(32 << 10, 1 << 20, 8 << 10)))
    assert not weights_stay_cached(tasks, dataclasses.replace(roomy, cache_bytes=(32 << 10, 1 << 20, 0)))

    backend.spec = roomy  # (a backend of its own: get_backend makes a new one per call)
    with TuningDB(tmp_path / "t.sqlite") as db:
        tuner = Tuner(backend, db, seed=0, runner=_FakeRunner(), builder=_FakeBuilder(), progress=False)
        tuner.start(tasks)
    assert tuner.evict_private_bytes == 1 << 20  # the L2 of a core: what a LocalRunner evicts before each run
    assert LocalRunner().timing("cpu", tuner.evict_private_bytes) == Timing.LLC


class _ManyRunner(_FakeRunner):
    """A runner that measures several workloads at once, as LocalRunner slices them; keeps each call's jobs."""

    def __init__(self):
        self.calls = []

    def run_many(self, jobs):
        self.calls.append(jobs)
        return [self.run(*job) for job in jobs]


def test_every_group_s_default_is_timed_in_one_pass_where_the_runner_can(tmp_path):
    """The defaults of all groups go to the runner together (LocalRunner.run_many slices them round-robin), each
    with its own reference and workload, and each group's default time is its record's."""
    from xcomp.autotune.db import canonical_knobs
    from xcomp.autotune.tuner import Tuner, model_tasks
    from xcomp.backends import get_backend

    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [64, 64])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [64, 64])
    weight = onnx.numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    model = make_model([onnx.helper.make_node("MatMul", ["x", "W"], ["h"]),
                        onnx.helper.make_node("Softmax", ["h"], ["y"], axis=-1)], [x], [y], [weight])
    backend = get_backend("cpu")
    tasks = model_tasks(model, backend, None)[0]
    assert len(tasks) == 2
    runner = _ManyRunner()
    with TuningDB(tmp_path / "t.sqlite") as db:
        Tuner(backend, db, seed=0, runner=runner, builder=_FakeBuilder(), progress=False).start(tasks)
        (jobs,) = runner.calls
        assert [job[4].key for job in jobs] == [task.group.key for task in tasks]
        for task, (reference, (build,), *_) in zip(tasks, jobs):
            assert reference == task.reference and build.knobs == task.template.default_knobs()
            (record,) = db.records(task.group.key)
            assert record.median_ms == task.default_ms
            assert canonical_knobs(record.knobs) == canonical_knobs(task.template.default_knobs())


def _best_knobs(db_path, groups, target, fingerprint) -> dict:
    """What xcomp.compile(..., tune_db=db_path) builds each group with."""
    from xcomp.autotune.db import TuningDB

    with TuningDB(db_path) as db:
        return db.best_knobs(groups, target, fingerprint)


class _SideBySideRunner(_FakeRunner):
    """The made-up latencies, from this machine or another (`measures_here`); in the side-by-side rounds of the
    default and the fastest alone, the default takes 0.5 ms in the round numbered `quick_round`."""

    def __init__(self, default: str, quick_round: int | None, measures_here: bool):
        self.default, self.quick_round, self.rounds = default, quick_round, 0
        self.measures_here = measures_here

    def run(self, reference, builds, target, params, workload=None):
        from xcomp.autotune.db import canonical_knobs

        results = super().run(reference, builds, target, params, workload)
        if len(builds) == 2 and self.default in {canonical_knobs(b.knobs) for b in builds}:
            self.rounds += 1
            for result in results:
                if canonical_knobs(result.knobs) == self.default and self.rounds == self.quick_round:
                    result.latencies_ms = [0.5]
        return results


@pytest.mark.parametrize("measures_here", [False, True], ids=["remote", "here"])
@pytest.mark.parametrize("quick_round", [None, 2])
def test_a_pick_beats_the_default_side_by_side_in_every_round(tmp_path, quick_round, measures_here):
    """Where no in-model step judges a group (the runner measures elsewhere, or the model runs the group as a VM
    builtin that no in-model timer sees: inception_v1's fused_layout_transform9_reshape ran a pick at 0.88x its
    default so), the fastest alone replaces the default only where it was faster in every side-by-side round;
    where the default won one, compile --db builds the default."""
    from xcomp.autotune.tuner import Tuner, model_tasks, summary
    from xcomp.backends import get_backend

    backend = get_backend("cpu")
    (task,) = model_tasks(_gemm_model(), backend, None)[0]
    default = canonical_knobs(task.template.default_knobs())
    path = tmp_path / "t.sqlite"
    with TuningDB(path) as db:
        tuner = Tuner(backend, db, seed=0, runner=_SideBySideRunner(default, quick_round, measures_here),
                      builder=_FakeBuilder(), progress=False, guided=False)
        (task,) = tuner.tune([task], trials=8)
        # the pick, and where the default stays, the fastest alone as a failure saying how it lost
        assert [r.error for r in db.records(task.group.key, timing=Timing.SIDE_BY_SIDE)] == (
            [None, "lost to the default side by side: faster in 2 of 3 rounds"] if quick_round else [None])
        search_timing = db.latest_timing(task.group.key, backend.target_string, picks=False)
    fastest_alone = min((ms, knobs) for knobs, ms in task.measured.items())[1]
    assert fastest_alone != default and search_timing == "made up"
    (chosen,) = _best_knobs(path, [task.group], backend.target_string, backend.spec.fingerprint()).values()
    expected = default if quick_round else fastest_alone
    assert canonical_knobs(chosen) == expected
    (row,) = summary([task])
    assert row.kept_default == bool(quick_round) and canonical_knobs(row.best_knobs) == expected
    assert row.why == ("the fastest alone lost to it side by side: faster in 2 of 3 rounds" if quick_round else "")


@pytest.mark.parametrize("inside", ["default fastest", "tuned fastest", "not timed"])
def test_the_benchmarks_report_the_tuner_s_pick_never_one_that_lost_to_the_default(monkeypatch, inside):
    """benchmarks/gemm.py and vs_metaschedule.py re-time workloads.tuner_pick's config: the in-model step's pick,
    so the default where a tuned config lost there, and where that step did not time the group the pick of its
    side-by-side rounds alone (never a fastest alone that lost to the default there). Made-up times alone, the
    same in every round, and inside the model."""
    from xcomp.autotune import in_model
    from xcomp.autotune.db import canonical_knobs
    from xcomp.backends import get_backend
    from xcomp.runtime import group_times

    workloads, backend, model = _benchmark_workloads(), get_backend("cpu"), _gemm_model()
    task = workloads.computing_task(model, backend, "gemm")
    default = canonical_knobs(task.template.default_knobs())
    timed = {}

    def made_up_inside(modules, runs):
        times = []
        for module in modules:
            (group,) = [g for g in module.groups if g.key == task.group.key]
            knobs = canonical_knobs(module.info["schedules"][group.key]["knobs"])
            if knobs not in timed:  # the same made-up time in every round
                timed[knobs] = 2.0 if knobs == default else 1.0 + len(timed) / 10
                if inside == "default fastest":
                    timed[knobs] = 1.0 if knobs == default else 3.0
            times.append({} if inside == "not timed" else {group.name: [timed[knobs]] * runs})
        return times

    monkeypatch.setattr(group_times, "interleaved_in_model_times", made_up_inside)
    pick = workloads.tuner_pick(model, task, backend, trials=8, seed=0, tuning_runner=_FakeRunner(),
                                builder=_FakeBuilder())
    fastest_alone = canonical_knobs(task.best_knobs)
    assert fastest_alone != default and len(timed) == in_model.TOP  # the default and 3 tuned configs, inside
    if inside == "tuned fastest":
        expected = min((ms, knobs) for knobs, ms in timed.items())[1]
        assert expected != default and pick["picked_by"] == Timing.IN_MODEL
    elif inside == "default fastest":
        expected = default
        assert pick["picked_by"] == Timing.IN_MODEL
    else:  # faster alone than the default in every side-by-side round
        expected = fastest_alone
        assert pick["picked_by"] == Timing.SIDE_BY_SIDE
    assert canonical_knobs(pick["knobs"]) == expected and pick["kept_default"] == (expected == default)


def test_the_tune_summary_says_why_each_group_keeps_its_default(tmp_path, monkeypatch, capsys):
    """xcomp tune prints, under its table, each group that keeps its default and why (GroupSummary.why)."""
    from xcomp.cli import main

    def group(name, kept, why=""):
        return {"group": name, "kind": "matmul", "key": name, "count": 1, "trials": 8, "default_ms": 1.0,
                "best_ms": 1.0 if kept else 0.5, "best_knobs": {}, "waiting": False, "timed": "alone",
                "kept_default": kept, "why": why, "speedup": 1.0 if kept else 2.0}

    result = {"target": "cpu", "db": "t.sqlite", "trials": 16, "history": [], "untuned_symbolic": [],
              "model_default_ms": 2.0, "model_tuned_ms": 1.5, "in_model": None,
              "groups": [group("kept_one", True, "the fastest alone lost to it side by side: faster in 2 of 3 rounds"),
                         group("tuned_one", False)]}
    monkeypatch.setattr(xcomp, "tune", lambda *args, **kwargs: result)
    path = tmp_path / "m.onnx"
    onnx.save(_gemm_model(), path)
    assert main(["tune", str(path), "-q"]) == 0
    out = capsys.readouterr().out
    assert "Keep their default (compile --db builds it):\n  kept_one: the fastest alone lost to it side by side: " \
           "faster in 2 of 3 rounds\n" in out
    assert "  tuned_one:" not in out


class _DeferredRunner(_FakeRunner):
    """A bundle runner's part the tuner sees: nothing measured now, side-by-side rounds queued (recorded here)."""

    deferred, measures_here, imported = True, False, None

    def __init__(self):
        self.queued = []

    def queue_side_by_side(self, reference, target, params, workload, default, contender):
        self.queued.append((default[0], canonical_knobs(contender[0].knobs) if contender else None))


def test_a_bundle_carries_side_by_side_rounds_until_they_judged_the_fastest_alone(tmp_path):
    """With a deferred runner, a group with no batch in the bundle still gets the rounds of its default against
    its fastest alone, until rounds stored a pick after that config's record (won, or lost): then none, so a
    bundle of an exhausted group empties and the round trips end."""
    from xcomp.autotune.measure import side_by_side_pick
    from xcomp.autotune.tuner import Tuner, model_tasks, summary
    from xcomp.backends import get_backend

    backend, path = get_backend("cpu"), tmp_path / "t.sqlite"
    with TuningDB(path) as db:  # a search stopped before its side-by-side rounds: nothing judged yet
        tuner = Tuner(backend, db, runner=_FakeRunner(), builder=_FakeBuilder(), progress=False, guided=False)
        tasks = model_tasks(_gemm_model(), backend, None)[0]
        tuner.start(tasks)
        tuner.step(tasks, 8)

    def queued():
        runner = _DeferredRunner()
        with TuningDB(path) as db:
            tuner = Tuner(backend, db, runner=runner, builder=_FakeBuilder(), progress=False, guided=False)
            (task,) = model_tasks(_gemm_model(), backend, None)[0]
            tuner.start([task])
            tuner.confirm([task])  # no batch this time: as for a group whose knob space is exhausted
        return task, runner.queued

    task, first = queued()
    default = canonical_knobs(task.template.default_knobs())
    fastest = next(k for k in task.fastest(2) if k != default)
    assert first == [(default, fastest)]
    for best_ms in ([1.0, 3.0, 1.0], [1.0, 1.0, 1.0]):  # lost one round, then won every round
        with TuningDB(path) as db:
            workload = Tuner(backend, db, runner=_FakeRunner(), builder=_FakeBuilder(), progress=False,
                             guided=False)._workload(task)
            db.replace_picks(workload.target, workload.hw_fingerprint, {workload.key: side_by_side_pick(
                workload, default, fastest, {default: [2.0] * 3, fastest: best_ms})})
        task, again = queued()
        assert again == []
        (row,) = summary([task])
        lost = best_ms[1] == 3.0
        assert row.kept_default == lost and canonical_knobs(row.best_knobs) == (default if lost else fastest)
        assert row.why == ("the fastest alone lost to it side by side: faster in 2 of 3 rounds" if lost else "")


@pytest.mark.parametrize("target", ["cpu:skylake-avx512", "cpu:znver3"])
def test_every_default_config_is_a_point_of_its_knob_space(target):
    """The search crosses configs knob by knob, the default among them: a default with a knob its space lacks
    stopped `xcomp tune onnx:light_squeezenet` with a KeyError on an AVX-512 host (a blocked conv over one
    input-channel vector, which has no input-channel passes to split)."""
    import random

    from xcomp.autotune.search import crossover
    from xcomp.autotune.tuner import model_tasks
    from xcomp.backends import get_backend
    from xcomp.frontends.examples import resolve

    tasks, _ = model_tasks(resolve("onnx:light_squeezenet"), get_backend(target), None)
    for task in tasks:
        default = task.template.default_knobs()
        assert task.template.in_space(default), (task.group.name, default, task.template.knob_space())
        crossover(default, task.template.sample(random.Random(0)), random.Random(0))
