"""exp / erf / tanh / sigmoid written out as vectorizable arithmetic (schedules/cpu/vector_math.py): accurate over
the whole float32 range, special values kept, used by the ops that need them, and no libm call left per element."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xcomp
from conftest import assert_matches_ort, make_model

SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)
LARGEST = float(np.finfo(np.float32).max)


def _grid():
    magnitudes = np.geomspace(1e-30, 1.0, 20001)
    specials = [0.0, -0.0, 88.0, 88.5, 88.72, 88.73, 89.0, -87.3, -87.34, -88.5, -104.0, np.inf, -np.inf, np.nan]
    return np.concatenate([np.linspace(-100, 100, 400001), np.linspace(-5, 5, 200001), magnitudes, -magnitudes,
                           specials]).astype(np.float32)


def _run_vectorized(expr, x):
    """expr applied to x by a 16-lane vectorized loop built for this CPU."""
    import tvm
    from tvm import te

    from xcomp.backends import get_backend

    a = te.placeholder(x.shape, "float32", name="A")
    b = te.compute(a.shape, lambda i: expr(a[i]), name="B")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    (loop,) = sch.get_loops(sch.get_sblock("B"))
    sch.vectorize(sch.split(loop, [None, 16])[1])
    built = tvm.compile(sch.mod, target=get_backend("cpu").target())
    out = tvm.runtime.tensor(np.zeros_like(x))
    built(tvm.runtime.tensor(x), out)
    return out.numpy()


REFERENCES = {"exp": np.exp, "erf": np.vectorize(math.erf), "tanh": np.tanh,
              "sigmoid": lambda v: 1 / (1 + np.exp(-v))}


@pytest.mark.parametrize("name", list(REFERENCES))
def test_accurate_over_the_float32_range(name):
    from xcomp.schedules.cpu import vector_math

    x = _grid()
    got = _run_vectorized(getattr(vector_math, f"fast_{name}"), x).astype(np.float64)
    with np.errstate(over="ignore"):
        want = REFERENCES[name](x.astype(np.float64))
    normal = (np.abs(want) >= SMALLEST_NORMAL) & (np.abs(want) <= LARGEST)
    rel = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
    assert rel.max() < 1e-6, f"{name}: {rel.max():.3g} relative at x = {x[normal][rel.argmax()]}"
    tiny = np.abs(want) < SMALLEST_NORMAL  # below the normal range: flushing to 0 is the only error allowed
    assert np.abs(got[tiny] - want[tiny]).max() <= SMALLEST_NORMAL
    overflow = np.isinf(want) & ~np.isnan(x)
    np.testing.assert_array_equal(got[overflow], want[overflow])  # inf of the right sign
    assert np.isnan(got[np.isnan(x)]).all()


EVERY_OP = [("Exp", {}), ("Softmax", {"axis": -1}), ("Erf", {}), ("Tanh", {}), ("Sigmoid", {}),
            ("LogSoftmax", {"axis": 0}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})]


def _activations_model(chain=EVERY_OP, dtype=TensorProto.FLOAT):
    """The ops of `chain` one after the other on x[4, 37] (37: a vector tail). Fused into one group, each op's
    input expression is inlined into the next: a chain this long also checks that does not blow up."""
    nodes, prev = [], "x"
    for n, (op, attrs) in enumerate(chain):
        nodes.append(helper.make_node(op, [prev], [f"t{n}"], **attrs))
        prev = f"t{n}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return make_model(nodes, [helper.make_tensor_value_info("x", dtype, [4, 37])],
                      [helper.make_tensor_value_info("y", dtype, [4, 37])], opset=20)


def test_models_use_it_and_match_onnxruntime(tmp_path):
    model = _activations_model()
    module = xcomp.compile(model)
    x = np.random.default_rng(0).normal(0, 3, (4, 37)).astype(np.float32)
    x[0, :4] = [-100.0, 100.0, -1e-20, 1e-20]
    assert_matches_ort(module, model, {"x": x})
    sources = module.emit_sources(tmp_path)
    with open(next(p for p in sources if p.endswith(".s"))) as f:
        asm = f.read()
    for libm in ("expf", "erff", "tanhf"):
        assert f"call\t{libm}" not in asm.replace("callq", "call"), f"a per-element {libm} call is left"


def test_softmax_of_masked_and_far_apart_scores_matches_onnxruntime():
    """Softmax takes exp of x - max <= 0 only, by a shorter exponential: entries masked to -inf or to float32's
    lowest (attention masks), scores 100 apart, a NaN (its row is NaN) and a row masked whole (NaN too, as in
    onnxruntime), over rows with a vector tail."""
    x = np.random.default_rng(2).normal(0, 4, (6, 101)).astype(np.float32)
    x[0, 50:] = -np.inf
    x[1, ::3] = np.finfo(np.float32).min
    x[2, 7] = 100.0
    x[3, 9] = np.nan
    x[4, :] = -np.inf
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 101])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 101])])
    module = xcomp.compile(model)
    assert_matches_ort(module, model, {"x": x}, rtol=1e-6, atol=1e-7)
    y = module.run({"x": x})["y"]
    assert np.isnan(y[3]).all() and np.isnan(y[4]).all()
    assert (y[0, 50:] == 0).all() and (y[1, ::3] == 0).all()


def test_other_dtypes_keep_tvm_lowering():
    # (onnxruntime has no double Erf or Gelu)
    model = _activations_model([("Exp", {}), ("Softmax", {"axis": -1}), ("Tanh", {}), ("Sigmoid", {})],
                               TensorProto.DOUBLE)
    onnx.checker.check_model(model)
    module = xcomp.compile(model)
    x = np.random.default_rng(1).normal(0, 3, (4, 37))
    assert_matches_ort(module, model, {"x": x})


@pytest.mark.parametrize("exponent", [2.0, 3.0, 4.0, 2.5])
def test_small_integer_powers_are_multiplications(exponent, tmp_path):
    """GPT-2's GELU cubes its input: x ** 3 as two multiplications (xcomp/graph/small_powers.py), vectorized, where
    TVM calls powf per element; other exponents keep TVM's pow."""
    from onnx import numpy_helper

    nodes = [helper.make_node("Pow", ["x", "e"], ["p"]), helper.make_node("Add", ["p", "x"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 37])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 37])],
                       [numpy_helper.from_array(np.array(exponent, np.float32), "e")])
    module = xcomp.compile(model)
    x = np.random.default_rng(0).normal(0, 3, (4, 37)).astype(np.float32)
    if exponent != int(exponent):
        x = np.abs(x)  # a fractional power of a negative number is NaN
    assert_matches_ort(module, model, {"x": x})
    with open(next(p for p in module.emit_sources(tmp_path) if p.endswith(".s"))) as f:
        calls_pow = "powf" in f.read()
    assert calls_pow == (exponent == 2.5)
