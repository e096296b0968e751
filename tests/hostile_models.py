"""A corpus of malformed and hostile models, each with the error xcomp must give."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import make_model, tiny_mlp


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def dangling_input():
    return make_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], [_vi("x", [2])], [_vi("y", [2])])


def mismatched_initializer():
    model = tiny_mlp(2)
    model.graph.initializer[0].dims[:] = [8, 5]  # 40 floats declared, 32 stored
    return model


def initializer_with_extra_data():
    model = tiny_mlp(2)
    model.graph.initializer[0].dims[:] = [1, 4]  # 4 floats declared, 32 stored: the checker lets this through
    return model


def undefined_data_type():
    model = tiny_mlp(2)
    model.graph.initializer[1].data_type = 99
    return model


def absurd_dims():
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", [1 << 40, 1 << 20])],
                      [_vi("y", [1 << 40, 1 << 20])])


def absurd_initializer():
    w = onnx.TensorProto()
    w.name, w.data_type = "W", TensorProto.FLOAT
    w.dims.extend([1 << 20, 1 << 20])  # 4 TiB declared, nothing stored
    return make_model([helper.make_node("Add", ["x", "W"], ["y"], name="a")], [_vi("x", [1 << 20, 1 << 20])],
                      [_vi("y", [1 << 20, 1 << 20])], [w])


def negative_pads():
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "W")
    node = helper.make_node("Conv", ["x", "W"], ["y"], name="conv", pads=[-5, -5, -5, -5])
    return make_model([node], [_vi("x", [1, 1, 4, 4])], [_vi("y", [1, 2, 12, 12])], [w])


def cyclic():
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2")]
    return make_model(nodes, [_vi("x", [2])], [_vi("b", [2])])


def nested_if(depth=25):
    """If inside If, `depth` deep (protobuf itself refuses much deeper messages)."""
    graph = leaf = helper.make_graph([helper.make_node("Relu", ["x"], ["o"])], "leaf", [], [_vi("o", [2])])
    for i in range(depth):
        cond = helper.make_tensor(f"c{i}", TensorProto.BOOL, [], [True])
        graph = helper.make_graph(
            [helper.make_node("Constant", [], [f"c{i}"], value=cond),
             helper.make_node("If", [f"c{i}"], ["o"], then_branch=graph, else_branch=leaf)],
            f"g{i}", [], [_vi("o", [2])])
    return make_model(list(graph.node), [_vi("x", [2])], [_vi("o", [2])])


def random_bytes():
    return np.random.default_rng(0).bytes(5000)


def truncated():
    data = tiny_mlp(2).SerializeToString()
    return data[: len(data) * 2 // 3]


# name -> (model factory, error class name, a phrase the message must contain)
CORPUS = {
    "dangling_input": (dangling_input, "ModelLoadError", "ghost"),
    "mismatched_initializer": (mismatched_initializer, "ModelLoadError", "tensor name: W"),
    "initializer_with_extra_data": (initializer_with_extra_data, "ModelLoadError",
                                    "tensor 'W' declares shape [1, 4] (16 bytes of float32) but stores 128 bytes"),
    "undefined_data_type": (undefined_data_type, "ModelLoadError", "data type 99, which ONNX does not define"),
    "absurd_dims": (absurd_dims, "ModelLoadError", "over the 256 GiB limit"),
    "absurd_initializer": (absurd_initializer, "ModelLoadError", "tensor name: W"),
    "negative_pads": (negative_pads, "ModelLoadError", "node conv (Conv) has negative pads"),
    "cyclic": (cyclic, "ModelLoadError", "topologically sorted"),
    "random_bytes": (random_bytes, "ModelLoadError", "not a valid ONNX model"),
    "truncated": (truncated, "ModelLoadError", "<bytes>"),
}
