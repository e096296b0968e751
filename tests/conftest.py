"""Shared helpers: shipped models, tiny hand-built models, the onnxruntime oracle, the CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

RTOL, ATOL = 1e-3, 1e-4


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory):
    """xcomp's cache folder (the best CPU roofs seen) in a temporary folder: tests never write to the home."""
    previous = os.environ.get("XCOMP_CACHE_DIR")
    os.environ["XCOMP_CACHE_DIR"] = str(tmp_path_factory.mktemp("xcomp-cache"))  # CLI subprocesses inherit it
    yield
    if previous is None:
        os.environ.pop("XCOMP_CACHE_DIR", None)
    else:
        os.environ["XCOMP_CACHE_DIR"] = previous


def data_dir(*parts) -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", *parts)


def ort_run(model, inputs: dict) -> list:
    import onnxruntime as ort

    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def assert_matches_ort(module, model, inputs, rtol=RTOL, atol=ATOL):
    ours = module.run(inputs)
    ref = ort_run(model, inputs)
    assert len(ours) == len(ref)
    for (name, got), want in zip(ours.items(), ref):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output {name}")


def xcomp_cli(*args, cwd=None):
    """The CLI as a user runs it: `python -m xcomp ARGS` in its own process."""
    return subprocess.run([sys.executable, "-m", "xcomp", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name="g"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def tiny_mlp(batch="N"):
    """x[batch,8] @ W[8,4] + b, relu: a model small enough to compile in about a second."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "B"], ["hb"], name="bias"),
        helper.make_node("Relu", ["hb"], ["y"], name="relu"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [w, b],
    )


@pytest.fixture(scope="session")
def tiny_module():
    import xcomp

    model = tiny_mlp(batch=2)
    return xcomp.compile(model), model


def with_metadata(saved, out, edit) -> str:
    """A copy at `out` of the saved module `saved`, its metadata changed in place by `edit(meta)`."""
    import json
    import zipfile

    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(out, "w") as dst:
        meta = json.loads(src.read("metadata.json"))
        library = src.read(meta["library"])
        edit(meta)
        dst.writestr("metadata.json", json.dumps(meta))
        dst.writestr(meta.get("library", "lib.so"), library)
    return str(out)

