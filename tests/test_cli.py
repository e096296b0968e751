"""The xcomp command line, end to end in subprocesses, as a user runs it."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx

from conftest import ort_run, tiny_mlp, xcomp_cli


def test_help_teaches():
    r = xcomp_cli("--help")
    assert r.returncode == 0
    for word in ("compile", "run", "info", "bench", "onnx:light_resnet50", "exit codes"):
        assert word in r.stdout


def test_version():
    import xcomp

    r = xcomp_cli("--version")
    assert r.returncode == 0 and xcomp.__version__ in r.stdout


def test_compile_run_matches_onnxruntime(tmp_path):
    model_path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(2), str(model_path))
    out = tmp_path / "build" / "mlp.xc"  # a folder that does not exist yet, shared with the emitted code
    r = xcomp_cli("compile", str(model_path), "-o", str(out), "--emit-source", str(out.parent), "--json", "-q")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["output"] == str(out) and out.exists()
    assert info["emitted"] and all(p.startswith(str(out.parent)) for p in info["emitted"])

    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = xcomp_cli("run", str(out), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y.npz"))
    assert r.returncode == 0, r.stderr
    assert "checksum" in r.stdout
    got = np.load(tmp_path / "y.npz")["y"]
    np.testing.assert_allclose(got, ort_run(str(model_path), {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_run_random_inputs_json(tmp_path):
    model_path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(2), str(model_path))
    r = xcomp_cli("run", str(model_path), "--json", "-q", "--seed", "7")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["inputs"]["x"]["random"] is True
    assert doc["outputs"]["y"]["shape"] == [2, 4]
    again = json.loads(xcomp_cli("run", str(model_path), "--json", "-q", "--seed", "7").stdout)
    assert again["outputs"]["y"]["checksum"] == doc["outputs"]["y"]["checksum"]  # seeded: reproducible


def test_user_errors_are_one_line_exit_1(tmp_path):
    r = xcomp_cli("compile", str(tmp_path / "missing.onnx"))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "no such file" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    model_path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(2), str(model_path))
    r = xcomp_cli("compile", str(model_path), "-t", "tpu", "-q")
    assert r.returncode == 1 and "unknown target" in r.stderr and "Traceback" not in r.stderr

    r = xcomp_cli("compile", str(model_path), "-o", str(model_path / "mlp.xc"), "-q")  # under a file: before compiling
    assert r.returncode == 1 and "is not a writable folder" in r.stderr and "Traceback" not in r.stderr

    np.save(tmp_path / "bad.npy", np.zeros((2, 8), np.float64))
    r = xcomp_cli("run", str(model_path), "--input", f"x={tmp_path / 'bad.npy'}", "-q")
    assert r.returncode == 1 and "expected dtype float32, got float64" in r.stderr


def test_run_of_a_corrupt_xc_is_one_line_exit_1(tiny_module, tmp_path):
    """A module file whose metadata lacks its target: an ArtifactError naming the file, not an internal error."""
    from conftest import with_metadata

    module, _ = tiny_module
    corrupt = with_metadata(module.save(tmp_path / "mlp.xc"), tmp_path / "corrupt.xc", lambda meta: meta.pop("target"))
    r = xcomp_cli("run", str(corrupt), "-q")
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [f"xcomp run: error: {corrupt}: corrupt module: its metadata has no "
                                             "'target'"]


def test_info_lists_ops_groups_and_unsupported(tmp_path):
    model_path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(2), str(model_path))
    r = xcomp_cli("info", str(model_path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ops"] == {"MatMul": 1, "Add": 1, "Relu": 1}
    assert doc["unsupported"] == []
    assert doc["groups"] and all(g["count"] >= 1 for g in doc["groups"])
    assert sum(g["flops"] * g["count"] for g in doc["groups"]) >= 2 * 2 * 8 * 4

    bad = tiny_mlp(2)
    bad.graph.node[2].op_type = "NoSuchOp"
    onnx.save(bad, str(tmp_path / "bad.onnx"))
    r = xcomp_cli("info", str(tmp_path / "bad.onnx"))
    assert r.returncode == 0 and "unsupported (1 node(s))" in r.stdout and "NoSuchOp" in r.stdout


def test_tvm_warnings_once_per_kind_all_with_verbose(tmp_path):
    """x ** 5 makes TVM's C++ warn about pow once per use it lowers: a line a kind, with a count; -v: each. (The
    graph passes multiply out x ** 2 to x ** 4, quietly.)"""
    from onnx import TensorProto, helper, numpy_helper

    from conftest import make_model

    nodes = [helper.make_node("Pow", ["x", "five"], ["p"]), helper.make_node("Add", ["x", "p"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                       [numpy_helper.from_array(np.array(5.0, np.float32), "five")])
    onnx.save(model, str(tmp_path / "fifth_power.onnx"))
    r = xcomp_cli("info", str(tmp_path / "fifth_power.onnx"))
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "Detected pow" in line]
    assert len(warned) == 1 and warned[0].startswith("xcomp.tvm: warning: "), r.stderr
    assert "repeated" in warned[0]
    repeats = int(re.search(r"repeated (\d+) more times", warned[0])[1])
    r = xcomp_cli("info", "-v", str(tmp_path / "fifth_power.onnx"))
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "Detected pow" in line]
    assert len(warned) == repeats + 1 and all(line.startswith("xcomp.tvm: warning: ") for line in warned)


def test_bench_against_onnxruntime(tmp_path):
    model_path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(2), str(model_path))
    r = xcomp_cli("bench", str(model_path), "--baseline", "onnxruntime", "--repeat", "5", "--json", "-q")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (target,), (ort,) = doc["targets"], doc["baselines"]
    assert target["status"] == ort["status"] == "measured" and ort["name"] == "onnxruntime"
    assert target["latency"]["runs"] == 5 and ort["latency"]["runs"] == 5 and ort["latency"]["median_ms"] > 0
    # one block of 6 calls each: its first, right after the other runner's block, is reported apart
    assert target["latency_after_switch"]["runs"] == ort["latency_after_switch"]["runs"] == 1
    assert target["check"] == {"reference": "onnxruntime", "max_abs_diff": target["check"]["max_abs_diff"],
                               "uniform_reference": False}
    assert target["check"]["max_abs_diff"] < 1e-4
    assert "groups" not in target  # the per-group profile is for --report
    assert target["model_flops"] > 0  # the table's rate column divides this by each runner's median


def test_bench_refuses_a_block_without_steady_runs(tmp_path):
    model_path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(2), str(model_path))
    r = xcomp_cli("bench", str(model_path), "--block", "1", "-q")
    assert r.returncode == 1 and "--block 1" in r.stderr and "Traceback" not in r.stderr


def test_bench_table_without_report_is_the_report_table(tmp_path):
    """One table layout whether or not a report is written."""
    model_path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp(2), str(model_path))
    r = xcomp_cli("bench", str(model_path), "--repeat", "3", "-q")
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if line.startswith("runner"))
    assert header.split()[:4] == ["runner", "status", "median", "p90"] and "vs onnxruntime" in header
    assert "onnxruntime (cpu)" in r.stdout and "measured" in r.stdout
    # the model's arithmetic rate and share of this CPU's peak, for xcomp and for the baselines alike
    assert "rate (% of peak)" in header
    rows = [line for line in r.stdout.splitlines() if "measured" in line]
    assert rows and all(re.search(r"[\d.]+ GFLOP/s \((<0.001|[\d.]+)%\)", line) for line in rows)


def test_bench_flags_a_check_against_uniform_outputs(tmp_path):
    """The shipped light models' weights are one constant and their softmax output uniform: matching it says
    little, and the table says so."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.full((4, 5), 0.02, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"]), helper.make_node("Softmax", ["logits"], ["y"])],
        "uniform", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], [weight])
    model_path = tmp_path / "uniform.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(model_path))
    doc = json.loads(xcomp_cli("bench", str(model_path), "--repeat", "3", "--json", "-q").stdout)
    assert doc["targets"][0]["check"]["uniform_reference"] is True
    r = xcomp_cli("bench", str(model_path), "--repeat", "3", "-q")
    assert r.returncode == 0, r.stderr
    (row,) = [line for line in r.stdout.splitlines() if line.startswith("xcomp cpu")]
    assert row.rstrip().endswith("(onnxruntime; uniform reference)")
    assert "note: onnxruntime's outputs are one value repeated" in r.stdout


def test_shipped_model_shorthand():
    r = xcomp_cli("info", "onnx:light_squeezenet", "--json", "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"][0]["shape"] == [1, 3, 224, 224]
    r = xcomp_cli("info", "onnx:no_such_model")
    assert r.returncode == 1 and "light_resnet50" in r.stderr
