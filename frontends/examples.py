"""Models that ship inside the onnx package (no download): `onnx:light_resnet50`, `onnx:test_AvgPool2d`, ..."""

from __future__ import annotations

import os

from xcomp.errors import ModelLoadError

PREFIX = "onnx:"
_SETS = ("light", "pytorch-converted", "pytorch-operator", "simple", "real")


def data_root() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def shipped_models() -> dict:
    """{name: path to model.onnx} for every model in the onnx package's test data."""
    root = data_root()
    found = {}
    for set_name in _SETS:
        folder = os.path.join(root, set_name)
        if not os.path.isdir(folder):
            continue
        for entry in sorted(os.listdir(folder)):
            path = os.path.join(folder, entry)
            if entry.endswith(".onnx"):
                found[entry[: -len(".onnx")]] = path
            elif os.path.isfile(os.path.join(path, "model.onnx")):
                found[entry] = os.path.join(path, "model.onnx")
    return found


def resolve(model: str) -> str:
    """`onnx:NAME` -> the path of that shipped model; anything else is returned unchanged."""
    if not isinstance(model, str) or not model.startswith(PREFIX):
        return model
    name = model[len(PREFIX):]
    models = shipped_models()
    if name not in models:
        light = sorted(n for n in models if n.startswith("light_"))
        raise ModelLoadError(f"{model}: no model {name!r} ships with onnx; try one of {', '.join(light)}")
    return models[name]


def read_test_data(folder: str, prefix: str) -> list:
    """The arrays of `prefix`_0.pb, `prefix`_1.pb, ... (prefix "input" or "output") in a shipped test_data_set
    folder, in index order."""
    import glob

    import onnx
    from onnx import numpy_helper

    files = sorted(glob.glob(os.path.join(folder, f"{prefix}_*.pb")), key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
    arrays = []
    for path in files:
        tensor = onnx.TensorProto()
        with open(path, "rb") as f:
            tensor.ParseFromString(f.read())
        arrays.append(numpy_helper.to_array(tensor))
    return arrays


def with_random_weights(model, seed: int = 0):
    """A copy of a shipped light model whose weights are random, with its logits exposed as outputs.

    The light models fill every weight with one constant (ConstantOfShape 0.02): all channels compute the same
    value and the softmax output is uniform, so a compiler that mixes channels or pixels up still matches. Here
    each such weight gets seeded random values (He-scaled when it has a fan-in, in [0.5, 1.5] when it is a
    vector: a valid batch-norm variance as well as a scale or bias), and the logits before a final Softmax
    become an extra output.
    """
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    original, model = model, onnx.ModelProto()
    model.CopyFrom(original)
    graph = model.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    rng = np.random.default_rng(seed)
    kept = []
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            kept.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        if len(shape) >= 2:
            limit = float(np.sqrt(6.0 / max(1, int(np.prod(shape[1:])))))
            value = rng.uniform(-limit, limit, shape)
        else:
            value = rng.uniform(0.5, 1.5, shape)
        graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
        if model.ir_version < 4:  # before IR 4 every initializer must also be a graph input
            graph.input.append(helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, shape))
    del graph.node[:]
    graph.node.extend(kept)
    used = {name for node in kept for name in node.input}
    unused = {name for name in shapes if name not in used}  # the shapes the replaced ConstantOfShape nodes read
    for tensor in [t for t in graph.initializer if t.name in unused]:
        graph.initializer.remove(tensor)
    for value in [v for v in graph.input if v.name in unused]:
        graph.input.remove(value)
    last = graph.node[-1]
    if last.op_type == "Softmax":  # the logits have the probabilities' shape
        probabilities = next(o for o in graph.output if o.name == last.output[0])
        logits = graph.output.add()
        logits.CopyFrom(probabilities)
        logits.name = last.input[0]
    return model
