"""Real models shipped with the onnx package, compiled for this CPU and checked against onnxruntime."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import xcomp
from conftest import assert_matches_ort, data_dir

LIGHT = sorted(os.path.basename(p)[: -len(".onnx")] for p in glob.glob(data_dir("light", "*.onnx")))
# Big ones (tens of GFLOPs per run, hundreds of MB of folded weights) run in the slow set.
SLOW_LIGHT = {"light_vgg19", "light_zfnet512", "light_bvlc_alexnet"}


def test_all_nine_light_models_are_shipped():
    assert len(LIGHT) == 9, LIGHT


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_LIGHT else n for n in LIGHT]
)
def test_light_model_matches_onnxruntime(name):
    path = data_dir("light", name + ".onnx")
    module = xcomp.compile(path)
    inputs = module.random_inputs(seed=1)
    assert_matches_ort(module, path, inputs)


def _cases(set_name):
    folder = data_dir(set_name)
    return sorted(d for d in os.listdir(folder) if os.path.isfile(os.path.join(folder, d, "model.onnx")))


def _load_case(set_name, case):
    """(model path, {input name: array}, [expected outputs]) from the shipped test_data_set_0."""
    folder = data_dir(set_name, case)
    model = onnx.load(os.path.join(folder, "model.onnx"))
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    data = os.path.join(folder, "test_data_set_0")

    def read(prefix):
        files = sorted(glob.glob(os.path.join(data, f"{prefix}_*.pb")), key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
        out = []
        for f in files:
            t = onnx.TensorProto()
            with open(f, "rb") as fh:
                t.ParseFromString(fh.read())
            out.append(numpy_helper.to_array(t))
        return out

    return os.path.join(folder, "model.onnx"), dict(zip(names, read("input"))), read("output")


# Cases that cannot pass, each with its reason. Keep this list short and honest.
KNOWN_FAILURES: dict = {}


@pytest.mark.parametrize("set_name,case", [(s, c) for s in ("simple", "pytorch-operator") for c in _cases(s)])
def test_shipped_case(set_name, case):
    _run_case(set_name, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases("pytorch-converted"))
def test_pytorch_converted_case(case):
    _run_case("pytorch-converted", case)


def _run_case(set_name, case):
    if (set_name, case) in KNOWN_FAILURES:
        pytest.xfail(KNOWN_FAILURES[(set_name, case)])
    path, inputs, expected = _load_case(set_name, case)
    module = xcomp.compile(path)
    got = module.run(inputs)
    assert len(got) == len(expected)
    for (name, g), want in zip(got.items(), expected):
        np.testing.assert_allclose(g, want, rtol=1e-3, atol=1e-4, err_msg=f"{case}: output {name}")
