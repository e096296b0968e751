"""The torch and torch.compile baselines of `xcomp bench`: a torch.export program given with --torch-model runs
beside xcomp on the same inputs and is checked against onnxruntime; a program that does not fit, a file that is
not one, and a torch.compile that fails each say so."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json

import numpy as np
import pytest
from conftest import make_model
from onnx import TensorProto, helper, numpy_helper

import onnx

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
W1 = (RNG.standard_normal((32, 64)) * 0.2).astype(np.float32)
B1 = RNG.standard_normal(64).astype(np.float32)
W2 = (RNG.standard_normal((64, 8)) * 0.2).astype(np.float32)


def onnx_model():
    """y = relu(x @ W1 + B1) @ W2 + z: two inputs, so handing them over in the wrong order would show."""
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Add", ["h", "B1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "W2"], ["m"]),
             helper.make_node("Add", ["m", "z"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32]),
              helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8])]
    weights = [numpy_helper.from_array(v, n) for n, v in (("W1", W1), ("B1", B1), ("W2", W2))]
    return make_model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], weights)


class Net(torch.nn.Module):
    def __init__(self, w2=W2):
        super().__init__()
        self.w1, self.b1, self.w2 = (torch.nn.Parameter(torch.from_numpy(v.copy())) for v in (W1, B1, w2))

    def forward(self, x, z):
        return torch.relu(x @ self.w1 + self.b1) @ self.w2 + z[:, :self.w2.shape[1]]


def export(net, path, z_width=8):
    example = (torch.zeros(4, 32), torch.zeros(4, z_width))
    torch.export.save(torch.export.export(net.eval(), example), str(path))
    return str(path)


def bench(*args):
    from xcomp.cli import main

    return main(["bench", *args])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("torch_baseline")
    onnx.save(onnx_model(), str(folder / "mlp.onnx"))
    export(Net(), folder / "mlp.pt2")
    return folder


@pytest.fixture(scope="module")
def report(folder):
    """`xcomp bench mlp.onnx --torch-model mlp.pt2 --json`, with the default baselines."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert bench(str(folder / "mlp.onnx"), "--torch-model", str(folder / "mlp.pt2"), "--repeat", "5",
                     "--warmup", "1", "-q", "--json") == 0
    return json.loads(buffer.getvalue())


def test_eager_and_compiled_are_measured_and_agree_with_onnxruntime(report, folder):
    baselines = {b["name"]: b for b in report["baselines"]}
    assert set(baselines) == {"onnxruntime", "torch", "torch.compile"}  # torch.compile is a default with a program
    for name, mode in (("torch", "eager"), ("torch.compile", "torch.compile (inductor)")):
        b = baselines[name]
        assert b["status"] == "measured" and b["mode"] == mode and b["version"] == torch.__version__
        assert b["latency"]["runs"] == 5 and b["latency"]["median_ms"] > 0 and b["first_run_s"] > 0
        assert b["check"]["reference"] == "onnxruntime" and b["check"]["max_abs_diff"] < 1e-4
        source = b["source"]
        assert source["kind"] == "torch.export" and source["path"] == str(folder / "mlp.pt2")
        assert len(source["sha256"]) == 64
    assert report["settings"]["torch_model"] == str(folder / "mlp.pt2")
    assert baselines["onnxruntime"]["first_run_s"] > 0


def test_latency_table_shows_both_torch_rows(folder, capsys):
    assert bench(str(folder / "mlp.onnx"), "--torch-model", str(folder / "mlp.pt2"), "--baseline", "onnxruntime",
                 "--baseline", "torch", "--repeat", "3", "--warmup", "1", "-q") == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("torch (cpu)"))
    assert "measured" in row and "(onnxruntime)" in row
    assert "torch.compile" not in printed  # only the baselines asked for


def test_a_program_with_other_outputs_is_refused(folder, capsys):
    other = export(Net(w2=W2[:, :4]), folder / "narrow.pt2")  # y is [4, 4], not [4, 8]
    assert bench(str(folder / "mlp.onnx"), "--torch-model", other, "--baseline", "torch", "-q") == 1
    err = capsys.readouterr().err
    assert "narrow.pt2" in err and "[[4, 4]]" in err and "not the same model" in err
    assert "Traceback" not in err


def test_a_program_taking_other_inputs_is_refused(folder, capsys):
    other = export(Net(), folder / "wide.pt2", z_width=16)  # z must be [4, 16]
    assert bench(str(folder / "mlp.onnx"), "--torch-model", other, "--baseline", "torch", "-q") == 1
    err = capsys.readouterr().err
    assert "wide.pt2" in err and "'z': [4, 8]" in err and "failed" in err


@pytest.mark.parametrize("content", [None, b"not a zip archive"])
def test_a_missing_or_foreign_file_is_refused(folder, capsys, content):
    path = folder / "missing.pt2"
    if content is not None:
        path = folder / "foreign.pt2"
        path.write_bytes(content)
    assert bench(str(folder / "mlp.onnx"), "--torch-model", str(path), "--baseline", "torch", "-q") == 1
    err = capsys.readouterr().err
    assert path.name in err and ("no such file" if content is None else "torch.export.save") in err


def test_a_failing_torch_compile_is_reported_and_the_rest_measured(folder, monkeypatch):
    def broken(_program):
        def run(*_args):
            raise RuntimeError("no C++ compiler\nsecond line")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    from xcomp.report import collect_report

    report = collect_report(str(folder / "mlp.onnx"), baselines=["torch", "torch.compile"], repeat=2, warmup=0,
                            torch_model=str(folder / "mlp.pt2"), progress=False, profile_groups=False, blas=False)
    baselines = {b["name"]: b for b in report["baselines"]}
    assert baselines["torch"]["status"] == "measured"
    failed = baselines["torch.compile"]
    assert failed["status"] == "failed" and failed["reason"] == "torch.compile failed: RuntimeError: no C++ compiler"
    assert "latency" not in failed


def test_without_a_program_the_entry_says_what_is_needed(folder):
    if importlib.util.find_spec("onnx2torch"):
        pytest.skip("onnx2torch is installed: it converts the model")
    from xcomp.report import collect_report

    report = collect_report(str(folder / "mlp.onnx"), baselines=["torch"], repeat=2, warmup=0, progress=False,
                            profile_groups=False, blas=False)
    entry = report["baselines"][0]
    assert entry["status"] == "unavailable" and "--torch-model" in entry["reason"]
