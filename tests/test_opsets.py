"""Opsets 23..28: every op version they brought is reviewed (frontends/opsets.py), and a node whose op version
changed what it computes, and that xcomp does not convert, is refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xcomp
from xcomp.frontends import opsets


def _model(node, inputs, outputs, opset):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(*spec) for spec in inputs],
                              [helper.make_tensor_value_info(*spec) for spec in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_the_highest_opset_is_the_installed_onnx_one():
    """A newer onnx brings a new opset: review its op versions into REVIEWED, then raise MAX_OPSET."""
    assert opsets.MAX_OPSET == onnx.defs.onnx_opset_version()


def test_every_op_version_of_the_new_opsets_is_reviewed():
    versions = {(s.name, s.since_version) for s in onnx.defs.get_all_schemas_with_history()
                if s.domain in ("", "ai.onnx") and 23 <= s.since_version <= opsets.MAX_OPSET}
    assert versions == set(opsets.REVIEWED)


def test_a_model_above_the_highest_opset_is_refused_by_its_opset():
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    model = _model(node, [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], opsets.MAX_OPSET + 1)
    with pytest.raises(xcomp.ModelLoadError, match=f"opset {opsets.MAX_OPSET + 1} is outside"):
        xcomp.compile(model)


def test_an_op_version_refused_by_the_review_names_the_node(monkeypatch):
    """The op version the model's opset selects decides: TopK-24 refused, the same node at opset 11 is TopK-11."""
    monkeypatch.setitem(opsets.REVIEWED, ("TopK", 24), ("what it computes changed", "a test's refusal"))
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], name="top")
    inputs = [("x", TensorProto.FLOAT, [4]), ("k", TensorProto.INT64, [1])]
    outputs = [("values", TensorProto.FLOAT, [2]), ("indices", TensorProto.INT64, [2])]
    with pytest.raises(xcomp.UnsupportedOpError, match=r"top \(TopK, opset 24\): what it computes changed") as info:
        xcomp.compile(_model(node, inputs, outputs, 24))
    assert info.value.nodes == [("top", "TopK", 24)]
    assert opsets.refusal("TopK", 11) is None


def test_a_new_op_without_a_converter_is_refused_with_its_reason():
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y", "state"], name="recurrence", q_num_heads=2,
                            kv_num_heads=2)
    model = _model(node, [(x, TensorProto.FLOAT, [1, 3, 8]) for x in "qkv"],
                   [("y", TensorProto.FLOAT, None), ("state", TensorProto.FLOAT, None)], 27)
    with pytest.raises(xcomp.UnsupportedOpError, match=r"recurrence \(LinearAttention, opset 27\): a recurrence"):
        xcomp.compile(model)


def test_a_semantic_attribute_the_converter_cannot_honour_names_the_node():
    """QuantizeLinear-23's `precision` sets the type of the division: TVM's converter refuses it, by node."""
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], name="quantize", precision=TensorProto.FLOAT)
    model = _model(node, [("x", TensorProto.FLOAT16, [4]), ("s", TensorProto.FLOAT16, [])],
                   [("y", TensorProto.UINT8, [4])], 23)
    with pytest.raises(xcomp.UnsupportedOpError, match=r"quantize \(QuantizeLinear, opset 23\)") as info:
        xcomp.compile(model)
    assert info.value.nodes == [("quantize", "QuantizeLinear", 23)]


def test_attention_against_onnxruntime_with_random_inputs():
    """Grouped-query attention with a KV cache, a bool mask and a causal frontier offset by the cache (3D inputs),
    against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node("Attention", ["q", "k", "v", "mask", "past_k", "past_v"], ["y", "present_k", "present_v"],
                            name="attention", q_num_heads=4, kv_num_heads=2, is_causal=1)
    inputs = [("q", TensorProto.FLOAT, [2, 3, 32]), ("k", TensorProto.FLOAT, [2, 3, 16]),
              ("v", TensorProto.FLOAT, [2, 3, 24]), ("mask", TensorProto.BOOL, [3, 8]),
              ("past_k", TensorProto.FLOAT, [2, 2, 5, 8]), ("past_v", TensorProto.FLOAT, [2, 2, 5, 12])]
    outputs = [("y", TensorProto.FLOAT, [2, 3, 48]), ("present_k", TensorProto.FLOAT, [2, 2, 8, 8]),
               ("present_v", TensorProto.FLOAT, [2, 2, 8, 12])]
    model = _model(node, inputs, outputs, 23)
    rng = np.random.default_rng(0)
    feed = {name: rng.standard_normal(shape).astype(np.float32) for name, _, shape in inputs if name != "mask"}
    feed["mask"] = rng.random((3, 8)) > 0.3
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    got = xcomp.compile(model).run(feed)
    for (name, g), w in zip(got.items(), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("case", ["rotary", "scatter", "causal_conv"])
def test_new_language_model_ops_against_onnxruntime_with_random_inputs(case):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(1)
    if case == "rotary":  # 4D, interleaved, a partial rotary dim, positions from a cache of 16
        node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="rope", interleaved=1,
                                rotary_embedding_dim=6)
        inputs = [("x", TensorProto.FLOAT, [2, 3, 5, 10]), ("cos", TensorProto.FLOAT, [16, 3]),
                  ("sin", TensorProto.FLOAT, [16, 3]), ("pos", TensorProto.INT64, [2, 5])]
        outputs, opset = [("y", TensorProto.FLOAT, [2, 3, 5, 10])], 23
        feed = {"pos": rng.integers(0, 16, (2, 5))}
    elif case == "scatter":  # a circular KV-cache write that wraps around
        node = helper.make_node("TensorScatter", ["cache", "update", "at"], ["y"], name="write", mode="circular")
        inputs = [("cache", TensorProto.FLOAT, [2, 3, 6, 4]), ("update", TensorProto.FLOAT, [2, 3, 3, 4]),
                  ("at", TensorProto.INT64, [2])]
        outputs, opset = [("y", TensorProto.FLOAT, [2, 3, 6, 4])], 24
        feed = {"at": np.array([1, 5], np.int64)}
    else:  # the carried state of a decode step, with SiLU
        node = helper.make_node("CausalConvWithState", ["x", "w", "b", "state"], ["y", "next"], name="conv",
                                activation="silu")
        inputs = [("x", TensorProto.FLOAT, [2, 4, 3]), ("w", TensorProto.FLOAT, [4, 1, 3]),
                  ("b", TensorProto.FLOAT, [4]), ("state", TensorProto.FLOAT, [2, 4, 2])]
        outputs, opset = [("y", TensorProto.FLOAT, [2, 4, 3]), ("next", TensorProto.FLOAT, [2, 4, 2])], 27
        feed = {}
    feed.update({name: rng.standard_normal(shape).astype(np.float32) for name, kind, shape in inputs
                 if kind == TensorProto.FLOAT})
    model = _model(node, inputs, outputs, opset)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    got = xcomp.compile(model).run(feed)
    for (name, g), w in zip(got.items(), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
