"""Per-channel epilogues folded into conv weights (xcomp/graph/fold_affine.py): what folds, what must not, and that
the numbers stay onnxruntime's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import assert_matches_ort, make_model


def _const(name, shape, low=-1.0, high=1.0, seed=0):
    values = np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)
    return numpy_helper.from_array(values, name)


def _model(tail_nodes, tail_inits, outputs=("y",), channels=8):
    """x -> Conv(W, B) -> c -> tail nodes; outputs are [1, channels, 6, 6]."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3])] + tail_nodes
    inits = [_const("W", (channels, 4, 3, 3), seed=1), _const("B", (channels,), seed=2)] + tail_inits
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                      [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, channels, 6, 6]) for o in outputs],
                      inits)


def _batch_norm(inp, out, seed=3, channels=8):
    inits = [_const(f"s{seed}", (channels,), seed=seed), _const(f"o{seed}", (channels,), seed=seed + 1),
             _const(f"m{seed}", (channels,), seed=seed + 2),
             _const(f"v{seed}", (channels,), 0.5, 2.0, seed=seed + 3)]
    node = helper.make_node("BatchNormalization", [inp, *(t.name for t in inits)], [out])
    return node, inits


def _compiled(model):
    module = xcomp.compile(model, progress=False)
    x = {"x": np.random.default_rng(9).uniform(-1, 1, (1, 4, 8, 8)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    return module


def _epilogue_ops(module) -> set:
    """Op names in the fused group holding the conv (FuseOps names a group after its ops)."""
    (name,) = [g.name for g in module.groups if "conv2d" in g.name]
    return set(name.split("_"))


def test_conv_bias_batch_norm_becomes_one_add():
    bn, inits = _batch_norm("c", "n")
    module = _compiled(_model([bn, helper.make_node("Relu", ["n"], ["y"])], inits))
    ops = _epilogue_ops(module)
    assert not ops & {"subtract", "divide", "multiply"}, ops
    assert "add" in ops and "relu" in ops


def test_scale_on_either_side_and_a_per_channel_divide_fold():
    scale = numpy_helper.from_array(np.linspace(0.5, 2, 8, dtype=np.float32).reshape(1, 8, 1, 1), "k")
    divisor = numpy_helper.from_array(np.linspace(1, 3, 8, dtype=np.float32).reshape(8, 1, 1), "d")
    nodes = [helper.make_node("Mul", ["k", "c"], ["m"]), helper.make_node("Div", ["m", "d"], ["y"])]
    ops = _epilogue_ops(_compiled(_model(nodes, [scale, divisor])))
    assert not ops & {"multiply", "divide"}, ops


@pytest.mark.parametrize("case", ["shared_intermediate", "zero_divisor", "spatial_operand"])
def test_what_must_not_fold_still_computes_right(case):
    if case == "shared_intermediate":  # c also leaves the graph: folding past it would compute the conv twice
        bn, inits = _batch_norm("c", "y")
        model = _model([bn], inits, outputs=("y", "c"))
        module = _compiled(model)
        assert any("divide" in g.name.split("_") for g in module.groups), [g.name for g in module.groups]
    elif case == "zero_divisor":  # x / 0 is inf or nan: not a weight scale
        divisor = numpy_helper.from_array(np.array([0, 1, 2, 3, 4, 5, 6, 7], np.float32).reshape(1, 8, 1, 1), "d")
        module = xcomp.compile(_model([helper.make_node("Div", ["c", "d"], ["y"])], [divisor]), progress=False)
        assert "divide" in _epilogue_ops(module)
    else:  # an operand varying over pixels is not a per-channel affine
        model = _model([helper.make_node("Mul", ["c", "p"], ["y"])], [_const("p", (1, 1, 6, 6), seed=5)])
        assert "multiply" in _epilogue_ops(_compiled(model))
