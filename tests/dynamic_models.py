"""Small models with symbolic batch (and sequence) dims, built with onnx.helper: an MLP, a CNN and a
transformer-ish attention block. Used by test_dynamic_shapes.py and benchmarks/dynamic_shapes.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from conftest import make_model


def _weight(rng, name, shape, scale):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mlp(batch="batch", sizes=(64, 128, 10)):
    """x[batch, sizes[0]] through dense layers (MatMul + Add, a Relu between layers)."""
    rng = np.random.default_rng(0)
    nodes, inits, h = [], [], "x"
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        inits += [_weight(rng, f"w{i}", (n_in, n_out), 1 / np.sqrt(n_in)), _weight(rng, f"b{i}", (n_out,), 0.1)]
        last = i == len(sizes) - 2
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], ["y" if last else f"a{i}"])]
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"h{i}"]))
            h = f"h{i}"
    return make_model(nodes, [_vi("x", [batch, sizes[0]])], [_vi("y", [batch, sizes[-1]])], inits)


def cnn(batch="N", image=32):
    """conv3x3-relu-maxpool, conv3x3-relu, global average pool, flatten, dense: x[N, 3, image, image] -> [N, 10]."""
    rng = np.random.default_rng(1)
    inits = [_weight(rng, "w1", (16, 3, 3, 3), 0.3), _weight(rng, "b1", (16,), 0.1),
             _weight(rng, "w2", (32, 16, 3, 3), 0.1), _weight(rng, "b2", (32,), 0.1),
             _weight(rng, "fw", (32, 10), 0.3), _weight(rng, "fb", (10,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("MatMul", ["f", "fw"], ["m"]),
        helper.make_node("Add", ["m", "fb"], ["y"]),
    ]
    return make_model(nodes, [_vi("x", [batch, 3, image, image])], [_vi("y", [batch, 10])], inits)


def attention(batch="batch", seq="seq", dim=32):
    """One attention head: softmax(x Wq (x Wk)^T / sqrt(dim) + mask) x Wv + b, with x[batch, seq, dim] and an
    additive mask[batch, seq, seq] (two inputs sharing both symbolic dims)."""
    rng = np.random.default_rng(2)
    inits = [_weight(rng, name, (dim, dim), 1 / np.sqrt(dim)) for name in ("wq", "wk", "wv")]
    inits += [_weight(rng, "bo", (dim,), 0.1),
              numpy_helper.from_array(np.array([1 / np.sqrt(dim)], np.float32), "scale")]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("Add", ["o", "bo"], ["y"]),
    ]
    return make_model(nodes, [_vi("x", [batch, seq, dim]), _vi("mask", [batch, seq, seq])],
                      [_vi("y", [batch, seq, dim])], inits)


def positions_after_past(seq="seq", past="past", dim=8, max_positions=64):
    """x[1, seq, dim] plus position embeddings of the positions after a KV cache, wpe[range(past, past + seq)],
    with past = past_k.shape[2], as torch exports GPT-2's decoder with past key/values (Shape, Slice, Gather,
    Add, Range, Unsqueeze, Gather); then scaled by the result's own batch dim, read back with Shape."""
    rng = np.random.default_rng(0)

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.int64)))

    nodes = [
        const("two", [2]), const("three", [3]), const("zero", [0]), const("one", [1]), const("one_scalar", 1),
        helper.make_node("Shape", ["past_k"], ["past_shape"]),
        helper.make_node("Slice", ["past_shape", "two", "three", "zero"], ["past_1"]),
        helper.make_node("Squeeze", ["past_1", "zero"], ["past_len"]),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Gather", ["x_shape", "one_scalar"], ["seq_len"]),
        helper.make_node("Add", ["seq_len", "past_len"], ["end"]),
        helper.make_node("Range", ["past_len", "end", "one_scalar"], ["positions"]),
        helper.make_node("Unsqueeze", ["positions", "zero"], ["positions_2d"]),
        helper.make_node("Gather", ["wpe", "positions_2d"], ["embedded"]),
        helper.make_node("Add", ["x", "embedded"], ["summed"]),
        helper.make_node("Shape", ["summed"], ["summed_shape"]),
        helper.make_node("Slice", ["summed_shape", "zero", "one", "zero"], ["batch"]),
        helper.make_node("Cast", ["batch"], ["batch_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["summed", "batch_f"], ["y"]),
    ]
    return make_model(nodes, [_vi("x", [1, seq, dim]), _vi("past_k", [1, 2, past, 4])], [_vi("y", [1, seq, dim])],
                      [_weight(rng, "wpe", (max_positions, dim), 1.0)])


def range_from_past(step: int, limit: int):
    """Range(past, limit, step) with past = past_k.shape[2]: empty, or counting up or down, by the cache length."""
    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.int64)))

    nodes = [const("two", [2]), const("three", [3]), const("zero", [0]), const("limit", limit), const("step", step),
             helper.make_node("Shape", ["past_k"], ["past_shape"]),
             helper.make_node("Slice", ["past_shape", "two", "three", "zero"], ["past_1"]),
             helper.make_node("Squeeze", ["past_1", "zero"], ["past_len"]),
             helper.make_node("Range", ["past_len", "limit", "step"], ["y"])]
    return make_model(nodes, [_vi("past_k", [1, 2, "past", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.INT64, ["length"])])


def random_feed(model_inputs: dict, seed: int = 0) -> dict:
    """{name: float32 array} of standard-normal values for {name: shape}."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in model_inputs.items()}
