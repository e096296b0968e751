"""Inputs that set shapes (a ReduceSum's axes, a Resize's scales, a Slice's starts) fixed at compile time with
input_values / --input-value."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xcomp
from conftest import assert_matches_ort, make_model, xcomp_cli
from xcomp.frontends.input_values import InputValuesRequired


def _reduce_sum_model():
    """ReduceSum-13 whose axes are a graph input, as ONNX's node tests and some exporters write it."""
    return make_model(
        [helper.make_node("ReduceSum", ["data", "axes"], ["y"], name="sum_rows", keepdims=0)],
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 4, 5]),
         helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])], opset=13)


def _data():
    return np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)


def test_compile_names_the_inputs_it_needs_and_how_to_give_them():
    with pytest.raises(InputValuesRequired) as info:
        xcomp.compile(_reduce_sum_model())
    err = info.value
    assert isinstance(err, xcomp.UnsupportedOpError) and err.inputs.keys() == {"axes"}
    assert err.nodes == [("sum_rows", "ReduceSum", 13)]
    text = str(err)
    assert "'axes' of ReduceSum node sum_rows" in text and "--input-value axes=" in text and "input_values=" in text


def test_fixed_input_matches_onnxruntime_and_is_checked(tmp_path):
    model = _reduce_sum_model()
    module = xcomp.compile(model, input_values={"axes": [1]})
    feed = {"data": _data(), "axes": np.array([1], np.int64)}
    assert_matches_ort(module, model, feed)
    assert [s.name for s in module.inputs] == ["data"] and module.bound_inputs[0].value == (1,)
    np.testing.assert_allclose(module(_data()), feed["data"].sum(axis=1), rtol=1e-5)  # may be left out
    assert "axes=[1] (fixed)" in repr(module)
    with pytest.raises(xcomp.InputError, match=r"'axes' was fixed to \[1\] at compile time.*got \[2\]"):
        module.run({**feed, "axes": np.array([2], np.int64)})
    with pytest.raises(xcomp.InputError, match=r"missing input\(s\) \['data'\]"):  # as many names as inputs
        module.run({"axes": feed["axes"]})
    loaded = xcomp.load(module.save(tmp_path / "m.xc"))
    np.testing.assert_array_equal(loaded.run(feed)["y"], module.run(feed)["y"])
    with pytest.raises(xcomp.InputError, match="fixed to"):
        loaded.run({**feed, "axes": np.array([0], np.int64)})
    assert set(loaded.random_inputs()) == {"data", "axes"}  # a whole feed, for onnxruntime too


def test_in_model_profile_and_benchmark_of_a_module_with_fixed_inputs():
    """The report's per-group profile calls main with the module's own arguments, not the whole feed."""
    from xcomp.runtime.group_times import in_model_times

    module = xcomp.compile(_reduce_sum_model(), input_values={"axes": [1]})
    times = in_model_times(module, runs=2)
    assert times and all(len(v) >= 2 for v in times.values())
    assert module.benchmark(repeat=2)["runs"] == 2


@pytest.mark.parametrize("values,message", [
    ({"axes": [1.5]}, "the input is int64, got"),
    ({"axes": [1, 2]}, "has shape [1] (1 values), got 2 value(s)"),
    ({"nope": [1]}, "names 'nope', but the model's inputs are ['axes', 'data']"),
])
def test_bad_values_are_input_errors(values, message):
    with pytest.raises(xcomp.InputError) as info:
        xcomp.compile(_reduce_sum_model(), input_values=values)
    assert message in str(info.value)


def test_slice_with_runtime_bounds_compiles_once_they_are_given():
    """TVM took a Slice with starts/ends as graph inputs and failed in the build (no shape function)."""
    model = make_model(
        [helper.make_node("Slice", ["x", "starts", "ends"], ["y"], name="cut")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4]),
         helper.make_tensor_value_info("starts", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("ends", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])], opset=13)
    with pytest.raises(InputValuesRequired) as info:
        xcomp.compile(model)
    assert set(info.value.inputs) == {"starts", "ends"} and len(info.value.nodes) == 1
    feed = {"x": np.arange(24, dtype=np.float32).reshape(6, 4), "starts": np.array([1]), "ends": np.array([4])}
    module = xcomp.compile(model, input_values={"starts": [1], "ends": [4]})
    assert_matches_ort(module, model, feed)


def test_cli_input_value(tmp_path):
    path = str(tmp_path / "rsum.onnx")
    onnx.save(_reduce_sum_model(), path)
    refused = xcomp_cli("compile", path, "-q", "-o", str(tmp_path / "x.xc"))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "--input-value axes=" in refused.stderr
    info = json.loads(xcomp_cli("info", path, "--json").stdout)
    assert info["needs_input_values"]["inputs"] == {"axes": ["'axes' of ReduceSum node sum_rows"]}
    out = str(tmp_path / "rsum.xc")
    done = xcomp_cli("compile", path, "-q", "-o", out, "--input-value", "axes=2")
    assert done.returncode == 0, done.stderr
    ran = json.loads(xcomp_cli("run", out, "--json").stdout)
    assert ran["outputs"]["y"]["shape"] == [3, 4]
    again = xcomp_cli("run", out, "--input-value", "axes=1")
    assert again.returncode == 1 and "compiled already (inputs it fixed: axes=[2])" in again.stderr
    bad = xcomp_cli("compile", path, "-q", "--input-value", "axes=one")
    assert bad.returncode == 1 and "'one' is not a number" in bad.stderr


def test_an_input_a_shape_is_computed_from_is_asked_for_then_folded():
    """Pad's pads computed from a graph input (as ONNX's expanded CenterCropPad does): TVM refused the computed
    pads; compile names the input the pads come from, and once it is given the computation folds away."""
    zeros = onnx.numpy_helper.from_array(np.zeros(2, np.int64), "zeros")
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Sub", ["target", "shape"], ["grow"]),
             helper.make_node("Concat", ["zeros", "grow"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["y"], name="pad_to_target")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("target", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])], [zeros], opset=18)
    with pytest.raises(InputValuesRequired) as info:
        xcomp.compile(model)
    assert info.value.inputs == {"target": ["'pads' of Pad node pad_to_target (computed from it)"]}
    feed = {"x": np.ones((2, 3), np.float32), "target": np.array([3, 5], np.int64)}
    module = xcomp.compile(model, input_values={"target": feed["target"]})
    assert_matches_ort(module, model, feed)
    assert module.run(feed)["y"].shape == (3, 5)
