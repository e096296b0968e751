"""1-D convolutions compile as 2-D ones over a height of 1 (xcomp/graph/conv1d.py), checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import assert_matches_ort


def _conv1d_model(c, o, width, kernel, stride, pad, dilation, groups):
    rng = np.random.default_rng(c + width)
    weight = rng.standard_normal((o, c // groups, kernel)).astype("float32") * 0.1
    bias = rng.standard_normal(o).astype("float32")
    out = (width + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride], pads=[pad, pad],
                              dilations=[dilation], group=groups),
             helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "conv1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, width])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, o, out])],
                              [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("c,o,width,kernel,stride,pad,dilation,groups", [
    (80, 96, 300, 3, 1, 1, 1, 1),  # Whisper's front convs, narrower
    (96, 96, 300, 3, 2, 1, 1, 1),
    (8, 16, 37, 5, 1, 2, 2, 1),
    (16, 16, 50, 3, 1, 1, 1, 16),  # depthwise
    (4, 6, 9, 1, 1, 0, 1, 2),
])
def test_conv1d_runs_as_a_conv2d_group(c, o, width, kernel, stride, pad, dilation, groups):
    """TVM's conv1d loop nest declined every conv template and ran on the generic schedule (Whisper's 384x384x3
    stride-2 conv at 8 GFLOP/s, one thread); as conv2d over one row it gets a conv template (58 GFLOP/s)."""
    model = _conv1d_model(c, o, width, kernel, stride, pad, dilation, groups)
    module = xcomp.compile(model)
    x = np.random.default_rng(0).standard_normal((1, c, width)).astype("float32")
    assert_matches_ort(module, model, {"x": x}, rtol=1e-4, atol=1e-4)
    (conv,) = [g for g in module.groups if g.kind == "conv"]
    assert "conv2d" in conv.name
    assert not [n for n in module.info["notes"] if "declined" in n]
