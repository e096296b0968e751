"""A float power by a constant 2, 3 or 4 becomes multiplications ahead of the graph's first constant folding
(xcomp/graph/small_powers.py), checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import make_model, ort_run, xcomp_cli


def _power_model(power, exponent_shape, out_shape=(4, 33)):
    exponent = numpy_helper.from_array(np.full(exponent_shape, power, np.float32), "e")
    return make_model([helper.make_node("Pow", ["x", "e"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 33])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))], [exponent])


@pytest.mark.parametrize("power,exponent_shape,out_shape,multiplied", [
    (3.0, [], (4, 33), True),
    (4.0, [1], (4, 33), True),
    (2.0, [1, 1], (4, 33), True),
    (2.5, [], (4, 33), False),
    (3.0, [1, 1, 1], (1, 4, 33), False),  # the exponent broadcasts the result to a larger shape
])
def test_small_constant_powers_become_products(power, exponent_shape, out_shape, multiplied):
    from xcomp.frontends import load_onnx
    from xcomp.graph.small_powers import MultiplyOutSmallPowers

    model = _power_model(power, exponent_shape, out_shape)
    rewritten = MultiplyOutSmallPowers()(load_onnx(model, None, None).mod)
    assert ("R.power(" not in rewritten["main"].script()) == multiplied
    x = np.random.default_rng(0).standard_normal((4, 33)).astype(np.float32) * 3
    x[0, :3] = [0.0, -np.inf, np.nan]
    if power != int(power):
        x = np.abs(x)  # a negative base to a fractional power is NaN either way
    got = xcomp.compile(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-6, equal_nan=True)


def test_gelu_tanh_cube_compiles_without_tvm_pow_warnings(tmp_path):
    """GPT-2's tanh GELU takes x^3: TVM printed a pow warning for each one it built (108 lines for one `xcomp
    info` of GPT-2), for the FoldConstant ahead of our own lowering too."""
    model = _power_model(3.0, [])
    onnx.save(model, str(tmp_path / "cube.onnx"))
    r = xcomp_cli("info", str(tmp_path / "cube.onnx"))
    assert r.returncode == 0, r.stderr
    assert "pow" not in r.stderr, r.stderr
