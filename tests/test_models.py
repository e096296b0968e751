"""Real models shipped with the onnx package, compiled for this CPU and checked against onnxruntime."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest

import xcomp
from xcomp.frontends.examples import read_test_data, with_random_weights
from conftest import data_dir, ort_run

LIGHT = sorted(os.path.basename(p)[: -len(".onnx")] for p in glob.glob(data_dir("light", "*.onnx")))
# Big ones (tens of GFLOPs per run, hundreds of MB of folded weights) run in the slow set.
SLOW_LIGHT = {"light_vgg19", "light_zfnet512", "light_bvlc_alexnet"}
# On a GPU, where one is visible: the six that are not slow.
GPU_LIGHT = [n for n in LIGHT if n not in SLOW_LIGHT]


def test_all_nine_light_models_are_shipped():
    assert len(LIGHT) == 9, LIGHT


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_LIGHT else n for n in LIGHT]
)
def test_light_model_matches_onnxruntime(name):
    """With random weights: the shipped ones are one constant, under which every channel computes the same value
    and the softmax is uniform, so a mixed-up channel or pixel would still match."""
    _check_against_onnxruntime(name, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cuda", "rocm"])
@pytest.mark.parametrize("name", GPU_LIGHT)
def test_light_model_on_visible_gpu_matches_onnxruntime(kind, name):
    import tvm

    if not getattr(tvm, kind)(0).exist:
        pytest.skip(f"no {kind} GPU visible")
    _check_against_onnxruntime(name, kind)


def _check_against_onnxruntime(name, target):
    """The light model with random weights, compiled for `target`, against onnxruntime on this CPU."""
    model = with_random_weights(onnx.load(data_dir("light", name + ".onnx")), seed=0)
    module = xcomp.compile(model, target=target)
    inputs = module.random_inputs(seed=1)
    ours, ref = module.run(inputs), ort_run(model, inputs)
    logits = ref[-1]
    assert logits.std() > 1e-2 * np.abs(logits).max(), "degenerate logits: the check would be vacuous"
    for (output, got), want in zip(ours.items(), ref):
        # activations grow through the random layers: compare at the output's scale (errors of a mixed-up
        # channel are of the order of the logits' spread)
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale,
                                   err_msg=f"{name} ({target}) output {output}")


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

    return os.path.join(folder, "model.onnx"), dict(zip(names, read_test_data(data, "input"))), read_test_data(data, "output")


# Cases that cannot pass yet, each with its reason (strict: a fix shows up as XPASS and must be removed here).
_STRINGS = "string tensors: StringNormalizer has no TVM converter"
KNOWN_FAILURES = {
    ("simple", "test_gradient_of_add"): "ai.onnx.preview.training.Gradient is a training op",
    ("simple", "test_gradient_of_add_and_mul"): "ai.onnx.preview.training.Gradient is a training op",
    ("simple", "test_sequence_model8"): "SplitToSequence over symbolic dim 'n': TVM's converter needs a constant split",
}
KNOWN_FAILURES.update({("simple", c): _STRINGS for c in [
    "test_strnorm_model_monday_casesensintive_lower", "test_strnorm_model_monday_casesensintive_nochangecase",
    "test_strnorm_model_monday_casesensintive_upper", "test_strnorm_model_monday_empty_output",
    "test_strnorm_model_monday_insensintive_upper_twodim", "test_strnorm_model_nostopwords_nochangecase"]})


def _params(sets, slow=False):
    params = []
    for set_name in sets:
        for case in _cases(set_name):
            marks = [pytest.mark.slow] if slow else []
            if (set_name, case) in KNOWN_FAILURES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[(set_name, case)]))
            params.append(pytest.param(set_name, case, marks=marks, id=f"{set_name}/{case}"))
    return params


@pytest.mark.parametrize("set_name,case", _params(["simple", "pytorch-operator"]))
def test_shipped_case(set_name, case):
    _run_case(set_name, case)


@pytest.mark.parametrize("set_name,case", _params(["pytorch-converted"], slow=True))
def test_pytorch_converted_case(set_name, case):
    _run_case(set_name, case)


def _run_case(set_name, case):
    path, inputs, expected = _load_case(set_name, case)
    module = xcomp.compile(path)
    got = module.run(inputs)
    assert len(got) == len(expected)
    for (name, g), want in zip(got.items(), expected):
        np.testing.assert_allclose(g, want, rtol=1e-3, atol=1e-4, err_msg=f"{case}: output {name}")
